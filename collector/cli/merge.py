"""``stallwatch merge OUT.sqlite IN.sqlite ...``: several nodes' files into one, for post-hoc analysis of a whole job."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collector.store.merge import Merged


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "merge",
        help="merge several nodes' stallwatch files into one (runs kept with host, job id and rank)",
        description="Copy every run of each IN file into OUT (created when missing), ids remapped. A run already "
        "in OUT (same hostname, pid, start time and name) is brought up to date, never copied twice, so merging "
        "the same file again adds nothing. The inputs are read only.",
    )
    parser.add_argument("out", metavar="OUT", help="the merged stallwatch file (created when missing)")
    parser.add_argument("inputs", metavar="IN", nargs="+", help="stallwatch files to merge into OUT")
    parser.set_defaults(handler=_main)


def _main(args: argparse.Namespace) -> int:
    from collector.store.merge import merge_files  # pandas and numpy: only when merging

    started = time.perf_counter()

    def progress(m: Merged) -> None:
        print(f"{m.path}: {m.runs} run(s), {m.new_runs} new; {m.batches} batches added ({m.rows} rows)", flush=True)

    results = merge_files(args.out, args.inputs, progress)
    batches = sum(m.batches for m in results)
    print(
        f"merged {len(results)} file(s) into {args.out}: {batches} batches added in {time.perf_counter() - started:.1f} s"
    )
    return 0

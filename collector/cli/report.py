"""``python -m collector report DB``: the diagnosis of a recorded run, as text or as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from collector.cli.args import positive_float
from collector.errors import StallwatchError

EXIT_USAGE = 2


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report",
        help="diagnose a recorded run: verdict, symptoms with evidence, suggested DataLoader settings",
        description="Diagnose one run of a stallwatch file. Reads the file only; never writes to it. "
        "The JSON (--json) is a stable contract documented in docs/report.md.",
    )
    parser.add_argument("db", help="the stallwatch SQLite file")
    parser.add_argument(
        "--run",
        default=None,
        help="run name, id, or 'latest' (default: every loader of the latest run's program, the costliest first)",
    )
    parser.add_argument(
        "--rank",
        type=_rank,
        default=None,
        help="one rank of a distributed job (default: every rank, the job's verdict from its straggler)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--live", action="store_true", help="diagnose a run that is still being recorded")
    window = parser.add_mutually_exclusive_group()
    window.add_argument("--window-s", type=positive_float, default=None, help="only the last SECONDS of batches")
    window.add_argument("--last-batches", type=_batch_count, default=None, help="only the last N batches")
    parser.set_defaults(handler=_main)


def _rank(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a rank number >= 0, got {text!r}")
    return int(text)


def _batch_count(text: str) -> int:
    if not text.isdigit() or int(text) < 2:
        raise argparse.ArgumentTypeError(f"must be an integer >= 2, got {text!r}")
    return int(text)


def _main(args: argparse.Namespace) -> int:
    from collector.diagnosis import diagnose, diagnose_job, diagnose_loaders  # pandas: only when a report is asked for
    from collector.diagnosis.text import render

    whole = args.window_s is None and args.last_batches is None
    try:
        if whole and args.run is None and args.rank is None:
            report = diagnose_loaders(args.db, live=args.live)  # NOTE [ The program's report ]
        elif whole:
            report = diagnose_job(args.db, args.run or "latest", rank=args.rank, live=args.live)
        elif args.rank is not None:
            raise StallwatchError("--rank cannot be combined with --window-s or --last-batches: give --run ID instead")
        else:
            report = diagnose(
                args.db, args.run or "latest", window_s=args.window_s, last_batches=args.last_batches, live=args.live
            )
    except StallwatchError:
        raise  # cli.main prints it on one line and exits 2
    except Exception as exc:  # noqa: BLE001 - the CLI's boundary: one line, never a traceback
        print(f"stallwatch: cannot diagnose {args.db}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        print(
            json.dumps(report.to_dict(), indent=2, default=str)
            if args.json
            else with_resume(render(report), report.run, args.db),
            flush=True,
        )
    except BrokenPipeError:  # `report ... | head`: the reader left; not an error
        sys.stderr.close()
    return 0


def with_resume(text: str, run: dict[str, Any], db: str) -> str:
    """The report with a line after its first saying the run resumed from a saved state (NOTE [ Resumed runs ])."""
    from collector.store.reader import Reader

    runs = Reader(db).runs()
    stored = runs[runs["id"] == run.get("id")]["warnings"].tolist()
    notes = [w for w in (stored[0] if stored else []) if isinstance(w, str) and "resumed mid-epoch" in w]
    if not notes and not (run.get("config") or {}).get("resumed"):
        return text
    head, _, rest = text.partition("\n")
    return f"{head}\nresumed: {'; '.join(notes) or 'the first epoch resumed mid-epoch from a saved state_dict'}\n{rest}"

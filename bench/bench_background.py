"""The collector's CPU outside the loop, in fresh processes, this checkout against another in the same rounds.

usage: python bench/bench_background.py [--workers 2,8] [--seconds 90] [--rounds 2] [--base DIR]

Each side is a fresh process running ``bench_collector.background``: a loader
of about 100 batches a second doing no work (``paced_loader``), watched at the
default rates, for ``--seconds`` after a 200-batch warm-up; it prints the CPU
the monitor thread and the writer process (every thread, sampling included)
spent per second. The window is long enough to hold the workers' USS/PSS reads
at their budget (every 40 s with 8 workers), which a 30 s window can miss.
``--base DIR`` runs the same in a checkout at DIR (a worktree of an older
commit) as a second side, the order alternating every round. Issue 15's
target: under 1% of one core (10 ms/s) for monitor + writer with 8 workers.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from quiet import QUIET_CORES, Others  # noqa: E402

LINE = re.compile(r"monitor thread ([\d.]+) ms/s, writer process \(SQLite, sampling\) ([\d.]+) ms/s")


def child(workers: int, seconds: float, db: str) -> None:
    from bench_collector import background, paced_loader

    background(f"100 batches/s, {workers} workers", lambda: paced_loader(workers), seconds, db)


def side(checkout: str | None, workers: int, seconds: float, db: str) -> tuple[float, float, float]:
    env = dict(os.environ)
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [checkout, env.get("PYTHONPATH")]))
    with Others() as others:
        done = subprocess.run(
            [sys.executable, __file__, "--child", str(workers), str(seconds), db],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    match = LINE.search(done.stdout)
    if match is None:
        raise SystemExit(f"no figures from the side at {checkout or 'this checkout'}:\n{done.stdout}\n{done.stderr}")
    return float(match[1]), float(match[2]), others.cores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="2,8")
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--base", help="another checkout of this project, run as a second side")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(int(args.child[0]), float(args.child[1]), args.child[2])
        return
    sides: list[tuple[str, str | None]] = [("now", None)] + ([("base", args.base)] if args.base else [])
    figures: dict[tuple[str, int], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for workers in (int(w) for w in args.workers.split(",")):
                for name, checkout in sides if r % 2 == 0 else sides[::-1]:
                    monitor, writer, others = side(checkout, workers, args.seconds, os.path.join(tmp, f"{name}.sqlite"))
                    quiet = others <= QUIET_CORES
                    if quiet:
                        figures.setdefault((name, workers), []).append((monitor, writer))
                    print(
                        f"round {r + 1}, {workers} workers, {name}: monitor {monitor:.2f} + writer {writer:.2f} "
                        f"= {monitor + writer:.2f} ms/s ({(monitor + writer) / 10:.2f}% of a core); others "
                        f"{others:.3f} cores{'' if quiet else ' (NOT QUIET: left out)'}",
                        flush=True,
                    )
    for (name, workers), rows in sorted(figures.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        totals = [m + w for m, w in rows]
        print(
            f"{workers} workers, {name}: median monitor {statistics.median(m for m, _ in rows):.2f} + writer "
            f"{statistics.median(w for _, w in rows):.2f} ms/s; total {min(totals):.2f}-{max(totals):.2f} ms/s "
            f"over {len(rows)} rounds"
        )


if __name__ == "__main__":
    main()

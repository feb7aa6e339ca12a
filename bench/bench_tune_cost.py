"""What ``tune=True`` costs a job already at its best setting: tuned and untuned jobs in interleaved pairs.

The two-loader job of bench/bench_tune_job.py, both loaders at one setting (by default the
light class's best of its grid, 2 persistent workers at 1 thread), ``--pairs`` pairs, the order
alternating. Printed per pair: untuned / tuned total seconds (below 1: tuning cost the job), and
the CPU the tuner's helper used (its proc_samples, the writer's own sampling of it), with how
many questions it answered (trials and answers are in the file).

    python bench/bench_tune_cost.py --pairs 4 [--class course-light] [--setting '[2, true, 1]']
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_tune_job import QUIET_CORES, run_job  # noqa: E402


def helper_cpu_s(db: str) -> float | None:
    """The tuner's helpers' CPU seconds over the run, from their last samples (cumulative cpu_s)."""
    with contextlib.closing(sqlite3.connect(db)) as con:
        rows = con.execute("SELECT pid, MAX(cpu_s) FROM proc_samples WHERE role = 'helper' GROUP BY pid").fetchall()
    return sum(cpu for _, cpu in rows if cpu is not None) if rows else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--class", dest="cls", default="course-light")
    parser.add_argument("--setting", default="[2, true, 1]")
    parser.add_argument("--epochs", type=int, default=12)
    args = parser.parse_args()
    args.hog_cores = 0.0
    setting = tuple(json.loads(args.setting))
    ratios, tails = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            order = (False, True) if i % 2 == 0 else (True, False)
            jobs = {}
            for tune in order:
                db = str(Path(tmp) / f"{i}-{int(tune)}.sqlite")
                jobs[tune] = (run_job(args, args.cls, setting, tune, db), db)  # type: ignore[arg-type]
            (plain, _), (tuned, db) = jobs[False], jobs[True]
            ratio = sum(plain["job"]) / sum(tuned["job"])
            tail = statistics.median(plain["job"][-3:]) / statistics.median(tuned["job"][-3:])
            ratios.append(ratio)
            tails.append(tail)
            others = max(plain["others"], tuned["others"])
            cpu = helper_cpu_s(db)
            print(
                f"pair {i}: untuned/tuned total {ratio:.3f}, last 3 epochs {tail:.3f}; helper CPU "
                f"{'n/a' if cpu is None else f'{cpu:.2f} s'}; trials {len(tuned['trials'])}; others {others:.2f} cores"
                f"{' (NOISY)' if others > QUIET_CORES else ''}",
                flush=True,
            )
    print(f"median untuned/tuned total {statistics.median(ratios):.3f}; last 3 epochs {statistics.median(tails):.3f}")


if __name__ == "__main__":
    main()

"""Stable answers: every demo scenario recorded several times in a row beside a CPU hog, and the verdicts listed.

usage: python bench/bench_demos.py [--repeats 5] [--seconds 6] [--hog-procs 1] [--scenarios starved,healthy,...]

Each scenario of ``python -m collector demo`` is recorded ``--repeats`` times
in a row with ``--hog-procs`` busy processes beside it (started here and
stopped at the end), and each run's verdict (with its borderline range when
it has one), symptoms and suggestions are printed: the same scenario should
give the same verdict each time, or say borderline.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import warnings

from collector import diagnose
from collector.cli.demo import SCENARIOS, run_demo

HOG = "while True: pass"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--hog-procs", type=int, default=1)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    db = os.path.join(tempfile.mkdtemp(prefix="bench-demos-"), "demos.sqlite")
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.hog_procs)]
    try:
        print(
            f"{os.cpu_count()} cores, {args.hog_procs} hog process(es), load average {os.getloadavg()[0]:.2f} at start"
        )
        print("\n| scenario | run | verdict | stall (range) | symptoms | suggestions |")
        print("|---|---|---|---|---|---|")
        for scenario in args.scenarios.split(","):
            for rep in range(args.repeats):
                name = f"{scenario}-{rep}"
                run_demo(db, args.seconds, scenario, run=name)
                report = diagnose(db, run=name)
                s = report.summary
                lo, hi = s["stall_fraction_range"]
                word = report.verdict
                if s["borderline"]:
                    word += f" (borderline {' / '.join(s['borderline']['between'])})"
                symptoms = ", ".join(x.id + (" (borderline)" if x.borderline else "") for x in report.symptoms)
                changes = ", ".join(f"{g.parameter}={g.suggested} ({g.expected_speedup}x)" for g in report.suggestions)
                print(
                    f"| {scenario} | {rep + 1} | {word} | {s['stall_fraction']:.1%} ({lo:.1%}-{hi:.1%}) | "
                    f"{symptoms or '-'} | {changes or '-'} |"
                )
        print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


if __name__ == "__main__":
    main()

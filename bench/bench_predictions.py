"""The model's predicted speed-up from every recorded setting to every other, against what each setting measured.

usage: python bench/bench_predictions.py collect --out DIR [--rounds 2] [--conditions idle,hog]
                                         [--pipelines light,heavy,course-light,course-heavy]
                                         [--workers 0,1,2,3] [--threads 2,1] [--persistent 0,1]
       python bench/bench_predictions.py evaluate DIR [--no-loo]

``collect`` runs bench/bench_pipelines.py's training program once per
(pipeline, num_workers, torch threads, persistent workers) each round, in an
order rotated every round (``hog``: one busy process beside each round;
``hog2``: two), and keeps every run's file and its steady train-epoch time in
DIR/runs.json, with the CPU that other processes used during the run (from
/proc/stat, less the run's own process tree). ``evaluate`` diagnoses each run
and asks its model (NOTE [ Sharing the cores ]) for the speed-up of every other
setting of the same pipeline and condition, against the measured ratio of the
two settings' median epoch times, and checks the measured ratio against the
prediction's range (NOTE [ Honest ranges ]). Leave-one-pipeline-out: for each
pipeline, the calibration constants PARALLEL_SHARE and MODEL_LOW / MODEL_HIGH
are fitted on the other pipelines' predictions only, then the left-out
pipeline is predicted with them: the median and worst |predicted / measured - 1|
per pipeline, and the share of measured speed-ups inside their ranges. Runs
during which other processes used more than 5% of a core are left out.
It reads the files again each time, so a change to the diagnosis is scored
without rerunning the training.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
TOLERANCE = 0.25  # a prediction within 25% of the measured speed-up
QUIET_CORES = 0.05  # other processes' CPU beyond which an idle run is left out
SHARES = [round(0.40 + 0.05 * i, 2) for i in range(11)]  # PARALLEL_SHARE values the leave-one-out fit tries


def _cpu_ticks() -> tuple[float, float]:
    """(all busy CPU seconds of the machine, seconds since boot) from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - fields[3] - fields[4]) / hz, sum(fields) / hz


def collect(args: argparse.Namespace) -> None:
    import resource

    from bench_pipelines import HOG, run_one, steady
    from pipelines import make_jpegs

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = str(make_jpegs(Path(args.data), args.images))
    index = out / "runs.json"
    runs = json.loads(index.read_text()) if index.exists() else []
    settings = [
        (pl, n, th, pe)
        for pl in args.pipelines.split(",")
        for n in _ints(args.workers)
        for th in _ints(args.threads)
        for pe in _ints(args.persistent)
        if n > 0 or pe == 0
    ]
    for condition in args.conditions.split(","):
        for rnd in range(args.rounds):
            busy = int(condition[3:] or 1) if condition.startswith("hog") else 0
            hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(busy)]
            try:
                order = settings[rnd % len(settings) :] + settings[: rnd % len(settings)]
                for i, (pipeline, workers, threads, persistent) in enumerate(order):
                    db = str(out / f"{condition}-{pipeline}-{workers}w-{threads}t-{persistent}p-{rnd}.sqlite")
                    busy0, _ = _cpu_ticks()
                    ours0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    started = time.monotonic()
                    epochs = args.light_epochs if pipeline.endswith("light") else args.epochs
                    times = run_one(data, pipeline, workers, epochs, db, "train", threads, bool(persistent))
                    ours1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    busy1, _ = _cpu_ticks()
                    mine = (ours1.ru_utime + ours1.ru_stime) - (ours0.ru_utime + ours0.ru_stime)
                    wall = max(time.monotonic() - started, 1e-9)
                    others = max(0.0, (busy1 - busy0) - mine) / wall - busy  # the hogs' own cores excepted
                    row = dict(condition=condition, round=rnd, pipeline=pipeline, workers=workers, threads=threads,
                               persistent=persistent, db=db, epoch_s=steady(times["epoch_s"]),
                               epochs=times["epoch_s"], others_cores=round(others, 3))  # fmt: skip
                    runs.append(row)
                    index.write_text(json.dumps(runs, indent=1))
                    print(f"{condition} round {rnd} [{i + 1}/{len(order)}] {pipeline} {workers}w {threads}t "
                          f"{'persistent' if persistent else 'fresh'}: {row['epoch_s']:.2f} s "
                          f"(others {others:.2f} cores)", flush=True)  # fmt: skip
            finally:
                for hog in hogs:
                    hog.kill()
                    hog.wait()


def _key(r: dict[str, Any]) -> tuple[str, str, int, int, int]:
    return (r["condition"], r["pipeline"], r["workers"], r["threads"], r.get("persistent", 0))


def _usable(r: dict[str, Any], quiet: float = QUIET_CORES) -> bool:
    """Idle runs beside more than ``quiet`` cores of other processes' CPU measure the machine, not the setting."""
    return r["condition"] != "idle" or r.get("others_cores", 0.0) <= quiet


def evaluate(args: argparse.Namespace) -> None:
    from collector.diagnosis.build import build_model
    from collector.diagnosis.calibration import C, override
    from collector.diagnosis.data import load_run
    from collector.diagnosis.stats import measure

    every_run = json.loads((Path(args.dir) / "runs.json").read_text())
    runs = [r for r in every_run if _usable(r, args.max_others)]
    times: dict[tuple[str, str, int, int, int], list[float]] = defaultdict(list)
    for r in runs:
        times[_key(r)].append(r["epoch_s"])
    median = {key: statistics.median(v) for key, v in times.items()}
    facts = {r["db"]: measure(load_run(r["db"], "train")) for r in runs}

    def predictions(pipelines: set[str]) -> list[tuple[str, float, float, float, float]]:
        """(pipeline, predicted, measured, low, high) for every run of ``pipelines`` to every other setting."""
        out = []
        for r in (r for r in runs if r["pipeline"] in pipelines):
            model = build_model(facts[r["db"]])
            if model is None:
                continue
            base = median[_key(r)]
            for key, then in median.items():
                condition, pipeline, n, t, p = key
                if (condition, pipeline) != (r["condition"], r["pipeline"]) or key == _key(r):
                    continue
                setting = model.recorded.but(num_workers=n, threads=t, persistent_workers=bool(p) and n > 0)
                s = model.speedup(setting)
                spread = min(model.spread, 0.5)
                out.append((pipeline, s, base / then, s / C.MODEL_HIGH * (1 - spread), s / C.MODEL_LOW * (1 + spread)))
        return out

    pipelines = sorted({r["pipeline"] for r in runs})
    print(f"{len(runs)} runs ({len(every_run) - len(runs)} left out: other processes above "
          f"{args.max_others:g} of a core)\n")  # fmt: skip
    print("| pipeline | constants | predictions | within 25% | median error | worst error | measured inside range |")
    print("|---|---|---|---|---|---|---|")
    for pipeline in pipelines:
        rows = [("table", predictions({pipeline}), {})]
        if not args.no_loo and len(pipelines) > 1:
            others = set(pipelines) - {pipeline}
            fitted = _fit(others, predictions, override)
            with override(**fitted):
                rows.append(("fitted on the others: " + ", ".join(f"{k} {v:.2f}" for k, v in fitted.items()),
                             predictions({pipeline}), fitted))  # fmt: skip
        for label, preds, _ in rows:
            errors = [abs(p / m - 1) for _, p, m, _, _ in preds]
            inside = sum(lo <= m <= hi for _, _, m, lo, hi in preds)
            if not errors:
                continue
            print(f"| {pipeline} | {label} | {len(errors)} | {sum(e <= TOLERANCE for e in errors)} | "
                  f"{statistics.median(errors):.0%} | {max(errors):.0%} | {inside} of {len(preds)} |")  # fmt: skip
    every = predictions(set(pipelines))
    ratios = sorted(p / m for _, p, m, _, _ in every)
    if ratios:
        print(f"\nall: {sum(abs(x - 1) <= TOLERANCE for x in ratios)} of {len(ratios)} within {TOLERANCE:.0%}; "
              f"predicted/measured median {statistics.median(ratios):.2f}, "
              f"10-90% {ratios[len(ratios) // 10]:.2f}-{ratios[9 * len(ratios) // 10]:.2f} (MODEL_LOW / MODEL_HIGH)")  # fmt: skip
    _advice(runs, median)


def _fit(pipelines: set[str], predictions: Any, override: Any) -> dict[str, float]:
    """PARALLEL_SHARE with the least median error on ``pipelines``, then their 10-90% predicted/measured."""
    best, share = float("inf"), SHARES[0]
    for value in SHARES:
        with override(PARALLEL_SHARE=value):
            errors = [abs(p / m - 1) for _, p, m, _, _ in predictions(pipelines)]
        if errors and statistics.median(errors) < best:
            best, share = statistics.median(errors), value
    with override(PARALLEL_SHARE=share):
        ratios = sorted(p / m for _, p, m, _, _ in predictions(pipelines))
    return {
        "PARALLEL_SHARE": share,
        "MODEL_LOW": ratios[len(ratios) // 10],
        "MODEL_HIGH": ratios[9 * len(ratios) // 10],
    }


def _advice(runs: list[dict[str, Any]], median: dict[tuple[str, str, int, int, int], float]) -> None:
    """Each run's recommendation against what its setting measured, where the matrix measured it."""
    from collector import diagnose

    print("\n| condition, pipeline | from | recommended | predicted (range) | measured | within 25% or inside |")
    print("|---|---|---|---|---|---|")
    good = total = 0
    for r in runs:
        report = diagnose(r["db"], run="train")
        rec = report.recommendation
        start = f"{r['workers']}w {r['threads']}t{' p' if r.get('persistent') else ''}"
        if rec is None:
            same = [v for k, v in median.items() if k[:2] == _key(r)[:2]]
            best = median[_key(r)] / min(same)
            said = "nothing helps" if any(n.startswith("Nothing here will help") for n in report.notes) else "try"
            fine = said == "try" or best < 1.10
            good, total = good + fine, total + 1
            print(f"| {r['condition']}, {r['pipeline']} | {start} | nothing ({said}) | - | best measured "
                  f"{best:.2f}x | {'yes' if fine else 'no'} |")  # fmt: skip
            continue
        c = rec.changes
        n = c.get("num_workers", r["workers"])
        key = (r["condition"], r["pipeline"], n, c.get("torch.set_num_threads", r["threads"]),
               int(c.get("persistent_workers", bool(r.get("persistent"))) and n > 0))  # fmt: skip
        if key not in median:
            what = ", ".join(f"{k}={v}" for k, v in c.items())
            print(
                f"| {r['condition']}, {r['pipeline']} | {start} | {what} | {rec.expected_speedup:.2f}x | not measured | - |"
            )
            continue
        measured = median[_key(r)] / median[key]
        lo, hi = rec.expected_speedup_range
        ok = abs(rec.expected_speedup / measured - 1) <= TOLERANCE or lo <= measured <= hi
        good, total = good + ok, total + 1
        what = ", ".join(f"{k}={v}" for k, v in c.items())
        print(f"| {r['condition']}, {r['pipeline']} | {start} | {what} | {rec.expected_speedup:.2f}x "
              f"({lo:.2f}-{hi:.2f}) | {measured:.2f}x | {'yes' if ok else 'no'} |")  # fmt: skip
    print(f"{good} of {total} answers hold: recommendations within 25% of what they measured or inside their "
          "range, and 'nothing helps' only where no setting measured 1.10x")  # fmt: skip


def _within(ratio: float) -> bool:
    return abs(ratio - 1) <= TOLERANCE


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--out", required=True)
    c.add_argument("--rounds", type=int, default=2)
    c.add_argument("--epochs", type=int, default=4)
    c.add_argument("--light-epochs", type=int, default=6)
    c.add_argument("--images", type=int, default=320)
    c.add_argument("--data", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "stallwatch-bench-jpegs"))
    c.add_argument("--conditions", default="idle,hog")
    c.add_argument("--pipelines", default="light,heavy,course-light,course-heavy")
    c.add_argument("--workers", default="0,1,2,3")
    c.add_argument("--threads", default="2,1")
    c.add_argument("--persistent", default="0,1")
    e = sub.add_parser("evaluate")
    e.add_argument("dir")
    e.add_argument("--no-loo", action="store_true", help="skip the leave-one-pipeline-out fit")
    e.add_argument("--max-others", type=float, default=QUIET_CORES, help="idle runs beside more are left out")
    args = parser.parse_args()
    collect(args) if args.command == "collect" else evaluate(args)


if __name__ == "__main__":
    main()

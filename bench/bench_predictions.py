"""The model's predicted speed-up from every recorded setting to every other, against what each setting measured.

usage: python bench/bench_predictions.py collect --out DIR [--rounds 3] [--conditions idle,hog]
                                         [--transforms light,heavy] [--workers 0,1,2,3] [--threads 2,1]
       python bench/bench_predictions.py evaluate DIR

``collect`` runs bench/bench_pipelines.py's training program once per
(transform, num_workers, torch threads) each round, in an order rotated every
round (``hog``: one busy process beside each round; ``hog2``: two), and keeps every run's
file and its steady train-epoch time in DIR/runs.json. ``evaluate`` then
diagnoses each run and asks its model (NOTE [ Sharing the cores ]) for the
speed-up of every other setting of the same transform and condition,
against the measured ratio of the two settings' median epoch times: a
matrix of predictions where bench_pipelines.py checks one suggestion a
run. It reads the files again each time, so a change to the diagnosis is
scored without rerunning the training.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
TOLERANCE = 0.25  # the target: a prediction within 25% of the measured speed-up


def collect(args: argparse.Namespace) -> None:
    from bench_pipelines import HOG, run_one, steady
    from pipelines import make_jpegs

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = str(make_jpegs(Path(args.data), args.images))
    index = out / "runs.json"
    runs = json.loads(index.read_text()) if index.exists() else []
    settings = [
        (t, n, th) for t in args.transforms.split(",") for n in _ints(args.workers) for th in _ints(args.threads)
    ]
    for condition in args.conditions.split(","):
        for rnd in range(args.rounds):
            busy = int(condition[3:] or 1) if condition.startswith("hog") else 0
            hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(busy)]
            try:
                order = settings[rnd % len(settings) :] + settings[: rnd % len(settings)]
                for i, (transform, workers, threads) in enumerate(order):
                    db = str(out / f"{condition}-{transform}-{workers}w-{threads}t-{rnd}.sqlite")
                    times = run_one(data, transform, workers, args.epochs, db, "train", threads=threads)
                    row = dict(condition=condition, round=rnd, transform=transform, workers=workers,
                               threads=threads, db=db, epoch_s=steady(times["epoch_s"]), load=os.getloadavg()[0])  # fmt: skip
                    runs.append(row)
                    index.write_text(json.dumps(runs, indent=1))
                    print(f"{condition} round {rnd} [{i + 1}/{len(order)}] {transform} {workers} workers "
                          f"{threads} threads: {row['epoch_s']:.2f} s", flush=True)  # fmt: skip
            finally:
                for hog in hogs:
                    hog.kill()
                    hog.wait()


def evaluate(args: argparse.Namespace) -> None:
    runs = json.loads((Path(args.dir) / "runs.json").read_text())
    times: dict[tuple[str, str, int, int], list[float]] = defaultdict(list)
    for r in runs:
        times[(r["condition"], r["transform"], r["workers"], r["threads"])].append(r["epoch_s"])
    median = {key: statistics.median(v) for key, v in times.items()}
    errors: list[float] = []
    advised: list[tuple[str, str, float, float]] = []
    for group in sorted({(c, t) for c, t, _, _ in median}):
        cases = sorted(key[2:] for key in median if key[:2] == group)
        print(f"\n## {group[0]}, {group[1]}: predicted / measured speed-up, from the row's run to the column")
        print("| from (run) | " + " | ".join(f"{n}w {t}t" for n, t in cases) + " |")
        print("|---" * (len(cases) + 1) + "|")
        before = len(errors)
        for r in (r for r in runs if (r["condition"], r["transform"]) == group):
            shared = _model(r["db"])
            base = median[(*group, r["workers"], r["threads"])]
            cells = []
            for n, t in cases:
                if shared is None or (n, t) == (r["workers"], r["threads"]) or t > r["threads"]:  # never suggested
                    cells.append("-")
                    continue
                errors.append(shared.speedup(n, t) / (base / median[(*group, n, t)]))
                cells.append(f"{shared.speedup(n, t):.2f}/{base / median[(*group, n, t)]:.2f}" + _mark(errors[-1]))
            print(f"| {r['workers']}w {r['threads']}t ({r['round']}) | " + " | ".join(cells) + " |")
            n, t, gain = _suggestion(r["db"], r["workers"], r["threads"])
            if gain is not None and (*group, n, t) in median:
                change = f"{r['workers']}w {r['threads']}t -> {n}w {t}t"
                advised.append((" ".join(group), change, gain, base / median[(*group, n, t)]))
        print(f"{sum(_within(e) for e in errors[before:])} of {len(errors) - before} within {TOLERANCE:.0%}")
    print("\n| condition, transform | suggestion | predicted | measured (medians) | within 25% |")
    print("|---|---|---|---|---|")
    for where, change, gain, measured in advised:
        print(f"| {where} | {change} | {gain:.2f}x | {measured:.2f}x | {'yes' if _within(gain / measured) else 'no'} |")
    good = sum(_within(g / m) for _, _, g, m in advised)
    print(f"{good} of {len(advised)} suggestions' predicted speed-ups within {TOLERANCE:.0%}")
    if errors:
        e = sorted(errors)
        print(f"\n{sum(map(_within, e))} of {len(e)} predictions within {TOLERANCE:.0%} of the measured speed-up; "
              f"predicted/measured median {statistics.median(e):.2f}, 10-90% {e[len(e) // 10]:.2f}-{e[9 * len(e) // 10]:.2f}")  # fmt: skip


def _model(db: str):  # -> SharedCores | None
    from collector.diagnosis import load_run
    from collector.diagnosis.model import DEFAULT_HANDOFF_S, build_model
    from collector.diagnosis.sharing import shared_cores
    from collector.diagnosis.stats import measure

    facts = measure(load_run(db, "train"))
    model = build_model(facts)
    return shared_cores(facts, model.handoff_s if model is not None else DEFAULT_HANDOFF_S)


def _suggestion(db: str, workers: int, threads: int) -> tuple[int, int, float | None]:
    """(num_workers, threads, expected speed-up) as the report of that run suggests them."""
    from collector import diagnose

    report = diagnose(db, run="train")
    n = next((g.suggested for g in report.suggestions if g.parameter == "num_workers"), workers)
    t = next((g.suggested for g in report.suggestions if g.parameter == "torch.set_num_threads"), threads)
    return n, t, next((g.expected_speedup for g in report.suggestions if g.expected_speedup), None)


def _within(ratio: float) -> bool:
    return abs(ratio - 1) <= TOLERANCE


def _mark(ratio: float) -> str:
    return "" if _within(ratio) else " x"


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--out", required=True)
    c.add_argument("--rounds", type=int, default=3)
    c.add_argument("--epochs", type=int, default=4)
    c.add_argument("--images", type=int, default=320)
    c.add_argument("--data", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "stallwatch-bench-jpegs"))
    c.add_argument("--conditions", default="idle,hog")
    c.add_argument("--transforms", default="light,heavy")
    c.add_argument("--workers", default="0,1,2,3")
    c.add_argument("--threads", default="2,1")
    e = sub.add_parser("evaluate")
    e.add_argument("dir")
    args = parser.parse_args()
    collect(args) if args.command == "collect" else evaluate(args)


if __name__ == "__main__":
    main()

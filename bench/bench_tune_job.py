"""Live tuning of a whole job: a training loader and a few-batch evaluation loader, as a course's photo program has.

Each job trains ``--epochs`` epochs in a fresh process: per epoch, an 8-batch training loader
(256 generated 512-px JPEGs decoded and resized to 64 px, bench/pipelines.py, a step of the
class's CNN) then a 3-batch evaluation loader (96 more, no gradient). Both loaders share one
setting and torch's threads, and both are watched (``collector.watch``); only ``tune`` differs
between the arms. Per class (``light``: resize only; ``heavy``: a training augmentation) and
per start (``0``: num_workers=0; ``shipped``: 2 workers as a course ships them; ``best``:
the grid's best static setting), interleaved rounds (the arms' order alternates):

- the static grid: every setting of GRID, untuned; the best is the fastest job epoch
- untuned at the start, tuned from the start

Printed per class and start, each a median over rounds:
- tuned / best: the best static job epoch over the tuned job's last 3 epochs (target >= 0.95), and
  the same for each loader alone (the training loader's, the evaluation loader's epochs)
- tuned / untuned: the untuned job's total time over the tuned one's (never below 1 beyond noise;
  started at the best, at least 0.98: a tuner that finds nothing costs at most 2%)
- slow epochs: tuned job epochs 10% or more slower than the untuned run's median (target <= 1 a run)
- the trials of each tuned run, per loader; others' CPU (runs over 0.05 cores are marked)

    python bench/bench_tune_job.py --classes course-light,course-heavy --rounds 2 --epochs 12 [--hog]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_tune import _cpu_busy_s, _hog, _tree_cpu_s  # noqa: E402

# (num_workers, persistent_workers, threads): the static settings of the grid, both loaders alike
GRID = [
    (0, False, 2),
    (2, False, 2),
    (2, True, 1),
    (2, True, 2),
    (3, True, 2),
    (4, True, 1),
    (4, True, 2),
    (8, True, 2),
]
SHIPPED = (2, False, 2)
QUIET_CORES = 0.05
TRAIN_IMAGES, VAL_IMAGES, BATCH = 256, 96, 32


def child(args: argparse.Namespace) -> None:
    """One job in this process: per-epoch seconds (train, val) as JSON on stdout."""
    import torch
    from pipelines import NETS, PIPELINES, JpegFolder, make_jpegs
    from torch.utils.data import DataLoader, Subset

    from collector import watch

    torch.manual_seed(0)
    workers, persistent, threads = json.loads(args.setting)
    torch.set_num_threads(threads)
    net, transform = PIPELINES[args.child]
    data = make_jpegs(Path(tempfile.gettempdir()) / "stallwatch-bench-tune-job", TRAIN_IMAGES + VAL_IMAGES)
    folder = JpegFolder(data, transform)
    train_set, val_set = Subset(folder, range(TRAIN_IMAGES)), Subset(folder, range(TRAIN_IMAGES, len(folder)))
    kwargs: dict[str, Any] = {"batch_size": BATCH, "num_workers": workers}
    if workers:
        kwargs["persistent_workers"] = persistent
    gen = torch.Generator().manual_seed(1)
    train = watch(DataLoader(train_set, shuffle=True, generator=gen, **kwargs), db=args.db, run="train", tune=args.tune)
    val = watch(DataLoader(val_set, **kwargs), db=args.db, run="val", tune=args.tune)
    model = NETS[net]()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    times: list[tuple[float, float]] = []
    for _ in range(args.epochs):
        t0 = time.perf_counter()
        model.train()
        for x, y in train:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        t1 = time.perf_counter()
        model.eval()
        with torch.no_grad():
            for x, _ in val:
                model(x)
        times.append((t1 - t0, time.perf_counter() - t1))
    train.close()
    val.close()
    print(json.dumps({"times": times}))


def run_job(args: argparse.Namespace, cls: str, setting: tuple[int, bool, int], tune: bool, db: str) -> dict[str, Any]:
    """A child job: {"job": epoch seconds, "train", "val", "others": others' CPU in cores, "trials"}."""
    cmd = [sys.executable, __file__, "--child", cls, "--setting", json.dumps(setting), "--db", db]
    cmd += ["--epochs", str(args.epochs)] + (["--tune"] if tune else [])
    t0, busy0 = time.monotonic(), _cpu_busy_s()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ours = _tree_cpu_s(proc)
    out, err = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"{cmd}: {err[-2000:]}")
    wall = time.monotonic() - t0
    times = json.loads(out.strip().splitlines()[-1])["times"]
    others = max(0.0, _cpu_busy_s() - busy0 - ours()) / wall - args.hog_cores
    lines = [line for line in err.splitlines() if line.startswith("stallwatch ")]
    return {
        "job": [a + b for a, b in times],
        "train": [a for a, _ in times],
        "val": [b for _, b in times],
        "others": others,
        "trials": _trials(db),
        "said": lines,
    }


def _trials(db: str) -> list[str]:
    with contextlib.closing(sqlite3.connect(db)) as con:
        rows = con.execute(
            "SELECT r.name, t.epoch, t.setting, t.predicted_speedup, t.measured_speedup, t.kept FROM trials t "
            "JOIN runs r ON r.id = t.run_id ORDER BY t.rowid"
        ).fetchall()
    out = []
    for name, epoch, setting, predicted, measured, kept in rows:
        s = json.loads(setting)
        what = f"{s['num_workers']}w{' p' if s['persistent_workers'] else ''} {s['threads']}t"
        got = "not judged" if measured is None else f"{measured:.2f}x"
        out.append(f"{name} e{epoch} {what}: pred {predicted:.2f}x, got {got}, {'kept' if kept else 'reverted'}")
    return out


def tail(times: list[float]) -> float:
    return statistics.median(times[-3:])


def bench_class(args: argparse.Namespace, cls: str, tmp: str) -> None:
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):
        arms: list[tuple[str, tuple[int, bool, int], bool]] = [(f"grid {s}", s, False) for s in GRID]
        arms += [("untuned 0", (0, False, 2), False), ("tuned 0", (0, False, 2), True)]
        arms += [("untuned shipped", SHIPPED, False), ("tuned shipped", SHIPPED, True)]
        results: dict[str, Any] = {}
        for i, (name, setting, tune) in enumerate(arms if r % 2 == 0 else arms[::-1]):
            results[name] = run_job(args, cls, setting, tune, str(Path(tmp) / f"{cls}-{r}-{i}.sqlite"))
        grid = {s: statistics.median(results[f"grid {s}"]["job"][1:]) for s in GRID}
        best = min(grid, key=grid.__getitem__)
        results["untuned best"] = results[f"grid {best}"]
        results["tuned best"] = run_job(args, cls, best, True, str(Path(tmp) / f"{cls}-{r}-best.sqlite"))
        results["grid"], results["best"] = grid, best
        rounds.append(results)
        _print_round(cls, r, results)
    print(f"== {cls}: medians over {len(rounds)} rounds", flush=True)
    for start in ("0", "shipped", "best"):
        vs_best = [rd["grid"][rd["best"]] / tail(rd[f"tuned {start}"]["job"]) for rd in rounds]
        vs_untuned = [sum(rd[f"untuned {start}"]["job"]) / sum(rd[f"tuned {start}"]["job"]) for rd in rounds]
        train = [_loader_vs_best(rd, start, "train") for rd in rounds]
        print(
            f"  from {start:8s} tuned/best {statistics.median(vs_best):.3f} ({', '.join(f'{v:.2f}' for v in vs_best)}); "
            f"tuned/untuned {statistics.median(vs_untuned):.3f} ({', '.join(f'{v:.2f}' for v in vs_untuned)}); "
            f"training loader alone tuned/best {statistics.median(train):.3f} ({', '.join(f'{v:.2f}' for v in train)})",
            flush=True,
        )


def _loader_vs_best(results: dict[str, Any], start: str, loader: str) -> float:
    """One loader's epoch at the best static setting over the tuned job's (its last 3 epochs): where the gap lies."""
    best = statistics.median(results[f"grid {results['best']}"][loader][1:])
    return best / tail(results[f"tuned {start}"][loader])


def _print_round(cls: str, r: int, results: dict[str, Any]) -> None:
    grid, best = results["grid"], results["best"]
    others = max(v["others"] for k, v in results.items() if isinstance(v, dict) and "others" in v)
    flag = " (NOISY)" if others > QUIET_CORES else ""
    print(f"{cls} round {r}: best static {best} {grid[best]:.3f} s; others {others:.2f} cores{flag}", flush=True)
    print("  grid " + ", ".join(f"{s} {t:.3f}" for s, t in grid.items()), flush=True)
    for start in ("0", "shipped", "best"):
        tuned, untuned = results[f"tuned {start}"], results[f"untuned {start}"]
        base = statistics.median(untuned["job"])
        slow = sum(t >= 1.10 * base for t in tuned["job"])
        print(
            f"  from {start}: tuned/best {grid[best] / tail(tuned['job']):.2f} (training loader "
            f"{_loader_vs_best(results, start, 'train'):.2f}, evaluation {_loader_vs_best(results, start, 'val'):.2f}), "
            f"tuned/untuned {sum(untuned['job']) / sum(tuned['job']):.3f}, slow epochs {slow}; "
            f"tuned {[round(t, 2) for t in tuned['job']]}",
            flush=True,
        )
        for line in tuned["trials"]:
            print(f"    {line}", flush=True)
        for line in tuned["said"]:
            print(f"    said: {line[len('stallwatch ') :]}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--classes", default="course-light,course-heavy")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--hog", action="store_true", help="a CPU hog on every core beside each job")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--setting", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--db", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tune", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args)
        return
    args.hog_cores = float(os.cpu_count() or 1) if args.hog else 0.0
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=_hog, args=(stop, False)) for _ in range(int(args.hog_cores))]
    for h in hogs:
        h.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for cls in args.classes.split(","):
                bench_class(args, cls, tmp)
    finally:
        stop.set()
        for h in hogs:
            h.join()


if __name__ == "__main__":
    main()

"""Live tuning against the best static setting: does ``watch(tune=True)`` find it, how fast, at what cost?

Each pipeline starts at its own setting (the demos' ``collector demo`` loaders, and the photo
pipeline of bench/pipelines.py at num_workers=0) and trains ``--epochs`` epochs in a fresh
process: untuned, tuned, and at each static setting of a small grid. Printed per pipeline:

- best static: the grid's fastest setting by its median epoch (seconds a batch)
- tuned / best: the best static's median epoch over the tuned run's median of its last 3 epochs
  (target >= 0.90), and the epoch by which the tuned run first came within 10% of the best
- slow epochs: tuned epochs 10% or more slower than the untuned run's median, and of them those
  run at a setting other than the start, the epochs spent in a worse setting (target <= 1); the
  rest ran at the start setting, their excess the machine's noise and our own cost (the healthy
  demo's target)
- for the healthy demo: the tuned run's total time over the untuned run's (target <= 1.02)
- others: other processes' CPU during the runs, in cores (runs over 0.05 are marked), and the load average
- the tuned run's trials: epoch, the change, predicted (corrected) and measured speed-up, kept, why

``--hog`` runs a CPU hog (one busy process a core) beside every run, in the job's own session (so
in its autogroup, where the tuner's nice +10 helper waits for it); ``--hog-apart`` puts the hog in a
session of its own, as another job's would be.

``--long S`` measures a long epoch instead (NOTE [ Windows of a long epoch ]): each pipeline's
dataset is stretched to one epoch of about S seconds at its own setting, tuned in windows, against
the grid's best static seconds a batch (from short epochs). Printed: the tuned rate in each minute
over the best static's (target >= 0.90 by minute 5), and minutes 10% or more slower than the
untuned rate.

    python bench/bench_tune.py --pipelines starved,cpu,photo --epochs 10 [--hog]
    python bench/bench_tune.py --pipelines starved --long 420
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
DEMOS = ("starved", "cpu", "oversubscribed", "epoch-stall", "healthy")
GRID = {  # static settings tried per pipeline: (num_workers, persistent_workers)
    "default": [(0, False), (2, False), (2, True), (4, True), (8, True)],
}
QUIET_CORES = 0.05


def _cpu_busy_s() -> float:
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def child(args: argparse.Namespace) -> None:
    """One run in this process: per-epoch seconds as JSON on stdout."""
    import torch
    from torch.utils.data import DataLoader

    from collector import watch

    torch.manual_seed(0)
    if args.pipeline == "photo":
        from pipelines import JpegFolder, SmallCNN, make_jpegs

        data = make_jpegs(Path(tempfile.gettempdir()) / "stallwatch-bench-tune-jpegs", 256)
        dataset, kwargs, step_s = JpegFolder(data, "light"), {"batch_size": 32, "num_workers": 0}, 0.0
        model: torch.nn.Module = SmallCNN()
    else:
        from collector.cli.demo import SCENARIOS

        spec = SCENARIOS[args.pipeline]
        dataset, kwargs, step_s = spec.make_dataset(), dict(spec.loader_kwargs), spec.step_s
        if args.long:
            dataset = torch.utils.data.Subset(dataset, [i % len(dataset) for i in range(int(args.long))])  # type: ignore[arg-type]
        elif args.pipeline != "epoch-stall":
            dataset = torch.utils.data.Subset(dataset, range(1024))
        torch.set_num_threads(1)
        model = torch.nn.Linear(256, 10)
    if args.workers is not None:
        kwargs.update(num_workers=args.workers, persistent_workers=bool(args.persistent) and args.workers > 0)
        if args.workers == 0:
            kwargs.pop("prefetch_factor", None)
    loader = DataLoader(dataset, shuffle=True, generator=torch.Generator().manual_seed(1), **kwargs)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01)
    watched = watch(loader, db=args.db, run=args.run, tune=bool(args.tune))
    times, stamps = [], []
    for _ in range(args.epochs):
        t0 = time.perf_counter()
        for x, y in watched:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            if step_s:
                time.sleep(step_s)
            stamps.append(time.perf_counter() - t0)
        times.append(time.perf_counter() - t0)
    watched.close()
    print(json.dumps({"times": times, "stamps": stamps if args.long else []}))


def run_one(
    args: argparse.Namespace, pipeline: str, db: str, run: str, extra: list[str], epochs: int | None = None
) -> tuple[dict[str, list[float]], float]:
    """A child run: ({"times": epoch seconds, "stamps": each batch's seconds into its epoch}, others' CPU in cores)."""
    epochs = args.epochs if epochs is None else epochs
    cmd = [sys.executable, __file__, "--child", pipeline, "--epochs", str(epochs), "--db", db, "--run", run]
    t0, busy0 = time.monotonic(), _cpu_busy_s()
    proc = subprocess.Popen([*cmd, *extra], stdout=subprocess.PIPE, text=True)
    ours = _tree_cpu_s(proc)
    out, _ = proc.communicate()
    wall = time.monotonic() - t0
    others = max(0.0, _cpu_busy_s() - busy0 - ours()) / wall - args.hog_cores
    return json.loads(out.strip().splitlines()[-1]), others


def _tree_cpu_s(proc: subprocess.Popen[str]) -> Callable[[], float]:
    """A function giving the CPU seconds of ``proc`` and its children once it has ended (rusage of children)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)

    def spent() -> float:
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    return spent


def _hog(stop: Any, apart: bool) -> None:
    if apart:
        os.setsid()  # another job: a session, so an autogroup, of its own
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipelines", default="starved,cpu,oversubscribed,epoch-stall,healthy,photo")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--hog", action="store_true", help="a CPU hog on every core beside each run")
    parser.add_argument(
        "--hog-apart", action="store_true", help="the hog in a session of its own, as another job's would be"
    )
    parser.add_argument("--long", type=float, default=0, help="one long epoch of about this many seconds")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--db", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--run", default="bench", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--persistent", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--tune", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        args.pipeline = args.child
        child(args)
        return
    args.hog_cores = float(os.cpu_count() or 1) if args.hog or args.hog_apart else 0.0
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=_hog, args=(stop, args.hog_apart)) for _ in range(int(args.hog_cores))]
    for h in hogs:
        h.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for pipeline in args.pipelines.split(","):
                bench = _bench_long if args.long else _bench
                bench(args, pipeline, str(Path(tmp) / f"{pipeline}.sqlite"))
    finally:
        stop.set()
        for h in hogs:
            h.join()


def _grid(args: argparse.Namespace, pipeline: str, db: str, others: list[float], epochs: int | None = None) -> Any:
    """Each static setting's median epoch after the first, in seconds: {(workers, persistent): s}."""
    grid = {}
    for workers, persistent in GRID["default"]:
        out, o = run_one(
            args,
            pipeline,
            db,
            f"static-{workers}-{persistent}",
            ["--workers", str(workers), "--persistent", str(int(persistent))],
            epochs,
        )
        grid[(workers, persistent)] = statistics.median(out["times"][1:])
        others.append(o)
    return grid


def _bench(args: argparse.Namespace, pipeline: str, db: str) -> None:
    untuned_out, o1 = run_one(args, pipeline, db, "untuned", [])
    tuned_out, o2 = run_one(args, pipeline, db, "tuned", ["--tune", "1"])
    untuned, tuned = untuned_out["times"], tuned_out["times"]
    others = [o1, o2]
    grid = _grid(args, pipeline, db, others)
    best_key = min(grid, key=grid.__getitem__)
    best = grid[best_key]
    last = statistics.median(tuned[-3:])
    within = next((i for i, t in enumerate(tuned) if t <= best / 0.9), None)
    base = statistics.median(untuned)
    slow = [t >= 1.10 * base for t in tuned]
    settings = _epoch_settings(db, "tuned")
    worse = sum(s and setting != settings[0] for s, setting in zip(slow, settings, strict=False))
    noisy = max(others) > QUIET_CORES
    print(
        f"{pipeline:15s} best static {best_key} {best:.3f} s; tuned/best {best / last:.2f}; "
        f"within 10% at epoch {within}; slow epochs {sum(slow)} ({worse} at another setting); tuned/untuned total {sum(tuned) / sum(untuned):.3f}; "
        f"others {max(others):.2f} cores{' (NOISY)' if noisy else ''}",
        flush=True,
    )
    print(f"  untuned {[round(t, 2) for t in untuned]}\n  tuned   {[round(t, 2) for t in tuned]}", flush=True)
    statics = ", ".join(f"{w}{' persistent' if p else ''} {t:.3f}" for (w, p), t in grid.items())
    print(f"  grid (median epoch s): {statics}", flush=True)
    print(f"  load average {os.getloadavg()[0]:.2f}", flush=True)
    for line in _trials(db, "tuned"):
        print(f"  trial {line}", flush=True)


def _epoch_settings(db: str, run: str) -> list[str]:
    """Each epoch's setting as the tuner stored it, whether a trial or not (epochs.setting)."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(db)) as con:
        rows = con.execute(
            "SELECT e.setting FROM epochs e JOIN runs r ON r.id = e.run_id WHERE r.name = ? ORDER BY e.epoch", (run,)
        ).fetchall()
    return [json.dumps({k: v for k, v in json.loads(row or "{}").items() if k != "trial"}) for (row,) in rows]


def _trials(db: str, run: str) -> list[str]:
    """The run's trials, one line each: epoch, the setting, predicted and measured speed-up, kept, why."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(db)) as con:
        rows = con.execute(
            "SELECT t.epoch, t.setting, t.predicted_speedup, t.measured_speedup, t.kept, t.why FROM trials t "
            "JOIN runs r ON r.id = t.run_id WHERE r.name = ? ORDER BY t.epoch, t.start_idx",
            (run,),
        ).fetchall()
    return [
        f"epoch {epoch} {setting}: predicted {predicted:.2f}x, "
        f"measured {'nothing' if measured is None else f'{measured:.2f}x'}, {'kept' if kept else 'reverted'} ({why})"
        for epoch, setting, predicted, measured, kept, why in rows
    ]


def _bench_long(args: argparse.Namespace, pipeline: str, db: str) -> None:
    """One long epoch, tuned in windows, against the best static setting's seconds a batch."""
    others: list[float] = []
    short = argparse.Namespace(**{**vars(args), "long": 0})
    grid = _grid(short, pipeline, db, others, epochs=4)
    best_key = min(grid, key=grid.__getitem__)
    batches = 1024 // 16  # the demos' 1024-item epochs, 16 a batch
    best_rate = batches / grid[best_key]
    start_rate = batches / grid.get((0, False), grid[best_key])
    items = int(args.long / grid[(0, False)] * 1024)  # an epoch of about --long seconds at num_workers=0
    out, o = run_one(args, pipeline, db, "tuned-long", ["--tune", "1", "--long", str(items)], epochs=1)
    others.append(o)
    stamps = out["stamps"]
    minutes = int(stamps[-1] // 60) + 1
    rates = [sum(m * 60 <= t < (m + 1) * 60 for t in stamps) / min(60.0, stamps[-1] - m * 60) for m in range(minutes)]
    first = next((m + 1 for m, r in enumerate(rates) if r >= 0.9 * best_rate), None)
    slow = sum(r <= start_rate / 1.10 for r in rates)
    print(
        f"{pipeline:15s} long epoch {stamps[-1]:.0f} s; best static {best_key} {best_rate:.1f} batches/s; "
        f"tuned/best by minute {[round(r / best_rate, 2) for r in rates]}; within 10% from minute {first}; "
        f"slow minutes {slow}; others {max(others):.2f} cores{' (NOISY)' if max(others) > QUIET_CORES else ''}",
        flush=True,
    )


if __name__ == "__main__":
    main()

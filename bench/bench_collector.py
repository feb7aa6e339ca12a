"""Collector overhead, memory and writer throughput; prints ratios (see docs/performance.md).

usage: python bench/bench_collector.py [--quick] [--only overhead|memory|writer]

Overhead: the plain and the watched loader take short turns in one process,
in a shuffled order each round, each turn after the same pause (so the
monitor's backlog from one turn never lands in the next); the median of the
per-round ratios watched/plain is reported with its standard error and
quartiles, and the time the collector adds to each batch, which carries over
between machines of different speed. A ratio is only honest if the collector
kept up, so each line also says how many records it dropped. With workers, a
second plain loader takes turns as well: its ratio to the first (an A/A
test) shows the noise floor. Two loaders built alike can differ by a percent
or more in one process, so with workers the comparison is also made on one
loader: every side takes the watched loader's own iterator, straight or
through the collector (``SameLoader``). What the collector spends per second outside
the loop (the monitor thread; the writer process's SQLite and sampling) runs
during both sides' turns, so it is measured apart, in CPU milliseconds a
second.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import psutil
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

import collector
from collector.record import plain_loop as watcher
from collector.record.hotloop import COMPILED, PyTimer, py_epoch
from collector.sample.sampler import Rates
from collector.writer.channel import ProcessLink
from collector.writer.frames import Flush, Open, RunStart
from collector.writer.link import connect, launch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quiet import Others, shown

PAUSE_S = 0.22  # before each turn: longer than one flush interval, so no backlog crosses turns
MIN_TURN_BATCHES = 1_000


class Trivial(Dataset[int]):
    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, index: int) -> int:
        return index


def reference_loader(workers: int = 0, n: int = 1 << 20, persistent: bool = False) -> DataLoader[Any]:
    """The issue's "fastest possible loader": a trivial TensorDataset, batch_size=1."""
    dataset = TensorDataset(torch.arange(n, dtype=torch.float32).view(-1, 1), torch.arange(n))
    return DataLoader(dataset, batch_size=1, num_workers=workers, persistent_workers=persistent)


class Paced(Dataset[int]):
    """A sample every ``sleep_s`` per worker: a loader at a real training job's pace, doing no work."""

    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, index: int) -> int:
        time.sleep(self.sleep_s)
        return index


def paced_loader(workers: int) -> DataLoader[int]:
    """About 100 batches a second from ``workers`` workers: what the collector does beside a real job."""
    return DataLoader(Paced(workers / 100), batch_size=None, num_workers=workers, persistent_workers=True)


def no_collate_loader(workers: int) -> DataLoader[int]:
    """Faster still: ints, no collate, a deep prefetch queue: the collector's worst case."""
    return DataLoader(Trivial(), batch_size=None, num_workers=workers, prefetch_factor=64 if workers else None)


@contextlib.contextmanager
def python_loop() -> Iterator[None]:
    """What a machine without a C compiler runs: the hot loop's Python twins."""
    compiled = watcher.Timer, watcher.Epoch
    watcher.Timer, watcher.Epoch = PyTimer, py_epoch
    try:
        yield
    finally:
        watcher.Timer, watcher.Epoch = compiled


def endless(loader: Any) -> Iterator[Any]:
    while True:
        yield from loader


def turn(it: Iterator[Any], batches: int, pause_s: float = PAUSE_S) -> float:
    time.sleep(pause_s)
    started = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches / (time.perf_counter() - started)


@dataclass(frozen=True)
class Turns:
    """How one comparison takes turns: rounds, a turn's length, the pause before each."""

    rounds: int
    seconds: float = 0.05  # at the plain loader's speed
    min_batches: int = MIN_TURN_BATCHES
    pause_s: float = PAUSE_S


def compare(
    label: str, make_loader: Callable[[], Any], turns: Turns, db: str, control: bool = False, same: bool = False
) -> None:
    """Watched against plain; with ``control`` a second plain side takes turns too (an A/A test).

    With ``same`` every side takes the watched loader's one iterator (``SameLoader``).
    """
    watched = collector.watch(make_loader(), db=db, run=f"bench-{label}")
    if same:
        shared = SameLoader(watched)
        sides = {"plain": shared.side(through=False), "watched": shared.side(through=True)}
        if control:
            sides["control"] = shared.side(through=False)
    else:
        sides = {"plain": endless(make_loader()), "watched": endless(watched)}
        if control:
            sides["control"] = endless(make_loader())
    for side in sides:  # warm up: starts the workers
        turn(sides[side], 2_000)
    speed = max(turn(sides["plain"], 2_000) for _ in range(3))
    batches = max(turns.min_batches, int(speed * turns.seconds))
    rates: dict[str, list[float]] = {side: [] for side in sides}
    with Others() as others:
        for _ in range(turns.rounds):
            order = list(sides)
            random.shuffle(order)
            for side in order:
                rates[side].append(turn(sides[side], batches, turns.pause_s))
    run_id = watched.run_id
    watched.close()
    with sqlite3.connect(db) as conn:
        dropped, stored = conn.execute(
            "SELECT dropped_records, (SELECT COUNT(*) FROM batches WHERE run_id = ?) FROM runs WHERE id = ?",
            (run_id, run_id),
        ).fetchone()
    pairs = list(zip(rates["watched"], rates["plain"], strict=True))
    costs_us = [(1 / w - 1 / p) * 1e6 for w, p in pairs]  # what the collector adds to each batch
    figures = (
        f"plain {statistics.median(rates['plain']):,.0f} batches/s; watched/plain {_spread(pairs)} "
        f"({turns.rounds} rounds of {batches:,} batches), {statistics.median(costs_us):.2f} us added per batch; "
        f"{stored:,} rows stored, {dropped:,} dropped"
    )
    print(shown(others, label, figures), flush=True)
    if control and others.quiet:
        control_pairs = list(zip(rates["control"], rates["plain"], strict=True))
        what = "the same iterator in a second plain side" if same else "a second plain loader"
        print(f"  noise floor: {what}/plain {_spread(control_pairs)}", flush=True)


class SameLoader:
    """One watched loader's batches, taken through the collector or straight from its iterator.

    Sides made here share one DataLoader iterator (its workers, its queues), so
    whatever makes one loader run faster than another in the same process (the
    separate-loader A/A line shows it) cancels. Worker fetch timing runs on
    every side: what this compares is the training process's part, the loop
    and the monitor, with the writer's work landing on every side alike.
    """

    def __init__(self, watched: Any) -> None:
        self._watched = watched
        self._epoch()

    def _epoch(self) -> None:
        session = self._watched._stallwatch_start()
        opened: list[tuple[Iterator[Any], int]] = []
        original = session._open_iterator
        session._open_iterator = lambda: opened.append(original()) or opened[0]
        try:
            self._through = iter(self._watched)
        finally:
            del session._open_iterator
        self._straight = opened[0][0]

    def side(self, through: bool) -> Iterator[Any]:
        """Endless batches, through the collector or straight; the first side to run out starts the next epoch."""
        name = "_through" if through else "_straight"
        while True:
            current = getattr(self, name)
            yield from current
            if getattr(self, name) is current:
                self._epoch()


def _spread(pairs: list[tuple[float, float]]) -> str:
    """Median of the per-round ratios, its quartiles, and the median's standard error (bootstrap)."""
    ratios = [a / b for a, b in pairs]
    q1, median, q3 = statistics.quantiles(ratios, n=4)
    rng = random.Random(0)
    medians = [statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(500)]
    return f"median {median:.3f} +- {statistics.stdev(medians):.3f} (quartiles {q1:.3f}-{q3:.3f})"


def background(label: str, make_loader: Callable[[], Any], seconds: float, db: str) -> None:
    """The collector's CPU per second outside the loop: the monitor thread and the writer process."""
    watched = collector.watch(make_loader(), db=db, run=f"bench-background-{label}")
    it = endless(watched)
    turn(it, 200, 0.0)
    monitor = watched._stallwatch_start().monitor
    link = monitor._writer.link
    writer = psutil.Process(link.pid) if isinstance(link, ProcessLink) else None
    assert monitor.ident is not None
    monitor_clock = time.pthread_getcpuclockid(monitor.ident)  # nanosecond CPU time of that one thread

    def cpu() -> tuple[float, float]:
        times = writer.cpu_times() if writer is not None else None
        return time.clock_gettime(monitor_clock), 0.0 if times is None else times.user + times.system

    with Others() as others:
        (m0, w0), started, batches = cpu(), time.perf_counter(), 0
        while time.perf_counter() - started < seconds:
            for _ in range(100):
                next(it)
            batches += 100
        elapsed = time.perf_counter() - started
        m1, w1 = cpu()
    watched.close()
    figures = (
        f"collector CPU beside the loop ({batches / elapsed:,.0f} batches/s): monitor thread "
        f"{(m1 - m0) / elapsed * 1e3:.1f} ms/s, writer process (SQLite, sampling) {(w1 - w0) / elapsed * 1e3:.1f} ms/s"
    )
    print(shown(others, label, figures), flush=True)


def continuous(label: str, make_loader: Callable[[], Any], epochs: int, db: str) -> None:
    """One loader, whole epochs back to back, plain and watched in turn: no pause, nothing of ours left out.

    The plain side iterates the very DataLoader the watched side wraps (its
    workers, its queues), so what differs is the collector: the loop, the
    monitor thread, the writer process and its sampling, whose work for one
    epoch lands mostly in that epoch (an epoch is many flush intervals long).
    With persistent workers the watched side goes first, so its timing hook is
    in the workers for every epoch, plain ones included.
    """
    loader = make_loader()
    watched = collector.watch(loader, db=db, run=f"bench-continuous-{label}")
    sides = {"watched": watched, "plain": loader}

    def epoch(side: str) -> float:
        started = time.perf_counter()
        batches = sum(1 for _ in sides[side])
        return batches / (time.perf_counter() - started)

    for side in sides:  # warm up: starts the workers, the writer's first samples
        epoch(side)
    rates: dict[str, list[float]] = {side: [] for side in sides}
    with Others() as others:
        for i in range(epochs):
            for side in list(sides)[:: 1 if i % 2 else -1]:
                rates[side].append(epoch(side))
    run_id = watched.run_id
    watched.close()
    with sqlite3.connect(db) as conn:
        (dropped,) = conn.execute("SELECT dropped_records FROM runs WHERE id = ?", (run_id,)).fetchone()
    pairs = list(zip(rates["watched"], rates["plain"], strict=True))
    best = max(rates["watched"]) / max(rates["plain"])
    costs_us = [(1 / w - 1 / p) * 1e6 for w, p in pairs]
    figures = (
        f"plain {statistics.median(rates['plain']):,.0f} batches/s; watched/plain {_spread(pairs)} "
        f"over {epochs} epoch pairs, best/best {best:.3f}; {statistics.median(costs_us):.2f} us added per batch; "
        f"{dropped:,} dropped"
    )
    print(shown(others, f"{label}, continuous", figures), flush=True)


def memory(batches: int, db: str) -> None:
    proc = psutil.Process()
    watched = collector.watch(no_collate_loader(0), db=db, run="bench-memory")
    it = iter(watched)
    for _ in range(10_000):
        next(it)
    gc.collect()
    base = proc.memory_info().rss
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            peak[0] = max(peak[0], proc.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    for _ in range(batches):
        next(it)
    elapsed = time.perf_counter() - started
    stop.set()
    sampler.join()
    watched.close()
    with sqlite3.connect(db) as conn:
        stored, dropped = conn.execute("SELECT COUNT(*), (SELECT dropped_records FROM runs) FROM batches").fetchone()
    print(
        f"memory: {batches:,} batches at {batches / elapsed:,.0f}/s; RSS growth while recording "
        f"{(peak[0] - base) / 2**20:.1f} MB (peak minus start); {stored:,} rows stored, {dropped:,} dropped",
        flush=True,
    )


def writer(rows: int, db: str) -> None:
    """Batch rows per second through the real writer process, frames as the monitor sends them."""
    chunk = 10_000  # one 0.2 s flush at 50k batches/s
    shapes = {
        "fast": lambda n: (0, n, n * 1000, n * 1000 + 500, n * 1000 - 200),
        "queue": lambda n: (1, n, n * 1000, n * 1000 + 500, n * 1000 - 200, 3, 4, 1, 4242, 0, n // 2),
    }
    for shape, make in shapes.items():
        frames = [
            Flush(records={shape: [make(n) for n in range(i, min(i + chunk, rows))]}) for i in range(0, rows, chunk)
        ]
        start = RunStart(f"bench-writer-{shape}", {}, {}, {}, "bench", os.getpid(), "bench", None, None)
        opening = Open(db, start, time.time(), time.perf_counter_ns(), Rates(gpu_hz=0, host_hz=0))
        link, replies = connect(opening, launch(opening))
        assert link is not None, replies
        started = time.perf_counter()
        for frame in frames:
            link.send(frame)
        problems = link.close(600.0)
        elapsed = time.perf_counter() - started
        print(
            f"writer process, {shape} records: {rows:,} rows in {elapsed:.2f} s = {rows / elapsed:,.0f} rows/s"
            + (f" ({problems})" if problems else ""),
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter runs, for a smoke test")
    parser.add_argument(
        "--only", choices=["overhead", "continuous", "background", "memory", "writer"], help="run one part"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    # Short turns, many rounds: this machine's noise comes in bursts longer than a turn.
    rounds, scale = (5, 10) if args.quick else (201, 1)
    fast = Turns(rounds)
    # With workers a turn's noise is a few percent (worker scheduling): many
    # short turns, and an A/A line that shows what a ratio can resolve.
    workers = Turns(max(5, rounds * 3 // 2), min_batches=300, pause_s=0.05)
    with tempfile.TemporaryDirectory() as tmp:
        print(
            f"python {sys.version.split()[0]}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
            f"hot loop {'compiled' if COMPILED else 'in Python (no compiler at install)'}",
            flush=True,
        )
        if args.only in (None, "overhead"):
            db = os.path.join(tmp, "overhead.sqlite")
            compare("reference: TensorDataset, batch_size=1, num_workers=0", reference_loader, fast, db)
            with python_loop():
                compare("reference, Python loop (no compiler)", reference_loader, fast, db)
            compare("reference with num_workers=2", lambda: reference_loader(2), workers, db, control=True)
            compare(
                "reference with num_workers=2, one iterator on every side",
                lambda: reference_loader(2),
                workers,
                db,
                control=True,
                same=True,
            )
            background("reference with num_workers=2", lambda: reference_loader(2), 20.0 / scale, db)
            background("reference, num_workers=0", reference_loader, 20.0 / scale, db)
            compare("no collate, num_workers=0", lambda: no_collate_loader(0), fast, db)
            compare("no collate, num_workers=2", lambda: no_collate_loader(2), replace(workers, min_batches=2_000), db)
        if args.only in (None, "continuous"):
            db = os.path.join(tmp, "continuous.sqlite")
            epochs = 4 if args.quick else 12
            continuous("reference, num_workers=0", lambda: reference_loader(0, 200_000 // scale), epochs, db)
            continuous("reference, 2 persistent workers", lambda: reference_loader(2, 4_000 // scale, True), epochs, db)
        if args.only == "background":
            db = os.path.join(tmp, "background.sqlite")
            for workers in (2, 8):
                background(f"100 batches/s, {workers} workers", lambda w=workers: paced_loader(w), 30.0 / scale, db)
        if args.only in (None, "memory"):
            memory(1_000_000 // scale, os.path.join(tmp, "memory.sqlite"))
        if args.only in (None, "writer"):
            writer(1_000_000 // scale, os.path.join(tmp, "writer.sqlite"))


if __name__ == "__main__":
    main()

"""What the collector adds to each epoch's set-up and end with fresh workers: iter(), the first and the final next().

usage: python bench/bench_epoch.py [--epochs 30] [--workers 2] [--start fork|spawn|both]

One DataLoader with non-persistent workers (a small in-memory dataset, so an
epoch is mostly its workers' start and end); its epochs are taken in turn,
in a shuffled order each round, by these sides:

- ``plain``: the DataLoader itself;
- ``watched``: the same DataLoader through ``collector.watch`` (one session for the whole benchmark);
- ``no-hook``: watched, but its workers get no timing hook (the user's worker_init_fn only);
- ``no-probe``: watched, with the queue probe left out as well (the loop without worker ids).

Reported per side, as the median and range over rounds of the difference
against plain in the same round: iter() (workers start), the first next()
(their first batch), the final next() (StopIteration: torch joins them).
The target (issue 15): the collector adds at most 10% or 20 ms, whichever is
larger, to iter() with workers, under fork and spawn.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import collector
from collector.record import loader_probe

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quiet import Others

SIDES = ("plain", "watched", "no-hook", "no-probe")


def epoch_times(it_factory: Any) -> tuple[float, float, float]:
    """(iter() s, first next() s, final next() s) of one epoch."""
    t0 = time.perf_counter()
    it = it_factory()
    t1 = time.perf_counter()
    next(it)
    t2 = time.perf_counter()
    last = 0.0
    while True:
        t = time.perf_counter()
        try:
            next(it)
        except StopIteration:
            last = time.perf_counter() - t
            break
    return t1 - t0, t2 - t1, last


def measure(start: str, workers: int, epochs: int, db: str) -> dict[str, list[tuple[float, float, float]]]:
    data = TensorDataset(torch.randn(256, 3, 32, 32), torch.arange(256))
    loader = DataLoader(data, batch_size=32, num_workers=workers, multiprocessing_context=start)
    watched = collector.watch(loader, db=db, run=f"bench-epoch-{start}")
    session = watched._stallwatch_start()
    original_open = session._open_iterator
    original_attach = loader_probe.attach

    def side(name: str) -> Any:
        def open_it() -> Any:
            session._open_iterator = (
                (lambda: (session._iterate(session.loader), 0)) if name != "watched" else original_open
            )
            loader_probe.attach = (lambda it, warn: None) if name == "no-probe" else original_attach
            try:
                return iter(watched)
            finally:
                session._open_iterator = original_open
                loader_probe.attach = original_attach

        return (lambda: iter(loader)) if name == "plain" else open_it

    for name in SIDES:  # warm: imports, shared memory, the writer's first samples
        epoch_times(side(name))
    out: dict[str, list[tuple[float, float, float]]] = {name: [] for name in SIDES}
    for _ in range(epochs):
        order = list(SIDES)
        random.shuffle(order)
        for name in order:
            out[name].append(epoch_times(side(name)))
    watched.close()
    return out


def report(start: str, results: dict[str, list[tuple[float, float, float]]]) -> None:
    plain = results["plain"]
    iters = sorted(p[0] for p in plain)
    print(
        f"{start}: plain iter() median {statistics.median(iters) * 1e3:.1f} ms "
        f"({iters[0] * 1e3:.1f}-{iters[-1] * 1e3:.1f}), first next() "
        f"{statistics.median(p[1] for p in plain) * 1e3:.1f} ms, final next() "
        f"{statistics.median(p[2] for p in plain) * 1e3:.1f} ms"
    )
    limit = max(0.10 * statistics.median(iters), 0.020)
    for name in SIDES[1:]:
        parts = []
        for k, label in enumerate(("iter()", "first next()", "final next()")):
            d = sorted((s[k] - p[k]) * 1e3 for s, p in zip(results[name], plain, strict=True))
            parts.append(f"{label} {statistics.median(d):+.1f} ms ({d[0]:+.1f} to {d[-1]:+.1f})")
        d_iter = statistics.median(s[0] - p[0] for s, p in zip(results[name], plain, strict=True))
        verdict = f"target <= +{limit * 1e3:.0f} ms {'met' if d_iter <= limit else 'NOT met'}"
        print(f"  {name:<9} " + "; ".join(parts) + (f"; {verdict}" if name == "watched" else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=30, help="rounds; each side takes one epoch a round")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--start", choices=["fork", "spawn", "both"], default="both")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"{args.workers} non-persistent workers, {args.epochs} rounds, load average "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores, python {sys.version.split()[0]}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        for start in ("fork", "spawn") if args.start == "both" else (args.start,):
            with Others() as others:
                results = measure(start, args.workers, args.epochs, os.path.join(tmp, f"{start}.sqlite"))
            if others.quiet:
                report(start, results)
            print(f"{start}: {others.label()}{'' if others.quiet else ': no figure'}", flush=True)


if __name__ == "__main__":
    main()

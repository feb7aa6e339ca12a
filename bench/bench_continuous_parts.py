"""Where the continuous no-worker cost goes: the writer's CPU on the other core, a thread taking the GIL, or the loop.

usage: python bench/bench_continuous_parts.py [--rounds 8] [--batches 200000]

The reference loader (bench_collector.py: in-process TensorDataset, batch_size=1,
no workers) runs whole epochs in one process, in a shuffled order each round, as:

- ``plain``: the loader alone;
- ``spinner``: the loader alone beside a process burning ``--duty`` of a core in
  10 ms periods, about what the writer spends storing 49k rows a second;
- ``gil``: the loader alone beside a thread of this process that takes the GIL for
  0.5 ms every 0.2 s, about what the monitor thread's drain takes at that rate;
- ``watched``: the same loader's twin through collector.watch.

Printed: each side's median rate and its per-round ratio to plain (median and
range), with other processes' CPU over the rounds (bench/quiet.py).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

import torch

import collector

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_collector import reference_loader
from quiet import Others, shown


def spin(stop: Any, duty: float) -> None:
    while not stop.is_set():
        end = time.perf_counter() + 0.01 * duty
        while time.perf_counter() < end:
            pass
        time.sleep(0.01 * (1 - duty))


def hold_gil(stop: threading.Event) -> None:
    while not stop.wait(0.2):
        end = time.thread_time() + 0.0005
        while time.thread_time() < end:
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batches", type=int, default=200_000)
    parser.add_argument("--duty", type=float, default=0.12, help="the spinner's share of a core")
    args = parser.parse_args()
    torch.set_num_threads(1)
    loader = reference_loader(0, args.batches)
    with tempfile.TemporaryDirectory() as tmp:
        watched = collector.watch(reference_loader(0, args.batches), db=os.path.join(tmp, "parts.sqlite"), run="parts")

        def epoch(side: str) -> float:
            stop: Any = mp.Event() if side == "spinner" else threading.Event()
            helper: Any = None
            if side == "spinner":
                helper = mp.Process(target=spin, args=(stop, args.duty))
                helper.start()
                time.sleep(0.2)
            elif side == "gil":
                helper = threading.Thread(target=hold_gil, args=(stop,))
                helper.start()
            started = time.perf_counter()
            batches = sum(1 for _ in (watched if side == "watched" else loader))
            rate = batches / (time.perf_counter() - started)
            stop.set()
            if helper is not None:
                helper.join()
            return rate

        epoch("plain")
        epoch("watched")
        rates: dict[str, list[float]] = {side: [] for side in ("plain", "spinner", "gil", "watched")}
        with Others() as others:
            for _ in range(args.rounds):
                for side in random.sample(list(rates), len(rates)):
                    rates[side].append(epoch(side))
        watched.close()
    for side, values in rates.items():
        ratios = [a / b for a, b in zip(values, rates["plain"], strict=True)]
        figures = (
            f"{statistics.median(values):,.0f} batches/s, /plain median {statistics.median(ratios):.3f} "
            f"({min(ratios):.3f}-{max(ratios):.3f}) over {args.rounds} rounds"
        )
        print(shown(others, side, figures), flush=True)


if __name__ == "__main__":
    main()

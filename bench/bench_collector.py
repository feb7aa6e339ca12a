"""Collector overhead, memory and writer throughput; prints ratios (see README "Performance").

usage: python bench/bench_collector.py [--quick]

Each comparison interleaves the plain and the watched loop in one process,
repeats, and reports the median and best ratios of watched to plain
throughput, so machine noise hits both sides alike.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import threading
import time

import psutil
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

import collector
from collector.store.writer import Store, batch_insert_json_sql, batch_insert_sql


class Trivial(Dataset[int]):
    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, index: int) -> int:
        return index


def fastest_loader(workers: int, batch_size: int | None = None) -> DataLoader[int]:
    # batch_size=None: no collate, the cheapest batches a DataLoader hands out
    prefetch = 64 if workers else None
    return DataLoader(Trivial(), batch_size=batch_size, num_workers=workers, prefetch_factor=prefetch)


def throughput(iterable, batches: int) -> float:
    it = iter(iterable)
    next(it)  # iterator and workers are up before the clock starts
    started = time.perf_counter()
    for _, _ in zip(range(batches), it, strict=False):
        pass
    return batches / (time.perf_counter() - started)


def compare(label: str, make_loader, batches: int, rounds: int, db: str) -> None:
    plain_loader = make_loader()
    watched = collector.watch(make_loader(), db=db, run=f"bench-{label}")
    ratios, plain_rates = [], []
    for _ in range(rounds):
        plain = throughput(plain_loader, batches)
        recorded = throughput(watched, batches)
        ratios.append(recorded / plain)
        plain_rates.append(plain)
    watched.close()
    print(
        f"{label}: plain {statistics.median(plain_rates):,.0f} batches/s; "
        f"watched/plain median {statistics.median(ratios):.3f}, best {max(ratios):.3f} "
        f"({rounds} interleaved rounds of {batches:,} batches)"
    )


def reference_loader() -> DataLoader:
    """The issue's "fastest possible loader": in-process, a trivial TensorDataset, batch_size=1."""
    n = 1 << 20
    dataset = TensorDataset(torch.arange(n, dtype=torch.float32).view(-1, 1), torch.arange(n))
    return DataLoader(dataset, batch_size=1)


def memory(batches: int, db: str) -> None:
    proc = psutil.Process()
    watched = collector.watch(fastest_loader(0), db=db, run="bench-memory")
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
    print(
        f"memory: {batches:,} batches at {batches / elapsed:,.0f}/s; RSS growth while recording "
        f"{(peak[0] - base) / 2**20:.1f} MB (peak over the run minus the start)"
    )


def writer(rows: int, db: str) -> None:
    store = Store(db)
    run_id = store.create_run(
        "bench-writer",
        config={},
        host={},
        versions={},
        hostname="h",
        pid=1,
        command="bench",
        rank=None,
        world_size=None,
    )
    chunk = 5_000  # about one 0.2 s flush at 25k batches/s
    fast = [(n, 0, n, n * 1000, n * 1000 + 500, n * 1000 - 200) for n in range(rows)]
    queue = [(n, 1, n, n * 1000, n * 1000 + 500, n * 1000 - 200, 3, 4, 1, 4242, 0, n // 2) for n in range(rows)]
    # as the monitor writes them: "fast" records row by row, "queue" records as one JSON array per chunk
    row_sql = batch_insert_sql(run_id, time.time(), time.perf_counter_ns(), "fast")
    json_sql = batch_insert_json_sql(run_id, time.time(), time.perf_counter_ns(), "queue")
    for label, records, write in (
        ("row by row (no workers)", fast, lambda part: [(row_sql, part)]),
        ("one JSON array per chunk (workers)", queue, lambda part: [(json_sql, [(json.dumps(part),)])]),
    ):
        started = time.perf_counter()
        for i in range(0, rows, chunk):
            store.write({}, statements=write(records[i : i + chunk]))
        elapsed = time.perf_counter() - started
        print(f"writer, {label}: {rows:,} batch rows in {elapsed:.2f} s = {rows / elapsed:,.0f} rows/s")
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller runs, for a smoke test")
    args = parser.parse_args()
    torch.set_num_threads(1)
    scale = 10 if args.quick else 1
    with tempfile.TemporaryDirectory() as tmp:
        print(f"python {sys.version.split()[0]}, torch {torch.__version__}, {os.cpu_count()} CPUs")
        db = os.path.join(tmp, "overhead.sqlite")
        compare("TensorDataset, batch_size=1, num_workers=0", reference_loader, 60_000 // scale, 9, db)
        compare("no collate, num_workers=0", lambda: fastest_loader(0), 200_000 // scale, 9, db)
        compare("no collate, num_workers=2", lambda: fastest_loader(2), 40_000 // scale, 7, db)
        memory(1_000_000 // scale, os.path.join(tmp, "memory.sqlite"))
        writer(1_000_000 // scale, os.path.join(tmp, "writer.sqlite"))


if __name__ == "__main__":
    main()

"""Past one machine, at scale: merging 8 nodes' 1M-batch files, and scraping 8 live 1M-batch ranks in one file.

    python bench/bench_exporter.py [--batches 1000000] [--ranks 8] [--scrapes 12] [--cache DIR]

Builds (once, then cached in DIR, by default under the system temp dir) one
file per rank with ``--batches`` batches and their worker fetches, written
with executemany of generated rows through ``collector.store.connection.Store``.
Then:

1. ``stallwatch merge`` of the rank files into one (timed), and again (idempotent: adds nothing).
2. The merged file's runs are made live (status running, fresh heartbeat) and
   ``stallwatch exporter`` is started on it as its own process. Each round
   appends 15 s worth of batches to every rank (at 10, 100 and 1000 batches/s
   per rank, interleaved), then times one scrape of /metrics (HTTP, wall) and
   the exporter's CPU for it. The exporter's idle CPU is measured over one
   real 15 s interval. CPU at a 15 s scrape interval =
   (CPU per scrape + idle CPU per 15 s) / 15 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collector.store.connection import Store
from collector.store.merge import merge_files

WORKERS = 4
PER_EPOCH = 10_000
STEP_S = 0.010
INTERVAL_S = 15.0
RATES = (10, 100, 1000)  # batches a second per rank, interleaved across scrapes
CHUNK = 200_000
BATCH_SQL = (
    "INSERT INTO batches (run_id, epoch, idx, ts, wait_s, step_s, ready, in_flight, worker_id, worker_pid,"
    " worker_incarnation, worker_seq) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
)
FETCH_SQL = "INSERT INTO worker_fetches VALUES (?,?,?,?,?,?,?,?,NULL)"


def rows_for(
    run_id: int,
    rank: int,
    first: int,
    n: int,
    t0: float,
    rng: np.random.Generator,
    epoch0: int = 0,
    period_s: float | None = None,
):
    """n batches from global index ``first``: (batch rows, fetch rows, last ts); a straggler rank waits 5x longer.

    Batches follow each other by their wait plus a 10 ms step, or every ``period_s`` (a given rate).
    """
    i = np.arange(first, first + n)
    epoch, idx = epoch0 + i // PER_EPOCH, i % PER_EPOCH
    wait = rng.exponential(0.002 * (5 if rank == 3 else 1), n)
    ts = t0 + np.cumsum(wait + STEP_S if period_s is None else np.full(n, period_s))
    ready = rng.integers(0, 2 * WORKERS, n)
    worker = idx % WORKERS
    pid = 10_000 + rank * 10 + worker
    seq = idx // WORKERS
    wall = rng.uniform(0.02, 0.04, n)
    batches = zip(
        *(c.tolist() for c in (np.full(n, run_id), epoch, idx, ts, wait, np.full(n, STEP_S), ready)),
        *(c.tolist() for c in (2 * WORKERS - ready, worker, pid, epoch, seq)),
        strict=True,
    )
    fetches = zip(
        *(c.tolist() for c in (np.full(n, run_id), pid, worker, epoch, seq, ts - wait - wall, wall, wall * 0.6)),
        strict=True,
    )
    return batches, fetches, float(ts[-1])


def build_rank(path: str, rank: int, batches: int) -> None:
    store = Store(path)
    rng = np.random.default_rng(rank)
    t0 = time.time() - batches * (STEP_S + 0.003) - 60
    run_id = store.create_run(
        "bench",
        config={"num_workers": WORKERS, "batch_size": 32, "prefetch_factor": 2, "persistent_workers": True},
        host={"usable_cores": 16},
        versions={"stallwatch": "bench"},
        hostname=f"node-{rank}",
        pid=1000 + rank,
        command="bench_exporter.py",
        rank=rank,
        world_size=8,
        started_at=t0,
        job_id="bench-job",
    )
    ts = t0
    for first in range(0, batches, CHUNK):
        rows, fetches, ts = rows_for(run_id, rank, first, min(CHUNK, batches - first), ts, rng)
        store.write({}, statements=[(BATCH_SQL, rows), (FETCH_SQL, fetches)])
    epochs = [(run_id, e, t0 + e, None, 0.05, PER_EPOCH, "[]") for e in range((batches - 1) // PER_EPOCH + 1)]
    store.write(
        {}, epochs=epochs, run_update={"status": "completed", "ended_at": ts, "heartbeat_at": ts}, run_id=run_id
    )
    store.close()


def rank_files(cache: Path, ranks: int, batches: int) -> list[str]:
    cache.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(ranks):
        path = cache / f"rank{rank}-{batches}.sqlite"
        if not path.exists():
            started = time.perf_counter()
            build_rank(str(path) + ".part", rank, batches)
            os.replace(str(path) + ".part", path)
            print(f"  built {path.name} in {time.perf_counter() - started:.1f} s", flush=True)
        paths.append(str(path))
    return paths


def bench_merge(paths: list[str], out: str) -> None:
    started = time.perf_counter()
    results = merge_files(out, paths)
    first = time.perf_counter() - started
    started = time.perf_counter()
    again = merge_files(out, paths)
    second = time.perf_counter() - started
    added = sum(r.batches for r in results)
    print(f"merge {len(paths)} files ({added:,} batches, {os.path.getsize(out) / 2**20:.0f} MB out): {first:.1f} s")
    print(f"merge the same files again: {second:.1f} s, {sum(r.rows for r in again)} rows added")


class Live:
    """The merged file's runs, made live again: every round appends batches and beats each rank."""

    def __init__(self, path: str) -> None:
        self.store = Store(path)
        self.rng = np.random.default_rng(99)
        now = time.time()
        with self.store.transaction() as conn:
            conn.execute("UPDATE runs SET status = 'running', ended_at = NULL, heartbeat_at = ?", (now,))
            self.runs = [
                (int(i), int(r), float(ts))
                for i, r, ts in conn.execute(
                    "SELECT r.id, r.rank, (SELECT MAX(ts) FROM batches b WHERE b.run_id = r.id) FROM runs r"
                )
            ]
        self.round = 0

    def append(self, rate: int) -> int:
        """15 s of batches at ``rate`` a second on every rank; returns the rows added."""
        self.round += 1
        updated = []
        per_rank = int(rate * INTERVAL_S)
        for run_id, rank, ts in self.runs:
            epoch0 = 100_000 + 10 * self.round
            rows, fetches, last = rows_for(run_id, rank, 0, per_rank, ts, self.rng, epoch0, period_s=1.0 / rate)
            self.store.write({}, statements=[(BATCH_SQL, rows), (FETCH_SQL, fetches)])
            updated.append((run_id, rank, last))
        self.runs = updated
        with self.store.transaction() as conn:
            conn.execute("UPDATE runs SET heartbeat_at = ?", (time.time(),))
        return per_rank * len(self.runs)


def cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def bench_exporter(path: str, scrapes: int) -> None:
    live = Live(path)
    with psutil.Popen(  # type: ignore[no-untyped-call]
        [sys.executable, "-m", "collector", "exporter", path, "--port", "0"], stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            line = proc.stdout.readline() if proc.stdout else ""
            print(f"exporter start: {line.strip()}")
            url = line.split(" on ")[1].split(" ")[0]
            rates: dict[int, list[float]] = {r: [] for r in RATES}
            cpu: dict[int, list[float]] = {r: [] for r in RATES}
            sizes = []
            for i in range(scrapes):
                rate = RATES[i % len(RATES)]
                live.append(rate)
                before, started = cpu_s(proc), time.perf_counter()
                body = urllib.request.urlopen(url, timeout=30).read()
                rates[rate].append(time.perf_counter() - started)
                cpu[rate].append(cpu_s(proc) - before)
                sizes.append(len(body))
            idle_before = cpu_s(proc)
            time.sleep(INTERVAL_S)
            idle = cpu_s(proc) - idle_before
        finally:
            proc.terminate()
    print(f"scrape answer: {statistics.median(sizes) / 1024:.0f} KiB of text, {len(live.runs)} live ranks")
    for rate in rates:
        wall, used = rates[rate], cpu[rate]
        share = (statistics.median(used) + idle) / INTERVAL_S
        print(
            f"{rate:>5} batches/s per rank ({int(rate * INTERVAL_S) * len(live.runs):,} new rows a scrape): "
            f"scrape median {statistics.median(wall) * 1000:.0f} ms, max {max(wall) * 1000:.0f} ms "
            f"(target < 100 ms); exporter CPU {statistics.median(used) * 1000:.0f} ms a scrape + idle "
            f"{idle * 1000:.0f} ms per 15 s = {share:.2%} of a core at a 15 s interval (target < 1%)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=1_000_000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--scrapes", type=int, default=15)
    parser.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "stallwatch-bench-exporter"))
    args = parser.parse_args()
    print(f"rank files: {args.ranks} x {args.batches:,} batches in {args.cache}", flush=True)
    paths = rank_files(Path(args.cache), args.ranks, args.batches)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "job.sqlite")
        bench_merge(paths, out)
        bench_exporter(out, args.scrapes)


if __name__ == "__main__":
    main()

"""Fixtures for the diagnosis tests: synthetic runs written to real SQLite files, and real recorded loops."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from collector.store.connection import Store

HOST_2 = {"physical_cores": 2, "logical_cores": 2, "usable_cores": 2, "ram_bytes": 16 * 2**30, "gpus": []}
T0 = 1_700_000_000.0

# the columns these fixtures fill (load_cpu_s, added later, stays NULL)
BATCH_FIXTURE_COLUMNS = (
    "run_id, epoch, idx, ts, wait_s, step_s, ready, in_flight, worker_id, worker_pid,"
    " worker_incarnation, worker_seq, samples, nbytes, pinned, gpu_idle_s, load_cpu_s, load_runq_s"
)


@dataclass
class Synthetic:
    """A run described by arrays: one entry per batch; everything else optional."""

    wait_s: Any
    step_s: Any
    config: dict[str, Any] = field(default_factory=lambda: {"batch_size": 32, "num_workers": 0})
    host: dict[str, Any] = field(default_factory=lambda: dict(HOST_2))
    epoch_len: int | None = None  # batches per epoch (None: one epoch)
    first_batch_s: float | None = None  # iter() to first batch, per epoch (None: the first wait)
    ready: Any = None
    worker_id: Any = None
    worker_wall_s: Any = None
    worker_cpu_s: Any = None
    pinned: Any = None
    nbytes: int | None = 1 << 20
    gpu_idle_s: Any = None
    load_cpu_s: Any = None  # CPU inside next() (num_workers=0); None: not sampled
    load_runq_s: Any = None  # the training thread's wait for a core inside next(); None: not measured
    worker_runq_s: Any = None  # per fetch, waiting for a core; None: not measured
    main_runq_cores: float | None = None  # the main process's threads waiting for a core, on average
    torch_threads: int | None = None
    end_wait_s: float | None = None  # the final next() of each epoch; None: not recorded (older files)
    collector_s: float | None = None  # the collector's own work in each epoch's iter(), in first_batch_s too
    between_epochs_s: float = 0.0  # other work between epochs (validation, checkpoints): not this loader's
    worker_exits: Any = None  # [(worker_id, started_s, ended_s, cpu_s)] after T0: workers' whole-life totals
    gpu_util: Any = None  # function ts -> util, or None
    gpu_hz: float = 10.0
    main_cpu_pct: float | None = None
    worker_cpu_pct: float | None = None
    host_cpu_pct: float | None = None
    mem_available: Any = None  # function (fraction of run 0..1) -> bytes
    worker_uss: Any = None  # function (fraction 0..1) -> bytes
    status: str = "completed"
    name: str = "synthetic"
    rank: int | None = None
    world_size: int | None = None
    job_id: str | None = None
    stage: str | None = None
    tags: dict[str, Any] | None = None


def write_synthetic(path: str, spec: Synthetic) -> int:
    """Write ``spec`` as a stallwatch run into ``path`` (created if missing); returns the run id."""
    n = len(spec.wait_s)
    wait = np.asarray(spec.wait_s, dtype=float)
    step = np.asarray(spec.step_s, dtype=float) * np.ones(n)
    epoch_len = spec.epoch_len or n
    epoch = np.arange(n) // epoch_len
    idx = np.arange(n) % epoch_len
    gap = spec.first_batch_s or 0.0  # iter() time per epoch
    ts = np.empty(n)
    starts: list[float] = []
    t = T0
    ends: list[float] = []
    for i in range(n):
        if idx[i] == 0:
            if i:
                t += step[i - 1]
                ends.append(t)  # the epoch's final next() returns at once unless end_wait_s says otherwise
                t += (spec.end_wait_s or 0.0) + spec.between_epochs_s
            starts.append(t)
            t += gap + (spec.collector_s or 0.0)
        elif i:
            t += step[i]
        t += wait[i]
        ts[i] = t
    store = Store(path)
    heartbeat = time.time() if spec.status == "running" else T0
    run_id = store.create_run(
        spec.name,
        config=spec.config,
        host=spec.host,
        versions={},
        hostname=socket.gethostname(),
        pid=os.getpid(),
        command="test",
        rank=spec.rank,
        world_size=spec.world_size,
        started_at=T0,
        job_id=spec.job_id,
        stage=spec.stage,
        tags=spec.tags,
    )
    workers = int(spec.config.get("num_workers") or 0)

    def col(values: Any, i: int) -> Any:
        if values is None:
            return None
        v = values[i] if hasattr(values, "__len__") else values
        return None if v is None else (float(v) if isinstance(v, float | np.floating) else int(v))

    rows, fetches = [], []
    for i in range(n):
        w = col(spec.worker_id, i)
        if w is None and workers:
            w = i % workers
        pid = None if w is None else 1000 + w
        seq = i // max(1, workers)
        rows.append(
            (
                run_id, int(epoch[i]), int(idx[i]), float(ts[i]), float(wait[i]),
                None if idx[i] == 0 else float(step[i]), col(spec.ready, i), None, w, pid,
                None if w is None else 0, None if w is None else seq, spec.config.get("batch_size"),
                spec.nbytes, col(spec.pinned, i), col(spec.gpu_idle_s, i), col(spec.load_cpu_s, i),
                col(spec.load_runq_s, i),
            )
        )  # fmt: skip
        if spec.worker_wall_s is not None and pid is not None:
            fetches.append(
                (
                    run_id, pid, w, 0, seq, float(ts[i]) - 0.1, col(spec.worker_wall_s, i),
                    col(spec.worker_cpu_s, i), col(spec.worker_runq_s, i),
                )
            )  # fmt: skip
    epochs = []
    for e, start in enumerate(starts):
        first = e * epoch_len
        last = min(n, first + epoch_len) - 1
        ended = float(ts[last]) + (spec.end_wait_s or 0.0)
        first_batch_s = float(ts[first] - start)
        epochs.append(
            (run_id, e, start, ended, first_batch_s, last - first + 1, "[]", spec.end_wait_s, spec.collector_s)
        )
    samples: dict[str, list[Any]] = {"gpu_samples": [], "host_samples": [], "proc_samples": []}
    t_end = float(ts[-1]) if n else T0
    if spec.gpu_util is not None:
        for t in np.arange(T0, t_end, 1.0 / spec.gpu_hz):
            samples["gpu_samples"].append((run_id, float(t), 0, float(spec.gpu_util(t)), None, None, None))
    for t in np.arange(T0, t_end, 0.5):
        frac = (t - T0) / max(t_end - T0, 1e-9)
        per_core = None if spec.host_cpu_pct is None else json.dumps([spec.host_cpu_pct] * 2)
        mem = None if spec.mem_available is None else int(spec.mem_available(frac))
        samples["host_samples"].append((run_id, float(t), spec.host_cpu_pct, per_core, mem, None))
        if spec.main_cpu_pct is not None:
            cpu_s = spec.main_cpu_pct / 100.0 * (t - T0)
            runq_s = None if spec.main_runq_cores is None else spec.main_runq_cores * (t - T0)
            samples["proc_samples"].append(
                (run_id, float(t), 1, "main", None, spec.main_cpu_pct, 1 << 28, None, None, cpu_s, runq_s, None)
            )
        for w in range(workers if spec.worker_cpu_pct is not None or spec.worker_uss else 0):
            uss = None if spec.worker_uss is None else int(spec.worker_uss(frac))
            samples["proc_samples"].append(
                (run_id, float(t), 1000 + w, "worker", w, spec.worker_cpu_pct, 1 << 28, uss, None, None, None, None)
            )
    exits = [(run_id, 1000 + w, w, T0 + a, T0 + b, cpu, None) for w, a, b, cpu in (spec.worker_exits or [])]
    store.write(
        samples,
        epochs=epochs,
        run_update={
            "status": spec.status,
            "heartbeat_at": heartbeat,
            "ended_at": None if spec.status == "running" else t_end,
            "torch_threads": spec.torch_threads,
        },
        run_id=run_id,
        statements=[
            (f"INSERT INTO batches ({BATCH_FIXTURE_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows),
            ("INSERT INTO worker_fetches VALUES (?,?,?,?,?,?,?,?,?)", fetches),
            ("INSERT INTO worker_exits VALUES (?,?,?,?,?,?,?)", exits),
        ],
    )
    store.close()
    return run_id


def file_state(path: str) -> tuple[bytes, int]:
    """The file's bytes and mtime: a reader must leave both unchanged."""
    with open(path, "rb") as f:
        return f.read(), os.stat(path).st_mtime_ns


def foreign_sqlite(path: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()


# -- real loops --------------------------------------------------------------


class BurstDataset(Dataset[tuple[torch.Tensor, int]]):
    """Batches of ``batch_size`` in order; every ``every``-th batch sleeps ``slow_s`` per sample."""

    def __init__(self, length: int, batch_size: int, fast_s: float, slow_s: float, every: int) -> None:
        self.length, self.batch_size, self.fast_s, self.slow_s, self.every = length, batch_size, fast_s, slow_s, every

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        slow = (index // self.batch_size) % self.every == 0
        time.sleep(self.slow_s if slow else self.fast_s)
        return torch.zeros(64), 0


class SlowWorkerDataset(Dataset[tuple[torch.Tensor, int]]):
    """Worker 0 sleeps ``slow_s`` per sample, the others ``fast_s``."""

    def __init__(self, length: int, fast_s: float, slow_s: float) -> None:
        self.length, self.fast_s, self.slow_s = length, fast_s, slow_s

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        info = torch.utils.data.get_worker_info()
        time.sleep(self.slow_s if info is not None and info.id == 0 else self.fast_s)
        return torch.zeros(64), 0


def record(
    db: str,
    dataset: Dataset[Any],
    seconds: float,
    *,
    step_s: float = 0.010,
    name: str = "scenario",
    **loader_kwargs: Any,
) -> int:
    """Run a tiny CPU training loop through ``watch`` for ``seconds`` (whole epochs repeat); returns the run id."""
    from collector import watch

    loader = DataLoader(dataset, **loader_kwargs)
    model = torch.nn.Linear(dataset[0][0].numel(), 10)
    deadline = time.monotonic() + seconds
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # See NOTE [ One intra-op thread in the bench ] in bench/bench_diagnosis.py
    try:
        with watch(loader, db=db, run=name, gpu_hz=0) as watched:
            while time.monotonic() < deadline:
                for features, _ in watched:
                    model(features).sum().backward()
                    time.sleep(step_s)
                    if time.monotonic() >= deadline:
                        break
            run_id = watched.run_id
    finally:
        torch.set_num_threads(threads)
    assert run_id is not None
    return run_id

"""Synthetic stallwatch files with known numbers for the exporter and merge tests, written through the real Store."""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest

from collector.store.connection import Store

T0 = 1_700_000_000.0
BATCH_SQL = (
    "INSERT INTO batches (run_id, epoch, idx, ts, wait_s, step_s, ready, in_flight, worker_id, worker_pid,"
    " worker_incarnation, worker_seq, samples) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
)


@dataclass
class FakeRun:
    """A run being 'recorded' by a test: each add() appends batches after the previous ones."""

    store: Store
    run_id: int
    workers: int
    epoch: int = 0
    idx: int = 0
    ts: float = T0
    seq: int = 0

    def add(self, waits: list[float], *, step_s: float = 0.010, ready: int | None = 2, wall_s=0.02, cpu_s=0.015):
        """Append one batch per wait; with workers each gets a fetch of ``wall_s`` / ``cpu_s``."""
        rows, fetches = [], []
        for wait in waits:
            self.ts += wait + step_s
            worker = self.idx % self.workers if self.workers else None
            seq = self.seq // self.workers if self.workers else None
            pid = 1000 + worker if worker is not None else None
            in_flight, incarnation = (4, 0) if self.workers else (None, None)
            key = (self.run_id, self.epoch, self.idx)
            rows.append((*key, self.ts, wait, step_s, ready, in_flight, worker, pid, incarnation, seq, 16))
            if self.workers:
                fetches.append((self.run_id, pid, worker, 0, seq, self.ts - wait - wall_s, wall_s, cpu_s))
                self.seq += 1
            self.idx += 1
        with self.store.transaction() as conn:
            conn.executemany(BATCH_SQL, rows)
            conn.executemany("INSERT INTO worker_fetches VALUES (?,?,?,?,?,?,?,?,NULL)", fetches)
            conn.execute("UPDATE runs SET heartbeat_at = ? WHERE id = ?", (self.ts, self.run_id))
        return self

    def new_epoch(self, started_at: float, first_batch_s: float | None = None) -> FakeRun:
        if self.idx:  # the first call opens epoch 0; later ones the next epoch
            self.epoch += 1
        self.idx = 0
        with self.store.transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO epochs VALUES (?, ?, ?, NULL, ?, NULL, '[]', NULL, NULL, NULL)",
                (self.run_id, self.epoch, started_at, first_batch_s),
            )
        return self

    def gpu(self, utils: list[float], gpu: int = 0) -> FakeRun:
        with self.store.transaction() as conn:
            conn.executemany(
                "INSERT INTO gpu_samples VALUES (?, ?, ?, ?, NULL, NULL, NULL)",
                [(self.run_id, self.ts - 0.1 * i, gpu, u) for i, u in enumerate(utils)],
            )
        return self

    def stages(self, rows: dict[str, tuple[float, float | None]], worker_id: int = 0) -> FakeRun:
        """worker_stages rows: stage -> (wall_s, cpu_s), one call each."""
        with self.store.transaction() as conn:
            conn.executemany(
                "INSERT INTO worker_stages VALUES (?, ?, ?, 1, 0, ?, ?, NULL, NULL, ?)",
                [(self.run_id, worker_id, stage, wall, cpu, self.ts) for stage, (wall, cpu) in rows.items()],
            )
        return self

    def end(self, at: float, status: str = "completed", dropped_records: int = 0) -> FakeRun:
        with self.store.transaction() as conn:
            conn.execute(
                "UPDATE runs SET status = ?, ended_at = ?, heartbeat_at = ?, dropped_records = ? WHERE id = ?",
                (status, at, at, dropped_records, self.run_id),
            )
        return self

    def set(self, **columns: object) -> FakeRun:
        with self.store.transaction() as conn:
            sets = ", ".join(f"{k} = ?" for k in columns)
            conn.execute(f"UPDATE runs SET {sets} WHERE id = ?", (*columns.values(), self.run_id))
        return self


def start_run(
    store: Store,
    name: str = "train",
    *,
    workers: int = 2,
    rank: int | None = None,
    job_id: str | None = None,
    hostname: str = "node-a",
    pid: int = 4242,
    started_at: float = T0,
) -> FakeRun:
    """A 'running' run on another host (so only its heartbeat says whether it is alive), epoch 0 started."""
    run_id = store.create_run(
        name,
        config={"num_workers": workers, "batch_size": 16, "prefetch_factor": 2 if workers else None},
        host={"usable_cores": 8},
        versions={"stallwatch": "test"},
        hostname=hostname,
        pid=pid,
        command="train.py",
        rank=rank,
        world_size=None if rank is None else 8,
        started_at=started_at,
        job_id=job_id,
    )
    return FakeRun(store, run_id, workers, ts=started_at).new_epoch(started_at, 0.05)


def bad_file(kind: str, directory: Path) -> str:
    """A file the exporter and merge must refuse politely: text, foreign SQLite, corrupt."""
    path = str(directory / f"{kind}.sqlite")
    if kind == "not-sqlite":
        Path(path).write_text("epoch,loss\n0,2.3\n")
    elif kind == "foreign":
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, caption TEXT)")
        conn.commit()
        conn.close()
    elif kind == "corrupt":
        Path(path).write_bytes(b"SQLite format 3\x00" + os.urandom(8192))
    else:
        raise ValueError(kind)
    return path


def free_port() -> int:
    """A port nothing listens on now (the OS's pick for port 0, on 127.0.0.1)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prometheus_tool(name: str) -> str:
    """The path of Debian's ``prometheus`` or ``promtool``; skipped without it, failed under STALLWATCH_REQUIRE_PROMETHEUS=1."""
    path = shutil.which(name)
    if path is not None:
        return path
    if os.environ.get("STALLWATCH_REQUIRE_PROMETHEUS") == "1":
        pytest.fail(f"{name} is missing and STALLWATCH_REQUIRE_PROMETHEUS=1: apt-get install prometheus")
    pytest.skip(f"{name} is missing (apt-get install prometheus; STALLWATCH_REQUIRE_PROMETHEUS=1 makes this a failure)")

"""One run followed incrementally: counters advanced from a cursor and a sliding window, one refresh per scrape."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collector.export.stall import Window, WindowStall, window_stall
from collector.store import export_queries as q
from collector.store.stage_sql import stage_seconds
from collector.store.tuning_queries import loader_setting

# Bucket bounds of the wait histogram, in seconds: from a ready batch's
# hand-off (well under a millisecond) to a worker start-up (seconds).
WAIT_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

_COLUMNS = ("epoch", "idx", "ts", "wait_s", "ready", "in_flight", "weight")  # the window's columns, as Window's
_WINDOW = [q.ROW_COLUMNS.index(c) for c in _COLUMNS[:-1]]
_TS = _COLUMNS.index("ts")
HEAD_BATCHES = 64  # every epoch's first batches are always read: worker start-up (start_batches, up to MAX_WORKERS)
# NOTE [ Sampled window ]
# Reading a batch row into Python costs about 2 us; the counters never need
# it (SQLite sums them, a few ns a row). So a scrape reads at most
# MAX_WINDOW_ROWS new rows per run for the window's stall fraction: past
# that, every n-th batch of an epoch (and its first HEAD_BATCHES), each row
# weighted n. The stall fraction is a ratio of sums over thousands of rows,
# so the sample moves it by well under a point; bench/bench_exporter.py
# measures the scrape at 1000 batches/s per rank.
MAX_WINDOW_ROWS = 1_000


@dataclass(frozen=True)
class RunLabels:
    """The labels every per-run series carries; "" where the file has no value (job_id before it is filled)."""

    run: str
    job_id: str
    rank: str
    host: str

    def values(self) -> list[str]:
        return [self.run, self.job_id, self.rank, self.host]


LABEL_NAMES = ["run", "job_id", "rank", "host"]


@dataclass(frozen=True)
class RunSnapshot:
    """Everything one scrape exports about one run. Seconds, counts; ``gpu_util_pct`` in percent."""

    labels: RunLabels
    state: str  # running | completed | crashed | interrupted | stopped
    info: dict[str, str]
    started_at: float
    last_batch_at: float | None
    batches: int
    wait_s: float
    step_s: float
    wait_le: tuple[int, ...]  # cumulative counts per WAIT_BUCKETS_S bound
    fetches: int
    fetch_wall_s: float
    fetch_cpu_s: float
    stall: WindowStall
    gpu_util_pct: dict[int, float]
    dropped_records: int
    dropped_samples: int
    setting: dict[str, float] = field(default_factory=dict)  # the loader's setting now, by parameter
    stages: dict[str, tuple[float, float | None]] = field(default_factory=dict)  # (wall_s, cpu_s) by stage


SETTING_PARAMETERS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory", "threads")


def setting_of(info: dict[str, str], tuned: dict[str, Any] | None) -> dict[str, float]:
    """The loader's setting now as numbers: a tuned run's newest epoch's, else its configuration's."""
    out: dict[str, float] = {}
    for name in SETTING_PARAMETERS:
        value: Any = tuned.get(name) if tuned is not None else info.get(name)
        if value in (None, "", "None"):
            continue
        if isinstance(value, str):
            value = {"True": 1.0, "False": 0.0}.get(value, value)
        try:
            out[name] = float(value)
        except (TypeError, ValueError):
            continue
    return out


def labels_of(row: dict[str, Any]) -> RunLabels:
    def text(value: Any) -> str:
        return "" if value is None else str(value)

    return RunLabels(text(row["name"]), text(row["job_id"]), text(row["rank"]), text(row["hostname"]))


def info_of(row: dict[str, Any]) -> dict[str, str]:
    """The run's configuration as info labels (``stallwatch_run_info``)."""
    config = _json(row.get("config"))
    versions = _json(row.get("versions"))
    keys = ("num_workers", "batch_size", "prefetch_factor", "pin_memory", "persistent_workers")
    info = {key: "" if config.get(key) is None else str(config.get(key)) for key in keys}
    info["world_size"] = "" if row.get("world_size") is None else str(row["world_size"])
    info["stage"] = row.get("stage") or ""
    info["version"] = str(versions.get("stallwatch") or "")
    return info


def _json(value: Any) -> dict[str, Any]:
    if not isinstance(value, str) or not value:
        return {}
    try:
        decoded = json.loads(value)
    except ValueError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


@dataclass
class RunTail:
    """Counters since the run's first batch, advanced from a cursor; the last ``window_s`` seconds of batches.

    See NOTE [ Export cursor ] in collector/store/export_queries.py.
    """

    run_id: int
    window_s: float
    cursor: q.Key | None = None
    first: q.Key | None = None
    last_ts: float | None = None
    batches: int = 0
    wait_s: float = 0.0
    step_s: float = 0.0
    wait_le: list[int] = field(default_factory=lambda: [0] * len(WAIT_BUCKETS_S))
    fetches: int = 0
    fetch_wall_s: float = 0.0
    fetch_cpu_s: float = 0.0
    window: np.ndarray = field(default_factory=lambda: np.empty((0, len(_COLUMNS))))  # columns: _COLUMNS
    partial: tuple[tuple[int, int], np.ndarray] | None = (
        None  # the cursor's second, counted: NOTE [ Exporting rollups ]
    )

    def advance(self, conn: sqlite3.Connection) -> None:
        """Count the batches written since the last call and slide the window to the newest one.

        Batches that are already outside the window when first seen (a long
        run found at start-up) are counted in SQL; the rest are read once, as
        rows, for both the counters and the window. Batches folded into rollups
        are counted from them (NOTE [ Exporting rollups ]).
        """
        newest = q.newest_batch(conn, self.run_id)
        if newest is None or (self.cursor is not None and newest[0] <= self.cursor):
            return
        upto, upto_ts = newest
        if self.first is None:
            self.first = q.first_batch(conn, self.run_id)
        since = upto_ts - self.window_s
        start = self.cursor
        if self.cursor is None or (self.last_ts is not None and self.last_ts < since):
            edge = q.key_before(conn, self.run_id, since)  # walks back over the window only
            if edge is not None and (self.cursor is None or edge > self.cursor):
                self._count(q.batch_sums(conn, self.run_id, self.cursor, edge, WAIT_BUCKETS_S))
                start = edge
        every = max(1, -(-q.batch_count(conn, self.run_id, start, upto) // MAX_WINDOW_ROWS))
        if every == 1:
            rows = q.batch_rows(conn, self.run_id, start, upto)
            self._count_rows(rows)
            weight = np.ones(len(rows))
        else:
            self._count(q.batch_sums(conn, self.run_id, start, upto, WAIT_BUCKETS_S))
            rows = q.batch_rows(conn, self.run_id, start, upto, every=every, head=HEAD_BATCHES)
            idx = rows[:, q.ROW_COLUMNS.index("idx")]
            weight = np.where(idx < HEAD_BATCHES, 1.0, float(every))
        fetches = q.fetch_sums(conn, self.run_id, self.cursor, upto)
        self._count_fetches(fetches, 1)
        whole, held = q.rollup_sums(conn, self.run_id, self.cursor, upto)
        for part in (whole, *held):
            self._count(part.batches)
            self._count_fetches(part.fetches, 1)
            if self.partial is not None and (part.epoch, part.second) == self.partial[0]:
                self._uncount(self.partial[1], part.first_idx)
        self.partial = self._partial_at(conn, upto, upto_ts)
        keep = self.window[:, _TS] >= since
        self.window = np.concatenate([self.window[keep], np.column_stack([rows[:, _WINDOW], weight])])
        self.cursor, self.last_ts = upto, upto_ts

    def _count(self, sums: q.BatchSums, sign: int = 1) -> None:
        self.batches += sign * sums.batches
        self.wait_s += sign * sums.wait_s
        self.step_s += sign * sums.step_s
        self.wait_le = [a + sign * b for a, b in zip(self.wait_le, sums.wait_le, strict=True)]

    def _count_fetches(self, sums: q.FetchSums, sign: int) -> None:
        self.fetches += sign * sums.fetches
        self.fetch_wall_s += sign * sums.wall_s
        self.fetch_cpu_s += sign * sums.cpu_s

    def _partial_at(self, conn: sqlite3.Connection, upto: q.Key, upto_ts: float) -> tuple[tuple[int, int], np.ndarray]:
        """The rows of ``upto``'s second counted so far: its rollup, once folded, holds them again."""
        second = int(upto_ts)
        edge = q.key_before(conn, self.run_id, float(second))
        if edge is None or edge[0] != upto[0]:
            edge = (upto[0], -1)
        return (upto[0], second), q.second_rows(conn, self.run_id, edge, upto)

    def _uncount(self, rows: np.ndarray, first_idx: int) -> None:
        """Take back what a rollup holds of rows counted before it was folded (those kept as rows stay counted)."""
        rows = rows[rows[:, 0] >= first_idx]
        _, wait, step, wall, cpu = (rows[:, i] for i in range(len(q.SECOND_COLUMNS)))
        le = (wait[:, None] <= np.asarray(WAIT_BUCKETS_S)[None, :]).sum(axis=0)
        self._count(q.BatchSums(len(rows), float(wait.sum()), float(np.nansum(step)), tuple(int(v) for v in le)), -1)
        timed = ~np.isnan(wall)
        self._count_fetches(q.FetchSums(int(timed.sum()), float(wall[timed].sum()), float(np.nansum(cpu[timed]))), -1)

    def _count_rows(self, rows: np.ndarray) -> None:
        """The same sums as ``batch_sums``, over rows already read."""
        wait, step = (rows[:, q.ROW_COLUMNS.index(c)] for c in ("wait_s", "step_s"))
        le = (wait[:, None] <= np.asarray(WAIT_BUCKETS_S)[None, :]).sum(axis=0)
        self._count(
            q.BatchSums(
                batches=len(rows),
                wait_s=float(wait.sum()),
                step_s=float(np.nansum(step)),
                wait_le=tuple(int(v) for v in le),
            )
        )

    def stall(self, conn: sqlite3.Connection, num_workers: int) -> WindowStall:
        w = Window(**{c: self.window[:, i] for i, c in enumerate(_COLUMNS)})
        if len(w) == 0:
            return window_stall(w, num_workers=num_workers, run_start=False, epoch_starts={})
        head = (int(w.epoch[0]), int(w.idx[0]))
        run_start = self.first is not None and head == self.first and self.first[1] == 0
        starts = q.epoch_starts(conn, self.run_id, head[0])
        return window_stall(w, num_workers=num_workers, run_start=run_start, epoch_starts=starts)

    def snapshot(self, conn: sqlite3.Connection, row: dict[str, Any], state: str, now: float) -> RunSnapshot:
        info = info_of(row)
        workers = int(info["num_workers"]) if info["num_workers"].isdigit() else 0
        since = (self.last_ts if self.last_ts is not None else now) - self.window_s
        return RunSnapshot(
            labels=labels_of(row),
            state=state,
            info=info,
            started_at=float(row["started_at"]),
            last_batch_at=self.last_ts,
            batches=self.batches,
            wait_s=self.wait_s,
            step_s=self.step_s,
            wait_le=tuple(self.wait_le),
            fetches=self.fetches,
            fetch_wall_s=self.fetch_wall_s,
            fetch_cpu_s=self.fetch_cpu_s,
            stall=self.stall(conn, workers),
            gpu_util_pct=q.gpu_utilisation(conn, self.run_id, since),
            dropped_records=int(row.get("dropped_records") or 0),
            dropped_samples=int(row.get("dropped_samples") or 0),
            setting=setting_of(info, loader_setting(conn, self.run_id)),
            stages=stage_seconds(conn, self.run_id),
        )

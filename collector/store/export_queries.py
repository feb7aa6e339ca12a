"""The queries the exporter makes on every scrape: runs worth exporting, new batches since a cursor, recent samples.

Every query walks a primary key or the (run_id, ts) sample indexes from a
known point, so a scrape costs the batches written since the last one, not
the size of the run. See NOTE [ Export cursor ].
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, NamedTuple

from collector.store.schema import RUN_DEFAULTS

Key = tuple[int, int]  # (epoch, idx): the batches primary key within a run

RUN_COLUMNS = (
    "id",
    "name",
    "status",
    "started_at",
    "ended_at",
    "heartbeat_at",
    "hostname",
    "pid",
    "rank",
    "world_size",
    "job_id",
    "stage",
    "config",
    "versions",
    "dropped_records",
    "dropped_samples",
)

# NOTE [ Export cursor ]
# The exporter keeps, per run, the (epoch, idx) of the last batch it counted.
# Batches are written in that order (the monitor drains them in order), and a
# batch's worker fetch is drained and committed no later than the batch itself
# (the worker writes its timing before it queues the batch, and the monitor
# drains records before fetch timings), so joining the new batches to their
# fetches once, at the cursor, counts every fetch exactly once. The newest
# key is read first and every aggregate stops at it, so two queries that run
# while the writer commits still agree on what they counted.


class BatchSums(NamedTuple):
    """Counts and sums over the batches after one key, up to and including another."""

    batches: int
    wait_s: float
    step_s: float
    wait_le: tuple[int, ...]  # cumulative: batches with wait_s <= each bucket bound
    fetches: int  # batches joined to a worker fetch
    fetch_wall_s: float
    fetch_cpu_s: float


class WindowRows(NamedTuple):
    """New batches as columns (NULL as NaN via the caller), in (epoch, idx) order."""

    epoch: list[int]
    idx: list[int]
    ts: list[float]
    wait_s: list[float]
    ready: list[int | None]
    in_flight: list[int | None]


def columns_of(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def exported_runs(conn: sqlite3.Connection, ended_after: float) -> list[dict[str, Any]]:
    """Runs still marked running, and runs that ended (or last beat) at or after ``ended_after``."""
    present = columns_of(conn, "runs")
    select = ", ".join(c if c in present else f"{_literal(RUN_DEFAULTS.get(c))} AS {c}" for c in RUN_COLUMNS)
    cur = conn.execute(
        f"SELECT {select} FROM runs WHERE status = 'running' OR ended_at >= ? OR heartbeat_at >= ? ORDER BY id",
        (ended_after, ended_after),
    )
    return [dict(zip(RUN_COLUMNS, row, strict=True)) for row in cur.fetchall()]


def _literal(value: object) -> str:
    return "NULL" if value is None else repr(value)


def newest_batch(conn: sqlite3.Connection, run_id: int) -> tuple[Key, float] | None:
    """The run's last batch: its key and when it was handed out."""
    row = conn.execute(
        "SELECT epoch, idx, ts FROM batches WHERE run_id = ? ORDER BY epoch DESC, idx DESC LIMIT 1", (run_id,)
    ).fetchone()
    return None if row is None else ((int(row[0]), int(row[1])), float(row[2]))


def first_batch(conn: sqlite3.Connection, run_id: int) -> Key | None:
    row = conn.execute(
        "SELECT epoch, idx FROM batches WHERE run_id = ? ORDER BY epoch, idx LIMIT 1", (run_id,)
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def _range(run_id: int, after: Key | None, upto: Key) -> tuple[str, list[Any]]:
    where, params = "b.run_id = ? AND (b.epoch, b.idx) <= (?, ?)", [run_id, upto[0], upto[1]]
    if after is not None:
        where += " AND (b.epoch, b.idx) > (?, ?)"
        params += [after[0], after[1]]
    return where, params


FETCH_JOIN = (
    "LEFT JOIN worker_fetches f ON f.run_id = b.run_id AND f.worker_pid = b.worker_pid"
    " AND f.worker_incarnation = b.worker_incarnation AND f.worker_seq = b.worker_seq"
)


def batch_sums(
    conn: sqlite3.Connection, run_id: int, after: Key | None, upto: Key, bounds: Sequence[float]
) -> BatchSums:
    """Aggregates over batches in (after, upto], each joined to its worker fetch (NOTE [ Export cursor ])."""
    where, params = _range(run_id, after, upto)
    buckets = "".join(f", TOTAL(b.wait_s <= {float(le)!r})" for le in bounds)
    row = conn.execute(
        f"SELECT COUNT(*), TOTAL(b.wait_s), TOTAL(b.step_s), COUNT(f.wall_s), TOTAL(f.wall_s), TOTAL(f.cpu_s)"
        f"{buckets} FROM batches b {FETCH_JOIN} WHERE {where}",
        params,
    ).fetchone()
    return BatchSums(
        batches=int(row[0]),
        wait_s=float(row[1]),
        step_s=float(row[2]),
        fetches=int(row[3]),
        fetch_wall_s=float(row[4]),
        fetch_cpu_s=float(row[5]),
        wait_le=tuple(int(v) for v in row[6:]),
    )


def key_before(conn: sqlite3.Connection, run_id: int, ts: float) -> Key | None:
    """The newest batch handed out before ``ts`` (walks back from the end: costs the window, not the run)."""
    row = conn.execute(
        "SELECT epoch, idx FROM batches WHERE run_id = ? AND ts < ? ORDER BY epoch DESC, idx DESC LIMIT 1",
        (run_id, ts),
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def batch_rows(conn: sqlite3.Connection, run_id: int, after: Key | None, upto: Key) -> WindowRows:
    """The batches in (after, upto], in key order, as columns."""
    where, params = _range(run_id, after, upto)
    rows = conn.execute(
        f"SELECT b.epoch, b.idx, b.ts, b.wait_s, b.ready, b.in_flight FROM batches b WHERE {where}"
        " ORDER BY b.epoch, b.idx",
        params,
    ).fetchall()
    if not rows:
        return WindowRows([], [], [], [], [], [])
    return WindowRows(*(list(column) for column in zip(*rows, strict=True)))


def epoch_starts(conn: sqlite3.Connection, run_id: int, from_epoch: int) -> dict[int, tuple[float, float | None]]:
    """epoch -> (started_at, first_batch_s) for the run's epochs from ``from_epoch`` on."""
    rows = conn.execute(
        "SELECT epoch, started_at, first_batch_s FROM epochs WHERE run_id = ? AND epoch >= ?", (run_id, from_epoch)
    ).fetchall()
    return {int(e): (float(s), None if f is None else float(f)) for e, s, f in rows}


def gpu_utilisation(conn: sqlite3.Connection, run_id: int, since_ts: float) -> dict[int, float]:
    """GPU index -> mean utilisation in percent over the samples since ``since_ts`` (GPUs never sampled: absent)."""
    rows = conn.execute(
        "SELECT gpu, AVG(util_pct) FROM gpu_samples WHERE run_id = ? AND ts >= ? AND util_pct IS NOT NULL GROUP BY gpu",
        (run_id, since_ts),
    ).fetchall()
    return {int(g): float(u) for g, u in rows}

"""The queries the exporter makes on every scrape: runs worth exporting, new batches since a cursor, recent samples.

Every query walks a primary key or the (run_id, ts) sample indexes from a
known point, so a scrape costs the batches written since the last one, not
the size of the run. See NOTE [ Export cursor ].
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from collector.store.checked import run_damage
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
# drains records before fetch timings), so counting the fetches of the new
# batches once, at the cursor, counts every fetch exactly once. The newest
# key is read first and every aggregate stops at it, so two queries that run
# while the writer commits still agree on what they counted.


class BatchSums(NamedTuple):
    """Counts and sums over the batches after one key, up to and including another."""

    batches: int
    wait_s: float
    step_s: float
    wait_le: tuple[int, ...]  # cumulative: batches with wait_s <= each bucket bound


class FetchSums(NamedTuple):
    """The worker fetches of those batches: how many, their wall and CPU seconds."""

    fetches: int
    wall_s: float
    cpu_s: float


def columns_of(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def exported_runs(conn: sqlite3.Connection, ended_after: float) -> list[dict[str, Any]]:
    """Runs still marked running, and runs that ended (or last beat) at or after ``ended_after``."""
    where = "status = 'running' OR ended_at >= ? OR heartbeat_at >= ? ORDER BY id"
    return _runs_rows(conn, where, (ended_after, ended_after))


def exported_run(conn: sqlite3.Connection, run_id: int) -> dict[str, Any] | None:
    """One run's row, as ``exported_runs`` gives it; None where it is not in the file."""
    rows = _runs_rows(conn, "id = ?", (run_id,))
    return rows[0] if rows else None


def _runs_rows(conn: sqlite3.Connection, where: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
    """Runs rows, each checked alone: ``damage`` names a bad value (NOTE [ Values from a file ])."""
    present = columns_of(conn, "runs")
    select = ", ".join(c if c in present else f"{_literal(RUN_DEFAULTS.get(c))} AS {c}" for c in RUN_COLUMNS)
    cur = conn.cursor()
    cur.row_factory = None  # every run alone, so one bad row is that run's problem
    out = []
    for row in cur.execute(f"SELECT {select} FROM runs WHERE {where}", params).fetchall():
        damage, fixed = run_damage(dict(zip(RUN_COLUMNS, row, strict=True)))
        if type(fixed["id"]) is int:
            out.append({**fixed, "damage": damage})
    return out


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


def batch_sums(
    conn: sqlite3.Connection, run_id: int, after: Key | None, upto: Key, bounds: Sequence[float]
) -> BatchSums:
    """Counts, wait and step sums, and the wait histogram of the batches in (after, upto]."""
    where, params = _range(run_id, after, upto)
    bucket = " ".join(f"WHEN b.wait_s <= {float(le)!r} THEN {i}" for i, le in enumerate(bounds))
    rows = conn.execute(
        f"SELECT CASE {bucket} ELSE {len(bounds)} END AS bucket, COUNT(*), TOTAL(b.wait_s), TOTAL(b.step_s)"
        f" FROM batches b WHERE {where} GROUP BY bucket",
        params,
    ).fetchall()
    per_bucket = [0] * (len(bounds) + 1)
    for i, n, _, _ in rows:
        per_bucket[int(i)] = int(n)
    cumulative, total = [], 0
    for n in per_bucket[:-1]:
        total += n
        cumulative.append(total)
    return BatchSums(
        batches=sum(per_bucket),
        wait_s=float(sum(r[2] for r in rows)),
        step_s=float(sum(r[3] for r in rows)),
        wait_le=tuple(cumulative),
    )


def fetch_sums(conn: sqlite3.Connection, run_id: int, after: Key | None, upto: Key) -> FetchSums:
    """The worker fetches of the batches in (after, upto] (NOTE [ Export cursor ]).

    A worker's k-th fetch in one incarnation is the k-th batch consumed from
    it (NOTE [ Worker timing ]), so the fetches of a range of batches are, per
    (worker pid, incarnation), one range of sequence numbers: summed along the
    worker_fetches key instead of joined batch by batch.
    """
    where, params = _range(run_id, after, upto)
    groups = conn.execute(
        "SELECT b.worker_pid, b.worker_incarnation, MIN(b.worker_seq), MAX(b.worker_seq) FROM batches b"
        f" WHERE {where} AND b.worker_seq IS NOT NULL GROUP BY b.worker_pid, b.worker_incarnation",
        params,
    ).fetchall()
    n, wall, cpu = 0, 0.0, 0.0
    for pid, incarnation, lo, hi in groups:
        row = conn.execute(
            "SELECT COUNT(*), TOTAL(wall_s), TOTAL(cpu_s) FROM worker_fetches WHERE run_id = ? AND worker_pid = ?"
            " AND worker_incarnation = ? AND worker_seq BETWEEN ? AND ?",
            (run_id, pid, incarnation, lo, hi),
        ).fetchone()
        n, wall, cpu = n + int(row[0]), wall + float(row[1]), cpu + float(row[2])
    return FetchSums(n, wall, cpu)


def key_before(conn: sqlite3.Connection, run_id: int, ts: float) -> Key | None:
    """The newest batch handed out before ``ts`` (walks back from the end: costs the window, not the run)."""
    row = conn.execute(
        "SELECT epoch, idx FROM batches WHERE run_id = ? AND ts < ? ORDER BY epoch DESC, idx DESC LIMIT 1",
        (run_id, ts),
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


ROW_COLUMNS = ("epoch", "idx", "ts", "wait_s", "step_s", "ready", "in_flight")
_NULL = -1.0  # no stored value is negative (see NOTE [ Lean batch columns ] in diagnosis_queries.py)


def batch_count(conn: sqlite3.Connection, run_id: int, after: Key | None, upto: Key) -> int:
    """How many batches (after, upto] holds (counted in SQLite: a few ns a row)."""
    where, params = _range(run_id, after, upto)
    return int(conn.execute(f"SELECT COUNT(*) FROM batches b WHERE {where}", params).fetchone()[0])


def batch_rows(
    conn: sqlite3.Connection, run_id: int, after: Key | None, upto: Key, *, every: int = 1, head: int = 0
) -> np.ndarray:
    """The batches in (after, upto], in key order, as a float64 array of ``ROW_COLUMNS``; NaN where NULL.

    ``every`` > 1 reads only every n-th batch of each epoch, and the first ``head`` of each whole.
    """
    where, params = _range(run_id, after, upto)
    if every > 1:
        where += f" AND (b.idx % {int(every)} = 0 OR b.idx < {int(head)})"
    rows = conn.execute(
        "SELECT b.epoch, b.idx, b.ts, b.wait_s, IFNULL(b.step_s, -1.0), IFNULL(b.ready, -1), IFNULL(b.in_flight, -1)"
        f" FROM batches b WHERE {where} ORDER BY b.epoch, b.idx",
        params,
    ).fetchall()
    values = np.array(rows, dtype=np.float64).reshape(-1, len(ROW_COLUMNS))
    values[:, 4:][values[:, 4:] == _NULL] = np.nan
    return values


def epoch_starts(conn: sqlite3.Connection, run_id: int, from_epoch: int) -> dict[int, tuple[float, float | None]]:
    """epoch -> (started_at, first_batch_s) for the run's epochs from ``from_epoch`` on.

    first_batch_s less the collector's own work in it (epochs.collector_s,
    schema 4: NOTE [ The collector's own time ] in collector/record/session.py).
    """
    sql = "SELECT epoch, started_at, first_batch_s - {own} FROM epochs WHERE run_id = ? AND epoch >= ?"
    try:
        rows = conn.execute(sql.format(own="IFNULL(collector_s, 0.0)"), (run_id, from_epoch)).fetchall()
    except sqlite3.OperationalError:  # a file from before schema 4: NOTE [ Schema versions ]
        rows = conn.execute(sql.format(own="0.0"), (run_id, from_epoch)).fetchall()
    return {int(e): (float(s), None if f is None else float(f)) for e, s, f in rows}


def gpu_utilisation(conn: sqlite3.Connection, run_id: int, since_ts: float) -> dict[int, float]:
    """GPU index -> mean utilisation in percent over the samples since ``since_ts`` (GPUs never sampled: absent)."""
    rows = conn.execute(
        "SELECT gpu, AVG(util_pct) FROM gpu_samples WHERE run_id = ? AND ts >= ? AND util_pct IS NOT NULL GROUP BY gpu",
        (run_id, since_ts),
    ).fetchall()
    return {int(g): float(u) for g, u in rows}


# NOTE [ Exporting rollups ]
# The writer folds a run's old rows into rollups, one whole (epoch, second) at
# a time (NOTE [ Rollups ] in collector/store/fold.py), long after the exporter
# counted most of them as rows. A rollup is counted when its last batch lies
# after the cursor; one that holds the cursor (its second was live at the last
# scrape) is counted less what was counted of it then: the exporter keeps the
# sums of the rows of the cursor's second (``partial``). Rows and rollups are
# read in one read transaction, so a fold between two queries cannot count a
# batch twice.


class Folded(NamedTuple):
    """Sums of batches and of their fetches, by (epoch, second) from its ``first_idx``."""

    epoch: int
    second: int
    first_idx: int
    batches: BatchSums
    fetches: FetchSums


_ROLLUP_SUMS = "TOTAL(batches), TOTAL(wait_s), TOTAL(step_s), TOTAL(fetches), TOTAL(fetch_wall_s), TOTAL(fetch_cpu_s)"


def _folded(epoch: int, second: int, first_idx: int, row: Sequence[Any]) -> Folded:
    batches = BatchSums(int(row[0]), float(row[1]), float(row[2]), tuple(int(v) for v in row[6:]))
    return Folded(epoch, second, first_idx, batches, FetchSums(int(row[3]), float(row[4]), float(row[5])))


def rollup_sums(conn: sqlite3.Connection, run_id: int, after: Key | None, upto: Key) -> tuple[Folded, list[Folded]]:
    """(the rollups wholly after ``after`` up to ``upto``, summed; each rollup that holds ``after``)."""
    from collector.store.rollup_schema import WAIT_LE_COLUMNS

    zero = _folded(0, 0, 0, (0,) * (6 + len(WAIT_LE_COLUMNS)))
    select = f"{_ROLLUP_SUMS}, {', '.join(f'TOTAL({c})' for c in WAIT_LE_COLUMNS)}"
    where, params = "run_id = ? AND (epoch, last_idx) <= (?, ?)", [run_id, upto[0], upto[1]]
    if after is not None:
        where += " AND (epoch, last_idx) > (?, ?)"
        params += [after[0], after[1]]
    try:
        whole = conn.execute(
            f"SELECT {select} FROM batch_rollups WHERE {where}"
            + ("" if after is None else " AND (epoch, first_idx) > (?, ?)"),
            params + ([] if after is None else [after[0], after[1]]),
        ).fetchone()
        held = (
            []
            if after is None
            else conn.execute(
                f"SELECT epoch, second, MIN(first_idx), {select} FROM batch_rollups WHERE {where} AND (epoch, first_idx) <= (?, ?)"
                " GROUP BY epoch, second",
                [*params, after[0], after[1]],
            ).fetchall()
        )
    except sqlite3.OperationalError:  # a file from before schema 6: NOTE [ Schema versions ]
        return zero, []
    return _folded(0, 0, 0, whole), [_folded(int(r[0]), int(r[1]), int(r[2]), r[3:]) for r in held]


SECOND_COLUMNS = ("idx", "wait_s", "step_s", "fetch_wall_s", "fetch_cpu_s")


def second_rows(conn: sqlite3.Connection, run_id: int, after: Key | None, upto: Key) -> np.ndarray:
    """The batches in (after, upto] with their fetches: ``SECOND_COLUMNS``, NaN where NULL (one second's worth)."""
    where, params = _range(run_id, after, upto)
    rows = conn.execute(
        "SELECT b.idx, b.wait_s, b.step_s, f.wall_s, f.cpu_s FROM batches b LEFT JOIN worker_fetches f"
        " ON f.run_id = b.run_id AND f.worker_pid = b.worker_pid AND f.worker_incarnation = b.worker_incarnation"
        f" AND f.worker_seq = b.worker_seq WHERE {where}",
        params,
    ).fetchall()
    return np.array(rows, dtype=np.float64).reshape(-1, len(SECOND_COLUMNS))

"""One input copied into a merge: its runs matched by identity, ids remapped, rows added once."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from typing import Any

from collector.errors import NotAStallwatchFile
from collector.store.export_queries import columns_of
from collector.store.schema import RUN_DEFAULTS, SAMPLE_TABLES

# NOTE [ Run identity ]
# A run is the same run in two files when it has the same hostname, pid,
# started_at and name: one process starts a run at one wall-clock instant,
# and no two processes on one host share a pid at once. Ids are not identity
# (every file numbers its runs from 1), and neither is the name alone (every
# rank of a job may use one name). A run already in the output is brought up
# to date rather than copied again: rows with a primary key (batches,
# worker_fetches, epochs) are upserted, samples (no key) are copied only past
# the newest one the output holds for that run, and the run's own row takes
# the newer of the two (by heartbeat). So merging a file twice adds nothing,
# and merging a file again after its run went on adds what is new.
IDENTITY = ("hostname", "pid", "started_at", "name")
# columns of the runs row that change while a run is recorded
RUN_PROGRESS = (
    "status",
    "error",
    "ended_at",
    "heartbeat_at",
    "dropped_records",
    "warnings",
    "error_count",
    "first_error",
    "last_error",
    "exit_code",
    "dropped_samples",
    "job_id",
    "stage",
)


@dataclass(frozen=True)
class Merged:
    """What one input added to the output."""

    path: str
    runs: int  # runs in the input
    new_runs: int  # of those, not in the output before
    batches: int  # batch rows added
    rows: int  # rows added in every table together, batches included


def uri(path: str) -> str:
    return "file:" + os.path.abspath(path).replace("%", "%25").replace("?", "%3f").replace("#", "%23")


def _attach(conn: sqlite3.Connection, path: str) -> None:
    try:
        conn.execute("ATTACH DATABASE ? AS src", (uri(path) + "?mode=ro",))
    except sqlite3.Error as exc:
        raise NotAStallwatchFile(f"{path} cannot be opened: {exc}") from exc


def merge_one(conn: sqlite3.Connection, path: str) -> Merged:
    _attach(conn, path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = _copy(conn, path)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result
    except sqlite3.DatabaseError as exc:
        raise NotAStallwatchFile(f"{path} is not a readable stallwatch file: {exc}") from exc
    finally:
        conn.execute("DETACH DATABASE src")


def _shared_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    src = {row[1] for row in conn.execute(f"PRAGMA src.table_info({table})")}
    return [c for c in (row[1] for row in conn.execute(f"PRAGMA main.table_info({table})")) if c in src]


def _copy(conn: sqlite3.Connection, path: str) -> Merged:
    src_runs = {row[1] for row in conn.execute("PRAGMA src.table_info(runs)")}
    run_columns = [c for c in columns_of(conn, "runs") if c != "id"]
    select = ", ".join(c if c in src_runs else f"{_literal(RUN_DEFAULTS.get(c))}" for c in run_columns)
    runs = conn.execute(f"SELECT id, {select} FROM src.runs ORDER BY id").fetchall()
    before = conn.total_changes
    batches = new_runs = 0
    for row in runs:
        old_id, values = int(row[0]), dict(zip(run_columns, row[1:], strict=True))
        new_id, is_new = _run_id(conn, values, run_columns)
        new_runs += is_new
        batches += _copy_rows(conn, old_id, new_id)
    return Merged(path, len(runs), new_runs, batches, conn.total_changes - before)


def _literal(value: object) -> str:
    return "NULL" if value is None else repr(value)


def _run_id(conn: sqlite3.Connection, values: dict[str, Any], columns: list[str]) -> tuple[int, bool]:
    """The output's id for this run (NOTE [ Run identity ]): its row brought up to date, or inserted."""
    found = conn.execute(
        "SELECT id, heartbeat_at FROM main.runs WHERE " + " AND ".join(f"{c} IS ?" for c in IDENTITY),
        [values[c] for c in IDENTITY],
    ).fetchone()
    if found is None:
        placeholders = ", ".join("?" for _ in columns)
        cur = conn.execute(
            f"INSERT INTO main.runs ({', '.join(columns)}) VALUES ({placeholders})", list(values.values())
        )
        assert cur.lastrowid is not None
        return int(cur.lastrowid), True
    run_id, beat = int(found[0]), found[1]
    if (values.get("heartbeat_at") or 0) >= (beat or 0):
        progress = [c for c in RUN_PROGRESS if c in values]
        changed = " OR ".join(f"{c} IS NOT ?" for c in progress)
        conn.execute(
            f"UPDATE main.runs SET {', '.join(f'{c} = ?' for c in progress)} WHERE id = ? AND ({changed})",
            [*(values[c] for c in progress), run_id, *(values[c] for c in progress)],
        )
    return run_id, False


def _copy_rows(conn: sqlite3.Connection, old_id: int, new_id: int) -> int:
    """Copy one run's rows from ``src`` under its new id; returns the batch rows added."""
    b = [c for c in _shared_columns(conn, "batches") if c != "run_id"]
    before = conn.execute("SELECT COUNT(*) FROM main.batches WHERE run_id = ?", (new_id,)).fetchone()[0]
    conn.execute(
        f"INSERT INTO main.batches (run_id, {', '.join(b)}) SELECT ?, {', '.join(b)} FROM src.batches"
        " WHERE run_id = ? ORDER BY epoch, idx"
        " ON CONFLICT (run_id, epoch, idx) DO UPDATE SET gpu_idle_s = excluded.gpu_idle_s"
        " WHERE excluded.gpu_idle_s IS NOT gpu_idle_s",
        (new_id, old_id),
    )
    added = conn.execute("SELECT COUNT(*) FROM main.batches WHERE run_id = ?", (new_id,)).fetchone()[0] - before
    f = [c for c in _shared_columns(conn, "worker_fetches") if c != "run_id"]
    conn.execute(
        f"INSERT OR IGNORE INTO main.worker_fetches (run_id, {', '.join(f)}) SELECT ?, {', '.join(f)}"
        " FROM src.worker_fetches WHERE run_id = ? ORDER BY worker_pid, worker_incarnation, worker_seq",
        (new_id, old_id),
    )
    x = [c for c in _shared_columns(conn, "worker_exits") if c != "run_id"]
    if x:  # both files have it (schema 3)
        conn.execute(
            f"INSERT OR IGNORE INTO main.worker_exits (run_id, {', '.join(x)}) SELECT ?, {', '.join(x)}"
            " FROM src.worker_exits WHERE run_id = ?",
            (new_id, old_id),
        )
    e = [c for c in _shared_columns(conn, "epochs") if c != "run_id"]
    conn.execute(
        f"INSERT INTO main.epochs (run_id, {', '.join(e)}) SELECT ?, {', '.join(e)} FROM src.epochs"
        " WHERE run_id = ? ORDER BY epoch ON CONFLICT (run_id, epoch) DO UPDATE SET"
        " ended_at = COALESCE(excluded.ended_at, ended_at), first_batch_s = COALESCE(excluded.first_batch_s,"
        " first_batch_s), batches = MAX(IFNULL(excluded.batches, 0), IFNULL(batches, 0)),"
        " worker_pids = COALESCE(excluded.worker_pids, worker_pids)"
        + (", end_wait_s = COALESCE(excluded.end_wait_s, end_wait_s)" if "end_wait_s" in e else "")
        + (", collector_s = COALESCE(excluded.collector_s, collector_s)" if "collector_s" in e else "")
        + (", setting = COALESCE(excluded.setting, setting)" if "setting" in e else "")
        + " WHERE excluded.ended_at IS NOT ended_at OR excluded.batches IS NOT batches",
        (new_id, old_id),
    )
    t = [c for c in _shared_columns(conn, "trials") if c != "run_id"]
    if t:  # both files have it (schema 6)
        conn.execute(
            f"INSERT OR REPLACE INTO main.trials (run_id, {', '.join(t)}) SELECT ?, {', '.join(t)}"
            " FROM src.trials WHERE run_id = ?",
            (new_id, old_id),
        )
    w = [c for c in _shared_columns(conn, "worker_stages") if c != "run_id"]
    if w:  # both files have it (schema 7): each row a run's totals, which only grow: the one of more calls wins
        update = ", ".join(f"{c} = excluded.{c}" for c in w if c not in ("worker_id", "stage"))
        conn.execute(
            f"INSERT INTO main.worker_stages (run_id, {', '.join(w)}) SELECT ?, {', '.join(w)}"
            " FROM src.worker_stages WHERE run_id = ? AND true ON CONFLICT (run_id, worker_id, stage)"
            f" DO UPDATE SET {update} WHERE excluded.calls > worker_stages.calls",
            (new_id, old_id),
        )
    for table in SAMPLE_TABLES:
        cols = [c for c in _shared_columns(conn, table) if c != "run_id"]
        conn.execute(
            f"INSERT INTO main.{table} (run_id, {', '.join(cols)}) SELECT ?, {', '.join(cols)} FROM src.{table}"
            f" WHERE run_id = ? AND ts > IFNULL((SELECT MAX(ts) FROM main.{table} WHERE run_id = ?), -1e300)"
            " ORDER BY ts",
            (new_id, old_id, new_id),
        )
    _copy_rollups(conn, old_id, new_id)
    return int(added)


ROLLUP_KEYS = {
    "batch_rollups": ("epoch", "second", "batches"),
    "fetch_rollups": ("second", "worker_id", "fetches"),
    "gpu_rollups": ("minute", "gpu", "samples"),
    "host_rollups": ("minute", "samples"),
    "proc_rollups": ("minute", "pid", "samples"),
}
# the rows a rollup stands for, deleted once it is in the output: (table, its key match)
COVERED = {
    "fetch_rollups": ("worker_fetches", "CAST(t.started_at AS INTEGER) = r.second AND t.worker_id = r.worker_id"),
    "gpu_rollups": ("gpu_samples", "CAST(t.ts / 60 AS INTEGER) * 60 = r.minute AND t.gpu = r.gpu"),
    "host_rollups": ("host_samples", "CAST(t.ts / 60 AS INTEGER) * 60 = r.minute"),
    "proc_rollups": ("proc_samples", "CAST(t.ts / 60 AS INTEGER) * 60 = r.minute AND t.pid = r.pid"),
}


def _copy_rollups(conn: sqlite3.Connection, old_id: int, new_id: int) -> None:
    """NOTE [ Merging rollups ]: each rollup is copied, the larger of two of one key kept (one file may
    have folded more of a run than the other), and the rows the output's rollups stand for are deleted,
    so a batch or sample is never both a row and in a rollup (NOTE [ Rollups ] in collector/store/fold.py)."""
    for table, (*keys, size) in ROLLUP_KEYS.items():
        columns = [c for c in _shared_columns(conn, table) if c != "run_id"]
        if not columns:  # the input is older than schema 5: it has no rollups
            continue
        update = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in keys)
        conn.execute(
            f"INSERT INTO main.{table} (run_id, {', '.join(columns)}) SELECT ?, {', '.join(columns)} FROM src.{table}"
            f" WHERE run_id = ? ON CONFLICT (run_id, {', '.join(keys)}) DO UPDATE SET {update}"
            f" WHERE excluded.{size} > {table}.{size}",
            (new_id, old_id),
        )
    spans = conn.execute(
        "SELECT epoch, first_idx, last_idx FROM main.batch_rollups WHERE run_id = ?", (new_id,)
    ).fetchall()
    conn.executemany(
        "DELETE FROM main.batches WHERE run_id = ? AND epoch = ? AND idx BETWEEN ? AND ?",
        [(new_id, *span) for span in spans],
    )
    for rollup, (table, match) in COVERED.items():
        conn.execute(
            f"DELETE FROM main.{table} AS t WHERE t.run_id = ?1 AND EXISTS"
            f" (SELECT 1 FROM main.{rollup} r WHERE r.run_id = ?1 AND {match})",
            (new_id,),
        )

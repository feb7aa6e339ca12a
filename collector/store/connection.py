"""The write side of a stallwatch file: one connection, WAL, batched inserts."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from collector.errors import CannotWrite, NotAStallwatchFile, SchemaTooNew
from collector.store.file_checks import version_of
from collector.store.rollup_schema import ROLLUP_DDL
from collector.store.schema import APP_ID, DDL, MIGRATIONS, SAMPLE_TABLES, SCHEMA_VERSION

BUSY_TIMEOUT_MS = 5_000

Row = Sequence[Any]

# an epochs row: run_id, epoch, started_at, ended_at, first_batch_s, batches, worker_pids, end_wait_s, collector_s, setting
EPOCH_FIELDS = 10


def batch_insert_sql(run_id: int, wall0_s: float, perf0_ns: int, extra: Sequence[str] = ()) -> str:
    """INSERT for one raw hot-path record, bound as parameters.

    Every record starts with (epoch, idx, t_request_ns, t_return_ns,
    t_prev_return_ns); ``extra`` names the fields after those, each a
    ``batches`` column, except that a field ending in ``_ns`` is stored in
    seconds in its ``_s`` column. See NOTE [ Record layouts ] in
    collector/writer/batch_records.py.
    """
    # NOTE [ Clocks in SQL ]
    # The raw perf_counter_ns values become ts, wait_s and step_s in the
    # statement, so Python does no per-row arithmetic. The constants are our
    # own int/float values, formatted with repr.
    stored = [name[: -len("_ns")] + "_s" if name.endswith("_ns") else name for name in extra]
    columns = ", ".join(("run_id", "epoch", "idx", "ts", "wait_s", "step_s", *stored))
    values = ", ".join(
        (
            str(int(run_id)),
            "?1",
            "?2",
            f"{float(wall0_s)!r} + (?4 - {int(perf0_ns)}) / 1e9",
            "MAX(0.0, (?4 - ?3) / 1e9)",
            "MAX(0.0, (?3 - ?5) / 1e9)",
            *(f"?{6 + i} / 1e9" if name.endswith("_ns") else f"?{6 + i}" for i, name in enumerate(extra)),
        )
    )
    return f"INSERT OR REPLACE INTO batches ({columns}) VALUES ({values})"


def fetch_insert_sql(run_id: int) -> str:
    """INSERT for worker timing entries (pid, worker_id, incarnation, seq, started_at, wall_s, cpu_s, runq_s)."""
    return f"INSERT OR REPLACE INTO worker_fetches VALUES ({int(run_id)}, ?, ?, ?, ?, ?, ?, ?, ?)"


def exit_insert_sql(run_id: int) -> str:
    """INSERT for a worker's whole-life totals (pid, worker_id, started_at, ended_at, cpu_s, runq_s)."""
    return f"INSERT OR REPLACE INTO worker_exits VALUES ({int(run_id)}, ?, ?, ?, ?, ?, ?)"


def _padded(rows: Iterable[Row], width: int) -> Iterable[Row]:
    """Rows as they are, or with NULL for trailing columns a newer schema added (a caller of an older layout)."""
    rows = list(rows)
    if not rows or len(rows[0]) >= width:
        return rows
    return [tuple(row) + (None,) * (width - len(row)) for row in rows]


# NOTE [ Accounting ]
# For every run, rows stored + dropped = handed out, for batches (handed to
# the loop) and samples (taken by the writers). Losses happen where no one
# can count them (a writer killed with frames in its pipe, a file deleted
# under it), so the end of a run does not add up losses: its last write sets
# each dropped count to what is missing from the run's rows, in SQL, from the
# totals: the batches the loop was handed (the monitor counts them) and the
# samples every writer of the run took (each tells the monitor as it takes
# them; a replacement learns its predecessors' total in its Open frame).
# Heartbeats store the monitor's running estimate. Rows folded into rollups
# (NOTE [ Rollups ] in collector/store/fold.py) count as stored: their rollups' counts.
DROPPED_UPDATE = (
    "UPDATE runs SET dropped_records = MAX(0, ?2 - (SELECT COUNT(*) FROM batches WHERE run_id = ?1)"
    " - (SELECT TOTAL(batches) FROM batch_rollups WHERE run_id = ?1)),"
    " dropped_samples = MAX(0, ?3 - (SELECT COUNT(*) FROM gpu_samples WHERE run_id = ?1)"
    " - (SELECT COUNT(*) FROM host_samples WHERE run_id = ?1) - (SELECT COUNT(*) FROM proc_samples WHERE run_id = ?1)"
    " - (SELECT TOTAL(samples) FROM gpu_rollups WHERE run_id = ?1) - (SELECT TOTAL(samples) FROM host_rollups"
    " WHERE run_id = ?1) - (SELECT TOTAL(samples) FROM proc_rollups WHERE run_id = ?1)) WHERE id = ?1"
)


def cannot_write(path: str, exc: BaseException) -> str:
    """Why ``path`` cannot be opened for writing, in words: the directory, permission, a full disk."""
    directory = os.path.dirname(os.path.abspath(path))
    text = str(exc)
    if not os.path.isdir(directory):
        return f"the directory {directory} does not exist"
    if "full" in text:
        return f"the disk holding {path} is full"
    if not os.access(directory, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return f"no permission to write {path} (or its directory, for the -wal and -shm files beside it)"
    if "readonly" in text or "read-only" in text:
        return f"{path} is on read-only storage"
    return f"cannot open {path} for writing: {text}"


GPU_IDLE_UPDATE = "UPDATE batches SET gpu_idle_s = ? WHERE run_id = ? AND epoch = ? AND idx = ?"


def table_names(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def check_meta(conn: sqlite3.Connection, path: str) -> int:
    """The file's schema version; raises unless ``conn`` holds a stallwatch database this version can read."""
    tables = table_names(conn)
    if "meta" not in tables:
        kind = "an empty database" if not tables else "another program's SQLite database"
        raise NotAStallwatchFile(f"{path} is {kind}, not a stallwatch file")
    cur = conn.cursor()
    cur.row_factory = None  # meta is checked here, whatever it holds
    meta = dict(cur.execute("SELECT key, value FROM meta").fetchall())
    if meta.get("app") != APP_ID:
        raise NotAStallwatchFile(f"{path} is another program's SQLite database")
    version = version_of(meta.get("schema_version"), path)
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"{path} has schema version {version}, newer than this stallwatch "
            f"understands ({SCHEMA_VERSION}): upgrade stallwatch (pip install -U stallwatch)"
        )
    return version


class Store:
    """Owns one read-write connection; every write goes through ``transaction``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        # NOTE [ Creating a file together ]
        # Several processes (DDP ranks, their writers) often open a new file at
        # the same moment. Switching it to WAL needs a lock that SQLite reports
        # as busy without waiting, so preparing is retried until the busy
        # timeout rather than read as a broken file.
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                self.conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            except sqlite3.Error as exc:
                raise CannotWrite(cannot_write(self.path, exc)) from exc
            try:
                self._prepare()
                return
            except sqlite3.OperationalError as exc:
                self.conn.close()
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise CannotWrite(cannot_write(self.path, exc)) from exc
                if time.monotonic() > deadline:
                    raise
                time.sleep(random.uniform(0.005, 0.05))
            except sqlite3.DatabaseError as exc:
                self.conn.close()
                raise NotAStallwatchFile(f"{self.path} is not a stallwatch file: {exc}") from exc
            except BaseException:
                self.conn.close()
                raise

    def _prepare(self) -> None:
        self.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if table_names(self.conn):  # never change another program's database
            check_meta(self.conn, self.path)
        # NOTE [ WAL ]
        # WAL lets the dashboard read while several training processes write;
        # synchronous=NORMAL keeps every committed transaction across a crash or
        # SIGKILL of the writer (only power loss can drop the last commits).
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        with self.transaction() as conn:
            if not table_names(conn):  # checked again: another process may have won
                for statement in (DDL + ";" + ROLLUP_DDL).split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.executemany(
                    "INSERT INTO meta VALUES (?, ?)",
                    [("app", APP_ID), ("schema_version", str(SCHEMA_VERSION))],
                )
        if check_meta(self.conn, self.path) < SCHEMA_VERSION:
            self._migrate()
        # one placeholder a column, read off the file: a sample field added to
        # collector/sample/ needs only its column in schema.py
        self._widths = {
            table: len(self.conn.execute(f"PRAGMA table_info({table})").fetchall()) for table in SAMPLE_TABLES
        }
        self._inserts = {
            table: f"INSERT INTO {table} VALUES ({','.join('?' * n)})" for table, n in self._widths.items()
        }

    def _migrate(self) -> None:
        """Bring an older file up to this schema (NOTE [ Schema versions ]); another writer may have done it."""
        with self.transaction() as conn:
            version = int(conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])
            for target in range(version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS.get(target, ()):
                    conn.execute(statement)
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, rolled back on any error."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def create_run(
        self,
        name: str,
        *,
        config: dict[str, Any],
        host: dict[str, Any],
        versions: dict[str, Any],
        hostname: str,
        pid: int,
        command: str,
        rank: int | None,
        world_size: int | None,
        tags: dict[str, Any] | None = None,
        started_at: float | None = None,
        job_id: str | None = None,
        stage: str | None = None,
    ) -> int:
        now = time.time() if started_at is None else started_at
        with self.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO runs (name, status, started_at, heartbeat_at, hostname, pid, command,"
                " rank, world_size, tags, config, host, versions, job_id, stage)"
                " VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    name,
                    now,
                    now,
                    hostname,
                    pid,
                    command,
                    rank,
                    world_size,
                    json.dumps(tags or {}),
                    json.dumps(config, default=str),
                    json.dumps(host, default=str),
                    json.dumps(versions, default=str),
                    job_id,
                    stage,
                ),
            )
            run_id = cur.lastrowid
        assert run_id is not None
        return run_id

    def has_run(self, run_id: int) -> bool:
        return self.conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None

    def write(
        self,
        rows: Mapping[str, Iterable[Row]],
        epochs: Iterable[Row] = (),
        run_update: dict[str, Any] | None = None,
        run_id: int | None = None,
        statements: Iterable[tuple[str, Iterable[Row]]] = (),
        totals: tuple[int, int] | None = None,
        fold: Callable[[sqlite3.Connection], object] | None = None,
    ) -> None:
        """Insert batched rows, upsert epochs and update the run in one transaction.

        ``rows`` maps a sample table to its rows; ``statements`` are (sql, rows)
        pairs built by ``batch_insert_sql`` and ``fetch_insert_sql`` or ``GPU_IDLE_UPDATE``.
        ``totals`` (batches iterated, samples taken) sets the run's dropped
        counts to what is missing from its rows: see NOTE [ Accounting ].
        ``fold`` folds rows past the run's window, after the inserts (NOTE [ Rollups ]).
        """
        with self.transaction() as conn:
            for sql, sql_rows in statements:
                conn.executemany(sql, sql_rows)
            for table, table_rows in rows.items():
                conn.executemany(self._inserts[table], _padded(table_rows, self._widths[table]))
            conn.executemany(
                "INSERT INTO epochs (run_id, epoch, started_at, ended_at, first_batch_s, batches, worker_pids,"
                " end_wait_s, collector_s, setting) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT (run_id, epoch) DO UPDATE"
                " SET ended_at=excluded.ended_at, first_batch_s=excluded.first_batch_s, batches=excluded.batches,"
                " worker_pids=excluded.worker_pids, end_wait_s=excluded.end_wait_s, collector_s=excluded.collector_s,"
                " setting=excluded.setting",
                (tuple(row) + (None,) * (EPOCH_FIELDS - len(row)) for row in epochs),  # rows without the newer fields
            )
            if fold is not None:
                fold(conn)
            if run_update and run_id is not None:
                columns = ", ".join(f"{key} = ?" for key in run_update)
                conn.execute(f"UPDATE runs SET {columns} WHERE id = ?", (*run_update.values(), run_id))
            if totals is not None and run_id is not None:
                conn.execute(DROPPED_UPDATE, (run_id, totals[0], totals[1]))

    def close(self) -> None:
        self.conn.close()

"""The read side of a stallwatch file: read-only, one short connection per query."""

from __future__ import annotations

import os
import socket
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pandas as pd

from collector.errors import CannotRead, DamagedRun, NotAStallwatchFile, StallwatchError, UnknownRun
from collector.store import checked, file_checks
from collector.store.connection import check_meta
from collector.store.schema import RUN_DEFAULTS, TRIAL_COLUMNS
from collector.store.stage_sql import STAGE_COLUMNS, STAGES_SELECT

# A running run whose heartbeat is older than this was killed (SIGKILL, OOM, power).
STALE_AFTER_S = 5.0

JSON_COLUMNS = ("tags", "config", "host", "versions", "warnings")

BATCH_COLUMNS = (
    "b.epoch, b.idx, b.ts, b.wait_s, b.step_s, b.ready, b.in_flight, b.worker_id,"
    " b.worker_pid, b.samples, b.nbytes, b.pinned, b.gpu_idle_s, b.load_cpu_s,"
    " f.wall_s AS worker_wall_s, f.cpu_s AS worker_cpu_s, f.started_at AS worker_started_at"
)
BATCH_JOIN = (
    "FROM batches b LEFT JOIN worker_fetches f ON f.run_id = b.run_id"
    " AND f.worker_pid = b.worker_pid AND f.worker_incarnation = b.worker_incarnation"
    " AND f.worker_seq = b.worker_seq"
)


def run_state(
    status: str,
    heartbeat_at: float | None,
    *,
    hostname: str | None = None,
    pid: int | None = None,
    now: float | None = None,
) -> str:
    """``status`` as stored, except a 'running' run that has stopped beating reads 'stopped'."""
    if status != "running":
        return status
    now = time.time() if now is None else now
    if heartbeat_at is None or now - heartbeat_at > STALE_AFTER_S:
        return "stopped"
    if hostname == socket.gethostname() and pid is not None and not _pid_alive(pid):
        return "stopped"
    return "running"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Reader:
    """Opens a stallwatch file read-only; each call uses a fresh, short connection.

    No read transaction outlives a call, so a reader never holds back the
    writer's WAL checkpoints, and nothing is ever written to the file.
    """

    def __init__(self, path: str | os.PathLike[str], *, query_limit_s: float = checked.QUERY_LIMIT_S) -> None:
        self.path = os.fspath(path)
        self.query_limit_s = query_limit_s
        if not os.path.exists(self.path):
            blocked = file_checks.closed_folder(self.path)
            if blocked is not None:
                raise CannotRead(f"no permission to look into {blocked}, which holds {self.path}")
            raise NotAStallwatchFile(f"{self.path} does not exist")
        if os.path.isdir(self.path):
            raise NotAStallwatchFile(f"{self.path} is a directory, not a stallwatch file")
        if not os.access(self.path, os.R_OK):
            raise CannotRead(f"no permission to read {self.path}")
        if os.path.getsize(self.path) == 0:
            raise NotAStallwatchFile(f"{self.path} is an empty file, not a stallwatch file")
        with self.connect() as conn:
            check_meta(conn, self.path)
            file_checks.check_tables(conn, self.path)
        file_checks.warn_network(self.path)

    # NOTE [ Reading never writes ]
    # A read-only connection to a WAL file still creates its -wal and -shm
    # files, and cannot open at all where it may not create them (read-only
    # media, a directory the user cannot write). A file whose writers have
    # all closed it has no -wal file: everything is in the file itself, so it
    # is opened ``immutable``, which touches nothing beside it. A live file
    # (its -wal there) is opened read-only in WAL mode and read live.
    # Every connection checks each value it returns and stops any query past
    # ``query_limit_s``: NOTE [ Values from a file ] in collector/store/checked.py.
    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        live = os.path.exists(self.path + "-wal")
        uri = (
            "file:" + urllib.parse.quote(os.path.abspath(self.path)) + ("?mode=ro" if live else "?mode=ro&immutable=1")
        )
        try:
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=5.0)
        except sqlite3.Error as exc:
            raise NotAStallwatchFile(f"{self.path} cannot be opened: {exc}") from exc
        conn.row_factory = checked.checked_row
        checked.deadline(conn, self.query_limit_s)
        try:
            yield conn
        except sqlite3.DatabaseError as exc:
            raise self._explain(exc, live) from exc
        finally:
            conn.close()

    def _explain(self, exc: sqlite3.DatabaseError, live: bool) -> StallwatchError:
        text = str(exc)
        if text == "interrupted":
            return checked.too_slow(self.path, self.query_limit_s)
        if live and ("unable to open" in text or "readonly" in text):
            return CannotRead(
                f"{self.path} is being written (or its writer was killed) and its -shm file cannot be created "
                f"here (read-only storage or no write permission): copy {self.path} and {self.path}-wal elsewhere"
            )
        return NotAStallwatchFile(f"{self.path} is not a readable stallwatch file: {text}")

    def frame(self, sql: str, params: Sequence[Any] = (), *, unchecked: bool = False) -> pd.DataFrame:
        """The rows of ``sql``, checked as a whole; ``unchecked``: the caller checks each row itself."""
        with self.connect() as conn:
            conn.row_factory = None  # checked_frame checks the columns as arrays
            cur = conn.execute(sql, params)
            df = pd.DataFrame.from_records(cur.fetchall(), columns=[d[0] for d in cur.description])
        return df if unchecked else checked.checked_frame(df)

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        with self.connect() as conn:
            row = conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    # -- runs ---------------------------------------------------------------

    def runs(self) -> pd.DataFrame:
        """Every run, newest first, with JSON columns decoded, a derived ``state`` and ``damage``.

        ``damage`` is one line naming a run's values no stallwatch writes (those read as NULL), else None;
        a row whose id is not a positive integer is left out (no other table can refer to it).
        """
        with self.connect() as conn:
            conn.row_factory = None  # each row checked alone, as stored (no pandas conversion in between)
            cur = conn.execute("SELECT * FROM runs ORDER BY id DESC")
            columns = [d[0] for d in cur.description]
            stored = cur.fetchall()
        rows, damage = [], []
        for values in stored:
            said, fixed = checked.run_damage(dict(zip(columns, values, strict=True)))
            if type(fixed.get("id")) is int and fixed["id"] > 0:
                rows.append(fixed)
                damage.append(said)
        df = pd.DataFrame.from_records(rows, columns=columns)
        df["damage"] = pd.Series(damage, index=df.index, dtype=object)
        for column, default in RUN_DEFAULTS.items():  # an older file: NOTE [ Schema versions ]
            if column not in df.columns:
                df[column] = default
        for column in JSON_COLUMNS:
            df[column] = [checked.json_value(v, [] if column == "warnings" else {}) for v in df[column]]
        now = time.time()
        df["state"] = [
            run_state(s, h, hostname=hn, pid=p, now=now)
            for s, h, hn, p in zip(df["status"], df["heartbeat_at"], df["hostname"], df["pid"], strict=True)
        ]
        return df

    def run(self, ref: str | int | None = "latest") -> dict[str, Any]:
        """One run by id, name (the newest of that name) or ``"latest"``."""
        runs = self.runs()
        if runs.empty:
            raise UnknownRun(f"{self.path} holds no runs yet")
        if ref is None or ref == "latest":
            match = runs.head(1)
        else:
            text = str(ref)
            match = runs[runs["name"] == text].head(1)
            if match.empty and text.isdigit():
                match = runs[runs["id"] == int(text)]
        if match.empty:
            names = ", ".join(runs["name"].head(5))
            raise UnknownRun(f"no run {ref!r} in {self.path} (newest runs: {names})")
        return {key: _plain(value) for key, value in match.iloc[0].to_dict().items()}

    def sound_run(self, ref: str | int | None = "latest") -> dict[str, Any]:
        """``run(ref)``, or DamagedRun with its one line when the run holds a value no stallwatch writes."""
        info = self.run(ref)
        if info.get("damage"):
            raise DamagedRun(f"{self.path}: {info['damage']}")
        return info

    def run_totals(self) -> pd.DataFrame:
        """Per run: batches, summed wait and step time, first and last batch time; folded batches included."""
        rows = (
            "SELECT run_id, COUNT(*) AS batches, SUM(wait_s) AS wait_s, SUM(step_s) AS step_s,"
            " MIN(ts) AS first_ts, MAX(ts) AS last_ts FROM batches GROUP BY run_id"
        )
        if not self.scalar("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'batch_rollups'"):
            return checked.numbers_only(self.frame(rows, unchecked=True))
        folded = (  # rows past a run's window, folded (NOTE [ Rollups ] in collector/store/fold.py)
            "SELECT run_id, SUM(batches) AS batches, TOTAL(wait_s) AS wait_s, TOTAL(step_s) AS step_s,"
            " MIN(end_ts) AS first_ts, MAX(end_ts) AS last_ts FROM batch_rollups GROUP BY run_id"
        )
        return checked.numbers_only(
            self.frame(
                "SELECT run_id, SUM(batches) AS batches, SUM(wait_s) AS wait_s, SUM(step_s) AS step_s,"
                f" MIN(first_ts) AS first_ts, MAX(last_ts) AS last_ts FROM ({rows} UNION ALL {folded})"
                " GROUP BY run_id",
                unchecked=True,
            )
        )

    # -- per-run tables -----------------------------------------------------

    def batches(self, run_id: int, since_ts: float | None = None) -> pd.DataFrame:
        """Batches in time order, each joined with its worker's fetch timing."""
        where, params = _since("b", run_id, since_ts)
        return self.frame(f"SELECT {BATCH_COLUMNS} {BATCH_JOIN} {where} ORDER BY b.ts", params)

    def epochs(self, run_id: int) -> pd.DataFrame:
        df = self.frame("SELECT * FROM epochs WHERE run_id = ? ORDER BY epoch", (run_id,))
        df["worker_pids"] = [checked.pid_list(v) for v in df["worker_pids"]]
        checked.json_objects(df.get("setting", ()), "epochs.setting")  # decoded by tuned.py
        if len(df) and not df["batches"].dropna().between(0, checked.MAX_EPOCH_BATCHES).all():
            raise DamagedRun(f"epochs.batches holds a count past {checked.MAX_EPOCH_BATCHES} (or below 0)")
        for column in ("end_wait_s", "collector_s"):  # an older file: NOTE [ Schema versions ]
            if column not in df:
                df[column] = np.nan
        return df

    def worker_exits(self, run_id: int) -> pd.DataFrame:
        """Each worker's whole-life CPU and run-queue wait (NOTE [ Worker totals ]); empty for older files."""
        columns = ["worker_pid", "worker_id", "started_at", "ended_at", "cpu_s", "runq_s"]
        if not self.scalar("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'worker_exits'"):
            return pd.DataFrame(columns=columns, dtype=float)  # a file from before schema 3
        return self.frame(
            f"SELECT {', '.join(columns)} FROM worker_exits WHERE run_id = ? ORDER BY started_at", (run_id,)
        )

    def worker_stages(self, run_id: int) -> pd.DataFrame:
        """Each worker's time by stage (NOTE [ Worker stages ]); empty for a file from before schema 7."""
        if not self.scalar("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'worker_stages'"):
            return pd.DataFrame(columns=list(STAGE_COLUMNS))
        return self.frame(STAGES_SELECT, (run_id,))

    def trials(self, run_id: int) -> pd.DataFrame:
        """A tuned run's trials (NOTE [ Live tuning ]); empty for an untuned run or a file from before schema 6."""
        columns = ["run_id", *TRIAL_COLUMNS]
        if not self.scalar("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'trials'"):
            return pd.DataFrame(columns=columns)
        df = self.frame("SELECT * FROM trials WHERE run_id = ? ORDER BY epoch, start_idx", (run_id,))
        checked.json_objects([*df["setting"], *df["baseline"]], "trials.setting", required=True)
        return df

    def worker_fetches(self, run_id: int, since_ts: float | None = None) -> pd.DataFrame:
        where, params = _since("f", run_id, since_ts, ts_column="started_at")
        return self.frame(f"SELECT * FROM worker_fetches f {where} ORDER BY f.started_at", params)

    def gpu_samples(self, run_id: int, since_ts: float | None = None) -> pd.DataFrame:
        where, params = _since("g", run_id, since_ts)
        return self.frame(f"SELECT * FROM gpu_samples g {where} ORDER BY g.ts", params)

    def host_samples(self, run_id: int, since_ts: float | None = None) -> pd.DataFrame:
        where, params = _since("h", run_id, since_ts)
        df = self.frame(f"SELECT * FROM host_samples h {where} ORDER BY h.ts", params)
        df["per_core_pct"] = [checked.number_list(v, "per_core_pct") for v in df["per_core_pct"]]
        return df

    def proc_samples(self, run_id: int, since_ts: float | None = None) -> pd.DataFrame:
        where, params = _since("p", run_id, since_ts)
        df = self.frame(f"SELECT * FROM proc_samples p {where} ORDER BY p.ts", params)
        for column in ("cpu_s", "runq_s", "threads"):  # an older file: NOTE [ Schema versions ]
            if column not in df:
                df[column] = np.nan
        return df


def _since(alias: str, run_id: int, since_ts: float | None, ts_column: str = "ts") -> tuple[str, tuple[Any, ...]]:
    if since_ts is None:
        return f"WHERE {alias}.run_id = ?", (run_id,)
    return f"WHERE {alias}.run_id = ? AND {alias}.{ts_column} >= ?", (run_id, since_ts)


def _plain(value: Any) -> Any:
    """numpy scalars and NaN to plain Python values (None for missing)."""
    if isinstance(value, (dict, list, str)) or value is None:
        return value
    if pd.isna(value):
        return None
    return value.item() if hasattr(value, "item") else value

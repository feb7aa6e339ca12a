"""What a reader accepts from a file: every value's type and range checked, every query under a time limit."""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from collector.errors import DamagedRun, QueryTooSlow

# NOTE [ Values from a file ]
# A stallwatch file travels (other nodes write it, anyone can edit it), so a
# reader takes nothing in it on trust. Every connection a reader opens
# (Reader.connect: the report, the dashboard, compare, the job view, the
# exporter) goes through this module:
# - each frame a query returns passes ``checked_frame`` (numeric columns as
#   arrays), each row read straight off a connection (the exporter's)
#   ``checked_row``: a column that holds a number (every column but those in
#   TEXT_COLUMNS) must hold an integer or a finite float of magnitude below
#   MAX_MAGNITUDE, or NULL; a text column text or NULL. Anything else raises DamagedRun naming the column and the
#   value, and the caller that reads one run names the run (load_run,
#   load_run_view, the exporter), so a damaged run is that run's error;
# - the runs rows, read for every run at once, are checked row by row
#   (``run_damage``): a bad value is set to NULL and the run carries one line
#   saying which value, so listing runs always works and only that run
#   refuses to be diagnosed;
# - values that size an allocation or a loop (world_size, rank, num_workers,
#   prefetch_factor, an epoch's batches) have ranges no real job exceeds;
# - every query runs under QUERY_LIMIT_S (SQLite's progress handler), and
#   our tables must be tables, never views, so no file can keep a reader busy.
QUERY_LIMIT_S = 30.0  # one query's wall time; the exporter's whole refresh of a file under one limit too
PROGRESS_EVERY = 10_000  # SQLite virtual machine steps between two looks at the clock
MAX_MAGNITUDE = 1e18  # past any count, byte total or timestamp a run stores; below 2**63
MAX_TIMESTAMP = 1e11  # Unix seconds: the year 5138
MAX_WORLD_SIZE = 1 << 17  # ranks in one job (the largest jobs run about 100,000 GPUs)
MAX_WORKERS = 1024  # DataLoader workers of one rank
MAX_PREFETCH = 1 << 12  # prefetch_factor
MAX_EPOCH_BATCHES = 1 << 24  # batches in one epoch (the model plays an epoch batch by batch)
MAX_COUNT = 1 << 53  # counters: dropped records, errors
STATUSES = ("running", "completed", "crashed", "interrupted")
TEXT_COLUMNS = frozenset(
    (  # columns (and aliases) that hold text; every other column holds a number
        "name",
        "status",
        "error",
        "hostname",
        "command",
        "tags",
        "config",
        "host",
        "versions",
        "warnings",
        "job_id",
        "stage",
        "first_error",
        "last_error",
        "worker_pids",
        "per_core_pct",
        "role",
        "setting",
        "baseline",
        "why",
        "key",
        "value",
        "type",
        "sql",
        "tbl_name",
        "dflt_value",
        "state",
    )
)

# runs columns: (kind, low, high); kinds: int, time, text; NULL is read as "not known" everywhere but id
RUN_COLUMNS: dict[str, tuple[str, float, float]] = {
    "started_at": ("time", 0.0, MAX_TIMESTAMP),
    "ended_at": ("time", 0.0, MAX_TIMESTAMP),
    "heartbeat_at": ("time", 0.0, MAX_TIMESTAMP),
    "pid": ("int", 0, 1 << 31),
    "rank": ("int", 0, MAX_WORLD_SIZE - 1),
    "world_size": ("int", 1, MAX_WORLD_SIZE),
    "dropped_records": ("int", 0, MAX_COUNT),
    "dropped_samples": ("int", 0, MAX_COUNT),
    "error_count": ("int", 0, MAX_COUNT),
    "exit_code": ("int", -(1 << 31), 1 << 31),
    "torch_threads": ("int", 1, 1 << 16),
    "interop_threads": ("int", 1, 1 << 16),
}
RUN_TEXT = ("name", "hostname", "command", "job_id", "stage", "error", "first_error", "last_error")
# config keys that size a loop or an allocation: (low, high)
HOST_RANGES: dict[str, tuple[int, int]] = {  # host facts the model counts cores and memory with
    "logical_cores": (1, 1 << 16),
    "physical_cores": (1, 1 << 16),
    "usable_cores": (1, 1 << 16),
    "ram_bytes": (0, 1 << 60),
}
CONFIG_RANGES: dict[str, tuple[int, int]] = {
    "num_workers": (0, MAX_WORKERS),
    "prefetch_factor": (0, MAX_PREFETCH),
    "batch_size": (0, 1 << 31),
    "batches_per_epoch": (0, MAX_EPOCH_BATCHES),
    "dataset_len": (0, MAX_COUNT),
}


def checked_row(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> tuple[Any, ...]:
    """The row factory of every reader's connection: the row as it is, or DamagedRun for a value no writer stores."""
    for (column, *_), value in zip(cursor.description, row, strict=True):
        if value is None:
            continue
        if column in TEXT_COLUMNS:
            if not isinstance(value, str):
                raise DamagedRun(f"{column} holds {_shown(value)}, not text")
        elif not is_number(value):
            raise DamagedRun(f"{column} holds {_shown(value)}, not a number")
    return row


def checked_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``checked_row`` over a whole frame at once: numeric columns are checked as arrays, others value by value."""
    for column in df.columns:
        values = df[column]
        kind = values.dtype.kind
        if kind in "iuf":  # numbers, NULL read as NaN
            array = values.to_numpy(dtype=float)
            bad = ~np.isnan(array) & ~(np.abs(array) < MAX_MAGNITUDE)
            if bad.any():
                raise DamagedRun(f"{column} holds {_shown(array[bad][0])}, not a number")
            if column in TEXT_COLUMNS and (~np.isnan(array)).any():
                raise DamagedRun(f"{column} holds {_shown(array[~np.isnan(array)][0])}, not text")
        else:  # text, or a column of mixed types (a damaged value among numbers)
            text = column in TEXT_COLUMNS
            for value in values:
                if (
                    value is None or value is pd.NA or (type(value) is float and value != value)
                ):  # NULL, as pandas reads it
                    continue
                if not (isinstance(value, str) if text else is_number(value)):
                    raise DamagedRun(f"{column} holds {_shown(value)}, not {'text' if text else 'a number'}")
    return df


def is_number(value: object) -> bool:
    """An int or a finite float within MAX_MAGNITUDE (bool and text are not numbers here)."""
    if type(value) is int or type(value) is float:
        return math.isfinite(value) and abs(value) < MAX_MAGNITUDE
    return False


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def in_range(value: object, low: float, high: float) -> bool:
    return is_number(value) and low <= value <= high  # type: ignore[operator]


def run_damage(row: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """(one line naming the run's first bad value or None, the row with each bad value set to NULL)."""
    fixed = dict(row)
    problems: list[str] = []
    status = row.get("status")
    if status not in STATUSES:
        problems.append(f"status is {_shown(status)}, not one of {', '.join(STATUSES)}")
        fixed["status"] = "stopped" if status is None or isinstance(status, str) else None
    for column, (kind, low, high) in RUN_COLUMNS.items():
        value = row.get(column)
        if value is None:
            continue
        if kind == "int" and not (type(value) is int and low <= value <= high):
            problems.append(f"{column} is {_shown(value)}, not an integer from {low:g} to {high:g}")
            fixed[column] = None
        elif kind == "time" and not in_range(value, low, high):
            problems.append(f"{column} is {_shown(value)}, not a Unix time")
            fixed[column] = None
    if row.get("started_at") is None and "started_at" in row:
        problems.append("started_at is missing")
    for column in RUN_TEXT:
        if column in row and row[column] is not None and not isinstance(row[column], str):
            problems.append(f"{column} is {_shown(row[column])}, not text")
            fixed[column] = None
    for column, ranges in (("config", CONFIG_RANGES), ("host", HOST_RANGES)):
        if isinstance(row.get(column), str):
            problems += json_damage(row[column], column, ranges)
    rank, size = fixed.get("rank"), fixed.get("world_size")
    if rank is not None and size is not None and rank >= size:
        problems.append(f"rank {rank} is not below world_size {size}")
        fixed["rank"] = None
    if not problems:
        return None, fixed
    name = row.get("name") if isinstance(row.get("name"), str) else "?"
    return f"run {name!r} (id {row.get('id')}): {'; '.join(problems)}", fixed


def json_damage(text: str, column: str, ranges: dict[str, tuple[int, int]]) -> list[str]:
    """What is wrong with a run's config or host JSON: a count outside what any machine or DataLoader has."""
    try:
        decoded = json.loads(text)
    except ValueError:
        return []  # unreadable JSON reads as {"unreadable": text}: nothing in it sizes anything
    if not isinstance(decoded, dict):
        return [f"{column} is {_shown(decoded)}, not an object"]
    problems = []
    for key, (low, high) in ranges.items():
        value = decoded.get(key)
        if value is not None and not (type(value) is int and low <= value <= high):
            problems.append(f"{column} {key} is {_shown(value)}, not an integer from {low} to {high}")
    if column == "host" and not isinstance(decoded.get("gpus", []), list):
        problems.append(f"host gpus is {_shown(decoded['gpus'])}, not a list")
    return problems


def deadline(conn: sqlite3.Connection, limit_s: float, clock: Callable[[], float] = time.monotonic) -> None:
    """Interrupt any statement on ``conn`` that runs past ``limit_s`` from now (see NOTE [ Values from a file ])."""
    end = clock() + limit_s
    conn.set_progress_handler(lambda: 1 if clock() > end else 0, PROGRESS_EVERY)


def too_slow(path: str, limit_s: float) -> QueryTooSlow:
    return QueryTooSlow(
        f"{path}: a query ran past {limit_s:g} s and was stopped: the file is damaged or edited "
        "(a table replaced by something endless), or far larger than stallwatch writes"
    )


def numbers_only(df: pd.DataFrame) -> pd.DataFrame:
    """Every run's totals at once: a value no stallwatch writes reads NaN (that run's own reads name it)."""
    df = df[[type(v) is int for v in df["run_id"]]] if len(df) else df
    for column in df.columns:
        df[column] = [v if is_number(v) else np.nan for v in df[column]]
    return df.reset_index(drop=True)


def number_list(text: str | None, column: str) -> list[float]:
    """A JSON list of numbers (per_core_pct), or DamagedRun."""
    if text is None or text != text or text == "":  # NULL (pandas reads it NaN beside text)
        return []
    try:
        values = json.loads(text)
    except ValueError:
        raise DamagedRun(f"{column} holds {_shown(text)}, not a JSON list") from None
    if not isinstance(values, list) or len(values) > 1 << 16 or not all(is_number(v) for v in values):
        raise DamagedRun(f"{column} holds {_shown(text)}, not a list of numbers")
    return values


def pid_list(text: str | None) -> list[int]:
    """epochs.worker_pids: a JSON list of integers (at most MAX_WORKERS), or DamagedRun."""
    values = number_list(text, "worker_pids")
    if len(values) > MAX_WORKERS or not all(type(v) is int for v in values):
        raise DamagedRun(f"worker_pids holds {_shown(text)}, not a list of process ids")
    return [int(v) for v in values]


def json_object(text: object, column: str) -> dict[str, Any] | None:
    """A JSON object column (epochs.setting, trials.setting): the object, None for NULL, else DamagedRun."""
    if text is None:
        return None
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise DamagedRun(f"{column} holds {_shown(text)}, not a JSON object")
    return value


def json_objects(values: Any, column: str, *, required: bool = False) -> None:
    """DamagedRun unless each value is a JSON object (or NULL, where not ``required``)."""
    for value in values:
        if json_object(value, column) is None and required:
            raise DamagedRun(f"{column} is missing")


def json_value(value: Any, empty: Any) -> Any:
    """A JSON column's value; a damaged one reads as empty, its text kept under "unreadable"."""
    if not isinstance(value, str) or not value:
        return empty
    try:
        decoded = json.loads(value)
    except ValueError:
        decoded = None
    if type(decoded) is not type(empty):  # damaged: NOTE [ Values from a file ]
        return [f"unreadable: {value}"] if isinstance(empty, list) else {"unreadable": value}
    return decoded

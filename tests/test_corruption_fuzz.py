"""Hundreds of single-value corruptions of a real recorded file: every reader reads or names the run, in bounds.

Each case changes one value of the first run ('demo-starved') of a file the
collector recorded (a type swap, NULL, NaN, an infinity, a huge or negative
number, a blob, a deleted row), then runs the report, the dashboard's run
view and runs table, and the exporter. Each either reads or fails with a
StallwatchError (one line), within a time and memory bound, and the second
run reads as it did. The cases are drawn from a fixed seed, so a failure
names its case and reproduces.
"""

from __future__ import annotations

import random
import resource
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from helpers import _copy

from app.data import load_run_view, load_runs_table
from collector.diagnosis import diagnose
from collector.errors import StallwatchError
from collector.export.sources import Exporter
from collector.store.reader import Reader

CASES = 240
SEED = 46
CASE_LIMIT_S = 20.0  # one case, every reader: far past the ~0.3 s a case takes, short of a hang
MEMORY_LIMIT_BYTES = 1 << 30  # growth of the test process's peak over all cases: no allocation sized by a value
LATER = 1.9e9
VALUES = {
    "text": "'x'",
    "null": "NULL",
    "nan": "(0.0 / 0.0)",  # SQLite stores NaN as NULL
    "+inf": "1e999",
    "-inf": "-1e999",
    "huge": "9223372036854775807",
    "large": "1000000000000000",  # below the magnitude any value may have: ranges and bounds hold it
    "negative": "-1",
    "blob": "x'00ff'",
    "fraction": "0.5",
}
TABLES = ("runs", "epochs", "batches", "worker_fetches", "host_samples", "proc_samples", "gpu_samples", "trials")


def cells(path: str) -> list[tuple[str, str, int]]:
    """(table, column, rowid) of every value of run 1 a case may change."""
    conn = sqlite3.connect(path)
    out = []
    for table in TABLES:
        key = "id" if table == "runs" else "run_id"
        columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
        try:
            rowids = [row[0] for row in conn.execute(f"SELECT rowid FROM {table} WHERE {key} = 1")]
        except sqlite3.OperationalError:  # a WITHOUT ROWID table (trials): left out
            continue
        out += [(table, column, rowid) for column in columns for rowid in rowids]
    conn.close()
    return out


def cases(path: str) -> list[tuple[str, str, int, str]]:
    rng = random.Random(SEED)
    every = cells(path)
    return [(*rng.choice(every), rng.choice([*VALUES, "deleted row"])) for _ in range(CASES)]


def corrupt(path: str, table: str, column: str, rowid: int, kind: str) -> bool:
    """Apply one case; False where SQLite itself refuses it (a NOT NULL or type constraint)."""
    conn = sqlite3.connect(path)
    try:
        if kind == "deleted row":
            conn.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))
        else:
            conn.execute(f"UPDATE {table} SET {column} = {VALUES[kind]} WHERE rowid = ?", (rowid,))
        conn.commit()
        return True
    except sqlite3.IntegrityError:
        return False
    finally:
        conn.close()


def read_or_name(problems: list[str], reader: str, call) -> None:
    try:
        call()
    except StallwatchError as exc:
        if "\n" in str(exc):
            problems.append(f"{reader}: a message of several lines: {exc}")
    except Exception as exc:  # what the fuzz is for: any other error is a finding
        problems.append(f"{reader}: {type(exc).__name__}: {exc}")


def exported(path: str) -> dict[str, tuple[int, float]]:
    refresh = Exporter([path], clock=lambda: LATER, grace_s=LATER, report=lambda _: None).refresh()
    return {s.labels.run: (s.batches, s.wait_s) for s in refresh.runs}


@pytest.mark.slow
def test_every_reader_reads_or_names_the_damaged_run_and_the_other_run_reads_as_before(recorded_db, tmp_path: Path):
    base = str(tmp_path / "base.sqlite")
    _copy(recorded_db, base)
    report_2 = diagnose(base, 2).summary
    listed_2 = load_runs_table(Reader(base)).set_index("id").loc[2, ["name", "batches", "wait_fraction"]].tolist()
    exported_2 = exported(base)["demo-healthy"]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    findings, applied = [], 0
    path = str(tmp_path / "case.sqlite")
    for n, (table, column, rowid, kind) in enumerate(cases(base)):
        shutil.copyfile(base, path)
        if not corrupt(path, table, column, rowid, kind):
            continue
        applied += 1
        started, problems = time.monotonic(), []
        read_or_name(problems, "report", lambda: diagnose(path, 1))
        read_or_name(problems, "run view", lambda: load_run_view(Reader(path), 1, None))
        try:
            listed = load_runs_table(Reader(path)).set_index("id")
            if listed.loc[2, ["name", "batches", "wait_fraction"]].tolist() != listed_2:
                problems.append("the runs table changed run 2")
            if exported(path).get("demo-healthy") != exported_2:
                problems.append("the exporter changed or lost run 2")
            if n % 20 == 0 and diagnose(path, 2).summary != report_2:
                problems.append("run 2's report changed")
        except Exception as exc:  # the other run must read, whatever run 1 holds
            problems.append(f"run 2: {type(exc).__name__}: {exc}")
        if time.monotonic() - started > CASE_LIMIT_S:
            problems.append(f"took {time.monotonic() - started:.1f} s")
        findings += [f"{table}.{column} (row {rowid}) {kind}: {p}" for p in problems]
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak
    assert applied > CASES * 3 // 4
    assert not findings, "\n".join(findings[:20])
    assert grown < MEMORY_LIMIT_BYTES

"""Schema versions: an older file is read as it is and brought up to date by the next writer."""

from __future__ import annotations

import sqlite3

import pandas as pd
import pytest

from collector.store.connection import Store
from collector.store.export_queries import epoch_starts
from collector.store.reader import Reader
from collector.store.rollup_schema import ROLLUP_TABLES
from collector.store.schema import MIGRATIONS, RUN_DEFAULTS, SCHEMA_VERSION

RUN = dict(config={}, host={}, versions={}, hostname="h", pid=1, command="train.py", rank=None, world_size=None)


# what schema 3 added outside the runs table: (table, column), and a new table
V3_COLUMNS = [
    ("epochs", "end_wait_s"),
    ("batches", "load_runq_s"),
    ("worker_fetches", "runq_s"),
    ("proc_samples", "cpu_s"),
    ("proc_samples", "runq_s"),
    ("proc_samples", "threads"),
]
V4_COLUMNS = [("epochs", "collector_s")]  # the collector's own time in an epoch's start
V6_COLUMNS = [("epochs", "setting")]  # live tuning
LATER_COLUMNS = {3: V3_COLUMNS, 4: V4_COLUMNS, 6: V6_COLUMNS}


def make_old_file(path: str, version: int) -> None:
    """A file as stallwatch ``version`` (1 to 4) wrote it: this schema less what later versions added."""
    store = Store(path)
    store.create_run("old", **RUN)
    store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    dropped = [
        s.split()[5] for v in range(version + 1, SCHEMA_VERSION + 1) for s in MIGRATIONS[v] if "runs" in s.split()[:3]
    ]
    for column in dropped:
        conn.execute(f"ALTER TABLE runs DROP COLUMN {column}")
    for v in range(version + 1, SCHEMA_VERSION + 1):
        for table, column in LATER_COLUMNS.get(v, []):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    if version < 3:
        conn.execute("DROP TABLE worker_exits")
    if version < 5:
        for table in ROLLUP_TABLES:
            conn.execute(f"DROP TABLE {table}")
    if version < 6:
        conn.execute("DROP TABLE trials")
    if version < 7:
        conn.execute("DROP TABLE worker_stages")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
    conn.close()


def make_version_1_file(path: str) -> None:
    make_old_file(path, 1)


def schema_version(path: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])


def test_every_column_added_since_version_1_has_a_default_for_readers():
    added = {s.split()[5] for v in (2, 3, 4, 5, 6, 7) for s in MIGRATIONS[v] if s.startswith("ALTER TABLE runs")}
    assert added == set(RUN_DEFAULTS) and SCHEMA_VERSION == 7
    for version, columns in LATER_COLUMNS.items():
        other = {(s.split()[2], s.split()[5]) for s in MIGRATIONS[version] if s.startswith("ALTER") and "runs" not in s}
        assert other == set(columns)


def test_a_version_2_file_reads_without_the_time_split_and_is_migrated_by_the_next_writer(db_path):
    make_old_file(db_path, 2)
    reader = Reader(db_path)
    run_id = int(reader.runs().loc[0, "id"])
    assert reader.worker_exits(run_id).empty
    assert "end_wait_s" in reader.epochs(run_id) and "runq_s" in reader.proc_samples(run_id)
    assert reader.runs().loc[0, "torch_threads"] is None and schema_version(db_path) == 2
    store = Store(db_path)
    store.create_run("new", **RUN)
    store.close()
    assert schema_version(db_path) == SCHEMA_VERSION
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM worker_exits").fetchone() == (0,)
        columns = {row[1] for row in conn.execute("PRAGMA table_info(proc_samples)")}
    assert {"cpu_s", "runq_s", "threads"} <= columns


def test_a_version_6_file_reads_without_stages_and_gains_their_table_from_the_next_writer(db_path):
    make_old_file(db_path, 6)
    reader = Reader(db_path)
    run_id = int(reader.runs().loc[0, "id"])
    assert reader.worker_stages(run_id).empty and schema_version(db_path) == 6
    store = Store(db_path)
    store.create_run("new", **RUN)
    store.close()
    assert schema_version(db_path) == SCHEMA_VERSION == 7
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM worker_stages").fetchone() == (0,)


def test_a_version_1_file_reads_with_defaults_and_is_left_unchanged(db_path):
    make_version_1_file(db_path)
    runs = Reader(db_path).runs()
    assert runs.loc[0, "name"] == "old" and runs.loc[0, "error_count"] == 0 and runs.loc[0, "job_id"] is None
    assert schema_version(db_path) == 1


def test_the_next_writer_migrates_a_version_1_file_and_keeps_its_runs(db_path):
    make_version_1_file(db_path)
    store = Store(db_path)
    new_id = store.create_run("new", **RUN, job_id="job-7", stage="train")
    store.close()
    assert schema_version(db_path) == SCHEMA_VERSION
    runs = Reader(db_path).runs().set_index("name")
    assert pd.isna(runs.loc["old", "job_id"]) and runs.loc["new", "job_id"] == "job-7"
    assert runs.loc["new", "stage"] == "train" and int(runs.loc["new", "id"]) == new_id


def test_a_version_3_file_reads_without_the_collectors_own_time_and_is_migrated_by_the_next_writer(db_path):
    make_old_file(db_path, 3)
    run_id = int(Reader(db_path).runs().loc[0, "id"])
    with sqlite3.connect(db_path) as conn:  # an epoch as stallwatch 3 wrote it
        conn.execute(
            "INSERT INTO epochs (run_id, epoch, started_at, first_batch_s) VALUES (?, 0, 1.0, 0.25)", (run_id,)
        )
    epochs = Reader(db_path).epochs(run_id)
    assert epochs.loc[0, "first_batch_s"] == 0.25 and pd.isna(epochs.loc[0, "collector_s"])
    with sqlite3.connect(db_path) as conn:
        assert epoch_starts(conn, run_id, 0) == {0: (1.0, 0.25)}
    assert schema_version(db_path) == 3
    Store(db_path).close()
    assert schema_version(db_path) == SCHEMA_VERSION
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT first_batch_s, collector_s FROM epochs").fetchall() == [(0.25, None)]
        conn.execute("UPDATE epochs SET collector_s = 0.05")
        assert epoch_starts(conn, run_id, 0) == {0: (1.0, pytest.approx(0.20))}

"""Schema versions: an older file is read as it is and brought up to date by the next writer."""

from __future__ import annotations

import sqlite3

import pandas as pd

from collector.store.connection import Store
from collector.store.reader import Reader
from collector.store.schema import MIGRATIONS, RUN_DEFAULTS, SCHEMA_VERSION

RUN = dict(config={}, host={}, versions={}, hostname="h", pid=1, command="train.py", rank=None, world_size=None)


def make_version_1_file(path: str) -> None:
    store = Store(path)
    store.create_run("old", **RUN)
    store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    for column in RUN_DEFAULTS:
        conn.execute(f"ALTER TABLE runs DROP COLUMN {column}")
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    conn.close()


def schema_version(path: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])


def test_every_column_added_since_version_1_has_a_default_for_readers():
    added = {statement.split()[5] for statement in MIGRATIONS[2]}
    assert added == set(RUN_DEFAULTS) and SCHEMA_VERSION == 2


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

"""stallwatch merge: several nodes' files into one, every run kept with its host, job and rank, nothing twice."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from export_fixtures import T0, bad_file, start_run
from helpers import query
from test_schema import make_version_1_file

import collector
from collector.cli import main
from collector.store.connection import Store
from collector.store.merge import merge_files

TABLES = ("runs", "epochs", "batches", "worker_fetches", "gpu_samples", "host_samples", "proc_samples", "worker_stages")


def node_file(directory: Path, node: str, ranks: range, *, batches: int = 40) -> str:
    """One node's file: a rank per process, all of job 'job-1', every run named 'train'."""
    path = str(directory / f"{node}.sqlite")
    store = Store(path)
    for rank in ranks:
        run = start_run(store, "train", rank=rank, job_id="job-1", hostname=node, pid=100 + rank, started_at=T0 + rank)
        run.add([0.002 * (rank + 1)] * batches).gpu([40.0 + rank] * 5).stages({"collate": (0.5, 0.25)}).end(run.ts + 1)
    store.close()
    return path


def counts(path: str) -> dict[str, int]:
    return {table: query(path, f"SELECT COUNT(*) FROM {table}")[0][0] for table in TABLES}


def per_run(path: str) -> dict[tuple, tuple]:
    """identity and labels -> (batches, summed wait, fetches, GPU samples), through the run's own id."""
    rows = query(
        path,
        "SELECT r.hostname, r.pid, r.started_at, r.name, r.rank, r.job_id,"
        " (SELECT COUNT(*) FROM batches b WHERE b.run_id = r.id), (SELECT ROUND(SUM(wait_s), 9) FROM batches b"
        " WHERE b.run_id = r.id), (SELECT COUNT(*) FROM worker_fetches f WHERE f.run_id = r.id),"
        " (SELECT COUNT(*) FROM gpu_samples g WHERE g.run_id = r.id) FROM runs r",
    )
    return {row[:6]: row[6:] for row in rows}


def test_merging_two_nodes_keeps_every_run_with_its_host_job_and_rank_and_every_row(tmp_path):
    a, b = node_file(tmp_path, "node-a", range(0, 2)), node_file(tmp_path, "node-b", range(2, 4))
    out = str(tmp_path / "job.sqlite")
    merge_files(out, [a, b])
    expected = {t: counts(a)[t] + counts(b)[t] for t in TABLES}
    assert counts(out) == expected
    assert per_run(out) == {**per_run(a), **per_run(b)}
    assert sorted(query(out, "SELECT id FROM runs")) == [(1,), (2,), (3,), (4,)]  # node-b's ids 1, 2 became 3, 4
    assert {r[0] for r in query(out, "SELECT run_id FROM batches")} == {1, 2, 3, 4}


def test_merging_the_same_file_twice_adds_nothing(tmp_path):
    a = node_file(tmp_path, "node-a", range(2))
    out = str(tmp_path / "job.sqlite")
    merge_files(out, [a])
    once = counts(out)
    (result,) = merge_files(out, [a])
    assert counts(out) == once and (result.new_runs, result.batches, result.rows) == (0, 0, 0)
    merge_files(out, [a, a])
    assert counts(out) == once


def test_merging_a_file_again_after_its_run_went_on_adds_only_what_is_new(tmp_path):
    path = str(tmp_path / "live.sqlite")
    store = Store(path)
    run = start_run(store, rank=0).add([0.01] * 30).gpu([50.0] * 3)
    out = str(tmp_path / "job.sqlite")
    merge_files(out, [path])
    assert query(out, "SELECT status FROM runs") == [("running",)]
    run.add([0.01] * 20).gpu([60.0] * 2).end(run.ts + 1)
    (result,) = merge_files(out, [path])
    assert result.batches == 20 and counts(out) == counts(path)
    assert query(out, "SELECT status, ended_at FROM runs") == query(path, "SELECT status, ended_at FROM runs")


def test_a_merged_job_reports_each_run_as_its_own_file_does(tmp_path):
    a, b = node_file(tmp_path, "node-a", range(1)), node_file(tmp_path, "node-b", range(1, 2))
    out = str(tmp_path / "job.sqlite")
    merge_files(out, [a, b])
    for source, merged_id in ((a, 1), (b, 2)):
        alone, merged = collector.diagnose(source, 1), collector.diagnose(out, merged_id)
        assert merged.summary == alone.summary and merged.verdict == alone.verdict
        assert {k: v for k, v in merged.run.items() if k != "id"} == {k: v for k, v in alone.run.items() if k != "id"}


def test_an_older_schema_input_merges_with_defaults(tmp_path):
    old = str(tmp_path / "old.sqlite")
    make_version_1_file(old)
    out = str(tmp_path / "job.sqlite")
    merge_files(out, [old])
    assert query(out, "SELECT name, job_id, error_count FROM runs") == [("old", None, 0)]


@pytest.mark.parametrize("kind", ["not-sqlite", "foreign", "missing"])
def test_a_bad_input_is_a_one_line_error_and_nothing_is_merged(tmp_path, kind, capsys):
    good = node_file(tmp_path, "node-a", range(1))
    bad = str(tmp_path / "missing.sqlite") if kind == "missing" else bad_file(kind, tmp_path)
    out = str(tmp_path / "job.sqlite")
    assert main(["merge", out, good, bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("stallwatch: ") and bad in err[0]
    assert not Path(out).exists() or counts(out)["runs"] == 0


def test_merging_the_output_into_itself_is_refused(tmp_path, capsys):
    a = node_file(tmp_path, "node-a", range(1))
    assert main(["merge", a, a]) == 2
    assert "output file itself" in capsys.readouterr().err


def test_the_merge_command_prints_what_each_input_added(tmp_path):
    a, b = node_file(tmp_path, "node-a", range(1), batches=25), node_file(tmp_path, "node-b", range(1, 3), batches=25)
    out = str(tmp_path / "job.sqlite")
    cmd = [sys.executable, "-m", "collector", "merge", out, a, b]
    lines = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout.splitlines()
    assert (
        lines[0] == f"{a}: 1 run(s), 1 new; 25 batches added (58 rows)"
    )  # run, epoch, 25 batches and fetches, 5 GPU samples
    assert lines[1].startswith(f"{b}: 2 run(s), 2 new; 50 batches added")
    assert lines[2].startswith(f"merged 2 file(s) into {out}: 75 batches added in ")

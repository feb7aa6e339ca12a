"""The demo records a real run, and the command line lists its subcommands."""

from __future__ import annotations

import subprocess
import sys

import pytest

from collector.cli.demo import run_demo
from collector.store.reader import Reader

pytestmark = pytest.mark.slow  # each test records a real demo run


def test_demo_starved_records_a_completed_run_that_waits_for_each_batch(db_path):
    run_id = run_demo(db_path, seconds=30.0, scenario="starved", max_batches=40)
    reader = Reader(db_path)
    run = reader.run(run_id)
    batches = reader.batches(run_id)
    assert run["status"] == "completed" and run["tags"] == {"demo": "starved"}
    assert len(batches) == 40
    assert batches.wait_s.median() >= 0.030  # 16 samples x 2 ms of "storage" per batch, in the loop's own process


def test_demo_healthy_barely_waits(db_path):
    run_id = run_demo(db_path, seconds=30.0, scenario="healthy", max_batches=120)
    batches = Reader(db_path).batches(run_id)
    steady = batches[batches.idx >= 10]
    assert steady.wait_s.sum() < 0.5 * steady.step_s.sum()
    assert batches.worker_id.notna().all()


def test_cli_help_lists_the_subcommands():
    out = subprocess.run([sys.executable, "-m", "collector", "--help"], capture_output=True, text=True, check=True)
    assert "demo" in out.stdout


def test_cli_demo_writes_the_named_file(tmp_path):
    db = tmp_path / "demo.sqlite"
    out = subprocess.run(
        [sys.executable, "-m", "collector", "demo", "--db", str(db), "--seconds", "1", "--scenario", "cpu"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "done: run 1" in out.stdout
    assert Reader(db).run("demo-cpu")["config"]["dataset"] == "ComputeDataset"


def test_cli_demo_rejects_a_bad_duration(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "collector", "demo", "--db", str(tmp_path / "x.sqlite"), "--seconds", "-3"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "must be > 0" in out.stderr

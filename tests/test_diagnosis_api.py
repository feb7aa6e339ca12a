"""``collector.diagnose``: the JSON contract, windows, and typed errors for bad input (nothing written)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from diagnosis_fixtures import Synthetic, file_state, foreign_sqlite, write_synthetic

import collector
from collector.diagnosis import RunInProgress
from collector.diagnosis.data import load_run
from collector.diagnosis.report_types import VERDICTS
from collector.diagnosis.stats import measure
from collector.errors import InsufficientData, NotAStallwatchFile, SchemaTooNew, StallwatchError, UnknownRun


def starved(n: int = 200, **kw: object) -> Synthetic:
    return Synthetic(wait_s=np.full(n, 0.030), step_s=0.010, main_cpu_pct=20.0, host_cpu_pct=10.0, **kw)  # type: ignore[arg-type]


def test_json_contract_has_every_documented_field(tmp_path: Path) -> None:
    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, starved(config={"batch_size": 64, "num_workers": 0, "pin_memory": False}))
    d = json.loads(json.dumps(collector.diagnose(path).to_dict()))
    assert set(d) >= {"run", "summary", "verdict", "symptoms", "suggestions"}
    assert d["run"]["id"] == 1 and d["run"]["name"] == "synthetic" and d["run"]["status"] == "completed"
    assert d["run"]["config"]["batch_size"] == 64 and d["run"]["host"]["usable_cores"] == 2
    s = d["summary"]
    for key in ("batches", "wall_s", "data_wait_fraction", "batches_per_s"):
        assert isinstance(s[key], int | float), key
    assert s["batches"] == 200
    assert s["data_wait_fraction"] == pytest.approx(0.75, abs=0.01)
    assert s["wait_s"]["p50"] == pytest.approx(0.030) and s["wait_s"]["p95"] == pytest.approx(0.030)
    assert s["step_s"]["p50"] == pytest.approx(0.010)
    assert s["gpu_util_pct"] is None  # no GPU sampled
    assert d["verdict"] in VERDICTS and d["verdict"] == "input-bound"
    sym = d["symptoms"][0]
    assert set(sym) >= {"id", "severity", "evidence", "confidence"}
    sug = d["suggestions"][0]
    assert set(sug) >= {"parameter", "current", "suggested", "reason", "expected_speedup"}
    assert sug["parameter"] == "num_workers" and sug["current"] == 0 and sug["expected_speedup"] > 1


def test_gpu_util_summary_when_sampled(tmp_path: Path) -> None:
    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, starved(gpu_util=lambda t: 30.0 + 60.0 * (int(t * 10) % 2)))
    util = collector.diagnose(path).summary["gpu_util_pct"]
    assert util["mean"] == pytest.approx(60.0, abs=3) and util["p5"] == 30.0 and util["p95"] == 90.0


@pytest.mark.parametrize(
    ("kwargs", "batches"),
    [({"last_batches": 50}, 50), ({"window_s": 1.0}, 25), ({}, 200)],
)
def test_a_recent_window_diagnoses_only_its_batches(tmp_path: Path, kwargs: dict[str, float], batches: int) -> None:
    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, starved())  # one batch every 40 ms
    report = collector.diagnose(path, **kwargs)
    assert report.summary["batches"] == pytest.approx(batches, abs=1)
    assert report.summary["window"] == (kwargs or None)


def test_run_by_name_id_and_latest(tmp_path: Path) -> None:
    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, starved(name="first"))
    write_synthetic(path, Synthetic(wait_s=np.full(100, 0.0001), step_s=0.01, name="second"))
    assert collector.diagnose(path).run["name"] == "second"
    assert collector.diagnose(path, run="first").verdict == "input-bound"
    assert collector.diagnose(path, run=1).run["name"] == "first"
    assert collector.diagnose(path, run="2").verdict == "not-input-bound"


def test_a_live_run_needs_live_true(tmp_path: Path) -> None:
    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, starved(status="running"))
    with pytest.raises(RunInProgress, match="still being recorded"):
        collector.diagnose(path)
    report = collector.diagnose(path, live=True, window_s=2.0)
    assert report.run["status"] == "running" and report.notes[0].startswith("live")


def test_a_running_epoch_is_no_epoch_of_fewer_batches(tmp_path: Path) -> None:
    """The model's epoch length counts the epochs that ended: the one running holds only its batches so far."""
    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, starved(n=170, epoch_len=50, status="running"))  # epochs of 50, 50, 50 and 20 so far
    conn = sqlite3.connect(path)
    conn.execute("UPDATE epochs SET ended_at = NULL WHERE epoch = (SELECT MAX(epoch) FROM epochs)")
    conn.commit()
    conn.close()
    facts = measure(load_run(path, live=True))
    assert facts.epochs == 4 and facts.batches == 170
    assert facts.epoch_batches == pytest.approx(50.0)  # 42.5 with the running epoch counted


def _newer_schema(path: str) -> None:
    write_synthetic(path, starved())
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()


def _not_sqlite(path: str) -> None:
    Path(path).write_bytes(b"this is not a database\n" * 100)


BAD_INPUT = {
    "not sqlite": (_not_sqlite, {}, NotAStallwatchFile),
    "another program's sqlite": (foreign_sqlite, {}, NotAStallwatchFile),
    "newer schema": (_newer_schema, {}, SchemaTooNew),
    "unknown run": (lambda p: write_synthetic(p, starved()), {"run": "nope"}, UnknownRun),
    "unknown run id": (lambda p: write_synthetic(p, starved()), {"run": 7}, UnknownRun),
    "still being written": (lambda p: write_synthetic(p, starved(status="running")), {}, RunInProgress),
    "zero batches": (lambda p: write_synthetic(p, starved(n=0)), {}, InsufficientData),
    "one batch": (lambda p: write_synthetic(p, starved(n=1)), {}, InsufficientData),
}


@pytest.mark.parametrize("case", list(BAD_INPUT), ids=list(BAD_INPUT))
def test_bad_input_raises_a_typed_error_and_writes_nothing(tmp_path: Path, case: str) -> None:
    make, kwargs, error = BAD_INPUT[case]
    path = str(tmp_path / "run.sqlite")
    make(path)
    before = file_state(path)
    with pytest.raises(error) as info:
        collector.diagnose(path, **kwargs)
    assert isinstance(info.value, StallwatchError)
    assert "\n" not in str(info.value)
    assert file_state(path) == before
    assert not Path(path + "-wal").exists() or Path(path + "-wal").stat().st_size == 0


def test_missing_file_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "missing.sqlite"
    with pytest.raises(NotAStallwatchFile):
        collector.diagnose(str(path))
    assert not path.exists()


def test_importing_collector_does_not_import_pandas() -> None:
    code = "import sys, collector; collector.diagnose; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_public_watch_and_diagnose_are_their_stages_own_and_import_neither_torch_nor_pandas() -> None:
    code = (
        "import sys, collector; watch, diagnose = collector.watch, collector.diagnose; "
        "print('torch' in sys.modules, 'pandas' in sys.modules); "
        "import collector.record.watch, collector.diagnosis; "
        "print(watch is collector.record.watch.watch, diagnose is collector.diagnosis.diagnose)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "True", "True"]

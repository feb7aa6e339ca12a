"""``python -m collector report``: text and JSON out, one line and exit 2 for anything wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from diagnosis_fixtures import Synthetic, file_state, foreign_sqlite, write_synthetic

from collector.cli import main


def starved(**kw: object) -> Synthetic:
    return Synthetic(wait_s=np.full(200, 0.030), step_s=0.010, main_cpu_pct=20.0, host_cpu_pct=10.0, **kw)  # type: ignore[arg-type]


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, starved(name="slow-one"))
    return path


def test_text_report_names_verdict_symptoms_and_the_line_to_paste(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", db]) == 0
    out = capsys.readouterr().out
    assert "run 1 'slow-one'" in out
    assert "verdict: INPUT-BOUND" in out
    assert "input_bound" in out and "io_bound_fetch" in out
    assert "num_workers: 0 -> " in out and "rule of thumb: 2" in out
    assert "paste: DataLoader(..., num_workers=" in out


def test_json_report_is_the_documented_contract(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", db, "--run", "slow-one", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["verdict"] == "input-bound" and d["run"]["name"] == "slow-one"
    assert d["summary"]["batches"] == 200
    assert {s["id"] for s in d["symptoms"]} == {"input_bound", "io_bound_fetch"}


def test_window_flags_reach_the_diagnosis(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", db, "--json", "--last-batches", "40"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["batches"] == 40


def _newer(path: str) -> None:
    import sqlite3

    write_synthetic(path, starved())
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '9' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()


BAD = {
    "not sqlite": (lambda p: Path(p).write_text("hello\n" * 50), [], "not a readable stallwatch file"),
    "another program's sqlite": (foreign_sqlite, [], "another program's SQLite database"),
    "newer schema": (_newer, [], "newer than this stallwatch"),
    "unknown run": (lambda p: write_synthetic(p, starved()), ["--run", "nope"], "no run 'nope'"),
    "still being written": (lambda p: write_synthetic(p, starved(status="running")), [], "still being recorded"),
    "one batch": (lambda p: write_synthetic(p, Synthetic(wait_s=[0.1], step_s=0.01)), [], "has 1 batch"),
    "bad window": (lambda p: write_synthetic(p, starved()), ["--window-s", "-3"], "must be > 0"),
    "bad batch count": (lambda p: write_synthetic(p, starved()), ["--last-batches", "x"], "integer >= 2"),
    "unknown flag": (lambda p: write_synthetic(p, starved()), ["--frobnicate"], "unrecognized arguments"),
}


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(args)
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_input_one_line_exit_2_nothing_written(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make, extra, message = BAD[case]
    path = str(tmp_path / "run.sqlite")
    make(path)
    before = file_state(path)
    code, out, err = run_cli(["report", path, *extra], capsys)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("stallwatch:") and message in lines[0]
    assert file_state(path) == before


@pytest.mark.parametrize("case", ["not sqlite", "unknown flag"])
@pytest.mark.slow
def test_as_a_process_no_traceback(tmp_path: Path, case: str) -> None:
    make, extra, message = BAD[case]
    path = str(tmp_path / "run.sqlite")
    make(path)
    result = subprocess.run(
        [sys.executable, "-m", "collector", "report", path, *extra], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0 and message in result.stderr


def test_missing_db_argument_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["report"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "required: db" in err[0]


def test_missing_file_is_an_error_and_is_not_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nope.sqlite"
    assert main(["report", str(path)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not path.exists()


def _program(path: str) -> None:
    """A training loader that waits a little over many batches, then an evaluation loader starved over 15."""
    write_synthetic(path, Synthetic(wait_s=np.full(300, 0.004), step_s=0.050, name="train"))
    evaluation = {"batch_size": 32, "num_workers": 0, "shuffle": False, "grad_enabled": False}
    write_synthetic(path, Synthetic(wait_s=np.full(15, 0.030), step_s=0.004, name="val", config=evaluation))


def test_report_without_run_gives_every_loader_the_costliest_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "program.sqlite")
    _program(path)
    assert main(["report", path, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [x["name"] for x in d["loaders"]] == ["train", "val"]  # 1.1 s of stalls against 0.4 s
    assert d["loaders"][1]["evaluation"] is True and d["loaders"][1]["verdict"] == "input-bound"
    assert d["run"]["name"] == "train"
    assert main(["report", path, "--run", "train", "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert {k: v for k, v in d.items() if k not in ("loaders", "notes")} == {
        k: v for k, v in alone.items() if k not in ("loaders", "notes")
    }
    assert main(["report", path]) == 0
    out = capsys.readouterr().out
    assert out.index("  train (run 1)") < out.index("  val (run 2, evaluation)")


def test_a_one_loader_file_reads_the_same_with_or_without_run(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", db, "--json"]) == 0
    program = json.loads(capsys.readouterr().out)
    assert main(["report", db, "--run", "latest", "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert [x["run_id"] for x in program.pop("loaders")] == [1] and alone.pop("loaders") == []
    assert program == alone


def test_another_programs_runs_are_not_in_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import sqlite3

    path = str(tmp_path / "two-programs.sqlite")
    _program(path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE runs SET pid = pid + 1 WHERE name = 'train'")  # an earlier program recorded it
    conn.commit()
    conn.close()
    assert main(["report", path, "--json"]) == 0
    assert [x["name"] for x in json.loads(capsys.readouterr().out)["loaders"]] == ["val"]


def test_a_run_without_a_process_id_is_its_own_program(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import sqlite3

    path = str(tmp_path / "no-pid.sqlite")
    _program(path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE runs SET pid = NULL")
    conn.commit()
    conn.close()
    assert main(["report", path, "--json"]) == 0
    assert [x["name"] for x in json.loads(capsys.readouterr().out)["loaders"]] == ["val"]

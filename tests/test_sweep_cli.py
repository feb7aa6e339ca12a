"""``python -m collector sweep``: the user's factory by path or module, one-line errors, the printed answer."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import query

import collector
from collector.cli import main

SCRIPTS = Path(__file__).parent / "scripts"
FACTORIES = SCRIPTS / "sweep_factories.py"


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert err.startswith("stallwatch: ")
    return err


def test_a_missing_file_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = one_line_error(capsys, ["sweep", str(tmp_path / "nope.py") + ":make_loader"])
    assert "no file" in err and "nope.py" in err


def test_a_missing_function_names_the_functions_there(capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(capsys, ["sweep", f"{FACTORIES}:make_loaderz"])
    assert "has no function 'make_loaderz'" in err and "make_capped" in err


def test_a_module_that_fails_to_import_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    broken = tmp_path / "broken_factory.py"
    broken.write_text("import not_a_real_module_xyz\n\ndef make_loader(**kw):\n    pass\n")
    err = one_line_error(capsys, ["sweep", f"{broken}:make_loader"])
    assert "ModuleNotFoundError" in err and "not_a_real_module_xyz" in err


def test_an_unknown_module_name_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(capsys, ["sweep", "no_such_package_abc.data:make_loader"])
    assert "no module named 'no_such_package_abc.data'" in err


def test_a_spec_without_a_function_says_how_to_write_one(capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(capsys, ["sweep", str(FACTORIES)])
    assert "FILE.py:FUNCTION" in err


def test_a_bad_grid_flag_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(capsys, ["sweep", f"{FACTORIES}:make_capped", "--workers", "0,two"])
    assert "--workers" in err


def test_the_process_exits_2_on_an_import_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "collector", "sweep", f"{tmp_path}/missing.py:make_loader", "--db", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "no file" in done.stderr
    assert "Traceback" not in done.stderr


def test_sweep_by_module_name_prints_a_table_and_the_winning_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(SCRIPTS))
    db = str(tmp_path / "s.sqlite")
    code = main(
        [
            *("sweep", "sweep_factories:make_capped", "--db", db, "--workers", "0,2", "--prefetch", "2"),
            *("--persistent-workers", "false", "--trial-s", "0.4", "--budget-s", "30"),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0
    assert "samples/s" in out and "vs best" in out
    assert "the cheapest setting within 5% of the fastest" in out
    assert "    DataLoader(..., num_workers=2, prefetch_factor=2, persistent_workers=False, pin_memory=False)" in out
    assert "trial 2: workers=2" in err  # the progress, on stderr
    assert len(query(db, "SELECT id FROM runs")) == 2


@pytest.mark.slow
def test_like_run_paces_the_sweep_at_a_recorded_runs_median_step(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "like.sqlite")
    watched = collector.watch(list(range(40)), db=db, run="recorded", gpu_hz=0, host_hz=0)
    for _ in watched:
        time.sleep(0.02)
    watched.close()
    code = main(
        [
            *("sweep", f"{FACTORIES}:make_capped", "--db", db, "--like-run", f"{db}:recorded", "--workers", "1"),
            *("--prefetch", "2", "--persistent-workers", "false", "--trial-s", "0.4"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "paced like run 'recorded'" in out
    assert "keeps this model fed" in out
    (tags,) = query(db, "SELECT tags FROM runs WHERE name != 'recorded'")[0]
    assert 0.018 <= json.loads(tags)["step_s"] <= 0.03


def test_like_run_with_an_unknown_run_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    db = str(tmp_path / "like.sqlite")
    watched = collector.watch([1, 2, 3], db=db, run="recorded", gpu_hz=0, host_hz=0)
    list(watched)
    watched.close()
    err = one_line_error(capsys, ["sweep", f"{FACTORIES}:make_capped", "--like-run", f"{db}:nope"])
    assert "no run 'nope'" in err


def test_like_run_accepts_run_names_with_colons(tmp_path: Path) -> None:
    from collector.cli.sweep import split_like_run

    db = tmp_path / "a.sqlite"
    db.write_bytes(b"")
    assert split_like_run(f"{db}:examples/train.py:42") == (str(db), "examples/train.py:42")
    assert split_like_run("missing.sqlite:latest") == ("missing.sqlite", "latest")

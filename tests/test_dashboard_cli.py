"""The command line answers fast and light (no torch for --help), and ``dashboard`` finds and starts the app."""

from __future__ import annotations

import io
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from helpers import REPO

from collector.cli import build_parser
from collector.cli.args import one_line_warnings
from collector.cli.dashboard import DEFAULT_HOST, app_script, streamlit_args
from collector.errors import CollectorWarning

HEAVY = ("torch", "pandas", "numpy", "streamlit")


def _modules_after(code: str) -> list[str]:
    report = f"print('loaded:' + ','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)"
    out = subprocess.run(
        [sys.executable, "-c", f"import sys\n{code}\n{report}"], capture_output=True, text=True, check=True, cwd=REPO
    )
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("loaded:")]
    return [m for m in line.removeprefix("loaded:").split(",") if m]


def test_building_the_parser_of_every_subcommand_imports_no_heavy_module() -> None:
    """``--help`` and usage errors must answer without importing torch (seconds) or pandas."""
    assert _modules_after("from collector.cli import build_parser; build_parser()") == []


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["dashboard", "--help"], ["demo", "--help"], ["report"], ["dashboard", "--port", "http"]],
    ids=["help", "dashboard-help", "demo-help", "report-usage", "dashboard-usage"],
)
def test_help_and_usage_errors_import_no_heavy_module(argv: list[str]) -> None:
    code = f"from collector.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass"
    assert _modules_after(code) == []


def test_dashboard_usage_errors_are_one_line_with_exit_code_2() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "collector", "dashboard", "--port", "http"], capture_output=True, text=True, cwd=REPO
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "stallwatch: argument --port: must be a port number 1-65535, got 'http' (see python -m collector dashboard --help)"
    ]


def test_dashboard_listens_on_this_machine_only_unless_told(tmp_path: Path) -> None:
    args = build_parser().parse_args(["dashboard", str(tmp_path / "x.sqlite")])
    assert (args.host, args.port) == (DEFAULT_HOST, 8501) == ("127.0.0.1", 8501)
    command = streamlit_args(Path("app.py"), args.db, args.host, args.port)
    assert command[command.index("--server.address") + 1] == "127.0.0.1"
    assert command[-2:] == ["--db", str(tmp_path / "x.sqlite")]
    assert command[command.index("--runner.postScriptGC") + 1] == "false"


def test_dashboard_finds_the_app_beside_a_clones_collector() -> None:
    assert app_script() == REPO / "app" / "streamlit_app.py"


def test_collector_warnings_on_the_command_line_are_one_line_each_and_shown_once() -> None:
    stream = io.StringIO()
    saved = warnings.showwarning
    try:
        one_line_warnings(stream)
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = warnings.showwarning  # catch_warnings restores ours on exit
            for _ in range(3):
                warnings.warn_explicit("stallwatch: GPU metrics are off:\n  no NVML", CollectorWarning, "x.py", 3)
    finally:
        warnings.showwarning = saved
    assert stream.getvalue() == "stallwatch: GPU metrics are off: no NVML\n"


@pytest.mark.slow
def test_demo_prints_its_verdict_and_the_next_step(tmp_path: Path) -> None:
    db = tmp_path / "demo.sqlite"
    out = subprocess.run(
        [sys.executable, "-m", "collector", "demo", "--db", str(db), "--seconds", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("verdict: INPUT-BOUND: waiting for data ") for line in lines), out.stdout
    assert any(line.startswith("to change: DataLoader(..., num_workers=") for line in lines)
    assert lines[-1].startswith(f"next: stallwatch dashboard {db}")
    assert "CollectorWarning" not in out.stderr  # a collector warning is one plain line, if any

"""Starts ``python -m collector demo`` in a background process for the empty-state page."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

DEMO_SECONDS = 90.0
DEMO_SCENARIO = "starved"
REPO_ROOT = Path(__file__).resolve().parents[1]


def demo_seconds() -> float:
    """``STALLWATCH_DEMO_SECONDS`` overrides the demo's length (the tests use a short one)."""
    try:
        return float(os.environ.get("STALLWATCH_DEMO_SECONDS", DEMO_SECONDS))
    except ValueError:
        return DEMO_SECONDS


def start_demo(
    db: str, seconds: float | None = None, scenario: str = DEMO_SCENARIO
) -> tuple[subprocess.Popen[bytes], str]:
    """Record the demo into ``db`` in a child process that outlives this rerun; returns it and its stderr log."""
    log = tempfile.NamedTemporaryFile(prefix="stallwatch-demo-", suffix=".log", delete=False)  # noqa: SIM115
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    command = [sys.executable, "-m", "collector", "demo", "--db", db, "--scenario", scenario]
    command += ["--seconds", f"{seconds if seconds is not None else demo_seconds():g}"]
    try:
        process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
    finally:
        log.close()
    return process, log.name


def tail(path: str, limit: int = 2_000) -> str:
    """The end of the demo's stderr, to show when it failed."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()[-limit:]
    except OSError:
        return ""

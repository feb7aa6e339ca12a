"""``collector run`` touches only the script's own Python: its children record, another virtualenv's sees nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, query

# what a Python can tell of stallwatch: its path, its children's environment, anything of ours imported
PROBE = (
    "import json, os, sys; print(json.dumps({'path': sys.path, 'pythonpath': os.environ.get('PYTHONPATH'),"
    " 'autowatch': 'STALLWATCH_AUTOWATCH' in os.environ,"
    " 'ours': sorted(m for m in sys.modules if m.split('.')[0] in ('collector', 'app'))}))"
)
STARTS = """
import subprocess, sys
python, probe = sys.argv[1], sys.argv[2]
print(subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True).stdout.strip())
"""
CHILD_LOADER = """
from torch.utils.data import DataLoader
for _ in DataLoader(list(range(8)), batch_size=4):
    pass
"""
STARTS_CHILD = """
import subprocess, sys
subprocess.run([sys.executable, sys.argv[1]], check=True)
"""


def run(tmp_path: Path, *command: str, under_collector: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("STALLWATCH_AUTOWATCH", None)
    prefix = ["-m", "collector", "run", "--db", str(tmp_path / "run.sqlite"), "--gpu-hz", "0", "--host-hz", "0"]
    return subprocess.run(
        [sys.executable, *(prefix if under_collector else []), *command],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )


@pytest.fixture(scope="module")
def other_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Python from another virtualenv (its own prefix; the binary links to this one's interpreter)."""
    venv = tmp_path_factory.mktemp("other") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return str(venv / "bin" / "python")


def test_another_virtualenvs_python_sees_exactly_what_it_sees_without_stallwatch(tmp_path, other_python):
    script = tmp_path / "starts_a_tool.py"
    script.write_text(STARTS)
    plain = run(tmp_path, str(script), other_python, PROBE, under_collector=False)
    recorded = run(tmp_path, str(script), other_python, PROBE, under_collector=True)
    assert plain.returncode == 0 and recorded.returncode == 0, recorded.stderr
    seen, seen_plain = json.loads(recorded.stdout.splitlines()[-1]), json.loads(plain.stdout.splitlines()[-1])
    assert seen == seen_plain and seen["ours"] == [] and not seen["autowatch"]


@pytest.mark.slow
def test_a_child_of_the_scripts_own_python_is_still_recorded(tmp_path):
    (tmp_path / "child.py").write_text(CHILD_LOADER)
    (tmp_path / "parent.py").write_text(STARTS_CHILD)
    done = run(tmp_path, str(tmp_path / "parent.py"), str(tmp_path / "child.py"), under_collector=True)
    assert done.returncode == 0, done.stderr
    rows = query(
        str(tmp_path / "run.sqlite"), "SELECT name, (SELECT COUNT(*) FROM batches WHERE run_id = runs.id) FROM runs"
    )
    assert [(name.rsplit("/", 1)[-1], n) for name, n in rows] == [("child.py:3", 2)]

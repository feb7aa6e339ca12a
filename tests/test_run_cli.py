"""``python -m collector run``: an unmodified script, every DataLoader recorded, the script's behaviour untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import query
from torch.utils.data import DataLoader

import collector
from collector.record.autowatch import AutoWatch
from collector.sample.sampler import Rates

SCRIPT = Path(__file__).parent / "scripts" / "two_loaders.py"


def collector_run(tmp_path: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    db = tmp_path / "run.sqlite"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path.cwd()), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "collector", "run", "--db", str(db), "--gpu-hz", "0", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
    )


@pytest.mark.slow
def test_two_dataloaders_make_two_runs_named_where_they_were_created_and_the_exit_code_passes(tmp_path: Path) -> None:
    done = collector_run(tmp_path, str(SCRIPT), "3", "--lr", "0.1")
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == [f"argv: {[str(SCRIPT), '3', '--lr', '0.1']}", "done"]
    rows = query(str(tmp_path / "run.sqlite"), "SELECT name, status, exit_code, tags FROM runs ORDER BY id")
    assert [(name.rsplit("/", 1)[-1], status, code) for name, status, code, _ in rows] == [
        ("two_loaders.py:19", "crashed", 3),  # sys.exit(3): a non-zero exit, recorded with its code
        ("two_loaders.py:20", "crashed", 3),
    ]
    counts = query(str(tmp_path / "run.sqlite"), "SELECT run_id, COUNT(*) FROM batches GROUP BY run_id ORDER BY run_id")
    assert [n for _, n in counts] == [2 * 64 // 4, 64 // 16]  # two epochs of train, one of val
    assert json.loads(rows[0][3])["collector_run"].endswith("two_loaders.py 3 --lr 0.1")
    assert "stallwatch: 2 DataLoader(s) recorded" in done.stderr
    assert "two_loaders.py:19 (run 1):" in done.stderr


WRITER_PIDS = """
import psutil, torch
from torch.utils.data import DataLoader

def writers():
    return [p.pid for p in psutil.Process().children() if "collector.writer.child" in " ".join(p.cmdline())]

before = writers()
for _ in DataLoader(torch.arange(8), batch_size=4):
    pass
print(before, writers())
"""


@pytest.mark.slow
def test_the_writer_starts_before_the_script_and_its_first_loader_joins_it(tmp_path: Path) -> None:
    script = tmp_path / "writer_pids.py"
    script.write_text(WRITER_PIDS)
    done = collector_run(tmp_path, "--no-verdict", str(script))
    assert done.returncode == 0, done.stderr
    before, during = json.loads(done.stdout.strip().replace("] [", "], [").join("[]"))
    assert len(before) == 1 and during == before  # booted beside the script's imports, then joined: one writer
    assert query(str(tmp_path / "run.sqlite"), "SELECT COUNT(*) FROM batches") == [(2,)]


@pytest.mark.slow
def test_a_failing_script_keeps_its_traceback_and_exit_code_1_and_its_runs_are_marked_crashed(tmp_path: Path) -> None:
    done = collector_run(tmp_path, str(SCRIPT), "0", "--fail")
    assert done.returncode == 1
    assert "Traceback (most recent call last):" in done.stderr
    assert "ValueError: loss is NaN" in done.stderr
    assert 'two_loaders.py", line' in done.stderr
    assert "collector/cli/run.py" not in done.stderr and "runpy" not in done.stderr  # only the script's frames
    statuses = query(str(tmp_path / "run.sqlite"), "SELECT status, error FROM runs ORDER BY id")
    assert statuses == [("crashed", "ValueError: loss is NaN")] * 2


@pytest.mark.slow
def test_run_dash_m_runs_a_module_with_its_arguments(tmp_path: Path) -> None:
    (tmp_path / "trainmod.py").write_text(
        "import sys\n"
        "from torch.utils.data import DataLoader\n"
        "print(__name__, sys.argv[1:])\n"
        "for _ in DataLoader(list(range(12)), batch_size=3):\n"
        "    pass\n"
        "sys.exit(5)\n"
    )
    done = collector_run(tmp_path, "-m", "trainmod", "--db", "not-ours", cwd=tmp_path)
    assert done.returncode == 5, done.stderr
    assert done.stdout.strip() == "__main__ ['--db', 'not-ours']"
    rows = query(str(tmp_path / "run.sqlite"), "SELECT name FROM runs")
    assert rows == [("trainmod.py:4",)]
    assert query(str(tmp_path / "run.sqlite"), "SELECT COUNT(*) FROM batches") == [(4,)]


def test_a_missing_script_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = collector_run(tmp_path, str(tmp_path / "nope.py"))
    assert done.returncode == 2
    assert done.stderr.strip().startswith("stallwatch: no file") and "\n" not in done.stderr.strip()


def test_autowatch_names_a_loader_after_the_line_that_built_it_even_through_a_subclass(db_path: str) -> None:
    class MyLoader(DataLoader):  # type: ignore[type-arg]
        def __init__(self, data: list[int]) -> None:
            super().__init__(data, batch_size=2)

    auto = AutoWatch(db_path, Rates(gpu_hz=0, host_hz=0), tags={}, cwd=os.path.dirname(__file__))
    auto.install()
    try:
        plain = DataLoader(list(range(6)), batch_size=2)
        line = sys._getframe().f_lineno - 1
        sub = MyLoader(list(range(4)))
        assert [len(b) for b in plain] == [2, 2, 2]
        assert len(list(sub)) == 2
    finally:
        auto.uninstall()
    auto.close()
    assert [origin for origin, _ in auto.run_ids()] == [f"test_run_cli.py:{line}", f"test_run_cli.py:{line + 2}"]
    assert DataLoader.__iter__ is not None and "autowatch" not in DataLoader.__iter__.__module__


def test_autowatch_leaves_a_loader_the_script_watches_itself_to_that_watch(db_path: str) -> None:
    auto = AutoWatch(db_path, Rates(gpu_hz=0, host_hz=0), tags={})
    auto.install()
    try:
        loader = DataLoader(list(range(6)), batch_size=2)
        with collector.watch(loader, db=db_path, run="mine", gpu_hz=0, host_hz=0) as watched:
            assert len(list(watched)) == 3
    finally:
        auto.uninstall()
    auto.close()
    assert auto.sessions == []
    assert query(db_path, "SELECT name FROM runs") == [("mine",)]


class OwnLoop(DataLoader):  # type: ignore[type-arg]
    """Defines __init__ and __iter__ and calls neither of DataLoader's, as torchdata's StatefulDataLoader does."""

    def __init__(self, data: list[int]) -> None:
        self.data = data
        self.num_workers = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter([self.data[i : i + 2] for i in range(0, len(self.data), 2)])

    def __len__(self) -> int:
        return (len(self.data) + 1) // 2


def test_autowatch_records_subclasses_with_their_own_init_and_iter_defined_before_or_after_it_starts(
    db_path: str,
) -> None:
    auto = AutoWatch(db_path, Rates(gpu_hz=0, host_hz=0), tags={}, cwd=os.path.dirname(__file__))
    auto.install()
    try:

        class Later(OwnLoop):
            def __iter__(self):  # type: ignore[no-untyped-def]
                for batch in super().__iter__():  # reaches OwnLoop's patched __iter__ too, from a generator
                    yield [x * 10 for x in batch]

        before = OwnLoop([1, 2, 3])
        line = sys._getframe().f_lineno - 1
        after = Later([1, 2, 3])
        assert list(before) == [[1, 2], [3]]
        assert list(after) == [[10, 20], [30]]
    finally:
        auto.uninstall()
    auto.close()
    assert [origin for origin, _ in auto.run_ids()] == [f"test_run_cli.py:{line}", f"test_run_cli.py:{line + 2}"]
    assert query(db_path, "SELECT run_id, COUNT(*) FROM batches GROUP BY run_id") == [(1, 2), (2, 2)]  # once each
    assert query(db_path, "SELECT COUNT(*) FROM epochs") == [(2,)]
    assert "autowatch" not in OwnLoop.__iter__.__module__ and "autowatch" not in Later.__init__.__module__
    assert "__init_subclass__" not in DataLoader.__dict__  # every patch put back


@pytest.mark.parametrize("args", [["-m"], []])
def test_run_without_a_target_says_what_to_give(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from collector.cli import main

    assert main(["run", *args]) == 2
    assert "python -m collector run" in capsys.readouterr().err


def test_the_patched_dataloader_keeps_everything_inspect_sees(db_path: str) -> None:
    import inspect

    before = (inspect.signature(DataLoader.__init__), DataLoader.__init__.__doc__, DataLoader.__iter__.__name__)
    auto = AutoWatch(db_path, Rates(gpu_hz=0, host_hz=0), tags={})
    auto.install()
    try:
        after = (inspect.signature(DataLoader.__init__), DataLoader.__init__.__doc__, DataLoader.__iter__.__name__)
        assert after == before
        assert DataLoader.__init__.__qualname__ == "DataLoader.__init__"
    finally:
        auto.uninstall()


def test_library_frames_are_stallwatch_installed_packages_and_the_standard_library() -> None:
    import json as stdlib_module

    import torch

    from collector.record import frameworks

    assert frameworks.is_library(torch.__file__) and frameworks.is_library(stdlib_module.__file__)
    assert frameworks.is_library(frameworks.__file__) and frameworks.is_library("<frozen runpy>")
    assert not frameworks.is_library(__file__)

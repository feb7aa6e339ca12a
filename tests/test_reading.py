"""Reading never writes, and a file that cannot be used says why."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import query

import collector
from collector.errors import CannotRead, CannotWrite, NotAStallwatchFile
from collector.store.connection import Store
from collector.store.reader import Reader


def recorded(path: Path) -> str:
    with collector.watch(range(50), db=str(path), run="closed", gpu_hz=0, host_hz=0) as watched:
        list(watched)
    return str(path)


def side_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(("-wal", "-shm")))


def report(db: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run(
        [sys.executable, "-m", "collector", "report", db], capture_output=True, text=True, env=env, **kwargs
    )


@pytest.mark.slow
def test_report_and_diagnose_leave_no_side_files_next_to_a_closed_file(tmp_path):
    db = recorded(tmp_path / "run.sqlite")
    assert side_files(tmp_path) == []
    assert report(db).returncode == 0
    collector.diagnose(db)
    Reader(db).runs()
    assert side_files(tmp_path) == []


def open_to_all(path: Path) -> None:
    """Let every user look into ``path`` and the folders above it (pytest makes its base folder 0700)."""
    for folder in [path, *path.parents]:
        os.chmod(folder, os.stat(folder).st_mode | 0o111)


def as_nobody(fn: Callable[[], str]) -> str:
    """``fn()`` in a forked child that became the user nobody (the modules it needs already imported)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read)
        try:
            os.setgid(65534)
            os.setuid(65534)
            text = fn()
        except BaseException as exc:
            text = f"{type(exc).__name__}: {exc}"
        os.write(write, text.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        text = answer.read()
    os.waitpid(pid, 0)
    return text


def test_a_closed_file_is_read_by_a_user_who_cannot_write_its_directory(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to read as another user (nobody)")
    folder = tmp_path / "ro"
    folder.mkdir()
    db = recorded(folder / "run.sqlite")
    collector.diagnose(db)  # imports everything the child needs
    open_to_all(tmp_path)
    os.chmod(folder, 0o555)
    os.chmod(db, 0o444)
    got = as_nobody(lambda: f"{Reader(db).run('closed')['status']} {collector.diagnose(db).verdict}")
    assert got.startswith("completed "), got
    assert side_files(folder) == []


@pytest.mark.slow
def test_a_closed_file_on_read_only_media_is_read(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a read-only tmpfs")
    mount = tmp_path / "media"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        db = recorded(mount / "run.sqlite")
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        done = report(db)
        assert done.returncode == 0, done.stderr
        assert "closed" in done.stdout and side_files(mount) == []
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_live_file_is_still_read_live(db_path):
    watched = collector.watch(range(10), db=db_path, run="live", gpu_hz=0, host_hz=0)
    list(watched)
    assert watched.run_id is not None
    assert os.path.exists(db_path + "-wal")
    assert Reader(db_path).run("live")["state"] == "running"
    watched.close()


def test_an_unreadable_file_names_the_permission(tmp_path):
    db = recorded(tmp_path / "run.sqlite")
    os.chmod(db, 0)
    if os.geteuid() == 0:  # root reads anything: ask as nobody
        assert as_nobody(lambda: str(Reader(db))).startswith("CannotRead: no permission to look into")
        open_to_all(tmp_path)
        assert as_nobody(lambda: str(Reader(db))) == f"CannotRead: no permission to read {db}"
    else:
        with pytest.raises(CannotRead, match="no permission to read"):
            Reader(db)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: str(d / "no" / "such" / "x.sqlite"), "the directory .* does not exist"),
        (lambda d: str(d), "cannot open|directory"),
    ],
)
def test_a_file_that_cannot_be_written_says_why(tmp_path, make, message):
    with pytest.raises((CannotWrite, NotAStallwatchFile), match=message):
        Store(make(tmp_path))


def test_a_garbage_schema_version_is_one_clear_error(db_path):
    Store(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE meta SET value = 'two' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(NotAStallwatchFile, match=r"schema version stallwatch never writes .*'two'"):
        Reader(db_path)


def test_broken_json_in_a_run_row_reads_as_unreadable_not_an_exception(tmp_path):
    db = recorded(tmp_path / "run.sqlite")
    conn = sqlite3.connect(db)
    conn.execute("UPDATE runs SET config = '{broken', warnings = '[oops'")
    conn.commit()
    conn.close()
    run = Reader(db).run("closed")
    assert run["config"] == {"unreadable": "{broken"} and run["warnings"] == ["unreadable: [oops"]
    assert json.loads(query(db, "SELECT tags FROM runs")[0][0]) == {}

"""Fault injection on the recording: each fault, the run's final state, and rows stored + dropped = handed out.

Real SQLite files, a real size-capped tmpfs (mounted where the test runs as
root), real SIGKILL and SIGSTOP of the writer child. NOTE [ Accounting ] in
collector/store/connection.py states the invariant these tests hold.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from helpers import query, wait_until, writers_alive

import collector
from collector.writer import channel, spawn
from collector.writer.spawn import CHILD_NICE
from collector.writer.supervisor import MAX_RESTARTS


def ticking(pause_s: float = 0.0005) -> Iterator[int]:
    """An endless loader: one item every ``pause_s``, so flushes and samples happen while it runs."""
    for i in itertools.count():
        time.sleep(pause_s)
        yield i


class Recording:
    """A watched endless loader, iterated on demand from the test thread."""

    def __init__(self, db: str, host_hz: float = 5.0, name: str = "faulty") -> None:
        self.loader = collector.watch(ticking(), db=db, run=name, gpu_hz=0, host_hz=host_hz)
        assert self.loader.run_id is not None
        self.monitor = self.loader._stallwatch_start().monitor
        self.db = db
        self._it = iter(self.loader)
        self.iterated = 0

    def take(self, n: int) -> None:
        for _ in range(n):
            next(self._it)
            self.iterated += 1

    @property
    def writer_pid(self) -> int | None:
        link = self.monitor._writer.link
        return getattr(link, "pid", None)

    def samples_taken(self) -> int:
        writer = self.monitor._writer
        return writer._taken_before + writer._taken_now

    def take_until(self, predicate: Any, timeout_s: float = 10.0) -> float:
        """Iterate until ``predicate()``; the seconds it took."""
        started = time.monotonic()
        while not predicate():
            assert time.monotonic() - started < timeout_s, "the recording did not heal in time"
            self.take(20)
        return time.monotonic() - started

    def close(self) -> float:
        started = time.monotonic()
        self.loader.close()
        return time.monotonic() - started


def accounts(db: str, name: str = "faulty") -> dict[str, Any]:
    (row,) = query(
        db,
        "SELECT id, status, dropped_records, dropped_samples, warnings,"
        " (SELECT COUNT(*) FROM batches b WHERE b.run_id = r.id),"
        " (SELECT COUNT(*) FROM host_samples h WHERE h.run_id = r.id)"
        " + (SELECT COUNT(*) FROM proc_samples p WHERE p.run_id = r.id)"
        " + (SELECT COUNT(*) FROM gpu_samples g WHERE g.run_id = r.id)"
        " FROM runs r WHERE name = ? ORDER BY id DESC LIMIT 1",
        (name,),
    )
    keys = ("id", "status", "dropped_records", "dropped_samples", "warnings", "rows", "sample_rows")
    return dict(zip(keys, row, strict=True))


def assert_every_loss_counted(rec: Recording, got: dict[str, Any]) -> None:
    assert got["rows"] + got["dropped_records"] == rec.iterated
    assert got["sample_rows"] + got["dropped_samples"] == rec.samples_taken()


@pytest.mark.slow
def test_a_killed_writer_is_replaced_at_once_and_every_batch_is_stored_or_counted(db_path):
    rec = Recording(db_path)
    rec.take(1000)
    old = rec.writer_pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    healed_s = rec.take_until(lambda: rec.writer_pid not in (None, old))
    rec.take(1000)
    rec.close()
    got = accounts(db_path)
    assert got["status"] == "completed"
    assert_every_loss_counted(rec, got)
    assert "was killed (signal 9); a new one took over" in got["warnings"]
    assert healed_s < 2.0


@pytest.mark.slow
def test_a_stopped_writer_is_noticed_within_about_a_second_killed_and_replaced(db_path):
    rec = Recording(db_path)
    rec.take(1000)
    old = rec.writer_pid
    assert old is not None
    os.kill(old, signal.SIGSTOP)
    try:
        healed_s = rec.take_until(lambda: rec.writer_pid not in (None, old))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(old, signal.SIGCONT)
    assert not psutil.pid_exists(old), "the stopped writer was ended and reaped"
    rec.take(1000)
    rec.close()
    got = accounts(db_path)
    assert got["status"] == "completed"
    assert_every_loss_counted(rec, got)
    assert "stopped responding; a new one took over" in got["warnings"]
    assert 0.8 < healed_s < 2.5  # silence of a second, noticed at the next 0.2 s tick
    assert writers_alive() == []


@pytest.mark.slow
def test_a_writer_stopped_just_before_close_costs_close_about_two_seconds_and_the_end_is_written(db_path):
    rec = Recording(db_path)
    rec.take(1000)
    old = rec.writer_pid
    assert old is not None
    os.kill(old, signal.SIGSTOP)
    rec.take(500)  # these records go to the stopped writer's pipe
    took_s = rec.close()
    assert took_s < 2.6
    assert not psutil.pid_exists(old) and writers_alive() == []
    got = accounts(db_path)
    assert got["status"] == "completed"
    assert_every_loss_counted(rec, got)
    assert "stopped responding" in got["warnings"]


@pytest.mark.slow
def test_a_writer_killed_again_and_again_is_replaced_a_bounded_number_of_times_and_the_end_still_written(db_path):
    rec = Recording(db_path)
    for _ in range(MAX_RESTARTS + 1):
        rec.take(300)
        old = rec.writer_pid
        assert old is not None
        os.kill(old, signal.SIGKILL)
        rec.take_until(lambda old=old: rec.writer_pid != old)
    assert rec.writer_pid is None  # no more replacements: counting only
    rec.take(300)
    rec.close()  # the end gets one more writer
    got = accounts(db_path)
    assert got["status"] == "completed"
    assert_every_loss_counted(rec, got)
    assert got["dropped_records"] >= 300 and "recording stops here" in got["warnings"]


@pytest.mark.slow
def test_a_deleted_file_is_recorded_anew_at_its_path_with_the_lost_rows_counted(db_path):
    rec = Recording(db_path)
    rec.take(1000)
    assert wait_until(lambda: accounts(db_path)["rows"] > 0)
    os.remove(db_path)
    rec.take_until(lambda: os.path.exists(db_path))
    rec.take(1000)
    rec.close()
    got = accounts(db_path)
    assert got["status"] == "completed"
    assert_every_loss_counted(rec, got)
    assert got["dropped_records"] > 0 and "was deleted or replaced while recording" in got["warnings"]


@pytest.mark.slow
def test_a_file_locked_longer_than_the_busy_timeout_costs_counted_rows_only(db_path):
    rec = Recording(db_path)
    rec.take(500)
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        rec.take_until(lambda: any(k.startswith("write-") for k in rec.monitor.warned), timeout_s=20)
        assert rec.writer_pid is not None and "writer-restarted" not in rec.monitor.warned  # waiting, not stuck
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    rec.take(500)
    rec.close()
    got = accounts(db_path)
    assert got["status"] == "completed"
    assert_every_loss_counted(rec, got)
    assert got["dropped_records"] > 0 and "database is locked" in got["warnings"]


# -- a full disk: a real tmpfs of a few MiB ---------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a full disk needs a size-capped tmpfs: run as root (mount -t tmpfs -o size=8m)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory: Path) -> Path:
    """Take every free byte of the disk with one file; delete it to give the space back."""
    filler = directory / "filler"
    chunk = b"\0" * (64 << 10)
    with open(filler, "wb", buffering=0) as out:
        for size in (len(chunk), 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    try:
                        out.write(chunk[:size])
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
    return filler


@pytest.mark.slow
def test_a_full_disk_mid_run_costs_counted_rows_and_the_end_and_warning_are_written_when_space_returns(small_disk):
    db = str(small_disk / "run.sqlite")
    rec = Recording(db)
    rec.take(1000)
    assert wait_until(lambda: accounts(db)["rows"] > 0)
    filler = fill(small_disk)
    rec.take_until(lambda: any(k.startswith("write-") for k in rec.monitor.warned))
    rec.take(1000)
    filler.unlink()
    rec.take(1000)
    rec.close()
    got = accounts(db)
    assert got["status"] == "completed"
    assert_every_loss_counted(rec, got)
    assert got["dropped_records"] > 0 and "is full" in got["warnings"]


@pytest.mark.slow
def test_a_disk_full_at_close_is_retried_and_the_end_written_once_space_returns(small_disk):
    db = str(small_disk / "run.sqlite")
    rec = Recording(db)
    rec.take(1000)
    assert wait_until(lambda: accounts(db)["rows"] > 0)
    filler = fill(small_disk)
    rec.take(1000)
    took_s = rec.close()
    assert took_s < 2.6
    assert accounts(db)["status"] == "running"  # the end could not be written yet
    filler.unlink()  # the writer, still retrying beside this process, writes it now
    assert wait_until(lambda: accounts(db)["status"] == "completed", timeout_s=10)
    got = accounts(db)
    assert_every_loss_counted(rec, got)
    assert wait_until(lambda: writers_alive() == [], timeout_s=5), [(p.pid, p.status()) for p in writers_alive()]


# NOTE [ One writer a process ] in collector/writer/channel.py: the runs of one process share a writer.


def test_the_loaders_of_one_process_share_one_writer_which_ends_with_the_last_of_them(db_path, monkeypatch):
    raised: list[int] = []  # whose priority the closes gave back (root in CI: allowed)
    monkeypatch.setattr(channel, "raise_to_ours", lambda pid: raised.append(pid) or spawn.raise_to_ours(pid))
    train, val = Recording(db_path, name="train"), Recording(db_path, name="val")
    train.take(300)
    val.take(100)
    assert train.writer_pid == val.writer_pid and len(writers_alive()) == 1
    writer = psutil.Process(train.writer_pid)
    assert writer.nice() == min(19, os.nice(0) + CHILD_NICE)  # NOTE [ A polite writer ]
    # In the job's session (its scheduler group, with autogroup), out of its process group (Ctrl-C).
    assert os.getsid(writer.pid) == os.getsid(0) and os.getpgid(writer.pid) == writer.pid != os.getpgid(0)
    train.close()
    assert [p.pid for p in writers_alive()] == [val.writer_pid], "the writer stays while a run is on it"
    assert raised == [] and writer.nice() == min(19, os.nice(0) + CHILD_NICE), "and polite"
    val.take(100)
    val.close()
    assert wait_until(lambda: writers_alive() == [], timeout_s=5)
    assert raised == [writer.pid]  # the last close is waited on: the end is written at the job's priority
    for rec, name in ((train, "train"), (val, "val")):
        got = accounts(db_path, name)
        assert got["status"] == "completed" and got["rows"] == rec.iterated and got["dropped_records"] == 0
        assert got["sample_rows"] + got["dropped_samples"] == rec.samples_taken() > 0  # each run sampled
    later = Recording(db_path, name="later")  # after the last close: a new writer
    later.take(50)
    assert later.writer_pid not in (None, train.writer_pid)
    later.close()
    assert accounts(db_path, "later")["rows"] == 50


@pytest.mark.slow
def test_a_killed_shared_writer_is_replaced_for_every_run_on_it_and_each_keeps_its_accounts(db_path):
    train, val = Recording(db_path, name="train"), Recording(db_path, name="val")
    train.take(500)
    val.take(200)
    old = train.writer_pid
    assert old is not None and val.writer_pid == old
    os.kill(old, signal.SIGKILL)
    train.take_until(lambda: train.writer_pid not in (None, old))
    val.take_until(lambda: val.writer_pid not in (None, old))
    assert train.writer_pid == val.writer_pid, "the replacement is shared too"
    train.take(500)
    val.take(200)
    train.close()
    val.close()
    for rec, name in ((train, "train"), (val, "val")):
        got = accounts(db_path, name)
        assert got["status"] == "completed"
        assert_every_loss_counted(rec, got)
        assert "was killed (signal 9); a new one took over" in got["warnings"]
    assert wait_until(lambda: writers_alive() == [], timeout_s=5)


def test_a_run_whose_file_cannot_be_opened_leaves_the_shared_writer_to_the_others(db_path, tmp_path):
    ok = Recording(db_path, name="ok")
    ok.take(100)
    bad = tmp_path / "not-a-database.sqlite"
    bad.write_bytes(b"this is not SQLite" * 100)
    with pytest.warns(collector.CollectorWarning, match="cannot record"):
        unrecorded = collector.watch(range(10), db=str(bad), run="bad", gpu_hz=0, host_hz=0)
        assert list(unrecorded) == list(range(10))
        unrecorded.close()  # the warning comes from the monitor thread: wait for it
    ok.take(100)
    assert [p.pid for p in writers_alive()] == [ok.writer_pid]
    ok.close()
    assert accounts(db_path, "ok")["rows"] == 200


CTRL_C_JOB = """
import itertools, signal, sys, time
import collector
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, where SIGINT is not inherited ignored
for i in collector.watch(itertools.count(), db=sys.argv[1], run="faulty"):
    if i == 200:
        print("recording", flush=True)
    time.sleep(0.001)
"""


def test_ctrl_c_to_the_jobs_process_group_interrupts_the_run_and_the_writer_stores_its_end(db_path, tmp_path):
    # A terminal's Ctrl-C (or a job runner's signal) goes to the whole foreground process group: the
    # writer, in a group of its own, is not in it, and writes the interrupted run's end and every row.
    script = tmp_path / "job.py"
    script.write_text(CTRL_C_JOB)
    job = subprocess.Popen(
        [sys.executable, str(script), db_path], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert job.stdout is not None and job.stdout.readline().strip() == "recording"
        os.killpg(job.pid, signal.SIGINT)
        assert job.wait(timeout=20) != 0
    finally:
        job.kill()
    assert wait_until(lambda: accounts(db_path)["status"] != "running", timeout_s=10)
    got = accounts(db_path)
    assert got["status"] == "interrupted" and got["rows"] > 200 and got["dropped_records"] == 0

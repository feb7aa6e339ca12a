"""The file survives what training processes go through: several writers, SIGKILL, faults."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import psutil
import pytest
import torch
from fixture_datasets import SlowDataset
from helpers import collector_messages, query, wait_until
from torch.utils.data import DataLoader

import collector
from collector.errors import NotAStallwatchFile, SchemaTooNew
from collector.record.handover import EpochEnded, Shared
from collector.record.hotloop import Timer
from collector.record.monitor import Monitor
from collector.record.watch import watch_with
from collector.sample.sampler import Rates
from collector.store.connection import Store
from collector.store.reader import Reader, run_state
from collector.writer.frames import EpochRow, Flush, Open, RunStart, Unwritten
from collector.writer.sink import Sink

SCRIPT = str(Path(__file__).parent / "scripts" / "record_loop.py")


def spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, SCRIPT, *args], stderr=subprocess.PIPE)


def test_two_processes_write_one_file_with_no_lost_rows(db_path):
    procs = [spawn(db_path, f"rank{i}", "400", "0.001") for i in range(2)]
    for p in procs:
        assert p.wait(timeout=60) == 0, p.stderr.read().decode() if p.stderr else ""
    rows = dict(query(db_path, "SELECT r.name, COUNT(b.idx) FROM runs r JOIN batches b ON b.run_id=r.id GROUP BY r.id"))
    assert rows == {"rank0": 400, "rank1": 400}
    assert query(db_path, "SELECT SUM(dropped_records) FROM runs") == [(0,)]
    assert {r[0] for r in query(db_path, "SELECT status FROM runs")} == {"completed"}


OPEN_AT = """
import sys, time
from collector.store.connection import Store
while time.time() < float(sys.argv[2]):
    pass
Store(sys.argv[1]).close()
"""


@pytest.mark.slow
def test_processes_creating_one_new_file_at_the_same_moment_all_succeed(tmp_path):
    for attempt in range(5):  # without the retry, about half of such attempts failed with "database is locked"
        path = str(tmp_path / f"new{attempt}.sqlite")
        start_at = str(time.time() + 0.5)
        procs = [
            subprocess.Popen([sys.executable, "-c", OPEN_AT, path, start_at], stderr=subprocess.PIPE) for _ in range(3)
        ]
        for p in procs:
            assert p.wait(timeout=60) == 0, p.stderr.read().decode() if p.stderr else ""


@pytest.mark.slow
def test_sigkill_keeps_all_but_the_last_half_second_and_reads_as_stopped(db_path, tmp_path):
    log = tmp_path / "loop.log"
    proc = spawn(db_path, "doomed", "0", "0.005", str(log))
    try:
        assert wait_until(lambda: os.path.exists(db_path) and _count(db_path) >= 250, timeout_s=30)
        writers = psutil.Process(proc.pid).children()
    finally:
        killed_at = time.time()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert len(writers) == 1 and "collector.writer.child" in " ".join(writers[0].cmdline())
    _, alive = psutil.wait_procs(writers, timeout=10)
    assert not alive, "the writer process exits once the training process is gone"
    logged = [line.split() for line in log.read_text().splitlines() if line.count(" ") == 1]
    must_have = {int(i) for i, t in logged if float(t) < killed_at - 0.5}
    stored = {r[0] for r in query(db_path, "SELECT idx FROM batches")}
    assert len(must_have) >= 100 and must_have <= stored
    assert query(db_path, "PRAGMA integrity_check") == [("ok",)]
    run = Reader(db_path).run("doomed")
    assert run["status"] == "running"  # as stored: nobody could write the end
    assert run_state(run["status"], run["heartbeat_at"], hostname=run["hostname"], pid=run["pid"]) == "stopped"


def _count(path: str) -> int:
    try:
        return query(path, "SELECT COUNT(*) FROM batches")[0][0]
    except sqlite3.Error:
        return 0


def test_an_exception_in_the_loop_body_marks_the_run_crashed(db_path):
    proc = spawn(db_path, "nan", "100", "0", "-", "--raise-in-loop")
    assert proc.wait(timeout=60) == 1
    assert b"RuntimeError: loss is NaN" in (proc.stderr.read() if proc.stderr else b"")
    run = Reader(db_path).run("nan")
    assert run["status"] == "crashed" and run["error"] == "RuntimeError: loss is NaN"
    assert run["ended_at"] is not None


def test_live_run_reads_as_running_while_beating():
    now = 1000.0
    assert run_state("running", now - 1.0, now=now) == "running"
    assert run_state("running", now - 60.0, now=now) == "stopped"
    assert run_state("completed", now - 60.0, now=now) == "completed"


def train(loader, steps_seed=0):
    torch.manual_seed(steps_seed)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(2):
        for batch in loader:
            loss = model(batch / 64.0).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return [p.detach().clone() for p in model.parameters()]


def test_unwritable_path_warns_once_and_training_is_identical(tmp_path, collector_warnings):
    dataset = SlowDataset(32)
    expected = train(DataLoader(dataset, batch_size=4))
    bad = str(tmp_path / "no" / "such" / "folder" / "x.sqlite")
    with collector.watch(DataLoader(dataset, batch_size=4), db=bad, gpu_hz=0, host_hz=0) as watched:
        got = train(watched)
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
    messages = collector_messages(collector_warnings)
    assert len(messages) == 1 and "cannot record to" in messages[0] and "training continues" in messages[0]


def test_locked_database_mid_run_loses_records_not_training(db_path, collector_warnings):
    dataset = SlowDataset(64)
    expected = train(DataLoader(dataset, batch_size=2))
    watched = collector.watch(DataLoader(dataset, batch_size=2), db=db_path, gpu_hz=0, host_hz=0)
    assert watched.run_id is not None
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("PRAGMA busy_timeout = 5000")
    blocker.execute("BEGIN EXCLUSIVE")  # the monitor's writes now wait 5 s, then fail
    try:
        started = time.monotonic()
        got = train(watched)
        elapsed = time.monotonic() - started
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    watched.close()
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
    assert elapsed < 2.0  # the loop never waited on the 5 s lock


def test_writer_falling_behind_drops_oldest_records_and_counts_them(db_path):
    records = {"fast": deque(maxlen=10), "queue": deque(maxlen=10), "rich": deque(maxlen=10)}
    events: deque[tuple[object, ...]] = deque()
    shared = Shared(records=records, epoch_events=events, resolver=None, stride=[1])  # type: ignore[arg-type]
    start = RunStart("drops", {}, {}, {}, "host", 1, "cmd", None, None)
    monitor = Monitor(db_path, start, shared, Rates(0, 0))
    for idx in range(25):
        records["fast"].append((0, idx, idx * 1000, idx * 1000 + 10, None))
    chunks = monitor._drain_records()
    assert [r[1] for r in chunks["fast"]] == list(range(15, 25))
    assert monitor.dropped == 15
    records["rich"].append((0, 30, 0, 1, None, *(None,) * 9))  # 25..29 were pushed out too
    monitor._drain_records()
    assert monitor.dropped == 20
    events.append(EpochEnded(0, 0, 40))  # the epoch ended after 40 batches: 31..39 never drained
    monitor._drain_epochs(float)
    assert monitor.dropped == 29


def test_a_lapped_timer_counts_its_lost_batches_once(db_path):
    records = {"described": deque(maxlen=10)}
    shared = Shared(records=records, epoch_events=deque(), resolver=None, stride=[1])  # type: ignore[arg-type]
    monitor = Monitor(db_path, RunStart("lapped", {}, {}, {}, "host", 1, "cmd", None, None), shared, Rates(0, 0))
    timer = Timer(range(10), 4)
    shared.timers[0] = timer
    for idx in range(10):
        next(timer)
        if idx in (0, 5, 9):  # the plain loop's described batches: also among the timer's pairs
            records["described"].append((0, idx, *timer.last, *(None,) * 9, 0))  # type: ignore[misc]
    monitor._drain_records()
    timed = monitor._drain_timers()
    assert [(epoch, first) for epoch, first, _ in timed] == [(0, 6)]
    assert monitor.dropped == 6  # batches 0..5 fell out of the 4-entry ring


def test_a_failed_write_counts_its_records_and_keeps_epoch_rows_for_the_next(db_path):
    sink = Sink(Open(db_path, RunStart("sink", {}, {}, {}, "host", 1, "cmd", None, None), 0.0, 0, Rates(0, 0)))
    records = {"fast": [(0, i, i * 10, i * 10 + 5, None) for i in range(3)]}
    blocker = sqlite3.connect(db_path, isolation_level=None, timeout=0.1)
    blocker.execute("BEGIN EXCLUSIVE")
    sink.store.conn.execute("PRAGMA busy_timeout = 50")
    messages = sink.write(Flush(records=records, epochs=[EpochRow(0, 1.0)]))
    blocker.execute("ROLLBACK")
    assert messages[0] == Unwritten(3) and "recording problem" in messages[1].text
    assert sink.write(Flush(records={"fast": [(0, 3, 30, 35, 25)]})) == []
    sink.close()
    assert query(db_path, "SELECT idx, step_s FROM batches") == [(3, 5e-9)]
    assert query(db_path, "SELECT epoch, started_at FROM epochs") == [(0, 1.0)]


def test_closing_returns_promptly_while_forked_workers_live_on(db_path):
    loader = DataLoader(SlowDataset(8), batch_size=2, num_workers=2, persistent_workers=True)
    watched = collector.watch(loader, db=db_path, gpu_hz=0, host_hz=0)
    for _ in watched:
        pass  # the persistent workers, forked after the writer started, are still alive
    started = time.monotonic()
    watched.close()
    assert time.monotonic() - started < 3.0
    assert query(db_path, "SELECT status, (SELECT COUNT(*) FROM batches) FROM runs") == [("completed", 4)]


def test_the_in_process_writer_records_the_same_rows(db_path):
    with watch_with(range(500), db=db_path, run="local", gpu_hz=0, host_hz=0, writer_in_process=True) as w:
        for _ in w:
            pass
    assert query(db_path, "SELECT COUNT(*), COUNT(step_s), MIN(idx), MAX(idx) FROM batches") == [(500, 499, 0, 499)]
    assert query(db_path, "SELECT status, dropped_records FROM runs") == [("completed", 0)]


def test_another_programs_database_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(NotAStallwatchFile, match="another program's SQLite database"):
        Store(path)
    with pytest.raises(NotAStallwatchFile, match="another program's SQLite database"):
        Reader(path)
    assert path.read_bytes() == before and not Path(str(path) + "-wal").exists()


def test_newer_schema_is_refused_with_upgrade_hint(db_path):
    Store(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaTooNew, match="upgrade stallwatch"):
        Reader(db_path)


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", "empty file"), (b"hello, not a database at all" * 40, "not a readable stallwatch file")],
)
def test_reader_refuses_files_that_are_not_stallwatch(tmp_path, content, message):
    path = tmp_path / "bad.sqlite"
    path.write_bytes(content)
    with pytest.raises(NotAStallwatchFile, match=message):
        Reader(path)
    assert path.read_bytes() == content


def test_reader_sees_rows_while_the_writer_is_still_writing(db_path):
    proc = spawn(db_path, "live", "0", "0.005")
    try:
        assert wait_until(lambda: os.path.exists(db_path) and _count(db_path) >= 20, timeout_s=30)
        reader = Reader(db_path)
        first = len(reader.batches(reader.run("live")["id"]))
        assert wait_until(lambda: len(reader.batches(reader.run("live")["id"])) > first + 20, timeout_s=10)
        assert reader.runs().state.tolist() == ["running"]
    finally:
        proc.kill()
        proc.wait(timeout=10)

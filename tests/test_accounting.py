"""Where the time goes: every blocked second of an epoch, and each one split into CPU, waiting for a core and blocked."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
import torch
from fixture_datasets import HelperThreadDataset, SlowDataset
from helpers import query
from torch.utils.data import DataLoader

import collector
from collector.sample.procfs import Process
from collector.sample.schedstat import ThreadClock, split

HAS_SCHEDSTAT = os.path.exists("/proc/thread-self/schedstat")
needs_schedstat = pytest.mark.skipif(not HAS_SCHEDSTAT, reason="no /proc/thread-self/schedstat on this OS")
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def record(loader, db_path, epochs=1, host_hz=0.0):
    with collector.watch(loader, db=db_path, gpu_hz=0, host_hz=host_hz) as watched:
        for _ in range(epochs):
            for _ in watched:
                pass
        return watched.run_id


# -- the reader of /proc -----------------------------------------------------


def write_proc(root: Path, pid: int, threads: dict[int, str]) -> None:
    (root / str(pid)).mkdir(parents=True, exist_ok=True)
    (root / str(pid) / "stat").write_text(f"{pid} (python) S 1 " + "0 " * 40 + "\n")
    for tid, text in threads.items():
        task = root / str(pid) / "task" / str(tid)
        task.mkdir(parents=True)
        (task / "schedstat").write_text(text)


def test_process_totals_sum_cpu_and_run_queue_over_every_thread(tmp_path):
    write_proc(tmp_path, 42, {42: "1500000000 250000000 10\n", 43: "500000000 750000000 3\n"})
    assert Process(42, proc=str(tmp_path)).thread_totals() == (2.0, 1.0, 2)


def test_without_schedstat_totals_are_unknown_and_a_thread_clock_falls_back_to_its_cpu_clock(tmp_path):
    write_proc(tmp_path, 42, {})
    assert Process(42, proc=str(tmp_path)).thread_totals() is None
    clock = ThreadClock(proc=str(tmp_path))
    assert clock.fd is None and clock.raw() is None
    cpu_ns, runq_ns = split(clock.raw())
    assert runq_ns is None and cpu_ns == pytest.approx(time.thread_time_ns(), abs=50_000_000)


@needs_schedstat
def test_a_thread_clock_reads_this_threads_cpu_and_not_another_threads():
    clock = ThreadClock()
    cpu0, runq0 = clock.read()
    other = threading.Thread(target=lambda: sum(range(3_000_000)))
    other.start()
    other.join()
    end = time.thread_time() + 0.02
    while time.thread_time() < end:
        pass
    cpu1, runq1 = clock.read()
    assert runq0 is not None and runq1 is not None and runq1 >= runq0
    assert 0.015 <= (cpu1 - cpu0) / 1e9 < 0.2


# -- every blocked second ----------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_the_final_next_of_every_epoch_is_recorded(db_path, workers):
    """The next() that raises StopIteration (and shuts non-persistent workers down) is part of the epoch's wait."""
    loader = DataLoader(SlowDataset(12, sleep_s=0.002), batch_size=4, num_workers=workers)
    run_id = record(loader, db_path, epochs=2)
    rows = query(
        db_path, "SELECT end_wait_s, ended_at - started_at FROM epochs WHERE run_id = ? ORDER BY epoch", (run_id,)
    )
    assert len(rows) == 2
    for end_wait_s, span_s in rows:
        assert end_wait_s is not None and 0.0 <= end_wait_s < span_s


def test_a_loop_that_breaks_out_has_no_final_wait(db_path):
    loader = DataLoader(SlowDataset(40), batch_size=4)
    with collector.watch(loader, db=db_path, gpu_hz=0, host_hz=0) as watched:
        for i, _ in enumerate(watched):
            if i == 2:
                break
        run_id = watched.run_id
    assert query(db_path, "SELECT end_wait_s FROM epochs WHERE run_id = ?", (run_id,)) == [(None,)]


# -- the split ---------------------------------------------------------------


@needs_schedstat
def test_a_sleeping_worker_fetch_is_blocked_time_with_its_wait_for_a_core_recorded(db_path):
    loader = DataLoader(SlowDataset(24, sleep_s=0.01), batch_size=3, num_workers=2)
    run_id = record(loader, db_path)
    rows = query(db_path, "SELECT wall_s, cpu_s, runq_s FROM worker_fetches WHERE run_id = ?", (run_id,))
    assert len(rows) == 8
    for wall_s, cpu_s, runq_s in rows:
        assert runq_s is not None and cpu_s + runq_s < wall_s
        assert wall_s - cpu_s - runq_s >= 0.025  # 3 samples x 10 ms asleep: blocked


@needs_schedstat
def test_short_lived_workers_report_their_whole_life_as_they_exit(db_path):
    loader = DataLoader(SlowDataset(8, sleep_s=0.005), batch_size=2, num_workers=2)
    run_id = record(loader, db_path, epochs=2)
    rows = query(
        db_path, "SELECT worker_id, started_at, ended_at, cpu_s, runq_s FROM worker_exits WHERE run_id = ?", (run_id,)
    )
    assert sorted(r[0] for r in rows) == [0, 0, 1, 1]  # two workers an epoch, fresh each epoch
    for _, started_at, ended_at, cpu_s, runq_s in rows:
        assert ended_at > started_at and cpu_s > 0 and runq_s is not None


def test_loading_cpu_counts_the_threads_the_training_thread_hands_work_to(db_path):
    """num_workers=0: CPU a helper thread (torch's intra-op threads) spends inside next() is loading, not the step."""
    loader = DataLoader(HelperThreadDataset(16, cpu_s=0.004), batch_size=2)
    run_id = record(loader, db_path)
    rows = query(
        db_path, "SELECT load_cpu_s, wait_s FROM batches WHERE run_id = ? AND load_cpu_s IS NOT NULL", (run_id,)
    )
    assert rows
    for load_cpu_s, wait_s in rows:
        assert load_cpu_s >= 0.8 * 2 * 0.004, "the helper's CPU is counted (the training thread mostly waits)"
        assert load_cpu_s <= wait_s * 1.5 + 0.002


@needs_schedstat
def test_the_training_threads_wait_for_a_core_is_recorded_on_sampled_batches(db_path):
    loader = DataLoader(SlowDataset(16), batch_size=2)
    run_id = record(loader, db_path)
    (known,) = query(db_path, "SELECT COUNT(load_runq_s) FROM batches WHERE run_id = ?", (run_id,))[0]
    assert known >= 1


def test_torch_threads_are_recorded_with_the_run(db_path):
    run_id = record(DataLoader(SlowDataset(4), batch_size=2), db_path)
    row = query(db_path, "SELECT torch_threads, interop_threads FROM runs WHERE id = ?", (run_id,))[0]
    assert row == (torch.get_num_threads(), torch.get_num_interop_threads())


@needs_schedstat
def test_process_samples_carry_cumulative_cpu_and_run_queue_of_every_thread(db_path):
    loader = DataLoader(SlowDataset(400, sleep_s=0.002), batch_size=4)
    run_id = record(loader, db_path, host_hz=20.0)
    rows = query(
        db_path,
        "SELECT cpu_s, runq_s, threads FROM proc_samples WHERE run_id = ? AND role = 'main' ORDER BY ts",
        (run_id,),
    )
    assert len(rows) >= 2
    assert all(r[0] is not None and r[1] is not None and r[2] >= 2 for r in rows)  # training + monitor thread at least
    assert rows[-1][0] >= rows[0][0]

"""The /proc fast path of the host sampler: exact on a written /proc, and the same figures as psutil on this machine's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from collector.sample import procfs, schedstat
from collector.sample.host import HostSampler

needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="Linux /proc only")

CORE_LINE = "cpu{n} {user} 0 {system} {idle} {iowait} 0 0 0 {guest} 0\n"


def write_machine(root: Path, cores: list[dict[str, int]], available_kb: int, disks: dict[str, int]) -> None:
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0\n"]  # the all-cores line: ignored
    lines += [CORE_LINE.format(n=n, **ticks) for n, ticks in enumerate(cores)]
    (root / "stat").write_text("".join(lines) + "intr 1 2 3\nctxt 5\n")
    (root / "meminfo").write_text(f"MemTotal:  999 kB\nMemFree:  1 kB\nMemAvailable:  {available_kb} kB\n")
    (root / "diskstats").write_text(
        "".join(f"   8  {i} {name} 10 0 {sectors} 5 0 0 0 0 0 0 0\n" for i, (name, sectors) in enumerate(disks.items()))
    )


def test_machine_figures_from_a_written_proc(tmp_path):
    (tmp_path / "block" / "sda").mkdir(parents=True)
    ticks = {"user": 100, "system": 50, "idle": 800, "iowait": 50, "guest": 0}
    write_machine(tmp_path, [ticks, ticks], 2048, {"sda": 1000, "sda1": 600, "sda2": 400})
    machine = procfs.Machine(str(tmp_path), sys_block=str(tmp_path / "block"))
    # Core 0: 30 busy ticks of 100, iowait counted idle; core 1: 75 of 100, its guest ticks
    # (already inside user) not counted twice.
    write_machine(
        tmp_path,
        [
            {"user": 120, "system": 60, "idle": 860, "iowait": 60, "guest": 0},
            {"user": 175, "system": 50, "idle": 825, "iowait": 50, "guest": 40},
        ],
        1024,
        {"sda": 3000, "sda1": 2000, "sda2": 1000},
    )
    assert machine.per_core_pct() == (30.0, 75.0)
    assert machine.available_bytes() == 1024 * 1024
    assert machine.disk_read_bytes() == 3000 * 512  # the whole disk, not its partitions again
    machine.close()
    assert machine.per_core_pct() is None and machine.available_bytes() is None


def test_a_disk_that_appears_is_counted(tmp_path):
    (tmp_path / "block" / "sda").mkdir(parents=True)
    ticks = {"user": 1, "system": 1, "idle": 1, "iowait": 0, "guest": 0}
    write_machine(tmp_path, [ticks], 1, {"sda": 10})
    machine = procfs.Machine(str(tmp_path), sys_block=str(tmp_path / "block"))
    assert machine.disk_read_bytes() == 10 * 512
    (tmp_path / "block" / "sdb").mkdir()
    write_machine(tmp_path, [ticks], 1, {"sda": 10, "sdb": 5})
    assert machine.disk_read_bytes() == 15 * 512


def test_a_process_stat_with_spaces_and_parentheses_in_its_name(tmp_path):
    (tmp_path / "7").mkdir()
    # Fields after the name: state, ppid ... utime (14th field of the line) and stime (15th), rss (24th).
    rest = ["S", "1"] + ["0"] * 9 + ["250", "150"] + ["0"] * 8 + ["300"] + ["0"] * 20
    (tmp_path / "7" / "stat").write_text("7 (my (odd) name) " + " ".join(rest) + "\n")
    process = procfs.Process(7, str(tmp_path))
    assert process.cpu_and_rss() == ((250 + 150) / procfs.CLOCK_TICKS, 300 * procfs.PAGE_BYTES)


def test_thread_files_follow_the_threads_that_come_and_go(tmp_path):
    task = tmp_path / "7" / "task"
    for tid, text in {"7": "100 10 1", "8": "200 20 1"}.items():
        (task / tid).mkdir(parents=True)
        (task / tid / "schedstat").write_text(text)
    (tmp_path / "7" / "stat").write_text("7 (x) S " + "0 " * 40)
    process = procfs.Process(7, str(tmp_path))
    assert process.thread_totals() == (300 / 1e9, 30 / 1e9, 2)
    (task / "8" / "schedstat").unlink()
    (task / "8").rmdir()
    (task / "9").mkdir()
    (task / "9" / "schedstat").write_text("1000 1000 1")
    (task / "7" / "schedstat").write_text("150 15 2")  # read again through the descriptor kept open
    assert process.thread_totals() == (1150 / 1e9, 1015 / 1e9, 2)
    assert set(process._threads) == {"7", "9"}
    assert schedstat.process_ns(7, str(tmp_path)) == (1150, 1015)  # the tuner's own reading: the same sum
    assert schedstat.process_ns(8, str(tmp_path)) is None


def test_a_missing_process_raises_where_psutil_would_say_no_such_process(tmp_path):
    with pytest.raises(FileNotFoundError):
        procfs.Process(12345, str(tmp_path))


@needs_proc
def test_this_machines_figures_match_psutils():
    machine = procfs.Machine()
    psutil.cpu_percent(percpu=True)
    end = time.process_time() + 0.3
    while time.process_time() < end:  # one core busy, so the shares are far from 0
        pass
    ours, theirs = machine.per_core_pct(), psutil.cpu_percent(percpu=True)
    assert ours is not None and len(ours) == len(theirs)
    assert sum(ours) == pytest.approx(sum(theirs), abs=10 * len(ours))
    assert sum(ours) > 50
    assert machine.available_bytes() == pytest.approx(psutil.virtual_memory().available, abs=256 << 20)
    counters = psutil.disk_io_counters()
    if counters is not None:
        assert machine.disk_read_bytes() == pytest.approx(counters.read_bytes, abs=64 << 20)
    me = procfs.Process(os.getpid())
    cpu_s, rss = me.cpu_and_rss()
    times = psutil.Process().cpu_times()
    assert cpu_s == pytest.approx(times.user + times.system, abs=0.05)
    assert rss == pytest.approx(psutil.Process().memory_info().rss, rel=0.05)
    totals = me.thread_totals()
    if totals is not None:  # a kernel with schedstat
        assert totals[2] == psutil.Process().num_threads()


@needs_proc
def test_a_process_that_ended_reads_as_gone_through_its_open_files():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    process = procfs.Process(child.pid)
    assert process.cpu_and_rss() is not None
    child.communicate(b"")
    assert process.cpu_and_rss() is None  # the descriptor names the process, not whoever gets its pid next
    process.close()


BUSY = "print('up', flush=True)\nwhile True: pass"


@needs_proc
def test_host_sampler_through_proc_measures_a_busy_child_and_forgets_it_when_gone():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    busy = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE)
    try:
        assert busy.stdout is not None and busy.stdout.readline() == b"up\n"  # past exec: its memory is mapped
        sampler = HostSampler(lambda key, text: pytest.fail(f"{key}: {text}"), main_pid=child.pid)
        first = sampler.processes(time.time(), {busy.pid: 0}, detail=True)
        assert [s.cpu_pct for s in first] == [None, None]
        assert first[1].uss_bytes and first[1].rss_bytes
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            time.sleep(0.05)
        second = {s.pid: s for s in sampler.processes(time.time(), {busy.pid: 0}, detail=False)}
        assert second[busy.pid].cpu_pct > 25 and second[busy.pid].uss_bytes is None
        busy.kill()
        busy.wait()
        third = sampler.processes(time.time(), {busy.pid: 0}, detail=False)
        assert [s.pid for s in third] == [child.pid]
        assert busy.pid not in sampler._files and busy.pid not in sampler._last_cpu
        sampler.close()
    finally:
        busy.kill()
        child.kill()
        busy.wait()
        child.wait()


def test_without_proc_psutil_gives_the_same_kinds_of_figures():
    sampler = HostSampler(lambda key, text: pytest.fail(f"{key}: {text}"), proc=None)
    assert sampler._machine is None
    first = sampler.processes(time.time(), {}, detail=False)
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    (second,) = sampler.processes(time.time(), {}, detail=False)
    host = sampler.host(time.time())
    assert first[0].cpu_pct is None and second.cpu_pct > 20 and second.rss_bytes > 0
    assert second.cpu_s is None  # schedstat comes through /proc only
    assert host.mem_available_bytes > 0 and host.per_core_pct is not None
    sampler.close()

"""Background sampling: NVML (fake and missing), psutil faults, and CUDA idle from events."""

from __future__ import annotations

import inspect
import json
import os
import sqlite3
import time
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from fake_nvml import FakeNvml
from fixture_datasets import SlowDataset
from helpers import collector_messages, query, wait_until
from torch.utils.data import DataLoader

import collector
from collector.record import cuda_idle
from collector.record import monitor as monitor_module
from collector.record.cuda_idle import IdleResolver
from collector.record.watch import watch_with
from collector.sample.host import HostSampler
from collector.sample.nvml import Nvml
from collector.sample.sampler import Rates, Sampler
from collector.store.reader import Reader
from collector.writer.frames import Close, decode_frame, encode_frame, frame_bytes
from collector.writer.pipe import WAITED, FrameReader


def with_fake_nvml(fake):
    """watch() arguments for a fake NVML: fakes reach only a writer in this process."""
    return {"nvml_factory": lambda warn: Nvml(warn, pynvml=fake), "writer_in_process": True}


def test_fake_nvml_keeps_every_buffered_sample_with_memory_and_power(db_path, fake_nvml):
    for i in range(5):
        fake_nvml.push(0, 1_000_000 + i * 166_000, 30 + i * 10)
    fake_nvml.push(1, 1_000_000, 99)
    with watch_with([1, 2], db=db_path, host_hz=0, **with_fake_nvml(fake_nvml)) as watched:
        list(watched)
        run_id = watched.run_id
    rows = query(db_path, "SELECT gpu, ts, util_pct, mem_used_bytes, mem_total_bytes, power_w FROM gpu_samples")
    gpu0 = [r for r in rows if r[0] == 0]
    utils = [r[2] for r in gpu0 if r[2] is not None]
    assert utils == [30.0, 40.0, 50.0, 60.0, 70.0]  # each kept once, in order; no new sample is NULL
    assert gpu0[0][1] == pytest.approx(1.0) and gpu0[1][1] == pytest.approx(1.166)
    assert {r[3] for r in rows if r[0] == 1} == {2 * 2**30}
    assert all(r[4] == 80 * 2**30 and r[5] == 250.0 for r in rows)
    gpus = Reader(db_path).run(run_id)["host"]["gpus"]
    assert [g["name"] for g in gpus] == ["Fake H200", "Fake H200"] and gpus[0]["driver"] == "550.54.15"


def test_utilisation_rates_are_the_fallback_without_a_sample_buffer(db_path):
    fake = FakeNvml(gpus=1, samples=False)
    with watch_with([1], db=db_path, host_hz=0, **with_fake_nvml(fake)) as watched:
        list(watched)
    assert {r[0] for r in query(db_path, "SELECT util_pct FROM gpu_samples")} == {42.0}


def test_no_nvml_on_a_cpu_only_process_is_recorded_as_no_gpu_without_a_warning(db_path, collector_warnings):
    fake = FakeNvml(init_error=OSError("libnvidia-ml.so.1: cannot open shared object file"))
    loader = DataLoader(SlowDataset(6), batch_size=2)
    with watch_with(loader, db=db_path, host_hz=0, cuda_in_use=lambda: False, **with_fake_nvml(fake)) as watched:
        for _ in range(3):
            list(watched)
    assert collector_messages(collector_warnings) == []
    assert query(db_path, "SELECT COUNT(*) FROM gpu_samples") == [(0,)]
    assert query(db_path, "SELECT COUNT(*) FROM batches") == [(9,)]
    run = Reader(db_path).run("latest")
    assert run["host"]["gpus"] == [] and "NVML is not available" in run["host"]["no_gpu"]
    assert "libnvidia-ml.so.1" in run["host"]["no_gpu"] and run["warnings"] == []


def test_no_nvml_while_cuda_is_in_use_warns_once_per_process_with_the_cause(db_path, collector_warnings, monkeypatch):
    monkeypatch.setattr(monitor_module, "_warned_in_process", set())
    fake = FakeNvml(init_error=OSError("libnvidia-ml.so.1: cannot open shared object file"))
    cuda = {"cuda_in_use": lambda: True, **with_fake_nvml(fake)}
    watched = watch_with(DataLoader(SlowDataset(6), batch_size=2), db=db_path, host_hz=0, **cuda)
    watch_line = inspect.currentframe().f_lineno - 1
    with watched:
        list(watched)
    with watch_with([1, 2], db=db_path, host_hz=0, **cuda) as second:  # a second loader: no second warning
        list(second)
    messages = collector_messages(collector_warnings)
    assert len(messages) == 1 and "NVML is not available" in messages[0] and "nvidia-ml-py" in messages[0]
    assert "libnvidia-ml.so.1: cannot open shared object file" in messages[0]
    # raised in the monitor thread, it points at the user's watch() line, not at the collector
    assert [(w.filename, w.lineno) for w in collector_warnings] == [(__file__, watch_line)]
    assert "NVML is not available" in Reader(db_path).run(watched.run_id)["warnings"][0]


def test_nvml_failing_mid_run_nulls_memory_and_warns_once(collector_warnings):
    fake = FakeNvml(gpus=1, samples=False)
    fake.fail_memory_after = 1
    warned = []
    nvml = Nvml(lambda key, msg: warned.append(key), pynvml=fake)
    first = nvml.sample(1.0)
    later = [nvml.sample(2.0 + i) for i in range(3)]
    assert first[0].mem_used_bytes == 2**30
    assert all(s[0].mem_used_bytes is None and s[0].util_pct == 42.0 for s in later)
    assert set(warned) == {"nvml-nvmlDeviceGetMemoryInfo"}


class DeniedProcess:
    def __init__(self, pid):
        raise psutil.AccessDenied(pid)


def test_access_denied_on_processes_nulls_their_fields(collector_warnings):
    fake_psutil = SimpleNamespace(
        cpu_percent=psutil.cpu_percent,
        virtual_memory=psutil.virtual_memory,
        disk_io_counters=lambda: None,
        Process=DeniedProcess,
        Error=psutil.Error,
        AccessDenied=psutil.AccessDenied,
        NoSuchProcess=psutil.NoSuchProcess,
    )
    warned = []
    sampler = HostSampler(lambda key, msg: warned.append(key), psutil=fake_psutil, main_pid=1, proc=None)
    procs = sampler.processes(10.0, {2: 0}, detail=True)
    assert [(p.pid, p.role, p.cpu_pct, p.rss_bytes) for p in procs] == [
        (1, "main", None, None),
        (2, "worker", None, None),
    ]
    host = sampler.host(10.0)
    assert host.mem_available_bytes > 0 and host.disk_read_bps is None
    assert warned.count("psutil-access") == 2


def epochs_until_sampled(watched: Any, db_path: str, samples: int = 3, timeout_s: float = 60.0) -> None:
    """Epochs until the file holds ``samples`` host samples: on a busy machine the polite writer boots and samples late."""
    deadline = time.monotonic() + timeout_s
    while True:
        list(watched)
        try:
            if query(db_path, "SELECT COUNT(*) FROM host_samples")[0][0] >= samples:
                return
        except sqlite3.OperationalError:  # no table yet: the writer has not created the file
            pass
        assert time.monotonic() < deadline, f"fewer than {samples} host samples in {timeout_s:g} s"


def test_host_and_process_samples_are_recorded(db_path):
    loader = DataLoader(SlowDataset(40, sleep_s=0.02), batch_size=2, num_workers=2, persistent_workers=True)
    with collector.watch(loader, db=db_path, gpu_hz=0, host_hz=20) as watched:
        epochs_until_sampled(watched, db_path)
        run_id = watched.run_id
    reader = Reader(db_path)
    host = reader.host_samples(run_id)
    assert len(host) >= 3 and host.mem_available_bytes.min() > 0
    assert all(len(cores) == psutil.cpu_count() for cores in host.per_core_pct)
    procs = reader.proc_samples(run_id)
    assert set(procs.role) == {"main", "worker", "writer"}  # the writer samples itself: ours, not another's CPU
    assert procs[procs.role == "writer"].pid.nunique() == 1 and os.getpid() not in set(
        procs[procs.role == "writer"].pid
    )
    assert set(procs[procs.role == "worker"].worker_id) <= {0, 1}
    assert procs.uss_bytes.notna().any()  # the first detailed sample


def test_the_writer_process_samples_the_host_not_the_training_process(db_path, monkeypatch):
    def not_here(*args, **kwargs):
        raise AssertionError("host sampled inside the training process")

    monkeypatch.setattr(HostSampler, "host", not_here)  # this process only: the writer has its own
    loader = DataLoader(SlowDataset(20, sleep_s=0.02), batch_size=2, num_workers=1, persistent_workers=True)
    with collector.watch(loader, db=db_path, gpu_hz=0, host_hz=20) as watched:
        epochs_until_sampled(watched, db_path)
    (workers,) = query(db_path, "SELECT worker_pids FROM epochs")[0]
    assert len(query(db_path, "SELECT * FROM host_samples")) >= 3
    assert {pid for (pid,) in query(db_path, "SELECT DISTINCT pid FROM proc_samples WHERE role != 'writer'")} == {
        os.getpid(),
        *json.loads(workers),
    }
    (stored,) = query(db_path, "SELECT warnings FROM runs")[0]
    assert [w for w in json.loads(stored or "[]") if not w.startswith("note: ")] == []  # a busy machine is noted


def test_missing_nvml_in_the_writer_process_is_recorded_as_no_gpu_and_not_warned(db_path, collector_warnings):
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        pass  # no driver, no library: what this test is about
    else:
        pytest.skip("this machine has a working NVML: the test needs one without a driver or library")
    with collector.watch(range(3), db=db_path, host_hz=0) as watched:
        list(watched)
    assert collector_messages(collector_warnings) == []
    assert query(db_path, "SELECT COUNT(*) FROM gpu_samples") == [(0,)]
    assert query(db_path, "SELECT warnings FROM runs") == [(None,)]
    assert "NVML is not available" in Reader(db_path).run(watched.run_id)["host"]["no_gpu"]


class CostlyHost:
    """A host sampler whose USS/PSS reads cost ``detail_cpu_s`` of (fake) CPU time."""

    def __init__(self, cpu, detail_cpu_s):
        self.cpu, self.detail_cpu_s, self.details = cpu, detail_cpu_s, []

    def host(self, now):
        return SimpleNamespace(ts=now, cpu_pct=1.0, per_core_pct=(1.0,), mem_available_bytes=1, disk_read_bps=None)

    def processes(self, now, workers, detail, ours=None):
        if detail:
            self.details.append(now)
            self.cpu[0] += self.detail_cpu_s
        return []

    def follow(self, pid, since=None):
        pass

    def close(self):
        pass


@pytest.mark.parametrize(("detail_cpu_s", "expected_gap_s"), [(0.004, 5.0), (0.04, 40.0)])
def test_uss_pss_reads_back_off_when_they_cost_more_than_their_budget(detail_cpu_s, expected_gap_s):
    now, cpu = [0.0], [0.0]
    host = CostlyHost(cpu, detail_cpu_s)
    sampler = Sampler(
        Rates(gpu_hz=0, host_hz=2),
        main_pid=1,
        host_facts={},
        warn=lambda key, text: None,
        host_factory=lambda warn: host,
        wall_clock=lambda: now[0],
        clock=lambda: now[0],
        cpu_clock=lambda: cpu[0],
    )
    while now[0] < 10.0:
        now[0] = sampler.due()
        sampler.sample()
    assert host.details == []  # no worker yet: nothing to read USS/PSS of
    sampler.see_workers(0, [2, 3])
    while now[0] < 120.0:
        now[0] = sampler.due()
        sampler.sample()
    gaps = {round(b - a, 1) for a, b in zip(host.details, host.details[1:], strict=False)}
    assert host.details[0] == 10.5 and gaps == {expected_gap_s}  # 1 ms of CPU a second at most: 40 ms -> every 40 s
    assert len(sampler.take()[0]["host_samples"]) == 241


class BusyHost(CostlyHost):
    """A host whose whole-machine CPU follows ``busy(now)``."""

    def __init__(self, now, busy):
        super().__init__([0.0], 0.0)
        self.now, self.busy, self.samples = now, busy, []

    def host(self, now):
        self.samples.append(now)
        pct = self.busy(now)
        return SimpleNamespace(ts=now, cpu_pct=pct, per_core_pct=(pct,), mem_available_bytes=1, disk_read_bps=None)


def test_sampling_backs_off_while_the_machine_is_saturated_and_returns_when_it_is_not():
    now, notes = [0.0], []
    host = BusyHost(now, lambda t: 99.0 if t < 30.0 else 40.0)
    sampler = Sampler(
        Rates(gpu_hz=0, host_hz=2),
        main_pid=1,
        host_facts={},
        warn=lambda key, text: notes.append(key),
        host_factory=lambda warn: host,
        wall_clock=lambda: now[0],
        clock=lambda: now[0],
    )
    sampler.see_workers(0, [2])
    while now[0] < 60.0:
        now[0] = sampler.due()
        sampler.sample()
    gaps = [round(b - a, 1) for a, b in zip(host.samples, host.samples[1:], strict=False)]
    # 2 Hz asked: doubled after each saturated sample but the first (its share is over the writer's start), up to 8x
    assert gaps[:5] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert max(gaps) == 4.0 and gaps[-1] == 0.5  # back to the asked rate once the machine eased
    assert sum(t < 30.0 for t in host.samples) < 12  # against 60 at the asked rate
    assert all(t >= 30.0 for t in host.details[1:])  # no USS/PSS reads while saturated
    assert notes == ["note-sampling-slowed"]  # said once


def test_a_saturated_machine_is_noted_with_the_run_and_not_warned(db_path, collector_warnings):
    host = BusyHost([0.0], lambda t: 100.0)
    watched = watch_with(range(5), db=db_path, gpu_hz=0, host_factory=lambda warn: host, writer_in_process=True)
    assert watched.run_id is not None  # the run starts (with its sampling) now, not at the first iteration
    assert wait_until(lambda: len(host.samples) >= 3)  # the first reads no load (NOTE [ Saturated machine ])
    list(watched)
    watched.close()
    assert collector_messages(collector_warnings) == []
    (stored,) = query(db_path, "SELECT warnings FROM runs")[0]
    assert "CPU was saturated" in json.loads(stored)[0]


def test_frame_reader_waits_no_longer_than_asked_and_ends_with_its_input():
    read_fd, write_fd = os.pipe()
    reader = FrameReader(read_fd)
    frame = frame_bytes(("flush", [1, 2, 3]))
    os.write(write_fd, frame[:5])
    started = time.monotonic()
    assert reader.next(0.05) is WAITED  # half a frame is not a frame
    assert 0.04 < time.monotonic() - started < 2.0
    os.write(write_fd, frame[5:] + encode_frame(Close()))
    assert reader.next(0.05) == ("flush", [1, 2, 3])
    assert decode_frame(reader.next(None)) == Close()
    os.close(write_fd)
    assert reader.next(None) is None
    os.close(read_fd)


class FakeGpu:
    """A GPU clock for fake CUDA events: work queued by the step keeps it busy."""

    busy_until = 0.0


class FakeEvent:
    def __init__(self):
        self.at = None

    def record(self):
        self.at = max(time.perf_counter(), FakeGpu.busy_until)

    def query(self):
        return self.at is not None and time.perf_counter() >= self.at

    def elapsed_time(self, other):  # in milliseconds, like torch.cuda.Event
        return (other.at - self.at) * 1000.0


def test_gpu_idle_during_waits_comes_from_events_without_sync(db_path, monkeypatch):
    monkeypatch.setattr(cuda_idle, "cuda_active", lambda: True)
    monkeypatch.setattr(cuda_idle, "torch_event", FakeEvent)
    loader = DataLoader(SlowDataset(6, sleep_s=0.03), batch_size=1)
    with collector.watch(loader, db=db_path, gpu_hz=0, host_hz=0) as watched:
        for _ in watched:
            FakeGpu.busy_until = time.perf_counter() + 0.01  # the step queued 10 ms of kernels
        run_id = watched.run_id
    idle = Reader(db_path).batches(run_id).gpu_idle_s
    # the first wait starts with an idle GPU; later ones overlap 10 ms of queued work
    assert idle.iloc[0] >= 0.028
    assert all(0.012 <= v <= 0.05 for v in idle.iloc[1:])


def test_idle_resolver_waits_for_the_gpu_and_gives_up_on_stale_pairs():
    class Pending:
        done = False

        def query(self):
            return self.done

        def elapsed_time(self, other):
            return 5.0

    resolver = IdleResolver()
    first, second = Pending(), Pending()
    resolver.add("a", first, first, t_ns=0)
    resolver.add("b", second, second, t_ns=0)
    assert resolver.resolve(now_ns=1) == []
    first.done = True
    assert resolver.resolve(now_ns=2) == [("a", 0.005)]
    assert resolver.resolve(now_ns=10**12) == [("b", None)]


@pytest.mark.parametrize("entry", ["watch", "collector run", "lightning", "hf"])
@pytest.mark.slow
def test_every_entry_point_samples_at_the_default_rates_unless_told(entry):
    if entry == "watch":
        params = inspect.signature(collector.watch).parameters
        rates = (params["gpu_hz"].default, params["host_hz"].default)
    elif entry == "collector run":
        from collector.cli import build_parser

        args = build_parser().parse_args(["run", "train.py"])
        rates = (args.gpu_hz, args.host_hz)
    else:
        module = pytest.importorskip(f"collector.{'lightning' if entry == 'lightning' else 'hf'}")
        rates = astuple_rates(module.StallwatchCallback()._recording.rates)
    assert rates == astuple_rates(Rates())


def astuple_rates(rates: Rates) -> tuple[float, float]:
    return rates.gpu_hz, rates.host_hz

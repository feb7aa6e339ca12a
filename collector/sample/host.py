"""The only module that reads psutil: host CPU, memory and disk, and process CPU and memory."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any, NamedTuple

import psutil as _psutil

from collector.sample import procfs

Warn = Callable[[str, str], None]


class HostSample(NamedTuple):
    ts: float
    cpu_pct: float | None  # whole machine, 100 = every core busy
    per_core_pct: tuple[float, ...] | None
    mem_available_bytes: int | None
    disk_read_bps: float | None


class ProcSample(NamedTuple):  # a tuple: it is the proc_samples row as it stands
    ts: float
    pid: int
    role: str  # "main" | "worker", or one of the collector's own (COLLECTOR_ROLES)
    worker_id: int | None
    cpu_pct: float | None  # 100 = one core busy
    rss_bytes: int | None
    uss_bytes: int | None  # measured less often: it walks the page tables
    pss_bytes: int | None
    cpu_s: float | None = None  # cumulative, every thread: NOTE [ Where the time goes ]
    runq_s: float | None = None  # cumulative seconds runnable, waiting for a core
    threads: int | None = None


class HostSampler:
    """Samples the machine and the training processes.

    Through /proc where it can be opened (NOTE [ Sampling through /proc ] in
    procfs.py), else through psutil; ``proc=None`` and ``psutil`` are for
    tests (a fake psutil alone). USS/PSS always come from psutil.
    """

    def __init__(
        self,
        warn: Warn,
        psutil: ModuleType = _psutil,
        main_pid: int | None = None,
        proc: str | None = procfs.PROC,
    ) -> None:
        self._ps = psutil
        self._warn = warn
        self._main_pid = os.getpid() if main_pid is None else main_pid
        self._proc = proc
        self._files: dict[int, procfs.Process] = {}
        self._procs: dict[int, Any] = {}  # psutil's, for what /proc did not give
        self._last_cpu: dict[int, tuple[float, float]] = {}  # pid -> (monotonic, its CPU seconds)
        self._last_disk: tuple[float, int] | None = None
        self._machine: procfs.Machine | None = None
        if proc is not None:
            try:
                self._machine = procfs.Machine(proc)
            except OSError:  # not Linux, or a sandbox that hides /proc: psutil knows the other ways
                self._proc = None
        if self._machine is None:
            self._try("psutil-cpu", lambda: psutil.cpu_percent(percpu=True))  # primes the per-core counters

    def host(self, now: float) -> HostSample:
        ps, machine = self._ps, self._machine
        if machine is not None:
            per_core = self._known("proc-cpu", machine.per_core_pct())
            available = self._known("proc-mem", machine.available_bytes())
            read = self._known("proc-disk", machine.disk_read_bytes())
        else:
            per_core = self._try("psutil-cpu", lambda: tuple(float(v) for v in ps.cpu_percent(percpu=True)))
            available = self._try("psutil-mem", lambda: int(ps.virtual_memory().available))
            counters = self._try("psutil-disk", ps.disk_io_counters)
            read = None if counters is None else int(counters.read_bytes)
        cpu = None if not per_core else sum(per_core) / len(per_core)
        return HostSample(now, cpu, per_core, available, self._disk_rate(now, read))

    def _disk_rate(self, now: float, read: int | None) -> float | None:
        if read is None:
            return None
        last, self._last_disk = self._last_disk, (now, read)
        if last is None or now <= last[0]:
            return None
        return max(0.0, (read - last[1]) / (now - last[0]))

    def processes(
        self, now: float, workers: Mapping[int, int], detail: bool, ours: Mapping[int, str] | None = None
    ) -> list[ProcSample]:
        """The main process, each worker (pid -> worker id) and the collector's own processes (pid -> role).

        The workers' USS/PSS only when ``detail``.
        """
        wanted: dict[int, tuple[str, int | None]] = {self._main_pid: ("main", None)}
        wanted.update({pid: ("worker", worker_id) for pid, worker_id in workers.items()})
        wanted.update({pid: (role, None) for pid, role in (ours or {}).items() if pid not in wanted})
        for pid in set(self._files) | set(self._procs) | set(self._last_cpu):
            if pid not in wanted:
                self._forget(pid)
        samples = []
        for pid, (role, worker_id) in wanted.items():
            sample = self._process(now, pid, role, worker_id, detail)
            if sample is not None:
                samples.append(sample)
        return samples

    def follow(self, pid: int, since: float | None = None) -> None:
        """Measure ``pid``'s first CPU share from ``since`` (monotonic; it had run no CPU then), else from now.

        The collector's own processes: the writer (from when its machine
        counters were read, so its first share covers the host's first
        interval) and the tuner's helper (from its start, its imports
        included).
        """
        if since is not None:
            self._last_cpu[pid] = (since, 0.0)
            return
        try:
            reading = self._read(pid)
        except (OSError, self._ps.Error):
            return  # its first sample then has no CPU share, as any process's
        if reading is not None:
            self._last_cpu[pid] = (time.monotonic(), reading[0])

    def _process(self, now: float, pid: int, role: str, worker_id: int | None, detail: bool) -> ProcSample | None:
        try:
            reading = self._read(pid)
        except (PermissionError, self._ps.AccessDenied):
            self._warn("psutil-access", f"not allowed to read process {pid}: its CPU and memory are NULL")
            return ProcSample(now, pid, role, worker_id, None, None, None, None)
        if reading is None:  # gone
            self._forget(pid)
            return None
        cpu_s, rss, totals = reading
        clock = time.monotonic()
        last = self._last_cpu.get(pid)
        self._last_cpu[pid] = (clock, cpu_s)
        cpu = None if last is None or clock <= last[0] else max(0.0, (cpu_s - last[1]) / (clock - last[0]) * 100)
        uss, pss = self._memory_detail(pid) if detail and worker_id is not None else (None, None)
        return ProcSample(now, pid, role, worker_id, cpu, rss, uss, pss, *(totals or ()))

    def _read(self, pid: int) -> tuple[float, int, tuple[float, float, int] | None] | None:
        """(CPU seconds, RSS, schedstat totals or None) of ``pid``; None once it is gone."""
        if self._proc is not None:
            files = self._files.get(pid)
            if files is None:
                try:
                    files = self._files[pid] = procfs.Process(pid, self._proc)
                except FileNotFoundError:
                    return None
            cpu_rss = files.cpu_and_rss()
            return None if cpu_rss is None else (*cpu_rss, files.thread_totals())
        try:
            proc = self._psutil_process(pid)
            times = proc.cpu_times()
            return float(times.user + times.system), int(proc.memory_info().rss), None
        except self._ps.NoSuchProcess:
            return None

    def _memory_detail(self, pid: int) -> tuple[int | None, int | None]:
        try:
            full = self._psutil_process(pid).memory_full_info()
            return int(full.uss), int(getattr(full, "pss", 0)) or None
        except (self._ps.Error, OSError):
            return None, None

    def _psutil_process(self, pid: int) -> Any:
        proc = self._procs.get(pid)
        if proc is None:
            proc = self._procs[pid] = self._ps.Process(pid)
        return proc

    def _forget(self, pid: int) -> None:
        files = self._files.pop(pid, None)
        if files is not None:
            files.close()
        self._procs.pop(pid, None)
        self._last_cpu.pop(pid, None)

    def close(self) -> None:
        for pid in list(self._files):
            self._forget(pid)
        if self._machine is not None:
            self._machine.close()

    def _known(self, key: str, value: Any) -> Any:
        if value is None:
            self._warn(key, "host metric unavailable (a /proc file could not be read); stored as NULL")
        return value

    def _try(self, key: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except (self._ps.Error, OSError) as exc:  # a metric the OS will not give is NULL
            self._warn(key, f"host metric unavailable ({exc}); stored as NULL")
            return None


def host_facts() -> dict[str, Any]:
    """Cores (physical, logical, usable) and RAM, for the run's host record."""
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {
        "physical_cores": _psutil.cpu_count(logical=False),
        "logical_cores": _psutil.cpu_count(logical=True),
        "usable_cores": usable,
        "ram_bytes": int(_psutil.virtual_memory().total),
    }


def end_orphans(pids: Iterable[int], parent_pid: int, since: float) -> list[int]:
    """SIGTERM the DataLoader workers a dead training process left behind; the pids ended.

    Only processes started since ``since`` (Unix seconds) whose parent is no
    longer ``parent_pid``: a worker stuck flushing its result queue to a dead
    parent would otherwise never exit (NOTE [ Orphaned workers ] in
    collector/writer/child.py).
    """
    ended = []
    for pid in pids:
        try:
            proc = _psutil.Process(pid)
            if proc.ppid() != parent_pid and proc.create_time() >= since - 1.0:
                proc.terminate()
                ended.append(pid)
        except (_psutil.Error, OSError):  # gone already, or not ours to end
            continue
    return ended


def launcher_started_at(psutil: ModuleType = _psutil) -> float | None:
    """Start time of the oldest ancestor (this process included) running this Python: the job's launcher.

    torchrun's workers, torch.multiprocessing.spawn's children and the ranks
    Lightning re-executes all descend from one such process. None when psutil
    cannot read the process table.
    """
    try:
        proc = psutil.Process()
        exe = proc.exe()
        oldest = proc
        for parent in proc.parents():
            try:
                if parent.exe() != exe:
                    break
            except (psutil.Error, OSError):  # init, another user's process: not our launcher
                break
            oldest = parent
        return float(oldest.create_time())
    except (psutil.Error, OSError):
        return None

"""The only module that reads psutil: host CPU, memory and disk, and process CPU and memory."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import psutil as _psutil

from collector.sample.schedstat import process_totals

Warn = Callable[[str, str], None]


@dataclass(frozen=True)
class HostSample:
    ts: float
    cpu_pct: float | None  # whole machine, 100 = every core busy
    per_core_pct: tuple[float, ...] | None
    mem_available_bytes: int | None
    disk_read_bps: float | None


@dataclass(frozen=True)
class ProcSample:
    ts: float
    pid: int
    role: str  # "main" | "worker"
    worker_id: int | None
    cpu_pct: float | None  # 100 = one core busy
    rss_bytes: int | None
    uss_bytes: int | None  # measured less often: it walks the page tables
    pss_bytes: int | None
    cpu_s: float | None = None  # cumulative, every thread: NOTE [ Where the time goes ]
    runq_s: float | None = None  # cumulative seconds runnable, waiting for a core
    threads: int | None = None


class HostSampler:
    """Samples the machine and the training processes; ``psutil`` is a parameter for tests."""

    def __init__(
        self,
        warn: Warn,
        psutil: ModuleType = _psutil,
        main_pid: int | None = None,
        schedstat: Callable[[int], tuple[float, float, int] | None] = process_totals,
    ) -> None:
        self._schedstat = schedstat
        self._ps = psutil
        self._warn = warn
        self._main_pid = os.getpid() if main_pid is None else main_pid
        self._procs: dict[int, Any] = {}
        self._last_disk: tuple[float, int] | None = None
        try:
            psutil.cpu_percent(percpu=True)  # primes the per-core counters
        except (psutil.Error, OSError) as exc:  # a sandbox may hide /proc/stat
            warn("psutil-cpu", f"host CPU figures are off: {exc}")

    def host(self, now: float) -> HostSample:
        ps = self._ps
        per_core = self._try("psutil-cpu", lambda: tuple(float(v) for v in ps.cpu_percent(percpu=True)))
        cpu = None if not per_core else sum(per_core) / len(per_core)
        available = self._try("psutil-mem", lambda: int(ps.virtual_memory().available))
        return HostSample(now, cpu, per_core, available, self._disk_rate(now))

    def _disk_rate(self, now: float) -> float | None:
        counters = self._try("psutil-disk", self._ps.disk_io_counters)
        if counters is None:
            return None
        read = int(counters.read_bytes)
        last, self._last_disk = self._last_disk, (now, read)
        if last is None or now <= last[0]:
            return None
        return max(0.0, (read - last[1]) / (now - last[0]))

    def processes(self, now: float, workers: Mapping[int, int], detail: bool) -> list[ProcSample]:
        """The main process and each worker (pid -> worker id); USS/PSS only when ``detail``."""
        wanted = {self._main_pid: None, **workers}
        for pid in list(self._procs):
            if pid not in wanted:
                del self._procs[pid]
        samples = []
        for pid, worker_id in wanted.items():
            sample = self._process(now, pid, worker_id, detail)
            if sample is not None:
                samples.append(sample)
        return samples

    def _process(self, now: float, pid: int, worker_id: int | None, detail: bool) -> ProcSample | None:
        ps = self._ps
        try:
            proc = self._procs.get(pid)
            if proc is None:
                proc = self._procs[pid] = ps.Process(pid)
                proc.cpu_percent()  # first call only primes the counter
                cpu = None
            else:
                cpu = float(proc.cpu_percent())
            rss = int(proc.memory_info().rss)
        except ps.NoSuchProcess:
            self._procs.pop(pid, None)
            return None
        except ps.AccessDenied:
            self._warn("psutil-access", f"not allowed to read process {pid}: its CPU and memory are NULL")
            return ProcSample(now, pid, "main" if worker_id is None else "worker", worker_id, None, None, None, None)
        uss = pss = None
        if detail:
            try:
                full = proc.memory_full_info()
                uss = int(full.uss)
                pss = int(getattr(full, "pss", 0)) or None
            except (ps.AccessDenied, ps.NoSuchProcess, OSError):
                pass
        role = "main" if worker_id is None else "worker"
        totals = self._schedstat(pid)
        if totals is None:
            return ProcSample(now, pid, role, worker_id, cpu, rss, uss, pss)
        return ProcSample(now, pid, role, worker_id, cpu, rss, uss, pss, *totals)

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

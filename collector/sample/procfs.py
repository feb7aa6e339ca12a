"""Linux's /proc read through descriptors kept open: the host sampler's fast path where /proc exists."""

from __future__ import annotations

import os

from collector.sample.schedstat import PROC, parse

# NOTE [ Sampling through /proc ]
# The writer samples the machine and every training process twice a second.
# Through psutil a sample of the machine and of a main process with 8
# workers cost 2.5 ms of CPU (measured cold, as a 2 Hz sampler runs): each
# call opens, reads and closes a file, parses every field into a namedtuple
# and checks the pid. That was most of the writer's CPU, on the cores the
# job fills. Here each file is opened once and read again with one pread
# (procfs regenerates a file read from offset 0), and only the fields the
# sampler stores are parsed: the same figures for a third of the CPU
# (0.84 -> 0.28 ms the machine, 1.63 -> 0.57 ms 9 processes; see
# bench/bench_background.py). A figure that cannot be read is None (stored
# as NULL, with one warning); where /proc cannot be opened at all,
# HostSampler uses psutil.

SECTOR_BYTES = 512  # /proc/diskstats counts 512-byte sectors whatever the device's own size
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class ProcFile:
    """One /proc file, opened once; ``read`` re-reads it whole (None once it cannot be read)."""

    def __init__(self, path: str, size: int = 4096) -> None:
        self.fd: int | None = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # raises: the caller decides
        self._size = size

    def read(self) -> bytes | None:
        if self.fd is None:
            return None
        try:
            return os.pread(self.fd, self._size, 0)
        except OSError:  # ESRCH: the process or thread ended
            self.close()
            return None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Machine:
    """Per-core busy percentages, available memory and bytes read from disk, as psutil computes them."""

    def __init__(self, proc: str = PROC, sys_block: str = "/sys/block") -> None:
        self._stat = ProcFile(f"{proc}/stat", 1 << 16)
        self._meminfo = ProcFile(f"{proc}/meminfo", 1 << 14)
        self._diskstats = ProcFile(f"{proc}/diskstats", 1 << 16)
        self._sys_block = sys_block
        self._disks: frozenset[str] | None = None
        self._names: frozenset[str] = frozenset()
        self._last_cores = self._cores()

    def per_core_pct(self) -> tuple[float, ...] | None:
        """Each core's busy share since the last call, in %: (total - idle - iowait) / total, guests not twice."""
        now, last = self._cores(), self._last_cores
        self._last_cores = now
        if now is None or last is None or len(now) != len(last):
            return None
        return tuple(_busy_pct(t0, t1) for t0, t1 in zip(last, now, strict=True))

    def _cores(self) -> list[tuple[int, int]] | None:
        raw = self._stat.read()
        if raw is None:
            return None
        cores = []
        for line in raw.split(b"\n"):
            if line.startswith(b"cpu") and not line.startswith(b"cpu "):
                ticks = [int(v) for v in line.split()[1:]]
                total = sum(ticks[:8])  # guest and guest_nice are already in user and nice
                cores.append((total, ticks[3] + (ticks[4] if len(ticks) > 4 else 0)))
        return cores or None

    def available_bytes(self) -> int | None:
        raw = self._meminfo.read()
        start = -1 if raw is None else raw.find(b"MemAvailable:")
        if raw is None or start < 0:
            return None
        return int(raw[start:].split(None, 2)[1]) * 1024

    def disk_read_bytes(self) -> int | None:
        """Bytes read, summed over whole disks (those in /sys/block: their partitions are in them already)."""
        raw = self._diskstats.read()
        if raw is None:
            return None
        rows = [line.split() for line in raw.splitlines()]
        names = frozenset(row[2].decode() for row in rows if len(row) > 5)
        if self._disks is None or names != self._names:  # a disk came or went: list the whole ones again
            self._names = names
            try:
                self._disks = frozenset(name.replace("!", "/") for name in os.listdir(self._sys_block))
            except OSError:
                self._disks = names
        disks = self._disks
        return sum(int(row[5]) for row in rows if len(row) > 5 and row[2].decode() in disks) * SECTOR_BYTES

    def close(self) -> None:
        for handle in (self._stat, self._meminfo, self._diskstats):
            handle.close()


def _busy_pct(before: tuple[int, int], after: tuple[int, int]) -> float:
    total, idle = after[0] - before[0], after[1] - before[1]
    return 0.0 if total <= 0 else round(max(0.0, (total - idle) / total * 100), 1)


class Process:
    """One process: CPU seconds and RSS from its stat, and its threads' schedstat sums.

    The constructor raises FileNotFoundError (no such process) or
    PermissionError, as ``os.open`` does.
    """

    def __init__(self, pid: int, proc: str = PROC) -> None:
        self._dir = f"{proc}/{pid}"
        self._stat = ProcFile(f"{self._dir}/stat", 1024)
        self._threads: dict[str, ProcFile] = {}

    def cpu_and_rss(self) -> tuple[float, int] | None:
        """(user + system CPU seconds over the process's life, RSS bytes); None once it has ended."""
        raw = self._stat.read()
        if not raw:
            return None
        fields = raw[raw.rindex(b")") + 2 :].split()  # the name in parentheses may hold spaces
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS, int(fields[21]) * PAGE_BYTES

    def thread_totals(self) -> tuple[float, float, int] | None:
        """(cpu_s, runq_s, threads) over its threads now (NOTE [ Where the time goes ] in schedstat.py)."""
        try:
            tids = os.listdir(f"{self._dir}/task")
        except OSError:
            return None
        threads = self._threads
        for tid in set(threads) - set(tids):
            threads.pop(tid).close()
        cpu = runq = count = 0
        for tid in tids:
            handle = threads.get(tid)
            if handle is None:
                try:
                    handle = threads[tid] = ProcFile(f"{self._dir}/task/{tid}/schedstat", 96)
                except OSError:
                    continue  # the thread ended meanwhile
            try:
                parsed = parse(handle.read() or b"")
            except ValueError:
                parsed = None
            if parsed is None:
                continue
            cpu, runq, count = cpu + parsed[0], runq + parsed[1], count + 1
        return (cpu / 1e9, runq / 1e9, count) if count else None

    def close(self) -> None:
        self._stat.close()
        for handle in self._threads.values():
            handle.close()
        self._threads.clear()

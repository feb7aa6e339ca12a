"""The only reader of Linux's per-thread scheduler accounting (``/proc/.../schedstat``): CPU and run-queue wait."""

from __future__ import annotations

import os
import time

# NOTE [ Where the time goes ]
# Wall time minus CPU time is not I/O: on a busy machine much of it is time a
# thread was runnable and waited for a core. Linux keeps both per thread in
# /proc/<pid>/task/<tid>/schedstat, three numbers: nanoseconds on a CPU
# (sum_exec_runtime, up to date for a running thread), nanoseconds runnable
# but waiting on a run queue (run_delay), and timeslices. So an interval of
# a thread's life splits exactly into
#     CPU + waiting for a core (run queue) + blocked (the rest: storage, sleeps, locks)
# Reading the file through a descriptor kept open costs one pread (about 1.5 us).
# Where the file does not exist (another OS, a kernel without
# CONFIG_SCHED_INFO, a sandbox), CPU comes from the thread's CPU clock and
# the run-queue wait is unknown (None, stored as NULL): nothing fails.

PROC = "/proc"


def parse(raw: bytes) -> tuple[int, int] | None:
    parts = raw.split()
    if len(parts) < 2:
        return None
    return int(parts[0]), int(parts[1])


def threads_ns(pid: int, tids: list[int], proc: str = PROC) -> tuple[int, int] | None:
    """(cpu_ns, runq_ns) summed over threads ``tids`` of ``pid`` now; None where none of them could be read."""
    cpu = runq = 0
    read = False
    for tid in tids:
        try:
            with open(f"{proc}/{pid}/task/{tid}/schedstat", "rb") as f:
                parsed = parse(f.read(96))
        except (OSError, ValueError):  # a thread that ended meanwhile; no schedstat
            continue
        if parsed is not None:
            cpu, runq, read = cpu + parsed[0], runq + parsed[1], True
    return (cpu, runq) if read else None


def process_ns(pid: int, proc: str = PROC) -> tuple[int, int] | None:
    """(cpu_ns, runq_ns) summed over every thread of ``pid`` alive now, as the sampler's ``cpu_s`` and ``runq_s``; None where unreadable."""
    try:
        tids = [int(tid) for tid in os.listdir(f"{proc}/{pid}/task")]
    except (OSError, ValueError):
        return None
    return threads_ns(pid, tids, proc)


class ThreadClock:
    """The calling thread's (cpu_ns, runq_ns); runq_ns None where schedstat is missing.

    Open it on the thread it measures (a worker's main thread, the training
    thread): the descriptor names that thread.
    """

    def __init__(self, proc: str = PROC) -> None:
        self.fd: int | None = None
        for path in (f"{proc}/thread-self/schedstat", f"{proc}/self/task/{_native_id()}/schedstat"):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if parse(os.pread(fd, 96, 0)) is not None:
                    self.fd = fd
                    break
            except (OSError, ValueError):
                pass
            os.close(fd)

    def raw(self) -> bytes | None:
        """The reading to take around the measured work: parse it later with ``split``."""
        fd = self.fd
        if fd is None:
            return None
        try:
            return os.pread(fd, 96, 0)
        except OSError:
            return None

    def read(self) -> tuple[int, int | None]:
        """(cpu_ns, runq_ns) now; runq_ns None without schedstat."""
        return split(self.raw())

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def split(raw: bytes | None) -> tuple[int, int | None]:
    """A ``ThreadClock.raw`` reading as (cpu_ns, runq_ns); the thread CPU clock where it is None."""
    if raw is not None:
        try:
            parsed = parse(raw)
        except ValueError:
            parsed = None
        if parsed is not None:
            return parsed
    return time.thread_time_ns(), None


def _native_id() -> int:
    import threading

    return threading.get_native_id()

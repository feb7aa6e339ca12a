"""The training process's reading around a sampled next(): every loading thread's CPU and the wait for a core."""

from __future__ import annotations

import time
from typing import Any

from collector.sample.schedstat import ThreadClock, split

# NOTE [ Loading CPU in the main process ]
# With num_workers=0 the batch is produced inside next(), on the training
# thread and on whatever threads it hands work to: torch's intra-op threads
# (a collate's torch.stack, a transform's tensor ops). The training thread's
# CPU clock misses those (process CPU read 1.7-1.8x the main thread's on a
# PIL + torch pipeline with torch's 2 threads), and the missing CPU would be
# booked to the step. So a sampled next() is bracketed by the process's CPU
# clock, less the collector's own monitor thread, and by the training
# thread's schedstat (NOTE [ Where the time goes ]): its run-queue wait. A
# reading is (process_cpu_ns - monitor_cpu_ns, raw schedstat); ``delta``
# turns two into (cpu_ns, runq_ns or None). Other threads of the user's (a
# logger) would count too; they rarely run inside next().


class LoadClock:
    """Opened on the thread that iterates (one per epoch); ``read`` before next(), ``delta`` after."""

    def __init__(self, monitor_ident: int | None) -> None:
        self._thread = ThreadClock()
        self._monitor_clock: int | None = None
        if monitor_ident is not None:
            try:
                self._monitor_clock = time.pthread_getcpuclockid(monitor_ident)
            except (AttributeError, OSError):  # not on this OS, or the thread ended
                self._monitor_clock = None

    def _collector_cpu_ns(self) -> int:
        clock = self._monitor_clock
        if clock is None:
            return 0
        try:
            return time.clock_gettime_ns(clock)
        except OSError:  # the monitor thread ended
            self._monitor_clock = None
            return 0

    def read(self) -> tuple[int, bytes | None]:
        return time.process_time_ns() - self._collector_cpu_ns(), self._thread.raw()

    def delta(self, before: Any) -> tuple[int | None, int | None]:
        """(loading CPU ns, training thread's run-queue ns) since ``before``; None where unknown."""
        if not isinstance(before, tuple):
            return None, None
        cpu1, raw1 = self.read()
        cpu0, raw0 = before
        runq = None
        if raw0 is not None and raw1 is not None:
            r0, r1 = split(raw0)[1], split(raw1)[1]
            if r0 is not None and r1 is not None:
                runq = max(0, r1 - r0)
        return max(0, cpu1 - cpu0), runq

    def close(self) -> None:
        self._thread.close()

    def __del__(self) -> None:
        self.close()

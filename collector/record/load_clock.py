"""The training process's reading around a sampled next(): every loading thread's CPU and the wait for a core."""

from __future__ import annotations

import threading
import time
from typing import Any

from collector.sample.schedstat import ThreadClock, split
from collector.writer.names import PREFIX

# NOTE [ Loading CPU in the main process ]
# With num_workers=0 the batch is produced inside next(), on the training
# thread and on whatever threads it hands work to: torch's intra-op threads
# (a collate's torch.stack, a transform's tensor ops). The training thread's
# CPU clock misses those (process CPU read 1.7-1.8x the main thread's on a
# PIL + torch pipeline with torch's 2 threads), and the missing CPU would be
# booked to the step. So a sampled next() is bracketed by the process's CPU
# clock, less the collector's own threads (the monitor; the stage sampler,
# NOTE [ Stages in the training process ]), and by the training
# thread's schedstat (NOTE [ Where the time goes ]): its run-queue wait. A
# reading is (process_cpu_ns - monitor_cpu_ns, raw schedstat); ``delta``
# turns two into (cpu_ns, runq_ns or None). Other threads of the user's (a
# logger) would count too; they rarely run inside next().


class LoadClock:
    """Opened on the thread that iterates (one per epoch); ``read`` before next(), ``delta`` after."""

    def __init__(self, monitor_ident: int | None) -> None:
        self._thread = ThreadClock()
        ours = {t.ident for t in threading.enumerate() if t.name.startswith(PREFIX)} | {monitor_ident}
        self._clocks: list[int] = []  # the collector's own threads in this process: the monitor, the stage sampler
        self._last: dict[int, int] = {}  # clock -> its last reading
        self._ended: set[int] = set()
        for ident in ours - {None, threading.get_ident()}:
            try:
                self._clocks.append(time.pthread_getcpuclockid(ident))  # type: ignore[arg-type]
            except (AttributeError, OSError):  # not on this OS, or the thread ended
                pass

    def _collector_cpu_ns(self) -> int:
        for clock in self._clocks:
            if clock in self._ended:
                continue
            try:
                self._last[clock] = time.clock_gettime_ns(clock)
            except OSError:  # the thread ended: its CPU stays in the process's, at its last reading
                self._ended.add(clock)
        return sum(self._last.values())

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

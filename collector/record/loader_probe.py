"""The one adapter to private DataLoader iterator state: queue depth and worker ids."""

from __future__ import annotations

import weakref
from typing import Any

# NOTE [ Private iterator state ]
# ``_MultiProcessingDataLoaderIter`` keeps (torch 2.1 to 2.13 at least):
#   _send_idx - _rcvd_idx   tasks sent to workers and not yet returned (in flight)
#   _data_queue.qsize()     batches that arrived and wait to be taken
#   _task_info              idx -> (worker,) outstanding or (worker, data) arrived
#                           out of order; len(_task_info) - _tasks_outstanding
#                           of them hold data
#   _process_data(data, worker_idx)  called once per batch handed out
# Reading them is far cheaper than any public route. If a torch version lacks
# any of them, ``attach`` returns None and those fields are stored as NULL.


class Probe:
    """Reads depth before ``next()`` and learns which worker served each batch."""

    def __init__(self, iterator: Any) -> None:
        # NOTE [ No reference cycle ]
        # The probe lives on the iterator, so it must hold it weakly, and the
        # wrapper calls the class's _process_data, not a bound method: a cycle
        # would leave the iterator to the cycle collector, which may finalise
        # its index queues before __del__ sends the workers their stop signal,
        # and every worker join then times out (5 s each).
        self._it = weakref.ref(iterator)
        self.workers = int(iterator._num_workers)
        self.capacity = int(iterator._prefetch_factor) * self.workers
        self.incarnation = -1
        self.counts = [0] * self.workers
        self.last: tuple[int, int] | None = None
        original = type(iterator)._process_data
        counts = self.counts
        it_ref = self._it
        probe_ref = weakref.ref(self)

        def process_data(data: Any, worker_idx: int) -> Any:
            seq = counts[worker_idx]
            counts[worker_idx] = seq + 1
            probe = probe_ref()
            if probe is not None:
                probe.last = (worker_idx, seq)
            return original(it_ref(), data, worker_idx)

        iterator._process_data = process_data

    def new_epoch(self) -> None:
        """Persistent workers: the same iterator serves the next epoch."""
        self.incarnation += 1
        for i in range(self.workers):
            self.counts[i] = 0

    def depth(self) -> tuple[int | None, int | None]:
        """(ready, in_flight) right now; (None, None) if torch's internals moved."""
        it: Any = self._it()
        try:
            in_flight = it._send_idx - it._rcvd_idx
            ready = it._data_queue.qsize() + len(it._task_info) - it._tasks_outstanding
        except (AttributeError, NotImplementedError, TypeError):
            return None, None
        return max(0, ready), max(0, in_flight)

    def worker_pids(self) -> list[int]:
        try:
            it: Any = self._it()
            return [int(w.pid) for w in it._workers]
        except (AttributeError, TypeError):
            return []


def attach(iterator: Any) -> Probe | None:
    """The iterator's probe (kept on it across persistent epochs), or None."""
    probe = getattr(iterator, "_stallwatch_probe", None)
    if probe is None:
        try:
            probe = Probe(iterator)
        except (AttributeError, TypeError, ValueError):
            return None
        try:
            iterator._stallwatch_probe = probe
        except AttributeError:
            return None
    probe.new_epoch()
    return probe

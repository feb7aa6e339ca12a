"""Per-batch timing inside DataLoader worker processes, sent back on a queue."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

# NOTE [ Worker timing ]
# torch's worker loop (torch/utils/data/_utils/worker.py) calls
# ``init_fn(worker_id)`` and then ``_DatasetKind.create_fetcher(...)``, and it
# creates the fetcher again on every ``_ResumeIteration`` (persistent workers,
# once per later epoch). ``WorkerHook`` runs as that init_fn inside the worker
# and wraps ``create_fetcher`` in that process only, so each fetcher it returns
# times ``fetch(index)``: ``__getitem__`` plus collate, wall clock and the
# thread's CPU time. Each fetch sends
#     (pid, worker_id, incarnation, seq, started_at, wall_s, cpu_s)
# where incarnation counts fetchers in this process and seq counts fetches in
# this incarnation. A worker serves its index queue in FIFO order, so its k-th
# fetch is the k-th batch the main process consumes from it in that epoch; the
# main process stores (pid, incarnation, k) with each batch and the reader
# joins on it. Fetches that end the worker's data (StopIteration from an
# IterableDataset) reach no batch and are not counted. The hook is a plain
# picklable object, so it works under the spawn and forkserver start methods.

TimingMessage = tuple[int, int, int, int, float, float, float]


class WorkerHook:
    """A ``worker_init_fn`` that installs fetch timing, then calls the user's own."""

    def __init__(self, queue: Any, user_init_fn: Callable[[int], None] | None) -> None:
        self.queue = queue
        self.user_init_fn = user_init_fn

    def __call__(self, worker_id: int) -> None:
        _install(self.queue, worker_id)
        if self.user_init_fn is not None:
            self.user_init_fn(worker_id)


def _install(queue: Any, worker_id: int) -> None:
    from torch.utils.data import _DatasetKind

    try:
        # A worker must never wait at exit for the main process to read timings.
        queue.cancel_join_thread()
    except AttributeError:
        pass
    original = _DatasetKind.create_fetcher
    if getattr(original, "_stallwatch", False):
        return
    incarnations = iter(range(1 << 62))

    def create_fetcher(*args: Any, **kwargs: Any) -> Any:
        return TimedFetcher(original(*args, **kwargs), queue, worker_id, next(incarnations))

    create_fetcher._stallwatch = True  # type: ignore[attr-defined]
    _DatasetKind.create_fetcher = staticmethod(create_fetcher)  # type: ignore[method-assign]


class TimedFetcher:
    """Wraps a torch fetcher; reports each fetch's wall and CPU time."""

    def __init__(self, inner: Any, queue: Any, worker_id: int, incarnation: int) -> None:
        self._inner = inner
        self._queue = queue
        self._key = (os.getpid(), worker_id, incarnation)
        self._seq = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def fetch(self, possibly_batched_index: Any) -> Any:
        started_at = time.time()
        t0 = time.perf_counter()
        c0 = time.thread_time()
        try:
            data = self._inner.fetch(possibly_batched_index)
        except StopIteration:
            raise
        except Exception:
            self._report(started_at, t0, c0)
            raise
        self._report(started_at, t0, c0)
        return data

    def _report(self, started_at: float, t0: float, c0: float) -> None:
        wall_s = max(0.0, time.perf_counter() - t0)
        cpu_s = max(0.0, time.thread_time() - c0)
        seq, self._seq = self._seq, self._seq + 1
        try:
            self._queue.put_nowait((*self._key, seq, started_at, wall_s, cpu_s))
        except Exception:  # noqa: BLE001 - timing is optional; the batch is not
            pass

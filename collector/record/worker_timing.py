"""Per-batch timing inside DataLoader worker processes, sent back through shared memory."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from collector.record.stage_board import StageBoards
from collector.record.stage_clock import StageClock
from collector.record.stage_worker import start_stages, wrap_collate
from collector.record.worker_failure import worker_failure
from collector.sample.schedstat import ThreadClock, split
from collector.writer.frames import FETCH

# NOTE [ Worker timing ]
# torch's worker loop (torch/utils/data/_utils/worker.py) calls
# ``init_fn(worker_id)`` and then ``_DatasetKind.create_fetcher(...)``, and it
# creates the fetcher again on every ``_ResumeIteration`` (persistent workers,
# once per later epoch); torchdata's StatefulDataLoader worker loop
# (torchdata/stateful_dataloader/worker.py) does the same, restoring a
# worker's state onto the fetcher it creates (NOTE [ A fetcher's own
# attributes ]). ``WorkerHook`` runs as that init_fn inside the worker
# and wraps ``create_fetcher`` in that process only, so each fetcher it returns
# times ``fetch(index)``: ``__getitem__`` plus collate, wall clock and the
# thread's CPU time. Each fetch writes one entry
#     (pid, worker_id, incarnation, seq, started_at, wall_s, cpu_s)
# where incarnation counts fetchers in this process and seq counts fetches in
# this incarnation. A worker serves its index queue in FIFO order, so its k-th
# fetch is the k-th batch the main process consumes from it in that epoch; the
# main process stores (pid, incarnation, k) with each batch and the reader
# joins on it. Fetches that end the worker's data (StopIteration from an
# IterableDataset) reach no batch and are not counted. The hook is a plain
# picklable object, so it works under the spawn and forkserver start methods.
#
# NOTE [ Worker totals ]
# Workers that live about a second an epoch are rarely sampled twice by a
# 2 Hz sampler, so their CPU (start-up included) would read as other
# processes'. Each worker therefore reports its own whole life as it exits
# normally (a multiprocessing finalizer, which torch's worker process runs
# after its loop returns): one more entry in its ring with seq = -1,
#     (pid, worker_id, -1, -1, started_at, lifetime_s, cpu_s, runq_s)
# cpu_s from the process's own CPU clock (every thread, ended ones too),
# runq_s its main thread's schedstat (one pread: the epoch's final next()
# waits for this exit, and reading every thread's file cost it 8 ms). The writer stores it in
# worker_exits. A worker killed instead of exiting sends none.
#
# NOTE [ Timing rings ]
# Entries go into shared memory, one ring per worker id, not through a pipe:
# a multiprocessing.Queue costs a pickle and a feeder thread in the worker
# and a locked read in the training process for every batch, which measured
# about a tenth of a fast two-worker loader's throughput. A worker writes its
# entry, then bumps its ring's head; the monitor copies everything between
# its last read and the head. A reader lapped by more than RING_SLOTS entries
# loses the oldest, and counts them. Fresh workers of a later epoch take over
# their worker id's ring and head.

RING_SLOTS = 8192
FIELDS = len(FETCH)
Entry = tuple[float, ...]


class TimingRings:
    """One shared-memory ring of fetch timings per worker id."""

    def __init__(self, context: Any, workers: int, stages: bool = True) -> None:
        self.workers = workers
        self.boards = StageBoards(context, workers) if stages else None  # NOTE [ Stage boards ]
        self.data = [context.RawArray("d", RING_SLOTS * FIELDS) for _ in range(workers)]
        self.heads = context.RawArray("q", workers)  # entries ever written, per worker id
        self._read = [0] * workers  # main process only
        self.lost = 0

    @classmethod
    def for_loader(cls, loader: Any, stages: bool = True) -> TimingRings | None:
        """Rings for the workers of ``loader`` (None without workers), in its multiprocessing context."""
        workers = getattr(loader, "num_workers", 0)
        if not workers or not hasattr(loader, "worker_init_fn"):
            return None
        return cls(loader.multiprocessing_context or multiprocessing.get_context(), workers, stages)

    def write(self, worker_id: int, entry: Entry) -> None:
        """In a worker: store one entry, then publish it by moving the head."""
        if not 0 <= worker_id < self.workers:
            return
        head = self.heads[worker_id]
        base = (head % RING_SLOTS) * FIELDS
        self.data[worker_id][base : base + FIELDS] = entry
        self.heads[worker_id] = head + 1

    def drain(self) -> list[bytes]:
        """In the main process: every entry written since the last drain, as raw float64 runs."""
        out: list[bytes] = []
        for worker_id in range(self.workers):
            head = self.heads[worker_id]
            start = max(self._read[worker_id], head - RING_SLOTS + 1)
            self.lost += start - self._read[worker_id]
            self._read[worker_id] = head
            data = memoryview(self.data[worker_id])
            out.extend(data[lo * FIELDS : hi * FIELDS].tobytes() for lo, hi in _segments(start, head))
        return out

    def __getstate__(self) -> dict[str, Any]:
        # Workers get the shared arrays, not the main process's read marks.
        return {
            "workers": self.workers,
            "data": self.data,
            "heads": self.heads,
            "_read": [],
            "lost": 0,
            "boards": self.boards,
        }


def _segments(start: int, end: int) -> list[tuple[int, int]]:
    """Slot ranges [lo, hi) covering entries start..end-1 of a ring, split at its end."""
    if end <= start:
        return []
    lo, hi = start % RING_SLOTS, (end - 1) % RING_SLOTS + 1
    return [(lo, hi)] if lo < hi else [(lo, RING_SLOTS), (0, hi)]


class WorkerHook:
    """A ``worker_init_fn`` that installs fetch timing, then calls the user's own."""

    def __init__(self, rings: TimingRings, user_init_fn: Callable[[int], None] | None) -> None:
        self.rings = rings
        self.user_init_fn = user_init_fn

    def __call__(self, worker_id: int) -> None:
        try:
            _install(self.rings, worker_id, _stages(self.rings, worker_id))
        except (ImportError, AttributeError, TypeError):  # the main process checked: see not_supported
            pass
        _report_at_exit(self.rings, worker_id)
        if self.user_init_fn is not None:
            self.user_init_fn(worker_id)


def not_supported() -> str | None:
    """Why fetches in workers cannot be timed with this torch, or None when they can (checked in the main process)."""
    try:
        from torch.utils.data import _DatasetKind
    except ImportError as exc:
        return f"worker fetch times (worker_fetches) are not recorded: torch.utils.data has no _DatasetKind ({exc})"
    if not callable(getattr(_DatasetKind, "create_fetcher", None)):
        return (
            "worker fetch times (worker_fetches) are not recorded: torch.utils.data._DatasetKind has no create_fetcher"
        )
    return None


def _stages(rings: TimingRings, worker_id: int) -> StageClock | None:
    try:
        return start_stages(getattr(rings, "boards", None), worker_id)
    except Exception:  # noqa: BLE001 - stage timing is optional; the worker is not
        return None


def _install(rings: TimingRings, worker_id: int, stages: StageClock | None = None) -> None:
    from torch.utils.data import _DatasetKind

    original = _DatasetKind.create_fetcher
    if getattr(original, "_stallwatch", False):
        return
    incarnations = iter(range(1 << 52))

    def create_fetcher(*args: Any, **kwargs: Any) -> Any:
        return TimedFetcher(original(*args, **kwargs), rings, worker_id, next(incarnations), stages)

    create_fetcher._stallwatch = True  # type: ignore[attr-defined]
    _DatasetKind.create_fetcher = staticmethod(create_fetcher)  # type: ignore[method-assign]


def _report_at_exit(rings: TimingRings, worker_id: int) -> None:
    """Write this worker's whole-life totals into its ring when it exits (NOTE [ Worker totals ])."""
    try:
        from multiprocessing import util

        started_at = time.time()
        t0 = time.perf_counter()
        pid = os.getpid()

        clock = _worker_clock()

        def report() -> None:
            # Cheap on purpose: the epoch's final next() waits for this exit (reading every thread's
            # schedstat here cost it 8 ms). The CPU clock covers every thread of the process's life;
            # the run-queue wait is its main thread's, the one that fetches.
            try:
                raw = clock.raw()
                runq = float("nan") if raw is None else (split(raw)[1] or 0) / 1e9
                life = time.perf_counter() - t0
                rings.write(
                    worker_id, (float(pid), float(worker_id), -1.0, -1.0, started_at, life, time.process_time(), runq)
                )
            except Exception:  # noqa: BLE001 - totals are optional; the worker's exit is not
                pass

        util.Finalize(None, report, exitpriority=100)
    except Exception:  # noqa: BLE001 - totals are optional; the worker is not
        pass


# NOTE [ A fetcher's own attributes ]
# The worker loop treats the timed fetcher as torch's own: torchdata's reads
# ``fetcher.dataset_iter`` and ``fetcher.ended`` for a worker's state_dict,
# and on a mid-epoch restore *assigns* ``fetcher.dataset_iter`` (the stream
# resumed where it stopped) and ``fetcher.ended``. So every attribute but
# the wrapper's own slots is read from, written to and deleted on the inner
# fetcher: kept on the wrapper, a restored stream would be reported but not
# fetched from, and would restart. ``fetch`` forwards whatever it is given.


class TimedFetcher:
    """Wraps a torch fetcher; reports each fetch's wall time, CPU and wait for a core."""

    __slots__ = ("_inner", "_key", "_read", "_seq", "_stages", "_wall_offset", "_worker_id", "_write")
    _inner: Any
    _key: tuple[float, float, float]
    _read: Callable[[], bytes | float]
    _seq: int
    _stages: StageClock | None
    _wall_offset: float
    _worker_id: int
    _write: Callable[[int, Entry], None]

    def __init__(
        self, inner: Any, rings: TimingRings, worker_id: int, incarnation: int, stages: StageClock | None = None
    ) -> None:
        own = object.__setattr__  # See NOTE [ A fetcher's own attributes ]
        own(self, "_inner", inner)
        own(self, "_stages", stages)
        wrap_collate(stages, inner)
        own(self, "_write", rings.write)
        own(self, "_worker_id", worker_id)
        own(self, "_key", (float(os.getpid()), float(worker_id), float(incarnation)))
        own(self, "_seq", 0)
        clock = _worker_clock()
        own(self, "_read", time.thread_time if clock.fd is None else clock.raw)
        # Start times come from the monotonic clock plus this offset, taken
        # once per fetcher (per epoch with persistent workers): one clock
        # read less per fetch, which runs on the worker's critical path.
        own(self, "_wall_offset", time.time() - time.perf_counter())

    def __getattr__(self, name: str) -> Any:
        if name in TimedFetcher.__slots__:  # not set yet (a copy): no recursion through _inner
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._inner, name)

    def fetch(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        s0 = self._read()
        stages = self._stages  # inside this fetch's own clock reads: NOTE [ Stage timing ]
        timed = stages is not None and stages.begin()
        try:
            data = self._inner.fetch(*args, **kwargs)
        except StopIteration:
            if stages is not None:
                stages.abandon()
            raise  # the end of an IterableDataset: no batch, not counted
        except Exception as exc:  # noqa: BLE001 - handed on as torch's worker loop would
            if stages is not None:
                stages.abandon()
            self._record(t0, s0)
            return worker_failure(exc, self._worker_id, sys._getframe(1))
        if stages is not None:
            stages.finish(timed, args)
        self._record(t0, s0)
        return data

    def _record(self, t0: float, s0: bytes | float) -> None:
        s1 = self._read()
        wall_s = time.perf_counter() - t0
        seq = self._seq
        object.__setattr__(self, "_seq", seq + 1)
        try:
            if isinstance(s0, bytes) and isinstance(s1, bytes):
                (cpu0, runq0), (cpu1, runq1) = split(s0), split(s1)
                cpu_s, runq_s = (cpu1 - cpu0) / 1e9, ((runq1 or 0) - (runq0 or 0)) / 1e9
            else:  # no schedstat: the thread's CPU clock, and no run-queue figure
                cpu_s, runq_s = float(s1) - float(s0), float("nan")
            self._write(self._worker_id, (*self._key, seq, self._wall_offset + t0, wall_s, cpu_s, runq_s))
        except Exception:  # noqa: BLE001 - timing is optional; the batch is not
            pass


_clock: ThreadClock | None = None  # one a worker process: its own thread's


def _worker_clock() -> ThreadClock:
    global _clock
    if _clock is None:
        _clock = ThreadClock()
    return _clock

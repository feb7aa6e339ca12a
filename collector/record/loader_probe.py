"""The one adapter to private DataLoader iterator state: queue depth, worker ids, whether its workers are timed."""

from __future__ import annotations

import functools
import sys
import weakref
from collections.abc import Callable
from typing import Any

from collector.record.worker_timing import TimingRings, WorkerHook

Warn = Callable[[str, str], None]  # (key, message): stored with the run, warned once per key; never raises

# NOTE [ Private iterator state ]
# ``_MultiProcessingDataLoaderIter`` keeps (torch 2.1 to 2.13 at least), and
# torchdata's ``_StatefulMultiProcessingDataLoaderIter`` (0.8 to 0.11) alike:
#   _send_idx - _rcvd_idx   tasks sent to workers and not yet returned (in flight)
#   _data_queue.qsize()     batches that arrived and wait to be taken
#   _task_info              idx -> (worker,) outstanding or (worker, data) arrived
#                           out of order; len(_task_info) - _tasks_outstanding
#                           of them hold data
#   _process_data(data, worker_idx, ...)  called once per batch handed out;
#                           torchdata adds the worker's state_dict as a third
# Reading them is far cheaper than any public route. Where one is missing,
# or ``_process_data`` is called in a shape we do not know, the fields it
# gives are stored as NULL and the run says so in one stored warning; the
# batch, and any exception ``_process_data`` raises, reach the loop as they
# would without us (every argument is forwarded as it came).
#
# NOTE [ Batches taken inside iter() ]
# The worker-fetch link counts the batches consumed from each worker (NOTE
# [ Worker timing ]). A StatefulDataLoader resuming mid-epoch may consume
# batches inside iter() itself, before the probe is attached (a dataset
# with no state of its own is fast-forwarded by drawing them), so that
# count is unknown: the epoch keeps its worker ids and queue depth, and
# stores no worker_seq, rather than join each batch to a wrong fetch.


class Probe:
    """Reads depth before ``next()`` and learns which worker served each batch."""

    def __init__(self, iterator: Any, warn: Warn) -> None:
        # NOTE [ No reference cycle ]
        # The probe lives on the iterator, so it must hold it weakly, and the
        # wrapper calls the class's _process_data, not a bound method: a cycle
        # would leave the iterator to the cycle collector, which may finalise
        # its index queues before __del__ sends the workers their stop signal,
        # and every worker join then times out (5 s each).
        self._it = weakref.ref(iterator)
        self._warn = warn
        self._kind = type(iterator).__name__
        self.workers = int(iterator._num_workers)
        self.incarnation = -1
        self.counts = [0] * self.workers
        self.last: tuple[int, int | None] | None = None
        self.seq_known = True  # See NOTE [ Batches taken inside iter() ]
        self._depth_known = True
        original = type(iterator)._process_data
        counts = self.counts
        workers = self.workers
        it_ref = self._it
        probe_ref = weakref.ref(self)

        def process_data(*args: Any, **kwargs: Any) -> Any:
            probe = probe_ref()
            if probe is not None:
                w = args[1] if len(args) > 1 else None
                if w.__class__ is int and 0 <= w < workers:
                    seq = counts[w]
                    counts[w] = seq + 1
                    probe.last = (w, seq if probe.seq_known else None)
                else:
                    probe.last = None
                    probe.unknown_call(len(args), sorted(kwargs))
            return original(it_ref(), *args, **kwargs)

        iterator._process_data = process_data

    def new_epoch(self) -> None:
        """A fresh epoch (persistent workers: the same iterator serves the next one)."""
        self.incarnation += 1
        for i in range(self.workers):
            self.counts[i] = 0
        self.last = None
        taken = getattr(self._it(), "_rcvd_idx", 0)
        self.seq_known = not (isinstance(taken, int) and taken > 0)
        if not self.seq_known:
            self._warn(
                "worker-seq",
                f"the loader handed out {taken} batches inside iter(), before stallwatch could count them (a "
                "StatefulDataLoader fast-forwarding to where it resumes mid-epoch), so that epoch's batches are not "
                "joined to their workers' fetch times (worker_seq is NULL); worker ids and queue depth are recorded",
            )

    def unknown_call(self, positional: int, keywords: list[str]) -> None:
        """``_process_data`` was called in a shape we do not know: that batch has no worker id."""
        self._warn(
            "worker-ids",
            f"{self._kind}._process_data was called with {positional} positional argument(s)"
            f"{' and ' + ', '.join(keywords) if keywords else ''}, not (data, worker_id, ...) as stallwatch "
            f"knows it (torch {_version('torch')}), so worker ids are not recorded for those batches",
        )

    def depth(self) -> tuple[int | None, int | None]:
        """(ready, in_flight) right now; (None, None) if torch's internals moved."""
        if not self._depth_known:
            return None, None
        it: Any = self._it()
        try:
            in_flight = it._send_idx - it._rcvd_idx
            ready = it._data_queue.qsize() + len(it._task_info) - it._tasks_outstanding
        except (AttributeError, NotImplementedError, TypeError) as exc:
            self._depth_known = False
            self._warn("queue-depth", f"queue depth (ready, in_flight) is not recorded: {self._kind}: {exc}")
            return None, None
        return max(0, ready), max(0, in_flight)

    def worker_pids(self) -> list[int]:
        try:
            it: Any = self._it()
            return [int(w.pid) for w in it._workers]
        except (AttributeError, TypeError) as exc:
            self._warn("worker-pids", f"worker pids are not recorded: {self._kind}: {exc}")
            return []


def attach(iterator: Any, warn: Warn) -> Probe | None:
    """The iterator's probe (kept on it across persistent epochs), or None, with a warning, for a torch
    DataLoader iterator whose internals we do not know."""
    probe = getattr(iterator, "_stallwatch_probe", None)
    if probe is None:
        try:
            probe = Probe(iterator, warn)
            iterator._stallwatch_probe = probe
        except (AttributeError, TypeError, ValueError) as exc:
            if _is_dataloader_iterator(iterator):
                warn(
                    "queue-fields",
                    f"queue depth and worker ids are not recorded: {type(iterator).__name__} lacks what stallwatch "
                    f"reads (torch {_version('torch')}): {type(exc).__name__}: {exc}",
                )
            return None
    probe.new_epoch()
    return probe


def untimed(iterator: Any, rings: TimingRings | None, loader_name: str) -> str | None:
    """Why the workers of ``iterator`` do not time their fetches into ``rings``; None when they do, or it cannot say.

    torch (and torchdata) keep the loader's ``worker_init_fn`` as ``_worker_init_fn``,
    inside a ``functools.partial`` for DataPipes: our hook is there only if the
    workers started in our iter() (NOTE [ Worker timing ]).
    """
    init_fn = getattr(iterator, "_worker_init_fn", _MISSING)
    if rings is None or init_fn is _MISSING:
        return None
    candidates = [init_fn, *init_fn.args] if isinstance(init_fn, functools.partial) else [init_fn]
    if any(isinstance(c, WorkerHook) and c.rings is rings for c in candidates):
        return None
    return (
        f"{loader_name} started worker processes outside the loop's iter() (a StatefulDataLoader does in "
        "state_dict() before its first epoch, as accelerate's prepare() calls it), so the fetches of those "
        "workers are not timed (no worker_fetches rows); worker ids and queue depth are recorded"
    )


_MISSING = object()


def _is_dataloader_iterator(iterator: Any) -> bool:
    """True for torch's DataLoader iterators and their kin (torchdata's); False for other iterables' iterators."""
    module = sys.modules.get("torch.utils.data.dataloader")
    base = getattr(module, "_BaseDataLoaderIter", None)
    return isinstance(base, type) and isinstance(iterator, base)


def _version(package: str) -> str:
    return str(getattr(sys.modules.get(package), "__version__", "?"))

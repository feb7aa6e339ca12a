"""Windows of a long epoch: the loader restarted mid-epoch at the same sampler position, at another setting."""

from __future__ import annotations

import itertools
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from collector.record import loader_probe
from collector.tune.policy import C, Setting

LONG_EPOCH_S = C.LONG_EPOCH_S  # an epoch running longer than this is tuned in windows, not at the next epoch
WINDOW_S = C.WINDOW_S  # one window of a long epoch: one measured segment (both: the calibration table's)

# NOTE [ Windows of a long epoch ]
# Where an epoch runs past LONG_EPOCH_S (or the one before it did), the
# tuner does not wait for the next: every WINDOW_S the loop's batches so far
# are one measured segment (collector/tune/policy.py), and where the next
# segment runs at another setting the loader is restarted there, mid-epoch,
# at the same position. Two routes, chosen by ``route``:
#   "sampler"  torch's DataLoader, map-style: its iterator draws index
#              batches from the loader's index sampler, so for each iterator
#              the tuner lends it a ``Recorded`` sampler that remembers what
#              was drawn and not yet handed to the loop (workers prefetch).
#              A restart opens the next iterator on what was drawn and not
#              handed out, then the rest of the same sampler iterator: the
#              same indices in the same order, whatever the worker count.
#   "state"    torchdata's StatefulDataLoader: its own state_dict() and
#              load_state_dict(), which restore the position exactly but only
#              at the same worker count, so a change of num_workers waits for
#              the next epoch (``restartable``).
# The random draw a new iterator makes for its workers' base seed is put
# back, so the generator (and the next epoch's shuffle) is where the user's
# loader would have left it. An IterableDataset, a loader that is not
# in_order, or another DataLoader subclass is tuned at epoch starts only.
# The restart's own time (workers ending and starting) falls in the batch
# that crosses the boundary, as wait: measured, not hidden. The new workers'
# batches keep their worker ids but no worker_seq for the rest of that epoch
# (NOTE [ Batches taken inside iter() ]).


def route(loader: Any) -> str | None:
    """How ``loader`` (the DataLoader itself) can be restarted mid-epoch: "sampler", "state", or None."""
    loader = getattr(loader, "_stallwatch_loader", loader)  # watch()'s twin shares its __dict__: the user's class
    if getattr(loader, "_dataset_kind", None) != 0 or getattr(loader, "in_order", True) is False:
        return None
    dataloader = sys.modules["torch"].utils.data.DataLoader
    if type(loader).__name__ == "StatefulDataLoader" and hasattr(loader, "load_state_dict"):
        return "state"
    if type(loader).__iter__ is dataloader.__iter__ and type(loader)._get_iterator is dataloader._get_iterator:
        return "sampler"
    return None


def restartable(kind: str | None, running: Setting, setting: Setting) -> bool:
    """Whether a window can move from ``running`` to ``setting`` without waiting for the next epoch."""
    if kind == "state":
        return setting.num_workers == running.num_workers
    return kind == "sampler"


class _Drawing:
    """The iterator a DataLoader iterator draws index batches from: each one drawn is remembered until handed out."""

    def __init__(self, source: Iterator[Any], pending: deque[Any]) -> None:
        self.source = source
        self.pending = pending

    def __iter__(self) -> _Drawing:
        return self

    def __next__(self) -> Any:
        item = next(self.source)
        self.pending.append(item)
        return item


class Recorded:
    """The index sampler lent to one iterator of a loader: ``source``, remembering what is drawn and not handed out."""

    def __init__(self, source: Any, length: int | None, start: int = 0) -> None:
        self.source = source
        self.length = length  # of what it hands out from batch ``start`` of the epoch on
        self.start = start
        self.pending: deque[Any] = deque()
        self.drawing: _Drawing | None = None

    def __iter__(self) -> _Drawing:
        self.drawing = _Drawing(iter(self.source), self.pending)
        return self.drawing

    def __len__(self) -> int:
        if self.length is None:
            raise TypeError("the remaining sampler has no length")
        return self.length

    def handed_out(self) -> None:
        if self.pending:
            self.pending.popleft()


class Lent:
    """``with Lent(loader, recorded):`` the loader's index sampler is ``recorded`` while an iterator is built."""

    def __init__(self, loader: Any, recorded: Recorded) -> None:
        self.loader = loader
        self.name, self.own = index_sampler(loader)
        self.recorded = recorded

    def __enter__(self) -> Recorded:
        self.loader.__dict__[self.name] = self.recorded  # past DataLoader.__setattr__, as tuning's apply
        persistent = self.loader.__dict__.get("_iterator")
        if persistent is not None:  # its _reset() in iter() draws from the sampler it was built with
            persistent._index_sampler = self.recorded
        return self.recorded

    def __exit__(self, *exc: Any) -> None:
        self.loader.__dict__[self.name] = self.own
        persistent = self.loader.__dict__.get("_iterator")
        if persistent is not None and getattr(persistent, "_index_sampler", None) is self.recorded:
            persistent._index_sampler = self.own  # the next epoch's reset, tuned or not, draws from the user's own


def index_sampler(loader: Any) -> tuple[str, Any]:
    """(attribute, sampler) the loader's iterators draw indices from: its batch_sampler, else its sampler."""
    name = "batch_sampler" if loader.batch_sampler is not None else "sampler"
    return name, loader.__dict__[name]


def lend(loader: Any) -> Lent:
    """A fresh epoch's lent sampler: the loader's own, recorded."""
    _, own = index_sampler(loader)
    return Lent(loader, Recorded(own, _length(own)))


def _length(sampler: Any) -> int | None:
    try:
        return len(sampler)
    except TypeError:
        return None


class SeedKept:
    """``with SeedKept(loader):`` the random draws an iterator's construction makes are put back after it."""

    def __init__(self, loader: Any) -> None:
        torch = sys.modules["torch"]
        self.generator = getattr(loader, "generator", None) or torch.default_generator

    def __enter__(self) -> None:
        self.state = self.generator.get_state()

    def __exit__(self, *exc: Any) -> None:
        self.generator.set_state(self.state)


class Windowed:
    """The iterator a tuned loop iterates in a window-able epoch: the loader's, restarted at window boundaries.

    ``boundary(start_idx, idx, t0_ns, t1_ns)`` is the tuner's: it measures
    the window that ended and returns the setting the next runs at where the
    loader must be restarted for it (else None). ``restart(windowed, setting)``
    does that through ``open_iterator`` and returns the new iterator, or None
    where it could not. ``recover(windowed, exc)``, where next() raised: the
    iterator to fetch the same batch from again, or None where the error is
    the loop's (NOTE [ Trials never hurt ] in collector/record/tuning_windows.py).
    """

    def __init__(
        self,
        inner: Iterator[Any],
        recorded: Recorded | None,
        t_start_ns: int,
        first_window_s: float,
        boundary: Callable[[int, int, int, int], Setting | None],
        restart: Callable[[Windowed, Setting], Iterator[Any] | None],
        open_iterator: Callable[[], Iterator[Any]],
        recover: Callable[[Windowed, BaseException], Iterator[Any] | None] | None = None,
    ) -> None:
        self.inner = inner
        self.recorded = recorded
        self.idx = 0  # batches handed to the loop in this epoch
        self.window_idx = 0
        self.window_ns = t_start_ns
        self.next_ns = t_start_ns + int(first_window_s * 1e9)
        self._boundary = boundary
        self._restart = restart
        self._recover = recover
        self.open_iterator = open_iterator  # the session's: the loader's iter() with the workers' timing hook
        self.retarget: Callable[[Any], None] | None = None  # the loop's probe follows a restart
        self.recovered: Callable[[], None] | None = None  # the batch came at the setting gone back to

    def __iter__(self) -> Windowed:
        return self

    def __next__(self) -> Any:
        if self.idx and time.perf_counter_ns() >= self.next_ns:
            self._cross()
        try:
            batch = next(self.inner)
        except StopIteration:
            self._handed_out()
            raise
        except Exception as exc:
            inner = None if self._recover is None else self._recover(self, exc)
            if inner is None:
                self._handed_out()  # a batch that raises is handed out too
                raise
            self._follow(inner)  # the same batch again, at the setting it went back to
            try:
                batch = next(self.inner)
            finally:
                self._handed_out()
            if self.recovered is not None:
                self.recovered()  # it came: the error was the trial's
        else:
            self._handed_out()
        self.idx += 1
        return batch

    def _handed_out(self) -> None:
        if self.recorded is not None:
            self.recorded.handed_out()

    def _follow(self, inner: Iterator[Any]) -> None:
        self.inner = inner
        if self.retarget is not None:
            self.retarget(inner)

    def _cross(self) -> None:
        now = time.perf_counter_ns()
        setting = self._boundary(self.window_idx, self.idx, self.window_ns, now)
        self.window_idx, self.window_ns = self.idx, now
        self.next_ns = now + int(WINDOW_S * 1e9)
        if setting is not None:
            inner = self._restart(self, setting)
            if inner is not None:
                self._follow(inner)

    def remaining(self) -> Recorded:
        """The index sampler for the rest of this epoch: drawn and not handed out, then the rest of the draw."""
        recorded = self.recorded
        assert recorded is not None and recorded.drawing is not None
        rest = recorded.drawing.source
        length = None if recorded.length is None else max(0, recorded.length - (self.idx - recorded.start))
        return Recorded(itertools.chain(list(recorded.pending), rest), length, self.idx)

    def put_back(self, failed: Recorded) -> None:
        """A restart failed: what its iterator drew past this one's pending is drawn next by this one."""
        assert self.recorded is not None and self.recorded.drawing is not None
        drawing = self.recorded.drawing
        assert drawing is not None
        extra = list(failed.pending)[len(self.recorded.pending) :]
        drawing.source = itertools.chain(extra, drawing.source)


def follow(loop_ref: Any, warn: Any, inner: Any) -> None:
    """A full loop's probe (queue depth, worker ids) on the iterator a restart opened, for the rest of the epoch.

    The loop is held weakly: it holds the Windowed that calls this, and a cycle would keep the epoch's
    iterator, and its workers, until a garbage collection ended them (20 workers: 100 s of joins).
    """
    loop = loop_ref()
    if loop is None:
        return
    probe = loader_probe.attach(inner, warn) if getattr(inner, "_num_workers", 0) else None
    if probe is not None:
        probe.seq_known = False  # its workers count from 0 again: See NOTE [ Batches taken inside iter() ]
    loop.probe = probe
    loop.pids = [] if probe is None else probe.worker_pids()
    loop.incarnation = None if probe is None else probe.incarnation

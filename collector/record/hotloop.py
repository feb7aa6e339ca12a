"""Time every next() of an iterator into a ring of clock pairs, and run a plain epoch over it:
compiled, or its Python twin."""

from __future__ import annotations

import contextlib
import time
import warnings
from array import array
from collections.abc import Callable, Iterator
from typing import Any

from collector.record.transparent import END, raising, transparent, without_our_frames

# NOTE [ Compiled hot loop ]
# Per batch the loop must read the clock twice and keep both readings. In
# Python that costs about 0.6 us a batch in place (clock calls, a tuple, a
# deque append), 3% of a 50k batches/s loader. ``Timer`` does it in C
# (collector/record/_hotloop.c, built at install when a compiler is present): it
# wraps the loader's iterator, and each next() stores (t_request_ns,
# t_return_ns) into a fixed ring of int64 pairs, no Python object made. The
# monitor copies the ring out with ``drain()``; a reader lapped by more than
# ``capacity`` entries loses the oldest (the ring is the bounded buffer). The
# clock is CLOCK_MONOTONIC, time.perf_counter_ns()'s on Linux.
#
# ``Epoch(timer, on_batch, on_end, on_error, clock=None)`` is a whole plain
# epoch, so that no Python frame sits between the user's loop and the Timer:
# it hands out the timer's items, and for every stride-th one (the first
# always) it also reads the thread's CPU clock around next() and calls
# ``on_batch(index, t0, t1, prev_t1, cpu_ns, batch)``, which describes the
# batch and returns the next stride. Given a ``clock``, it calls ``clock()``
# just before that next() instead and hands its reading to on_batch in
# place of cpu_ns (None if clock raised): on_batch reads the clock again
# and takes the difference (collector/record/load_clock.py: every loading
# thread's CPU and the wait for a core). The Timer keeps, as
# ``end_request_ns``, when the next() that ended the iterator was asked for:
# the epoch's final wait, which ends (and with workers, shuts them down). When next() raises, ``on_error(exc)``
# sees the exception, which then reaches the loop unchanged, and the epoch
# goes on: a loop that catches it and asks again gets the loader's next
# item, as from the loader itself. ``on_end(count)`` is called once: at
# exhaustion, or when the epoch is dropped before its end (a loop that broke
# out early, or that let an exception end it). A KeyboardInterrupt or
# SystemExit inside on_batch goes to the loop; any other exception there is
# the collector's fault: one RuntimeWarning names it (``describing_failed``)
# and describing stops, the batches keep coming. ``PyTimer`` and
# ``py_epoch`` below keep the same contract in Python where the extension is
# missing, without a frame of theirs in any traceback (NOTE [ Transparent
# iteration ]).


class PyTimer:
    """The pure-Python twin of ``collector.record._hotloop.Timer``."""

    def __init__(self, iterator: Any, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self._next = iter(iterator).__next__
        self._ring = [0] * (2 * capacity)
        self._capacity = capacity
        self.count = 0
        self._read = 0
        self.last: tuple[int, int, int | None] | None = None
        self.end_request_ns: int | None = None

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        out = self.step()
        if out is None:
            raise StopIteration
        if isinstance(out, tuple):
            return out[0]
        raise out

    def step(self) -> tuple[Any] | BaseException | None:
        """One timed next(): ``(item,)``, None at the end, or the exception it raised, without this frame."""
        t0 = time.perf_counter_ns()
        try:
            item = self._next()
        except StopIteration:
            self.end_request_ns = t0
            return None
        except BaseException as exc:  # noqa: BLE001 - handed back to be raised as it was
            exc.__traceback__ = without_our_frames(exc.__traceback__)
            return exc
        t1 = time.perf_counter_ns()
        slot = 2 * (self.count % self._capacity)
        self._ring[slot] = t0
        self._ring[slot + 1] = t1
        self.count += 1
        self.last = (t0, t1, None if self.last is None else self.last[1])
        return (item,)

    def drain(self) -> tuple[int, bytes]:
        start = max(self._read, self.count - self._capacity)
        lo = start % self._capacity
        hi = lo + self.count - start  # may run past the ring's end: then it wraps
        ring = self._ring
        pairs = ring[2 * lo : 2 * hi] if hi <= self._capacity else ring[2 * lo :] + ring[: 2 * (hi - self._capacity)]
        self._read = self.count
        return start, array("q", pairs).tobytes()


OnBatch = Callable[[int, int, int, "int | None", Any, Any], int]
OnEnd = Callable[[int], None]
OnError = Callable[[BaseException], None]


class _PyEpoch:
    """The state of one ``py_epoch``; its ``step`` is the iterator's next(). See NOTE [ Transparent iteration ]."""

    def __init__(
        self, timer: PyTimer, on_batch: OnBatch, on_end: OnEnd, on_error: OnError, clock: Callable[[], Any] | None
    ) -> None:
        self.timer = timer
        self.clock = clock
        self.on_batch: OnBatch | None = on_batch
        self.on_end = on_end
        self.on_error = on_error
        self.countdown = 0
        self.ended = False

    def step(self) -> Any:
        if self.ended:
            return END
        timer = self.timer
        describe = self.countdown <= 0 and self.on_batch is not None
        before: Any = None
        c0 = 0
        if describe:
            if self.clock is not None:
                try:
                    before = self.clock()
                except Exception:  # noqa: BLE001 - the collector's fault: no reading, the batch goes on
                    before = None
            else:
                c0 = time.thread_time_ns()
        out = timer.step()
        if out is None:
            self.end()
            return END
        if not isinstance(out, tuple):
            with contextlib.suppress(Exception):  # the collector's fault: never the loop's
                self.on_error(out)
            return raising(out)
        if not describe:
            self.countdown -= 1
            return out
        cpu_ns = before if self.clock is not None else time.thread_time_ns() - c0
        t0, t1, prev = timer.last  # type: ignore[misc]
        try:
            stride = self.on_batch(timer.count - 1, t0, t1, prev, cpu_ns, out[0])  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 - the collector's fault, never the loop's
            describing_failed(exc)
            self.on_batch = None
            return out
        self.countdown = max(1, stride) - 1
        return out

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self.on_end(self.timer.count)

    def __del__(self) -> None:  # dropped before its end: not an error
        self.end()


def py_epoch(
    timer: Any, on_batch: OnBatch, on_end: OnEnd, on_error: OnError, clock: Callable[[], Any] | None = None
) -> Iterator[Any]:
    """The pure-Python twin of ``collector.record._hotloop.Epoch``."""
    return transparent(_PyEpoch(timer, on_batch, on_end, on_error, clock).step)


def describing_failed(exc: BaseException) -> None:
    """What both loops do when on_batch fails: one warning, then no more descriptions."""
    message = f"stallwatch: describing a batch failed ({type(exc).__name__}: {exc}); no more batch sizes this epoch"
    with contextlib.suppress(Exception):  # warnings turned into errors must not reach the loop either
        warnings.warn(message, RuntimeWarning, stacklevel=3)


try:
    from collector.record._hotloop import Epoch, Timer
except ImportError:  # no compiler at install time: same contract, slower
    Timer = PyTimer  # type: ignore[misc,assignment]
    Epoch = py_epoch  # type: ignore[misc,assignment]

COMPILED = Timer is not PyTimer

"""Time every next() of an iterator into a ring of clock pairs: compiled, or its Python twin."""

from __future__ import annotations

import time
from array import array
from collections.abc import Iterator
from typing import Any

# NOTE [ Compiled hot loop ]
# Per batch the loop must read the clock twice and keep both readings. In
# Python that costs about 0.6 us a batch in place (clock calls, a tuple, a
# deque append), 3% of a 50k batches/s loader. ``Timer`` does it in C
# (collector/_hotloop.c, built at install when a compiler is present): it
# wraps the loader's iterator, and each next() stores (t_request_ns,
# t_return_ns) into a fixed ring of int64 pairs, no Python object made. The
# monitor copies the ring out with ``drain()``; a reader lapped by more than
# ``capacity`` entries loses the oldest (the ring is the bounded buffer). The
# clock is CLOCK_MONOTONIC, time.perf_counter_ns()'s on Linux. ``PyTimer``
# below keeps the same contract in Python where the extension is missing.


class PyTimer:
    """The pure-Python twin of ``collector._hotloop.Timer``."""

    def __init__(self, iterator: Any, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self._next = iter(iterator).__next__
        self._ring = [0] * (2 * capacity)
        self._capacity = capacity
        self.count = 0
        self._read = 0
        self.last: tuple[int, int, int | None] | None = None

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        t0 = time.perf_counter_ns()
        item = self._next()
        t1 = time.perf_counter_ns()
        slot = 2 * (self.count % self._capacity)
        self._ring[slot] = t0
        self._ring[slot + 1] = t1
        self.count += 1
        self.last = (t0, t1, None if self.last is None else self.last[1])
        return item

    def drain(self) -> tuple[int, bytes]:
        start = max(self._read, self.count - self._capacity)
        lo = start % self._capacity
        hi = lo + self.count - start  # may run past the ring's end: then it wraps
        ring = self._ring
        pairs = ring[2 * lo : 2 * hi] if hi <= self._capacity else ring[2 * lo :] + ring[: 2 * (hi - self._capacity)]
        self._read = self.count
        return start, array("q", pairs).tobytes()


try:
    from collector._hotloop import Timer
except ImportError:  # no compiler at install time: same contract, slower
    Timer = PyTimer  # type: ignore[misc,assignment]

COMPILED = Timer is not PyTimer

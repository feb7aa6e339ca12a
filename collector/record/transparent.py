"""Iterators built from C parts only, so an exception from the loader reaches the loop with none of our frames."""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterable, Iterator
from itertools import chain, starmap
from types import TracebackType
from typing import Any

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # collector/

# NOTE [ Transparent iteration ]
# Every Python frame an exception passes through becomes a line of its
# traceback; a loop that wraps next() in Python adds its own, however it
# re-raises. So the loops written in Python (the full loop with workers,
# and the plain loop's Python twin) never let an exception pass through
# them: their per-batch ``step()`` catches it, removes its own frame from
# the traceback and *returns* it. The iterator handed to the user's loop is
#     chain.from_iterable(iter(step, END))
# where step returns ``(batch,)`` for a batch, ``END`` at the loader's end,
# or ``raising(exc)``: a starmap whose one call throws ``exc`` into a
# finished generator, which raises it as it is, adding no frame. chain,
# callable_iterator and starmap are C, so the traceback reads exactly as
# the loader's own: the loop's line, then the loader's frames (a wrapper of
# ours deeper down, such as the probe's _process_data, is cut out too). Like the
# loader's iterator (and unlike a generator), it goes on after an exception
# the loop caught: the next next() calls step again.

END: Any = object()  # step's answer at the loader's end


def _finished() -> Generator[None, None, None]:
    yield


_DEAD = _finished()
for _ in _DEAD:
    pass


def raising(exc: BaseException) -> Iterable[Any]:
    """An iterable whose first next() raises ``exc``, every traceback entry of this package removed."""
    exc.__traceback__ = without_our_frames(exc.__traceback__)
    return starmap(_DEAD.throw, ((exc,),))


def without_our_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without the entries of collector's own frames (the step that caught it, a probe's wrapper)."""
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(PACKAGE_DIR):
        tb = tb.tb_next
    head = tb
    while tb is not None:
        nxt = tb.tb_next
        while nxt is not None and nxt.tb_frame.f_code.co_filename.startswith(PACKAGE_DIR):
            nxt = nxt.tb_next
        tb.tb_next = nxt
        tb = nxt
    return head


def transparent(step: Callable[[], Iterable[Any]]) -> Iterator[Any]:
    """The iterator whose every next() is one ``step()``: see NOTE [ Transparent iteration ]."""
    return chain.from_iterable(iter(step, END))

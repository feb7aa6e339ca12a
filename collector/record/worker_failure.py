"""What a worker sends for a failed fetch, as if stallwatch's timing were not there."""

from __future__ import annotations

from types import FrameType, TracebackType
from typing import Any

from collector.record import stage_hooks

# NOTE [ A worker's exception ]
# torch's worker loop catches what ``fetcher.fetch(index)`` raises and sends
# ``ExceptionWrapper(where="in DataLoader worker process N")``, whose text
# holds the worker's traceback; the training process raises it. Re-raised
# through our fetch, that text would gain a line of ours, so the timed
# fetcher builds the same wrapper itself, from a traceback that starts at the
# worker loop's line and skips our frame, and returns it: the loop sends it
# on and the user reads exactly what the plain loader gives. The frames of
# the stage hooks (NOTE [ Stage hooks ]) are left out the same way; a step of
# a timed Compose then shows without the Compose's own line.


def worker_failure(exc: Exception, worker_id: int, caller: FrameType) -> Any:
    """What torch's worker loop sends for ``exc``, as if our fetch were not there; re-raises where it cannot."""
    try:
        from torch._utils import ExceptionWrapper

        inner = _without_hooks(exc.__traceback__.tb_next if exc.__traceback__ is not None else None)
        tb = TracebackType(inner, caller, caller.f_lasti, caller.f_lineno)
        return ExceptionWrapper(exc_info=(type(exc), exc, tb), where=f"in DataLoader worker process {worker_id}")
    except Exception:  # noqa: BLE001 - a torch without these: raise as before, one line of ours more
        raise exc from None


def _without_hooks(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` with the stage hooks' frames left out."""
    kept: list[TracebackType] = []
    while tb is not None:
        if tb.tb_frame.f_code.co_filename != stage_hooks.__file__:
            kept.append(tb)
        tb = tb.tb_next
    out: TracebackType | None = None
    for entry in reversed(kept):
        out = TracebackType(out, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return out

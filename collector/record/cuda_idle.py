"""GPU idle time during each data wait, from CUDA events resolved without synchronising."""

from __future__ import annotations

import sys
from collections import deque
from typing import Any

# NOTE [ GPU idle from CUDA events ]
# Around each next() the loop records event A (before) and event B (after) on
# the current stream. The GPU reaches A once all earlier work is done, and B
# right after, since nothing was queued in between:
#
#   host:  |--- step (queues kernels) ---|=== wait in next() ===|--- step
#   GPU :  |#### kernels ####|...... idle ......|A           B|#### kernels
#                                               |<-- idle_s -->|
#
# so elapsed(A, B) is how long the stream sat idle because of the wait (0 when
# the queued kernels outlasted it). B.query() says when it can be read; we
# never call synchronize(), so the training stream is never stalled.

MAX_PENDING = 100_000


def cuda_active() -> bool:
    """True once this process has initialised CUDA (never imports torch itself)."""
    torch = sys.modules.get("torch")
    if torch is None:  # no torch imported, so no CUDA: and importing it would cost a second
        return False
    return bool(torch.cuda.is_available() and torch.cuda.is_initialized())


def torch_event() -> Any:
    import torch

    return torch.cuda.Event(enable_timing=True)


class IdleResolver:
    """Holds recorded event pairs until the GPU has passed them, then reads them."""

    def __init__(self) -> None:
        self._pending: deque[tuple[Any, Any, Any, Any]] = deque(maxlen=MAX_PENDING)

    def add(self, key: Any, before: Any, after: Any, t_ns: int) -> None:
        self._pending.append((key, before, after, t_ns))

    def resolve(self, now_ns: int, give_up_after_ns: int = 30_000_000_000) -> list[tuple[Any, float | None]]:
        """(key, idle_s) for every pair the GPU has passed, in order; stale ones get None."""
        done: list[tuple[Any, float | None]] = []
        pending = self._pending
        while pending:
            key, before, after, t_ns = pending[0]
            if after.query():
                done.append((key, max(0.0, before.elapsed_time(after) / 1000.0)))
            elif now_ns - t_ns > give_up_after_ns:
                done.append((key, None))
            else:
                break
            pending.popleft()
        return done

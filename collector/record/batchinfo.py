"""Size and pinning of a batch: samples, bytes, and whether its tensors are page-locked."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

BatchInfo = tuple[int | None, int | None, int | None]

UNKNOWN: BatchInfo = (None, None, None)
MAX_DEPTH = 3
MAX_LEAVES = 64


def describe_batch(batch: Any) -> BatchInfo:
    """(samples, nbytes, pinned) of the tensors in ``batch``; None where there are none.

    Looks at most ``MAX_LEAVES`` tensors, ``MAX_DEPTH`` containers deep, so a
    huge nested batch costs no more than a small one. A batch that raises when
    walked (a user's container with a broken ``__len__``, say) reads as unknown.
    """
    try:
        return _describe(batch)
    except Exception:  # noqa: BLE001 - see NOTE [ Never hurt training ]
        return UNKNOWN


def _describe(batch: Any) -> BatchInfo:
    torch = sys.modules.get("torch")
    if torch is None:
        return (_len(batch), None, None)
    tensors: list[Any] = []
    _collect(batch, torch.Tensor, tensors, 0)
    if not tensors:
        return (_len(batch), None, None)
    first = tensors[0]
    samples = int(first.shape[0]) if first.dim() > 0 else _len(batch)
    nbytes = sum(t.nbytes for t in tensors)
    on_cpu = [t for t in tensors if t.is_cpu]  # is_cpu: a quarter of device.type's cost
    pinned = None if not on_cpu else int(all(t.is_pinned() for t in on_cpu))
    return (samples, nbytes, pinned)


def _collect(obj: Any, tensor_type: type, out: list[Any], depth: int) -> None:
    if isinstance(obj, tensor_type):
        out.append(obj)
        return
    if depth >= MAX_DEPTH or len(out) >= MAX_LEAVES:
        return
    if isinstance(obj, Mapping):
        children: Any = obj.values()
    elif isinstance(obj, (list, tuple)):
        children = obj
    else:
        return
    for child in children:
        _collect(child, tensor_type, out, depth + 1)
        if len(out) >= MAX_LEAVES:
            return


def _len(batch: Any) -> int | None:
    if not hasattr(batch, "__len__"):
        return None
    try:
        return len(batch)
    except TypeError:
        return None

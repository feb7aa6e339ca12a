"""How often the training thread describes a batch: from the loop's own rate."""

from __future__ import annotations

import struct
from typing import Any

from collector.writer.batch_records import PAIR_BYTES, T_RETURN

PAIR_T_RETURN = struct.Struct("=q")  # one int64 of a Timer's (t_request_ns, t_return_ns) pairs


def adapt_stride(
    stride: list[int], chunks: dict[str, list[tuple[Any, ...]]], timed: list[tuple[int, int, bytes]]
) -> None:
    """Set ``stride[0]``, the describing stride, from the loop's rate in this flush's records."""
    # NOTE [ Batch size sampling ]
    # Walking a batch for its size and pinning costs about a microsecond;
    # at tens of thousands of batches per second that is measurable. So
    # each batch is described while the loop runs under ~200 batches/s,
    # and every k-th batch above that (always the first of each epoch).
    # The rate comes from the records' own clocks, so a pause in training
    # between two flushes does not read as a slow loop.
    spans = [(len(c), c[0][T_RETURN], c[-1][T_RETURN]) for c in chunks.values() if len(c) >= 2]
    for _, _, pairs in timed:
        if len(pairs) >= 2 * PAIR_BYTES:
            spans.append(
                (
                    len(pairs) // PAIR_BYTES,
                    *PAIR_T_RETURN.unpack_from(pairs, 8),
                    *PAIR_T_RETURN.unpack_from(pairs, len(pairs) - 8),
                )
            )
    if not spans:
        return
    n, first, last = max(spans)
    rate = (n - 1) / ((last - first) / 1e9) if last > first else float("inf")
    stride[0] = max(1, min(1024, int(rate / 200.0) or 1))

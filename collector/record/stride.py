"""How often the training thread describes a batch: from the loop's own rate."""

from __future__ import annotations

import struct
from typing import Any

from collector.writer.batch_records import PAIR_BYTES, T_RETURN

PAIR_T_RETURN = struct.Struct("=q")  # one int64 of a Timer's (t_request_ns, t_return_ns) pairs
DESCRIBED_PER_S = 50  # batches described a second, at most (about): NOTE [ Batch size sampling ]
MAX_STRIDE = 1024


def adapt_stride(
    stride: list[int], chunks: dict[str, list[tuple[Any, ...]]], timed: list[tuple[int, int, bytes]]
) -> None:
    """Set ``stride[0]``, the describing stride, from the loop's rate in this flush's records."""
    # NOTE [ Batch size sampling ]
    # Describing a batch (its size and pinning, the loading CPU and the
    # run-queue wait around its next()) costs 10-30 us on the training
    # thread: at tens of thousands of batches per second, describing each
    # would double the loop. So each batch is described while the loop runs
    # under DESCRIBED_PER_S batches a second, and every k-th batch above that
    # (always the first of each epoch): about 50 a second, 0.1% of a core,
    # which the per-second rollups and the diagnosis's medians need no more
    # of. (At 200 a second the continuous no-worker loader paid 0.5% for it.)
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
    stride[0] = max(1, min(MAX_STRIDE, int(rate / DESCRIBED_PER_S) or 1))

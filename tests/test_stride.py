"""How often the training thread describes a batch: NOTE [ Batch size sampling ]."""

from __future__ import annotations

from array import array

import pytest

from collector.record.stride import DESCRIBED_PER_S, MAX_STRIDE, adapt_stride


def pairs_at(rate: float, n: int = 1000) -> bytes:
    """A Timer's drained (t_request_ns, t_return_ns) pairs of ``n`` batches handed out at ``rate`` a second."""
    gap = int(1e9 / rate)
    return array("q", [v for i in range(n) for v in (i * gap, i * gap + 1000)]).tobytes()


@pytest.mark.parametrize(
    ("rate", "expected"),
    [
        (DESCRIBED_PER_S / 2, 1),  # a slow loop: every batch
        (DESCRIBED_PER_S * 10, 10),
        (50_000, 50_000 // DESCRIBED_PER_S),  # the fastest loader: about DESCRIBED_PER_S a second
        (10_000_000, MAX_STRIDE),
    ],
)
def test_the_stride_keeps_descriptions_near_their_rate(rate: float, expected: int) -> None:
    stride = [1]
    adapt_stride(stride, {}, [(0, 0, pairs_at(rate))])
    assert stride[0] == pytest.approx(expected, rel=0.01)


def test_no_records_leave_the_stride_alone() -> None:
    stride = [7]
    adapt_stride(stride, {}, [(0, 0, pairs_at(1000, n=1))])
    assert stride == [7]

"""The one-word verdict: how much of the run the loop spent starved of data."""

from __future__ import annotations

from collector.diagnosis.findings import Verdict
from collector.diagnosis.stats import Facts

INPUT_BOUND = 0.20  # the TensorFlow profiler calls 20% of step time "highly input bound"
PARTLY_INPUT_BOUND = 0.05  # ... and under 5% "not input bound"
MIN_BATCHES = 20


def verdict(
    facts: Facts,
    *,
    input_bound: float = INPUT_BOUND,
    partly_input_bound: float = PARTLY_INPUT_BOUND,
    min_batches: int = MIN_BATCHES,
) -> Verdict:
    """``input-bound`` when the loop stalls for data ``input_bound`` (20%) of the time or more.

    The stall fraction counts, after the run's warm-up (its first epoch start),
    each wait beyond the hand-off cost of an already-ready batch, plus the
    iter() time of later epochs::

        |== wait ==|-- step --|== wait ==|-- step --|     stall / wall
        |<-stall->|h|          (h: hand-off of a ready batch, not a stall)

    ``partly-input-bound`` from ``partly_input_bound`` (5%), ``not-input-bound``
    below it, ``insufficient-data`` with fewer than ``min_batches`` batches.
    """
    if facts.batches < min_batches:
        return "insufficient-data"
    if facts.input_fraction >= input_bound:
        return "input-bound"
    if facts.input_fraction >= partly_input_bound:
        return "partly-input-bound"
    return "not-input-bound"

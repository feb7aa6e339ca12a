"""The one-word verdict: how much of the run the loop spent starved of data."""

from __future__ import annotations

from collector.diagnosis.report_types import Verdict
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


def borderline(
    facts: Facts, *, input_bound: float = INPUT_BOUND, partly_input_bound: float = PARTLY_INPUT_BOUND
) -> dict[str, object] | None:
    """The two verdicts either end of the stall fraction's range, when they differ (NOTE [ Stable answers ]).

    A stall fraction of 4.9% on one run and 6% on the next is one answer
    near the 5% line, not two: both read as borderline between
    not-input-bound and partly-input-bound, with the measured range.
    """
    if facts.batches < MIN_BATCHES:
        return None
    lo, hi = facts.input_range
    low = _word(lo, input_bound, partly_input_bound)
    high = _word(hi, input_bound, partly_input_bound)
    if low == high:
        return None
    return {"between": [low, high], "stall_fraction_range": [round(lo, 4), round(hi, 4)]}


def _word(fraction: float, input_bound: float, partly_input_bound: float) -> Verdict:
    if fraction >= input_bound:
        return "input-bound"
    return "partly-input-bound" if fraction >= partly_input_bound else "not-input-bound"

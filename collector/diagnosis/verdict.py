"""The one-word verdict: how much of the run the loop spent starved of data."""

from __future__ import annotations

from collector.diagnosis.report_types import Verdict
from collector.diagnosis.stats import Facts

INPUT_BOUND = 0.20  # the TensorFlow profiler calls 20% of step time "highly input bound"
PARTLY_INPUT_BOUND = 0.05  # ... and under 5% "not input bound"
MIN_BATCHES = 20  # from here the measured point decides, a range across a threshold reads as borderline
MIN_STEADY = 6  # below MIN_BATCHES, the steady batches needed for a range at all (three windows of two)


def verdict(
    facts: Facts,
    *,
    input_bound: float = INPUT_BOUND,
    partly_input_bound: float = PARTLY_INPUT_BOUND,
    min_batches: int = MIN_BATCHES,
    min_steady: int = MIN_STEADY,
) -> Verdict:
    """``input-bound`` when the loop stalls for data ``input_bound`` (20%) of the time or more.

    The stall fraction counts, after the run's warm-up (its first epoch start),
    each wait beyond the hand-off cost of an already-ready batch, plus the
    iter() time of later epochs::

        |== wait ==|-- step --|== wait ==|-- step --|     stall / wall
        |<-stall->|h|          (h: hand-off of a ready batch, not a stall)

    ``partly-input-bound`` from ``partly_input_bound`` (5%), ``not-input-bound``
    below it. A run of fewer than ``min_batches`` (20) batches gets a verdict
    as soon as the evidence is clear: when the whole range of its stall
    fraction, from its own variation (``Facts.input_range``), falls on one side
    of the thresholds (NOTE [ Clear evidence decides ]); ``insufficient-data``
    while the range still spans a threshold, or with fewer than ``min_steady``
    (6) steady batches to take a range from.
    """
    if facts.batches < min_batches:
        if facts.steady_batches < min_steady:
            return "insufficient-data"
        lo, hi = facts.input_range
        low, high = _word(lo, input_bound, partly_input_bound), _word(hi, input_bound, partly_input_bound)
        return low if low == high else "insufficient-data"
    return _word(facts.input_fraction, input_bound, partly_input_bound)


# NOTE [ Clear evidence decides ]
# Eighteen batches that each waited 490 ms for a 41 ms step are input-bound;
# a count of batches cannot say so, the spread of their waits can. A short
# run's stall fraction carries a range from its own windows of two batches
# (Student's t for their few degrees of freedom: collector/diagnosis/stats.py
# stall_range), and the verdict is given when that range lies within one
# verdict's band. Only a run whose range crosses a threshold is "not enough
# data". From MIN_BATCHES on, the point decides and a range across a
# threshold is shown as borderline (NOTE [ Stable answers ]).


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

"""The stall fraction and verdict of a recent window of batches, computed as the diagnosis computes them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collector.diagnosis.phases import start_batches
from collector.diagnosis.report_types import Verdict
from collector.diagnosis.stats import MIN_HANDOFF_BATCHES
from collector.diagnosis.verdict import INPUT_BOUND, MIN_BATCHES, PARTLY_INPUT_BOUND


@dataclass(frozen=True)
class Window:
    """The batches of one run handed out in the last ``window_s`` seconds, in (epoch, idx) order; NaN for NULL."""

    epoch: np.ndarray
    idx: np.ndarray
    ts: np.ndarray
    wait_s: np.ndarray
    ready: np.ndarray
    in_flight: np.ndarray
    weight: np.ndarray  # batches each row stands for: 1, or n for every n-th batch (NOTE [ Sampled window ])

    def __len__(self) -> int:
        return len(self.ts)


@dataclass(frozen=True)
class WindowStall:
    """What the exporter reports about a window: the stall fraction, its verdict and the queue depths."""

    stall_fraction: float
    verdict: Verdict
    batches: int
    ready_mean: float | None
    in_flight_mean: float | None


def window_stall(
    w: Window,
    *,
    num_workers: int,
    run_start: bool,
    epoch_starts: dict[int, tuple[float, float | None]],
    input_bound: float = INPUT_BOUND,
    partly_input_bound: float = PARTLY_INPUT_BOUND,
    min_batches: int = MIN_BATCHES,
) -> WindowStall:
    """The share of the window's wall time the loop stalled for data, as ``collector.diagnose`` measures it.

    The same rule as the diagnosis (collector/diagnosis/stats.py ``measure``):
    each wait beyond the hand-off cost of an already-ready batch (the median
    wait of steady ready batches, when there are ``MIN_HANDOFF_BATCHES``), plus
    the iter() time of the epochs that start in the window, over the window's
    wall time::

        window: |== wait ==|-- step --|= iter() =|== wait ==|-- step --|
                 <-stall->h             <-stall->  <-stall->h

    When the window reaches back to the run's first batch (``run_start``) the
    run's warm-up (its first epoch start) is left out, as in a whole-run
    diagnosis; otherwise it is a windowed diagnosis (``report --window-s``).
    The verdict uses the thresholds of collector/diagnosis/verdict.py.
    """
    n = round(float(w.weight.sum())) if len(w) else 0
    ready_mean = _mean(w.ready)
    in_flight_mean = _mean(w.in_flight)
    if len(w) < 2:
        return WindowStall(0.0, "insufficient-data", n, ready_mean, in_flight_mean)
    k = start_batches(num_workers)
    head = w.idx < k
    warm = head & (w.epoch == w.epoch[0]) if run_start else np.zeros(len(w), dtype=bool)
    steady = ~head
    if steady.sum() < 2:
        steady = np.arange(len(w)) > 0
    ready_steady = steady & (np.nan_to_num(w.ready) > 0)
    handoff = float(np.median(w.wait_s[ready_steady])) if ready_steady.sum() >= MIN_HANDOFF_BATCHES else 0.0
    stall = np.maximum(0.0, w.wait_s - handoff) * w.weight

    first = epoch_starts.get(int(w.epoch[0]))
    t_first = first[0] if run_start and first is not None else float(w.ts[0] - w.wait_s[0])
    wall = max(float(w.ts[-1] - t_first), 1e-9)
    warmup_s = float(w.ts[warm].max() - t_first) if warm.any() else 0.0
    iter_s = 0.0
    for e in np.unique(w.epoch[head]):
        if run_start and e == w.epoch[0]:
            continue
        first_batch_s = epoch_starts.get(int(e), (0.0, None))[1]
        zero = w.wait_s[(w.epoch == e) & (w.idx == 0)]
        if first_batch_s is not None:
            iter_s += max(0.0, first_batch_s - (float(zero[0]) if len(zero) else 0.0))
    fraction = min(1.0, float(stall[~warm].sum() + iter_s) / max(wall - warmup_s, 1e-9))
    verdict: Verdict
    if n < min_batches:
        verdict = "insufficient-data"
    elif fraction >= input_bound:
        verdict = "input-bound"
    elif fraction >= partly_input_bound:
        verdict = "partly-input-bound"
    else:
        verdict = "not-input-bound"
    return WindowStall(fraction, verdict, n, ready_mean, in_flight_mean)


def _mean(values: np.ndarray) -> float | None:
    known = values[~np.isnan(values)]
    return float(known.mean()) if len(known) else None

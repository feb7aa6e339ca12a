"""Which loaders of a job pay to tune: long enough epochs, a large enough share of the job's time."""

from __future__ import annotations

from collector.diagnosis.calibration import C


def worth_tuning(batches: int, share: float | None) -> str | None:
    """None where a loader of ``batches`` an epoch, ``share`` of the job's loader time, pays to tune; else why not.

    See NOTE [ One tuner for the job ] in collector/record/tuning_job.py.
    """
    if batches < C.MIN_TUNED_BATCHES:
        return f"its epochs of {batches} batches are too short to judge a trial by (at least {C.MIN_TUNED_BATCHES:.0f})"
    if share is not None and share < C.MIN_JOB_SHARE:
        return f"it takes {share:.0%} of the job's loader time: a trial could not pay for itself"
    return None

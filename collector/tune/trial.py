"""A measured stretch of a tuned loop, and a trial judged on one: a row of the trials table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collector.diagnosis.model import Setting
from collector.tune.answers import Proposal, setting_json


@dataclass(frozen=True)
class Trial:
    """One trial, measured: a row of the trials table."""

    epoch: int
    start_idx: int  # 0: a whole epoch; else the batch a window of a long epoch started at
    batches: int
    started_at: float
    ended_at: float
    setting: Setting
    baseline: Setting
    proposal: Proposal
    measured: float | None  # baseline's seconds a batch / the trial's; None: not judged (NOTE [ Trials never hurt ])
    noise: float
    kept: bool
    why: str

    def row(self) -> tuple[Any, ...]:
        """In TRIAL_COLUMNS order (collector/store/schema.py)."""
        p = self.proposal
        return (
            self.epoch,
            self.start_idx,
            self.batches,
            self.started_at,
            self.ended_at,
            setting_json(self.setting),
            setting_json(self.baseline),
            p.corrected(p.predicted),
            p.corrected(p.low),
            p.corrected(p.high),
            self.measured,
            self.noise,
            int(self.kept),
            self.why,
        )


@dataclass(frozen=True)
class Segment:
    """A measured stretch of the loop at one setting: an epoch, or a window of a long one."""

    epoch: int
    start_idx: int
    batches: int
    seconds: float
    started_at: float  # wall clock, for the record
    ended_at: float

    @property
    def per_batch_s(self) -> float:
        return self.seconds / max(1, self.batches)

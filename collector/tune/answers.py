"""What the tuner and its helper exchange: a setting in stored form and in words, the helper's proposal, or why nothing pays."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from collector.diagnosis.model import Setting
from collector.diagnosis.setting import stored


def setting_json(setting: Setting, trial: bool = False) -> str:
    """The stored form of a setting (epochs.setting, trials.setting): its fields, and whether it was a trial."""
    return json.dumps({**stored(setting), **({"trial": True} if trial else {})}, sort_keys=True)


def setting_from(value: dict[str, Any]) -> Setting:
    return Setting(**{f.name: value[f.name] for f in dataclasses.fields(Setting) if f.name in value})


@dataclass(frozen=True)
class Proposal:
    """The model's pick against ``baseline``: the setting to try and its predicted speed-up with a range.

    ``predicted``, ``low`` and ``high`` are the model's own; ``correction`` is
    what the policy scales their gains by (NOTE [ Measurement steers the model ]).
    """

    baseline: Setting
    setting: Setting
    predicted: float
    low: float
    high: float
    correction: float = 1.0
    seen: int | None = None  # segments measured when the helper was asked (None: not known)
    between: bool = False  # between settings measured: ranked by their models, not corrected (NOTE [ After a miss ])
    neighbour: bool = False  # one change from a kept setting, measured (NOTE [ Measured neighbours ])

    def corrected(self, speedup: float) -> float:
        """A speed-up of the model's with its gain scaled by ``correction``."""
        return 1.0 + (speedup - 1.0) * self.correction

    def described(self) -> str:
        """The corrected prediction in words, with the model's own where they differ."""
        text = f"predicted {self.corrected(self.predicted):.2f}x"
        if self.neighbour:
            return f"{text}, one change from the kept setting, within the model's error: measured to decide"
        if abs(self.correction - 1.0) < 0.005:
            return text
        return f"{text} (the model's {self.predicted:.2f}x, its gain x{self.correction:.2f} by this job's trials)"


@dataclass(frozen=True)
class NothingPays:
    """The helper's answer where no untried setting is predicted above 1.0: why, and what it had seen."""

    why: str
    seen: int | None = None  # as Proposal.seen
    later: bool = False  # asked too early to say (the step's CPU not sampled yet): a later question may find one


def describe(setting: Setting) -> str:
    """A setting in words: ``num_workers=2, prefetch_factor=2, 2 threads``."""
    parts = [f"num_workers={setting.num_workers}"]
    if setting.num_workers:
        parts.append(f"prefetch_factor={setting.prefetch_factor}")
        if setting.persistent_workers:
            parts.append("persistent_workers=True")
    if setting.pin_memory:
        parts.append("pin_memory=True")
    parts.append(f"{setting.threads} threads")
    return ", ".join(parts)

"""One number the diagnosis or the tuner does not measure on the user's run, with where it came from."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Constant:
    """One number the model does not measure on the user's run."""

    name: str
    value: float
    unit: str
    measured: str  # how and where; "chosen" for a decision threshold no bench can measure

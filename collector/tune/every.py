"""``tune=`` as the entry points take it: light to import, so an untuned job loads none of the tuner."""

from __future__ import annotations

DEFAULT_EVERY = 4  # at most one epoch in four on a trial once a gain is kept


def tune_every(tune: bool | int) -> int | None:
    """``tune=`` as given to watch() and the callbacks: None (off), or at most one epoch in N on a trial."""
    if tune is False or tune is None:
        return None
    if tune is True:
        return DEFAULT_EVERY
    if isinstance(tune, int) and tune >= 2:
        return tune
    raise ValueError(f"tune must be True, False or an integer N >= 2 (at most one epoch in N on a trial), got {tune!r}")

"""How the report writes numbers for people: one formatter per unit, shared by the rules, the CLI and the app."""

from __future__ import annotations


def ms(seconds: float | None) -> str:
    """``0.0123`` -> ``"12.3 ms"``; ``None`` -> ``"n/a"``."""
    return "n/a" if seconds is None else f"{seconds * 1000:.1f} ms"

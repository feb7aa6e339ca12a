"""The line a tuned run ends with; no pandas, so the training process can print it (collector/tune/policy.py)."""

from __future__ import annotations

from typing import Any

SETTING_KEYS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory")


def line(start: dict[str, Any], now: dict[str, Any], speedup: float) -> str:
    """The one line a tuned run ends with: what changed, by how much, and the code to start there."""
    names = {"threads": "torch.set_num_threads"}
    changed = [k for k in ("num_workers", *SETTING_KEYS[1:], "threads") if start.get(k) != now.get(k)]
    if now.get("num_workers"):
        changed = [k for k in changed if not (k == "prefetch_factor" and start.get(k) is None and now.get(k) == 2)]
    moves = ", ".join(f"{names.get(k, k)} {start.get(k)} -> {now.get(k)}" for k in changed)
    loader = ", ".join(f"{k}={now.get(k)!r}" for k in changed if k != "threads")
    parts = [f"DataLoader(..., {loader})"] if loader else []
    if "threads" in changed:
        parts.append(f"torch.set_num_threads({now.get('threads')})")
    return f"tuned: {moves}: {speedup:.1f}x measured; start there next time: {' and '.join(parts)}"

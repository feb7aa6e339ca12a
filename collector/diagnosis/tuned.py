"""A tuned run's settled part: the epochs at the setting the tuner kept, which the diagnosis describes."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from collector.diagnosis.tuned_line import SETTING_KEYS, line


def settled(epochs: pd.DataFrame) -> tuple[list[int], dict[str, Any]] | None:
    """(the epochs at the setting the tuner kept last, that setting), or None for a run no tuner changed.

    Walking back from the last epoch: an epoch at that setting counts; a
    trial at another setting (reverted) is passed over; the first other
    setting that was not a trial ends the walk. NOTE [ Live tuning ] in
    collector/tune/policy.py.
    """
    if "setting" not in epochs or epochs["setting"].isna().all():
        return None
    rows = [
        (int(e), json.loads(s)) for e, s in zip(epochs["epoch"], epochs["setting"], strict=True) if isinstance(s, str)
    ]
    plain = [(e, s) for e, s in rows if not s.get("trial")]
    target = _bare(plain[-1][1] if plain else rows[-1][1])
    kept: list[int] = []
    for epoch, setting in reversed(rows):
        if _bare(setting) == target:
            kept.append(epoch)
        elif not setting.get("trial"):
            break
    return sorted(kept), target


def at_setting(epochs: pd.DataFrame, setting: dict[str, Any]) -> tuple[list[int], dict[str, Any]]:
    """(the epochs a tuned run ran at ``setting``, trials included, that setting)."""
    rows = zip(epochs["epoch"], epochs["setting"], strict=True) if "setting" in epochs else iter(())
    return [int(e) for e, s in rows if isinstance(s, str) and _bare(json.loads(s)) == setting], setting


def stored_settings(epochs: pd.DataFrame) -> list[dict[str, Any]]:
    """Each tuned epoch's setting as stored in epochs.setting, without its trial mark, in epoch order."""
    return [_bare(json.loads(s)) for s in epochs.get("setting", ()) if isinstance(s, str)]


def settled_run(run: dict[str, Any], setting: dict[str, Any]) -> dict[str, Any]:
    """The run row as if recorded at ``setting``: its config's loader settings and torch's threads."""
    config = dict(run.get("config") or {})
    config.update({key: setting[key] for key in SETTING_KEYS if key in setting})
    threads = setting.get("threads", run.get("torch_threads"))
    return {**run, "config": config, "torch_threads": threads, "tuned": True}


def _bare(setting: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in setting.items() if k != "trial"}


def tuning(trials: pd.DataFrame) -> tuple[dict[str, Any], ...]:
    """The run's trials, as ``report --json`` gives them (docs/tuning.md): oldest first."""
    out = []
    for t in trials.sort_values(["epoch", "start_idx"]).to_dict("records"):
        out.append(
            {
                "epoch": int(t["epoch"]),
                "start_idx": int(t["start_idx"]),
                "batches": None if pd.isna(t["batches"]) else int(t["batches"]),
                "setting": json.loads(t["setting"]),
                "baseline": json.loads(t["baseline"]),
                "predicted_speedup": _num(t["predicted_speedup"]),
                "predicted_range": [_num(t["predicted_low"]), _num(t["predicted_high"])],
                "measured_speedup": _num(t["measured_speedup"]),
                "noise": _num(t["noise"]),
                "kept": bool(t["kept"]),
                "why": t["why"],
                "started_at": _num(t["started_at"]),
                "ended_at": _num(t["ended_at"]),
            }
        )
    return tuple(out)


def tuned_line(epochs: pd.DataFrame) -> str | None:
    """``tuned: num_workers 0 -> 4: 2.9x measured; start there next time: DataLoader(..., num_workers=4)``.

    Measured: the median seconds a batch of the epochs at the user's own
    setting over those at the setting the tuner kept. None where it kept none.
    """
    found = settled(epochs)
    if found is None:
        return None
    rows = [r for r in epochs.to_dict("records") if isinstance(r.get("setting"), str)]
    start = _bare(json.loads(rows[0]["setting"]))
    now = found[1]
    if start == now:
        return None
    before = _per_batch(r for r in rows if _bare(json.loads(r["setting"])) == start)
    after = _per_batch(r for r in rows if int(r["epoch"]) in found[0])
    if before is None or after is None:
        return None
    return line(start, now, before / after)


def _per_batch(rows: Any) -> float | None:
    times = sorted(
        (r["ended_at"] - r["started_at"]) / r["batches"]
        for r in rows
        if not pd.isna(r.get("ended_at")) and r.get("batches")
    )
    return times[len(times) // 2] if times else None


def _num(value: Any) -> float | None:
    return None if value is None or pd.isna(value) else float(value)

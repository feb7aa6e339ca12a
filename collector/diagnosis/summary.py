"""The report's ``summary`` block: the run's headline numbers, in the units docs/report.md documents."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from collector.diagnosis.data import RunData
from collector.diagnosis.stats import Facts
from collector.diagnosis.verdict import borderline


def percentiles(values: pd.Series, qs: dict[str, float]) -> dict[str, float] | None:
    v = values.dropna().to_numpy(dtype=float)
    return {k: round(float(np.quantile(v, q)), 6) for k, q in qs.items()} if len(v) else None


def summary(facts: Facts, data: RunData) -> dict[str, Any]:
    """The report's ``summary`` block (see docs/report.md)."""
    gpu = _busiest_gpu(data.gpu)
    util = None
    if gpu is not None:
        u = data.gpu.loc[data.gpu["gpu"] == gpu, "util_pct"]
        util = percentiles(u, {"p5": 0.05, "p95": 0.95})
        if util is not None:
            util = {"mean": round(float(u.mean()), 2), **util, "gpu": int(gpu)}
    return {
        "batches": facts.batches,
        "steady_batches": facts.steady_batches,
        "epochs": facts.epochs,
        "wall_s": round(facts.wall_s, 4),
        "data_wait_fraction": round(min(1.0, facts.wait_s / facts.active_s), 4),
        "stall_fraction": round(facts.input_fraction, 4),
        "stall_fraction_range": [round(facts.input_range[0], 4), round(facts.input_range[1], 4)],
        "borderline": borderline(facts),
        "active_s": round(facts.active_s, 4),
        "batches_per_s": round(facts.batches_per_s, 3),
        "steady_batches_per_s": round(facts.steady_batches_per_s, 3),
        "wait_s": {"p50": round(facts.wait_p50_s, 6), "p95": round(facts.wait_p95_s, 6)},
        "step_s": {"p50": round(facts.step_p50_s, 6), "mean": round(facts.step_mean_s, 6)},
        "handoff_s": round(facts.handoff_s, 6),
        "warmup_s": round(facts.warmup_s, 4),
        "epoch_start_lost_s": round(sum(facts.epoch_lost_s), 4),
        "collector_s": round(facts.collector_s, 6),
        "gpu_util_pct": util,
        "gpu_idle_s": None if facts.gpu_idle_s is None else round(float(facts.gpu_idle_s), 4),
        "window": data.window,
        "folded_batches": facts.folded_batches,
        "time_split": time_split(facts),
        "threads": {"torch": facts.torch_threads, "cores": facts.usable_cores},
        "cpu_cores": {
            "main": _round(facts.main_cpu_cores),
            "workers": _round(facts.worker_cpu_cores),
            "others": round(facts.background_cores, 3),
            "exact": facts.accounting_exact,
        },
    }


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(float(value), digits)


def time_split(facts: Facts) -> dict[str, Any]:
    """Per batch: producing it and the step, each as CPU, waiting for a core and blocked (seconds; None unknown)."""
    step_runq = facts.step_runq_s
    step_blocked = None
    if step_runq is not None:
        pool = max(1, facts.torch_threads or 1)
        step_blocked = max(0.0, facts.step_mean_s - (facts.step_cpu_s + step_runq) / pool)
    return {
        "load": {
            "wall_s": _round(facts.load_wall_s),
            "cpu_s": _round(facts.load_cpu_s),
            "runq_s": _round(facts.load_runq_s),
            "blocked_s": _round(facts.load_blocked_s),
        },
        "step": {
            "wall_s": _round(facts.step_mean_s),
            "cpu_s": _round(facts.step_cpu_s),
            "runq_s": _round(step_runq),
            "blocked_s": _round(step_blocked),
        },
    }


def _busiest_gpu(gpu: pd.DataFrame) -> int | None:
    g = gpu.dropna(subset=["util_pct"]) if not gpu.empty else gpu
    if g.empty:
        return None
    return int(g.groupby("gpu")["util_pct"].mean().idxmax())

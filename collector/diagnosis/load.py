"""What producing one batch costs: wall time, CPU, waiting for a core and blocked, with workers or without."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from collector.diagnosis.calibration import C


def load_share(
    known: bool, load_cpu: float | None, main_cpu: float | None, load_wall: float | None, cycle: float
) -> float | None:
    """With num_workers=0: the share of a core loading used, measured when known, else its upper bound."""
    if known and load_cpu is not None and load_wall:
        return min(1.0, load_cpu / load_wall)
    if main_cpu is None or not load_wall or cycle <= 0:
        return None
    return min(1.0, main_cpu / max(load_wall / cycle, 1e-9))


@dataclass(frozen=True)
class Load:
    """Per batch: producing it (wall, CPU, waiting for a core, blocked), and the step's CPU."""

    wall_s: float | None
    cpu_s: float | None
    known: bool
    runq_s: float | None
    blocked_s: float | None
    step_cpu_s: float
    concurrency: float | None
    runq_main_s: float | None  # the part of the training thread's run-queue wait spent inside next()


def _split(wall: float, cpu: float | None, runq: float | None) -> float | None:
    """Blocked: what the wall time leaves beyond CPU and waiting for a core (None without the run-queue figure)."""
    if cpu is None or runq is None:
        return None
    return max(0.0, wall - cpu - runq)


def load_costs(
    b: pd.DataFrame, steady: np.ndarray, n_workers: int, main_cpu: float | None, worker_cpu: float | None, cycle: float
) -> Load:
    """NOTE [ Load time without workers ]
    With num_workers=0 the batch is produced inside next(), so its wall time is
    the wait. Its CPU time is every loading thread's CPU inside next(),
    recorded on sampled batches (``load_cpu_s``; NOTE [ Loading CPU in the main
    process ]) with the training thread's wait for a core (``load_runq_s``):
    their shares of the sampled waits, applied to the mean wait. Without them
    (older files, fast loops where no batch was sampled), the main process's
    CPU share m bounds it: with w the wait share of a cycle, loading used
    between max(0, m - (1 - w)) / w and min(1, m / w) of a core while it ran.
    We take the middle of that range (the step's CPU is the other unknown).
    """
    wait = b["wait_s"].to_numpy()[steady]
    sampled_runq = b["load_runq_s"].to_numpy()[steady] if "load_runq_s" in b else np.full(len(wait), np.nan)
    runq_known = ~np.isnan(sampled_runq)
    runq_share = (
        float(sampled_runq[runq_known].sum() / max(wait[runq_known].sum(), 1e-12))
        if runq_known.sum() >= C.MIN_SAMPLED_LOADS
        else None
    )
    if n_workers == 0:
        load_wall = float(wait.mean())
        sampled_cpu = b["load_cpu_s"].to_numpy()[steady] if "load_cpu_s" in b else np.full(len(wait), np.nan)
        known = ~np.isnan(sampled_cpu)
        runq = None if runq_share is None else load_wall * min(1.0, runq_share)
        if known.sum() >= C.MIN_SAMPLED_LOADS:
            share = min(1.0, float(sampled_cpu[known].sum() / max(wait[known].sum(), 1e-12)))
            load_cpu = load_wall * share
            step_cpu = max(0.0, (main_cpu or 0.0) * cycle - load_cpu) if main_cpu is not None else 0.0
            return Load(load_wall, load_cpu, True, runq, _split(load_wall, load_cpu, runq), step_cpu, None, runq)
        if main_cpu is None or cycle <= 0:
            return Load(load_wall, None, False, None, None, 0.0, None, None)
        w = min(1.0, load_wall / cycle)
        upper = min(1.0, main_cpu / max(w, 1e-9))
        lower = min(1.0, max(0.0, (main_cpu - (1.0 - w)) / max(w, 1e-9)))
        load_cpu = load_wall * (upper + lower) / 2.0
        return Load(load_wall, load_cpu, False, None, None, max(0.0, main_cpu * cycle - load_cpu), None, None)
    main_load_cpu = b["load_cpu_s"].to_numpy()[steady] if "load_cpu_s" in b else np.full(len(wait), np.nan)
    in_next = float(np.nanmean(main_load_cpu)) if (~np.isnan(main_load_cpu)).any() else 0.0
    step_cpu = max(0.0, (main_cpu or 0.0) * cycle - in_next)
    runq_main = None if runq_share is None else float(wait.mean()) * runq_share
    wall = b["worker_wall_s"].to_numpy()[steady]
    cpu = b["worker_cpu_s"].to_numpy()[steady]
    fetch_runq = b["worker_runq_s"].to_numpy()[steady] if "worker_runq_s" in b else np.full(len(wall), np.nan)
    timed = ~np.isnan(wall)
    if timed.sum() >= 2:
        ts = b["ts"].to_numpy()[steady]
        span = float(ts[-1] - ts[0]) or 1e-9
        concurrency = float(wall[timed].sum() / span * len(wall) / timed.sum())
        with_runq = timed & ~np.isnan(fetch_runq)
        runq = float(fetch_runq[with_runq].mean()) if with_runq.sum() >= 2 else None
        wall_s, cpu_s = float(wall[timed].mean()), float(cpu[timed].mean())
        return Load(wall_s, cpu_s, True, runq, _split(wall_s, cpu_s, runq), step_cpu, concurrency, runq_main)
    # No worker timing: a starved loop consumes what n workers produce.
    unknown_cpu = None if worker_cpu is None else worker_cpu * cycle
    return Load(n_workers * cycle, unknown_cpu, False, None, None, step_cpu, None, runq_main)

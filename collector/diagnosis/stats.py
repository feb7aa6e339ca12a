"""Summary statistics of one run: the measured numbers every rule and the model start from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from collector.diagnosis.data import RunData
from collector.diagnosis.phases import STEADY, WARMUP, epoch_starts, label_phases

MIN_HANDOFF_BATCHES = 10  # ready batches needed before their median wait counts as the hand-off cost
MIN_SAMPLED_LOADS = 5  # num_workers=0: sampled next() CPU times needed before they replace the estimate


@dataclass(frozen=True)
class Facts:
    """Numbers measured once per diagnosis. Seconds, cores (1.0 = one core busy), bytes."""

    batches: int
    steady_batches: int
    epochs: int
    wall_s: float  # first iter() (or first batch request) to the last batch
    wait_s: float  # time in next() and iter(): everything the loop spent waiting for data
    warmup_s: float  # the run's first epoch start, from iter() to its last start batch
    input_wait_s: float  # stall after warm-up: waits beyond the hand-off, plus later iter() time
    input_fraction: float  # input_wait_s / (wall_s - warmup_s): what the verdict reads
    steady_stall_fraction: float  # stall share of steady-state batch cycles
    handoff_s: float  # median wait of a batch that was already ready (IPC, unpickling)
    step_mean_s: float  # steady state
    step_p50_s: float
    wait_p50_s: float
    wait_p95_s: float
    wait_p99_s: float
    cycle_s: float  # steady mean of wait + step: 1 / steady throughput
    batches_per_s: float  # whole span
    steady_batches_per_s: float
    epoch_lost_s: tuple[float, ...]  # per epoch start after the first: seconds lost
    num_workers: int
    prefetch_factor: int
    batch_size: int | None
    persistent_workers: bool
    pin_memory: bool
    usable_cores: int
    physical_cores: int
    main_cpu_cores: float | None  # main process, mean over steady samples
    worker_cpu_cores: float | None  # all workers together
    background_cores: float  # busy cores that are neither the main process nor its workers
    load_wall_s: float | None  # per batch: producing it, wall time (one worker, or next() with none)
    load_cpu_s: float | None  # per batch: CPU time producing it
    load_cpu_known: bool  # True from worker timing or next() CPU; False when estimated from process CPU
    load_cpu_upper: float | None  # num_workers=0: the most of a core loading can have used (see NOTE)
    step_cpu_s: float  # per batch: main-process CPU outside loading
    fetch_concurrency: float | None  # workers fetching at once, on average
    cuda: bool  # CUDA events were recorded: the loop trains on a GPU
    gpu_idle_s: float | None  # CUDA-event idle time during waits
    ram_bytes: int | None
    mem_available_min_bytes: int | None
    batch_nbytes: float | None  # mean, sampled
    disk_read_bps: float | None  # host disk reads, mean over the run
    shuffle: bool | None  # None: not known (a plain iterable)
    pinned_share: float | None  # share of described batches that were pinned


def _q(values: np.ndarray, q: float) -> float:
    return float(np.quantile(values, q)) if len(values) else 0.0


def measure(data: RunData) -> Facts:
    """Derive the run's ``Facts`` from its tables (vectorised; a 1M-batch run takes well under a second)."""
    b = data.batches
    cfg, host = data.config, data.host_facts
    n_workers = int(cfg.get("num_workers") or 0)
    wait = b["wait_s"].to_numpy()
    step = b["step_s"].to_numpy()
    ready = b["ready"].to_numpy()
    ts = b["ts"].to_numpy()
    epochs = data.epochs
    first_epoch = int(b["epoch"].iloc[0])
    run_start_in_data = int(b["idx"].iloc[0]) == 0 and data.window is None
    phases = label_phases(b, n_workers, run_start_in_data=run_start_in_data)
    steady = phases == STEADY
    if steady.sum() < 2:  # tiny runs: everything after the first batch counts as steady
        steady = np.arange(len(b)) > 0
    ready_steady = steady & (ready > 0)
    handoff = float(np.median(wait[ready_steady])) if ready_steady.sum() >= MIN_HANDOFF_BATCHES else 0.0
    stall = np.maximum(0.0, wait - handoff)

    row0 = epochs[epochs["epoch"] == first_epoch]
    from_iter = run_start_in_data and not row0.empty  # the first iter() is in the data
    t_first = float(row0["started_at"].iloc[0]) if from_iter else float(ts[0] - wait[0])
    wall = max(float(ts[-1] - t_first), 1e-9)
    steady_wait_mean = float(wait[steady].mean())
    starts = epoch_starts(b, epochs, n_workers, steady_wait_mean)
    iter_total = float(starts["iter_s"].sum())
    warm = phases == WARMUP
    warmup_s = float(ts[warm].max() - t_first) if warm.any() else 0.0
    later = starts[starts["epoch"] != first_epoch] if run_start_in_data else starts
    input_wait = float(stall[~warm].sum() + later["iter_s"].sum())
    cycles = wait[steady] + np.nan_to_num(step[steady])
    step_steady = step[steady & ~np.isnan(step)]
    cycle = float(cycles.mean())

    main_cpu, worker_cpu, background = _cpu(data, t_first + warmup_s)
    usable = int(host.get("usable_cores") or host.get("logical_cores") or 1)
    load_wall, load_cpu, known, step_cpu, concurrency = _load(b, steady, n_workers, main_cpu, worker_cpu, cycle)
    agg = data.aggregates
    described = agg.get("pinned_known") or 0
    gpu_known = agg.get("gpu_idle_known") or 0
    host_mem = data.host["mem_available_bytes"].dropna() if not data.host.empty else pd.Series(dtype=float)
    return Facts(
        batches=len(b),
        steady_batches=int(steady.sum()),
        epochs=int(b["epoch"].nunique()),
        wall_s=wall,
        wait_s=float(wait.sum() + iter_total),
        warmup_s=warmup_s,
        input_wait_s=input_wait,
        input_fraction=min(1.0, input_wait / max(wall - warmup_s, 1e-9)),
        steady_stall_fraction=float(stall[steady].sum() / max(cycles.sum(), 1e-12)),
        handoff_s=handoff,
        step_mean_s=float(step_steady.mean()) if len(step_steady) else 0.0,
        step_p50_s=_q(step_steady, 0.5),
        wait_p50_s=_q(wait[steady], 0.5),
        wait_p95_s=_q(wait[steady], 0.95),
        wait_p99_s=_q(wait[steady], 0.99),
        cycle_s=cycle,
        batches_per_s=len(b) / wall,
        steady_batches_per_s=1.0 / cycle if cycle > 0 else 0.0,
        epoch_lost_s=tuple(float(v) for v in later["lost_s"]),
        num_workers=n_workers,
        prefetch_factor=int(cfg.get("prefetch_factor") or (2 if n_workers else 0)),
        batch_size=cfg.get("batch_size"),
        persistent_workers=bool(cfg.get("persistent_workers")),
        pin_memory=bool(cfg.get("pin_memory")),
        usable_cores=usable,
        physical_cores=int(host.get("physical_cores") or usable),
        main_cpu_cores=main_cpu,
        worker_cpu_cores=worker_cpu,
        background_cores=min(background, max(0.0, usable - 1.0)),
        load_wall_s=load_wall,
        load_cpu_s=load_cpu,
        load_cpu_known=known,
        load_cpu_upper=_load_share(known, load_cpu, main_cpu, load_wall, cycle) if n_workers == 0 else None,
        step_cpu_s=step_cpu,
        fetch_concurrency=concurrency,
        cuda=gpu_known > 0,
        gpu_idle_s=agg.get("gpu_idle_s") if gpu_known else None,
        ram_bytes=host.get("ram_bytes"),
        mem_available_min_bytes=int(host_mem.min()) if len(host_mem) else None,
        batch_nbytes=agg.get("nbytes_mean"),
        disk_read_bps=_mean(data.host, "disk_read_bps"),
        shuffle=cfg.get("shuffle"),
        pinned_share=(agg.get("pinned_true") or 0) / described if described else None,
    )


def _mean(df: pd.DataFrame, column: str) -> float | None:
    if df.empty or column not in df or df[column].isna().all():
        return None
    return float(df[column].mean())


def _cpu(data: RunData, after_ts: float) -> tuple[float | None, float | None, float]:
    """Mean cores used by the main process, by the workers, and by everything else on the host."""
    procs, host = data.procs, data.host
    if procs.empty:
        return None, None, 0.0
    p = procs[procs["ts"] >= after_ts] if (procs["ts"] >= after_ts).sum() >= 2 else procs
    main = p[p["role"] == "main"].dropna(subset=["cpu_pct"])
    main_cpu = float(main["cpu_pct"].mean()) / 100.0 if len(main) else None
    workers = p[p["role"] == "worker"].dropna(subset=["cpu_pct"])
    per_ts = workers.groupby("ts")["cpu_pct"].sum() / 100.0
    worker_cpu = float(per_ts.mean()) if len(per_ts) else (0.0 if main_cpu is not None else None)
    background = 0.0
    if not host.empty and main_cpu is not None:
        logical = int(data.host_facts.get("logical_cores") or 1)
        h = host[(host["ts"] >= after_ts)].dropna(subset=["cpu_pct"]).set_index("ts")["cpu_pct"] / 100.0 * logical
        job = main.groupby("ts")["cpu_pct"].sum().div(100.0).add(per_ts, fill_value=0.0)
        joined = pd.concat([h.rename("host"), job.rename("job")], axis=1, join="inner")
        if len(joined):
            background = max(0.0, float((joined["host"] - joined["job"]).median()))
    return main_cpu, worker_cpu, background


def _load_share(
    known: bool, load_cpu: float | None, main_cpu: float | None, load_wall: float | None, cycle: float
) -> float | None:
    """With num_workers=0: the share of a core loading used, measured when known, else its upper bound."""
    if known and load_cpu is not None and load_wall:
        return min(1.0, load_cpu / load_wall)
    return _upper_share(main_cpu, load_wall, cycle)


def _upper_share(main_cpu: float | None, load_wall: float | None, cycle: float) -> float | None:
    """With num_workers=0: main-process CPU / wait share, the most of a core loading can have used."""
    if main_cpu is None or not load_wall or cycle <= 0:
        return None
    return min(1.0, main_cpu / max(load_wall / cycle, 1e-9))


def _load(
    b: pd.DataFrame, steady: np.ndarray, n_workers: int, main_cpu: float | None, worker_cpu: float | None, cycle: float
) -> tuple[float | None, float | None, bool, float, float | None]:
    """(load_wall_s, load_cpu_s, cpu_known, step_cpu_s, concurrency) per batch.

    NOTE [ Load time without workers ]
    With num_workers=0 the batch is produced inside next(), so its wall time is
    the wait. Its CPU time is the training thread's CPU inside next(), recorded
    on sampled batches (``load_cpu_s``): the CPU share of the sampled waits,
    applied to the mean wait. Without it (older files, fast loops where no batch
    was sampled), the main process's CPU share m bounds it: with w the wait
    share of a cycle, loading used between max(0, m - (1 - w)) / w and
    min(1, m / w) of a core while it ran. We take the middle of that range (the
    step's CPU is the other unknown).
    """
    wait = b["wait_s"].to_numpy()[steady]
    if n_workers == 0:
        load_wall = float(wait.mean())
        sampled_cpu = b["load_cpu_s"].to_numpy()[steady] if "load_cpu_s" in b else np.full(len(wait), np.nan)
        known = ~np.isnan(sampled_cpu)
        if known.sum() >= MIN_SAMPLED_LOADS:
            share = min(1.0, float(sampled_cpu[known].sum() / max(wait[known].sum(), 1e-12)))
            load_cpu = load_wall * share
            step_cpu = max(0.0, (main_cpu or 0.0) * cycle - load_cpu) if main_cpu is not None else 0.0
            return load_wall, load_cpu, True, step_cpu, None
        if main_cpu is None or cycle <= 0:
            return load_wall, None, False, 0.0, None
        w = min(1.0, load_wall / cycle)
        upper = min(1.0, main_cpu / max(w, 1e-9))
        lower = min(1.0, max(0.0, (main_cpu - (1.0 - w)) / max(w, 1e-9)))
        load_cpu = load_wall * (upper + lower) / 2.0
        return load_wall, load_cpu, False, max(0.0, main_cpu * cycle - load_cpu), None
    step_cpu = (main_cpu or 0.0) * cycle
    wall = b["worker_wall_s"].to_numpy()[steady]
    cpu = b["worker_cpu_s"].to_numpy()[steady]
    timed = ~np.isnan(wall)
    if timed.sum() >= 2:
        ts = b["ts"].to_numpy()[steady]
        span = float(ts[-1] - ts[0]) or 1e-9
        concurrency = float(wall[timed].sum() / span * len(wall) / timed.sum())
        return float(wall[timed].mean()), float(cpu[timed].mean()), True, step_cpu, concurrency
    # No worker timing: a starved loop consumes what n workers produce.
    unknown_cpu = None if worker_cpu is None else worker_cpu * cycle
    return n_workers * cycle, unknown_cpu, False, step_cpu, None


def steady_batches(data: RunData, facts: Facts) -> pd.DataFrame:
    """The steady-state batches (no warm-up, no epoch starts), with ``stall_s`` beyond the hand-off."""
    b = data.batches
    run_start_in_data = int(b["idx"].iloc[0]) == 0 and data.window is None
    phases = label_phases(b, facts.num_workers, run_start_in_data=run_start_in_data)
    steady = phases == STEADY
    if steady.sum() < 2:
        steady = np.arange(len(b)) > 0
    out = b[steady].copy()
    out["stall_s"] = np.maximum(0.0, out["wait_s"].to_numpy() - facts.handoff_s)
    return out


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
        "data_wait_fraction": round(min(1.0, facts.wait_s / facts.wall_s), 4),
        "stall_fraction": round(facts.input_fraction, 4),
        "batches_per_s": round(facts.batches_per_s, 3),
        "steady_batches_per_s": round(facts.steady_batches_per_s, 3),
        "wait_s": {"p50": round(facts.wait_p50_s, 6), "p95": round(facts.wait_p95_s, 6)},
        "step_s": {"p50": round(facts.step_p50_s, 6), "mean": round(facts.step_mean_s, 6)},
        "handoff_s": round(facts.handoff_s, 6),
        "warmup_s": round(facts.warmup_s, 4),
        "epoch_start_lost_s": round(sum(facts.epoch_lost_s), 4),
        "gpu_util_pct": util,
        "gpu_idle_s": None if facts.gpu_idle_s is None else round(float(facts.gpu_idle_s), 4),
        "window": data.window,
    }


def _busiest_gpu(gpu: pd.DataFrame) -> int | None:
    g = gpu.dropna(subset=["util_pct"]) if not gpu.empty else gpu
    if g.empty:
        return None
    return int(g.groupby("gpu")["util_pct"].mean().idxmax())

"""Summary statistics of one run: the measured numbers every rule and the model start from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from collector.diagnosis.accounting import active_spans, job_cpu, mean_range, t95, window_edges
from collector.diagnosis.data import RunData
from collector.diagnosis.load import load_costs, load_share
from collector.diagnosis.phases import STEADY, WARMUP, epoch_starts, label_phases, start_batches

MIN_HANDOFF_BATCHES = 10  # ready batches needed before their median wait counts as the hand-off cost
WINDOWS = 8  # epochs (or equal time windows) the uncertainty is taken over
MIN_HALF_RANGE = 0.005  # half a point: no measurement on a shared machine is finer
SHORT_RUN = 10 * WINDOWS  # steady batches below which the stall's windows hold 2 batches each (NOTE [ Stable answers ])


@dataclass(frozen=True)
class Facts:
    """Numbers measured once per diagnosis. Seconds, cores (1.0 = one core busy), bytes."""

    batches: int
    steady_batches: int
    epochs: int
    wall_s: float  # first iter() (or first batch request) to the last batch
    active_s: float  # the loader's own epochs, iter() to the final next(): NOTE [ A loader's active time ]
    wait_s: float  # time in iter(), every next() and the final one: everything the loop spent waiting for data
    warmup_s: float  # the run's first epoch start, from iter() to its last start batch
    input_wait_s: float  # stall after warm-up: waits beyond the hand-off, plus later iter() time
    input_fraction: float  # input_wait_s / (active_s - warmup_s): what the verdict reads
    input_range: tuple[float, float]  # its uncertainty over epochs or fixed windows (NOTE [ Stable answers ])
    steady_stall_fraction: float  # stall share of steady-state batch cycles
    handoff_s: float  # median wait of a batch that was already ready (IPC, unpickling)
    step_mean_s: float  # steady state
    step_p50_s: float
    wait_p50_s: float
    wait_p95_s: float
    wait_p99_s: float
    cycle_s: float  # steady mean of wait + step: 1 / steady throughput
    cycle_spread: float  # relative spread of the time a batch over epochs or windows: NOTE [ Honest ranges ]
    batches_per_s: float  # whole span
    steady_batches_per_s: float
    epoch_lost_s: tuple[float, ...]  # per epoch start after the first: seconds lost
    # per epoch start after the first: iter() to batch 0, the collector's own out. The first carries one-time
    # costs (10% more with the oversubscribed demo's 8 workers), but where it is all there is (the tuner's
    # first question) it is the start's best measure: the default start put epoch-stall's 0.5-s worker start
    # at 0.03 s and its fix at 1.1x, which measured 3x
    epoch_first_s: tuple[float, ...]
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
    load_runq_s: float | None  # per batch: producing it, waiting for a core (None: not measured)
    load_blocked_s: float | None  # per batch: producing it, neither computing nor waiting for a core
    step_cpu_s: float  # per batch: main-process CPU outside loading, every thread
    step_runq_s: float | None  # per batch: the main process's threads waiting for a core during the step
    main_runq_cores: float | None  # the main process's threads waiting for a core, on average
    accounting_exact: bool  # CPU from cumulative counters and the workers' own totals (schema 3)
    torch_threads: int | None  # torch.get_num_threads() in the training process
    epoch_batches: float  # batches per epoch, on average: of the epochs that ended (RunData.epoch_length)
    steady_from: int  # an epoch's first batch in steady state: the step and cycle means are of those from it on
    end_wait_s: float  # final next() calls, summed
    collector_s: float  # the collector's own work on the training thread in the spans: in no wait, no active time
    fetch_concurrency: float | None  # workers fetching at once, on average
    cuda: bool  # CUDA events were recorded: the loop trains on a GPU
    gpu_idle_s: float | None  # CUDA-event idle time during waits
    ram_bytes: int | None
    mem_available_min_bytes: int | None
    batch_nbytes: float | None  # mean, sampled
    disk_read_bps: float | None  # host disk reads, mean over the run
    shuffle: bool | None  # None: not known (a plain iterable)
    pinned_share: float | None  # share of described batches that were pinned
    folded_batches: int = 0  # of ``batches``, those read from rollups: in the totals, not the distributions


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
    steady_from = start_batches(n_workers)
    if steady.sum() < 2:  # tiny runs: everything after the first batch counts as steady
        steady, steady_from = np.arange(len(b)) > 0, 1
    ready_steady = steady & (ready > 0)
    handoff = float(np.median(wait[ready_steady])) if ready_steady.sum() >= MIN_HANDOFF_BATCHES else 0.0
    stall = np.maximum(0.0, wait - handoff)

    row0 = epochs[epochs["epoch"] == first_epoch]
    from_iter = run_start_in_data and not row0.empty  # the first iter() is in the data
    t_first = float(row0["started_at"].iloc[0]) if from_iter else float(ts[0] - wait[0])
    wall = max(float(ts[-1] - t_first), 1e-9)
    r = data.rollups  # the batches folded into rollups (NOTE [ Rollups ]): their sums count in every total
    folded = int(r["batches"].sum()) if not r.empty else 0
    spans = active_spans(b, epochs, windowed=data.window is not None, rollups=r)
    active = max(spans.active_s, 1e-9)
    steady_wait_mean = float(wait[steady].mean())
    starts = epoch_starts(b, epochs, n_workers, steady_wait_mean)
    iter_total = float(starts["iter_s"].sum())
    warm = phases == WARMUP
    warmup_s = float(ts[warm].max() - t_first) if warm.any() else 0.0
    if from_iter and warm.any():  # the collector's own start is in the warm-up span: out of both, as in active
        own_first = starts.loc[starts["epoch"] == first_epoch, "collector_s"]
        warmup_s = max(0.0, warmup_s - float(own_first.sum()))
    later = starts[starts["epoch"] != first_epoch] if run_start_in_data else starts
    ends = max(0.0, spans.end_wait_s - handoff * len(spans.starts))
    input_wait = float(stall[~warm].sum() + later["iter_s"].sum() + ends) + (
        float(r["stall_s"].sum()) if folded else 0.0
    )
    cycles = wait[steady] + np.nan_to_num(step[steady])
    step_steady = step[steady & ~np.isnan(step)]
    cycle = float(cycles.mean())

    usable = int(host.get("usable_cores") or host.get("logical_cores") or 1)
    logical = int(host.get("logical_cores") or usable)
    job = job_cpu(data.procs, data.host, data.worker_exits, spans, logical, t_first + warmup_s)
    main_cpu, worker_cpu = job.main_cores, job.worker_cores
    load = load_costs(b, steady, n_workers, main_cpu, worker_cpu, cycle)
    step_runq = None
    if job.main_runq_cores is not None:
        step_runq = max(0.0, job.main_runq_cores * cycle - (load.runq_main_s or 0.0))
    agg = data.aggregates
    described = agg.get("pinned_known") or 0
    gpu_known = agg.get("gpu_idle_known") or 0
    host_mem = data.host["mem_available_bytes"].dropna() if not data.host.empty else pd.Series(dtype=float)
    n_epochs = int(np.union1d(b["epoch"].unique(), r["epoch"].to_numpy() if folded else []).size)
    return Facts(
        batches=len(b) + folded,
        steady_batches=int(steady.sum()),
        epochs=n_epochs,
        wall_s=wall,
        active_s=active,
        wait_s=float(wait.sum() + iter_total + spans.end_wait_s) + (float(r["wait_s"].sum()) if folded else 0.0),
        warmup_s=warmup_s,
        input_wait_s=input_wait,
        input_fraction=min(1.0, input_wait / max(active - warmup_s, 1e-9)),
        input_range=stall_range(b, stall, steady, cycles, min(1.0, input_wait / max(active - warmup_s, 1e-9)), r),
        steady_stall_fraction=float(stall[steady].sum() / max(cycles.sum(), 1e-12)),
        handoff_s=handoff,
        step_mean_s=float(step_steady.mean()) if len(step_steady) else 0.0,
        step_p50_s=_q(step_steady, 0.5),
        wait_p50_s=_q(wait[steady], 0.5),
        wait_p95_s=_q(wait[steady], 0.95),
        wait_p99_s=_q(wait[steady], 0.99),
        cycle_s=cycle,
        cycle_spread=time_spread(b, ~warm, wait + np.nan_to_num(step), r),
        batches_per_s=(len(b) + folded) / wall,
        steady_batches_per_s=1.0 / cycle if cycle > 0 else 0.0,
        epoch_lost_s=tuple(float(v) for v in later["lost_s"]),
        epoch_first_s=tuple(float(v) for v in (later if len(later) else starts)["first_s"]),
        num_workers=n_workers,
        prefetch_factor=int(cfg.get("prefetch_factor") or (2 if n_workers else 0)),
        batch_size=cfg.get("batch_size"),
        persistent_workers=bool(cfg.get("persistent_workers")),
        pin_memory=bool(cfg.get("pin_memory")),
        usable_cores=usable,
        physical_cores=int(host.get("physical_cores") or usable),
        main_cpu_cores=main_cpu,
        worker_cpu_cores=worker_cpu,
        background_cores=min(job.background_cores, max(0.0, float(usable))),
        load_wall_s=load.wall_s,
        load_cpu_s=load.cpu_s,
        load_cpu_known=load.known,
        load_cpu_upper=load_share(load.known, load.cpu_s, main_cpu, load.wall_s, cycle) if n_workers == 0 else None,
        load_runq_s=load.runq_s,
        load_blocked_s=load.blocked_s,
        step_cpu_s=load.step_cpu_s,
        step_runq_s=step_runq,
        main_runq_cores=job.main_runq_cores,
        accounting_exact=job.exact,
        torch_threads=_int(data.run.get("torch_threads")),
        epoch_batches=data.epoch_length or (len(b) + folded) / max(1, n_epochs),
        steady_from=steady_from,
        end_wait_s=spans.end_wait_s,
        collector_s=spans.collector_s,
        fetch_concurrency=load.concurrency,
        cuda=gpu_known > 0,
        gpu_idle_s=agg.get("gpu_idle_s") if gpu_known else None,
        ram_bytes=host.get("ram_bytes"),
        mem_available_min_bytes=int(host_mem.min()) if len(host_mem) else None,
        batch_nbytes=agg.get("nbytes_mean"),
        disk_read_bps=_mean(data.host, "disk_read_bps"),
        shuffle=cfg.get("shuffle"),
        pinned_share=(agg.get("pinned_true") or 0) / described if described else None,
        folded_batches=folded,
    )


def _int(value: Any) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def _mean(df: pd.DataFrame, column: str) -> float | None:
    if df.empty or column not in df or df[column].isna().all():
        return None
    return float(df[column].mean())


def _points(
    b: pd.DataFrame, idx: np.ndarray, values: dict[str, np.ndarray], rollups: pd.DataFrame | None
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(ts, epoch, values) of the rows at ``idx``, each a batch (``n`` 1), and of each rollup minute (``n`` its batches)."""
    ts, epoch = b["ts"].to_numpy()[idx], b["epoch"].to_numpy()[idx]
    values = {**values, "n": np.ones(len(idx))}
    if rollups is None or rollups.empty:
        return ts, epoch, values
    folded = {"stall": rollups["stall_s"], "cycle": rollups["wait_s"] + rollups["step_s"], "n": rollups["batches"]}
    ts = np.concatenate([ts, rollups["end_ts"].to_numpy(dtype=float)])
    order = np.argsort(ts, kind="stable")
    epoch = np.concatenate([epoch, rollups["epoch"].to_numpy()])[order]
    merged = {k: np.concatenate([v, folded[k].to_numpy(dtype=float)])[order] for k, v in values.items()}
    return ts[order], epoch, merged


def stall_range(
    b: pd.DataFrame,
    stall: np.ndarray,
    steady: np.ndarray,
    cycles: np.ndarray,
    point: float,
    rollups: pd.DataFrame | None = None,
) -> tuple[float, float]:
    """NOTE [ Stable answers ]: ``point`` plus or minus the uncertainty of the steady stall share.

    A number measured once on a busy machine moves between reruns. The steady
    stall share is taken per epoch (with 8 or more) or per equal time window
    (8), and the range is the point plus or minus two standard errors of
    their mean. The verdict and each symptom carry such a range, and one whose
    range straddles its threshold is reported as borderline, with the range,
    rather than flipping between two answers from one run to the next.
    A file's rollups (NOTE [ Rollups ]) take part, each minute of them with its batches.
    A short run (under ``SHORT_RUN`` steady batches) is cut into windows of
    two batches or more, with Student's t for their few degrees of freedom,
    so that 18 batches that each wait 490 ms for a 41 ms step are clearly
    input-bound while 18 that wait now and then are not yet anything.
    """
    idx = np.flatnonzero(steady)
    ts, epoch, v = _points(b, idx, {"stall": stall[idx], "cycle": cycles}, rollups)
    short = len(idx) < SHORT_RUN and (rollups is None or rollups.empty)
    groups = window_edges(ts, epoch, WINDOWS, per_window=2 if short else 10)
    s, c = v["stall"], v["cycle"]
    per = np.array([s[g].sum() / max(c[g].sum(), 1e-12) for g in groups])
    weights = np.array([c[g].sum() for g in groups])
    if short and len(groups) < 2:
        return 0.0, 1.0  # one window: no variation to judge from
    lo, hi = mean_range(per, weights, z=t95(len(groups) - 1) if short else 2.0)
    half = max((hi - lo) / 2.0, MIN_HALF_RANGE)
    return max(0.0, point - half), min(1.0, point + half)


def time_spread(
    b: pd.DataFrame, after_warmup: np.ndarray, cycles: np.ndarray, rollups: pd.DataFrame | None = None
) -> float:
    """How much the time a batch (its wait and its step) varies over epochs, or equal windows: std / mean.

    NOTE [ Honest ranges ]
    A predicted speed-up compares two epochs that this machine will not run
    alike: a shared 2-core machine's epochs of one setting vary about +-12%.
    So every prediction carries a range (collector/diagnosis/choose.py) from
    two measured spreads: this run's own, per epoch with 8 or more, else per
    eighth of its time after warm-up, and the model's error on the benches
    (C.MODEL_LOW and C.MODEL_HIGH, NOTE [ Calibration table ]).
    """
    idx = np.flatnonzero(after_warmup)
    ts, epoch, v = _points(b, idx, {"cycle": cycles[idx]}, rollups)
    groups = window_edges(ts, epoch, WINDOWS)
    per = np.array([v["cycle"][g].sum() / max(v["n"][g].sum(), 1e-12) for g in groups if len(g)])
    if len(per) < 2 or per.mean() <= 0:
        return 0.0
    return float(per.std() / per.mean())


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

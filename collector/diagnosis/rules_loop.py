"""Rules read from the training loop's side: starvation, the GPU sawtooth, one busy core, epoch starts."""

from __future__ import annotations

import numpy as np

from collector.diagnosis.data import RunData
from collector.diagnosis.report_types import Severity, Symptom
from collector.diagnosis.rules_cpu import busiest_core
from collector.diagnosis.stats import Facts, steady_batches
from collector.diagnosis.units import ms

CHUNKS = 10  # "sustained" = the evidence holds in most tenths of the steady state


def sustained_share(stall_s: np.ndarray, cycle_s: np.ndarray, threshold: float, chunks: int = CHUNKS) -> float:
    """Share of consecutive chunks of batches whose stall fraction reaches ``threshold``."""
    n = min(chunks, len(stall_s))
    if n == 0:
        return 0.0
    hits = [
        s.sum() >= threshold * max(c.sum(), 1e-12)
        for s, c in zip(np.array_split(stall_s, n), np.array_split(cycle_s, n), strict=True)
    ]
    return float(np.mean(hits))


def input_bound(
    data: RunData, facts: Facts, *, threshold: float = 0.05, high: float = 0.20, sustained: float = 0.6
) -> Symptom | None:
    """The loop waits for data ``threshold`` (5%) of the time or more, in most of the run.

        |== wait ==|-- step --|== wait ==|-- step --|   stall share = wait / (wait + step)

    Severity high from ``high`` (20%, the verdict's input-bound line); the stall
    must reach ``threshold`` in at least ``sustained`` of ten chunks of the
    steady state, so one slow burst does not fire it.
    """
    steady = steady_batches(data, facts)
    cycles = steady["wait_s"].to_numpy() + np.nan_to_num(steady["step_s"].to_numpy())
    share = sustained_share(steady["stall_s"].to_numpy(), cycles, threshold)
    if facts.input_fraction < threshold or share < sustained:
        return None
    fraction = facts.input_fraction
    lo, hi = facts.input_range
    severity: Severity = "high" if fraction >= high else ("medium" if fraction >= 2 * threshold else "low")
    return Symptom(
        id="input_bound",
        severity=severity,
        evidence=(
            f"{fraction:.0%} of the time after warm-up went to waiting for data "
            f"({facts.input_wait_s:.1f} s of {facts.active_s - facts.warmup_s:.1f} s; range {lo:.0%}-{hi:.0%} over "
            f"epochs or windows); a steady batch waits "
            f"{ms(facts.wait_p50_s)} (p50, p95 {ms(facts.wait_p95_s)}) for a {ms(facts.step_p50_s)} step"
        ),
        confidence=round(min(1.0, share * min(1.0, facts.steady_batches / 100)) * (0.6 if lo < threshold else 1.0), 2),
        metrics={
            "stall_fraction": round(fraction, 4),
            "range": [round(lo, 4), round(hi, 4)],
            "lost_s": round(facts.input_wait_s, 3),
            "sustained": share,
        },
        borderline=lo < threshold,
    )


def gpu_util_sawtooth(
    data: RunData,
    facts: Facts,
    *,
    swing_pct: float = 40.0,
    gap_pct: float = 30.0,
    low_pct: float = 50.0,
    starved: float = 0.20,
    nvml_window_s: float = 1 / 6,
) -> Symptom | None:
    """GPU utilisation swings between low and high in step with the data waits.

        util  ‾‾‾\\___/‾‾‾\\___/‾‾‾     high while stepping, low while waiting
        loop  -step-|wait|-step-|wait|

    Fires when p95 - p5 >= ``swing_pct`` points, p5 <= ``low_pct`` and samples
    taken during waits read ``gap_pct`` points below those taken during steps.
    NVML averages utilisation over its sample period (at least ``nvml_window_s``),
    so a loop cycle shorter than two periods cannot show a sawtooth: then the
    loop's own busy share and the CUDA-event idle time carry the evidence, and
    it fires when the stall fraction reaches ``starved``.
    """
    gpu = data.gpu.dropna(subset=["util_pct"]) if not data.gpu.empty else data.gpu
    if not gpu.empty:
        busiest = gpu.groupby("gpu")["util_pct"].mean().idxmax()
        gpu = gpu[gpu["gpu"] == busiest].sort_values("ts")
    if len(gpu) >= 10:
        period = max(float(np.median(np.diff(gpu["ts"].to_numpy()))), nvml_window_s)
        if period * 2 <= facts.cycle_s:
            return _sawtooth_seen(data, facts, gpu, swing_pct, gap_pct, low_pct)
        coarse = f"NVML sampled every {ms(period)}, too coarse to show a sawtooth for a {ms(facts.cycle_s)} cycle"
    elif facts.cuda:
        coarse = "no GPU utilisation was sampled"
    else:
        return None  # CPU-only training: there is no GPU to starve
    if facts.input_fraction < starved:
        return None
    idle = "" if facts.gpu_idle_s is None else f"; CUDA events show the GPU idle {facts.gpu_idle_s:.1f} s during waits"
    return Symptom(
        id="gpu_util_sawtooth",
        severity="medium",
        evidence=f"{coarse}; from the loop, the GPU was fed only {1 - facts.input_fraction:.0%} of the time{idle}",
        confidence=0.6,
        metrics={"busy_fraction": round(1 - facts.input_fraction, 4), "gpu_idle_s": facts.gpu_idle_s},
    )


def _sawtooth_seen(
    data: RunData, facts: Facts, gpu: object, swing_pct: float, gap_pct: float, low_pct: float
) -> Symptom | None:
    import pandas as pd

    assert isinstance(gpu, pd.DataFrame)
    b = data.batches
    ends = b["ts"].to_numpy()
    starts = ends - b["wait_s"].to_numpy()
    t = gpu["ts"].to_numpy()
    util = gpu["util_pct"].to_numpy()
    i = np.clip(np.searchsorted(ends, t), 0, len(ends) - 1)
    waiting = (t >= starts[i]) & (t <= ends[i])
    p5, p95 = np.quantile(util, [0.05, 0.95])
    if waiting.sum() < 3 or (~waiting).sum() < 3:
        return None
    during_wait, during_step = float(util[waiting].mean()), float(util[~waiting].mean())
    if p95 - p5 < swing_pct or p5 > low_pct or during_step - during_wait < gap_pct:
        return None
    return Symptom(
        id="gpu_util_sawtooth",
        severity="high" if facts.input_fraction >= 0.2 else "medium",
        evidence=(
            f"GPU utilisation swings from {p5:.0f}% (p5) to {p95:.0f}% (p95): {during_wait:.0f}% while the "
            f"loop waits for data vs {during_step:.0f}% while it steps"
        ),
        confidence=round(min(1.0, len(util) / 100), 2),
        metrics={"p5": float(p5), "p95": float(p95), "during_wait": during_wait, "during_step": during_step},
    )


def single_core_saturated(
    data: RunData,
    facts: Facts,
    *,
    busy: float = 0.8,
    pegged: float = 0.95,
    core_pegged_pct: float = 90.0,
    min_stall: float = 0.05,
    spare: float = 0.5,
) -> Symptom | None:
    """Loading in the main process keeps one core busy while the others idle.

        core 0  ██████████████████   main process: step + __getitem__ + collate
        core 1  ▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁   idle

    Fires with num_workers=0 when the loop stalls ``min_stall`` of the time, and
    the main process uses ``busy`` of a core, or the loading thread was on a
    core or waiting for one (CPU plus run-queue time) ``pegged`` of the time it
    spent loading, or the host's busiest core reads ``core_pegged_pct`` (its
    per-core samples, median; only while other processes use under ``spare``
    cores, so the pegged core is this job's); and the job leaves at least
    ``spare`` cores unused.
    """
    if facts.num_workers != 0 or facts.main_cpu_cores is None or facts.input_fraction < min_stall:
        return None
    job = facts.main_cpu_cores + (facts.worker_cpu_cores or 0.0)
    load_share = facts.load_cpu_upper or 0.0
    demand = load_share
    if facts.load_runq_s is not None and facts.load_cpu_s is not None and facts.load_wall_s:
        demand = min(1.0, (facts.load_cpu_s + facts.load_runq_s) / facts.load_wall_s)
    cores = busiest_core(data)
    core_busy = (
        cores is not None and cores[0] >= core_pegged_pct and facts.background_cores < spare
    )  # ours, not others'

    if facts.usable_cores - job < spare:
        return None
    if facts.main_cpu_cores < busy and load_share < pegged and demand < pegged and not core_busy:
        return None
    where = "" if cores is None else f"; busiest core {cores[0]:.0f}% (median), the others {cores[1]:.0f}% on average"
    return Symptom(
        id="single_core_saturated",
        severity="high" if facts.input_fraction >= 0.2 else "medium",
        evidence=(
            f"num_workers=0: the main process loads every batch itself at {facts.main_cpu_cores:.0%} of one core "
            f"(while loading, on a core or waiting for one {demand:.0%} of the time) and leaves "
            f"{facts.usable_cores - job:.1f} of {facts.usable_cores} usable cores unused{where}"
        ),
        confidence=0.9 if facts.main_cpu_cores >= busy or demand >= pegged else 0.6,
        metrics={
            "main_cpu_cores": facts.main_cpu_cores,
            "load_cpu_share": round(load_share, 3),
            "load_demand_share": round(demand, 3),
            "busiest_core_pct": None if cores is None else round(cores[0], 1),
        },
    )


def epoch_start_stall(
    data: RunData, facts: Facts, *, ratio: float = 5.0, min_lost_s: float = 0.1, min_share: float = 0.05
) -> Symptom | None:
    """Every epoch's first batches wait far longer than steady state (workers restarting).

        epoch 1                 epoch 2
        iter() |== start ==|b b b b b| iter() |== start ==|b b b b b|

    Fires, for loaders with workers, when an epoch start after the first was observed, the
    median start loses ``min_lost_s`` (0.1 s) and ``ratio`` (5) steady batch
    cycles, and together they cost ``min_share`` (5%) of the run after warm-up.
    """
    lost = np.asarray(facts.epoch_lost_s)
    if facts.num_workers == 0 or len(lost) < 1:
        return None
    median = float(np.median(lost))
    share = float(lost.sum()) / max(facts.active_s - facts.warmup_s, 1e-9)
    if median < min_lost_s or median < ratio * facts.cycle_s or share < min_share:
        return None
    why = "workers restart each epoch (persistent_workers=False)" if not facts.persistent_workers else ""
    why = why or "the epoch starts slowly even with persistent workers (sampler or dataset set-up?)"
    return Symptom(
        id="epoch_start_stall",
        severity="high" if share >= 0.2 else "medium",
        evidence=(
            f"each epoch start loses {median:.2f} s (median over {len(lost)} epochs, "
            f"{median / max(facts.cycle_s, 1e-9):.0f}x a steady batch), {share:.0%} of the run: {why}"
        ),
        confidence=round(min(1.0, 0.5 + 0.1 * len(lost)), 2),
        metrics={"lost_per_epoch_s": round(median, 4), "lost_s": round(float(lost.sum()), 4), "share": share},
    )

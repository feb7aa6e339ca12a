"""Rules about host memory: running out of RAM, and pageable batches copied to a GPU."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from collector.diagnosis.data import RunData
from collector.diagnosis.report_types import Severity, Symptom
from collector.diagnosis.stats import Facts

MiB = 2**20
SEVERITIES: tuple[Severity, ...] = ("low", "medium", "high")


def worker_private_bytes(procs: pd.DataFrame) -> float | None:
    """Mean private memory (USS, else RSS) of one worker, from its latest sample."""
    workers = procs[procs["role"] == "worker"] if not procs.empty else procs
    if workers.empty:
        return None
    column = "uss_bytes" if workers["uss_bytes"].notna().any() else "rss_bytes"
    last = workers.dropna(subset=[column]).groupby("pid")[column].last()
    return float(last.mean()) if len(last) else None


def main_rss_bytes(procs: pd.DataFrame) -> float | None:
    main = procs[procs["role"] == "main"].dropna(subset=["rss_bytes"]) if not procs.empty else procs
    return float(main["rss_bytes"].iloc[-1]) if len(main) else None


@dataclass(frozen=True)
class Trend:
    """Available memory after start-up, as a line: what the trend rule reads (bytes, seconds)."""

    window_s: float  # seconds of samples after the run's warm-up
    fall_bytes: float  # available memory, first sample of the window less the last
    rate_bps: float  # its fall now, bytes a second: the later half's slope (0 when not falling)
    left_bytes: float  # available at the last sample: what is actually left
    to_zero_s: float  # left_bytes / rate_bps (inf when not falling)
    run_fall_bytes: float  # the whole run's fall, start-up included
    own_bytes: float | None  # the job's own memory (main process and workers, RSS) over the window: its growth


def available_trend(data: RunData, facts: Facts) -> Trend | None:
    """The run's available memory after its warm-up (the first epoch start), as a ``Trend``; None without samples.

    NOTE [ A trend needs a window ]
    Start-up takes memory once: the model is built, workers fork and import,
    buffers fill. Its slope over a few seconds, extrapolated, says "gone in 5
    min" on a healthy run (pytorch/examples' imagenet, 16.8 s: 77.8 MiB/s).
    So the trend is read only after the warm-up, its rate is the later half's
    slope (memory that fell and then held is no trend), the time to zero is
    what is left at the end over that rate, and the rule fires only over a
    window long enough to see it, with severity from how far it projects past
    what was seen.
    """
    host = data.host.dropna(subset=["mem_available_bytes"]) if not data.host.empty else data.host
    if len(host) < 2:
        return None
    host = host.sort_values("ts")
    t_all = host["ts"].to_numpy(dtype=float)
    avail_all = host["mem_available_bytes"].to_numpy(dtype=float)
    t_from = float(data.batches["ts"].iloc[-1]) - facts.wall_s + facts.warmup_s
    after = t_all >= t_from
    t, avail = t_all[after], avail_all[after]
    run_fall = float(avail_all[0] - avail_all[-1])
    if len(t) < 5 or t[-1] <= t[0]:
        span = float(t[-1] - t[0]) if len(t) else 0.0
        return Trend(span, 0.0, 0.0, float(avail_all[-1]), float("inf"), run_fall, None)
    half = t >= (t[0] + t[-1]) / 2
    late = float(np.polyfit(t[half] - t[0], avail[half], 1)[0]) if half.sum() >= 3 else 0.0
    whole = float(np.polyfit(t - t[0], avail, 1)[0])
    rate = -max(late, whole) if late < 0 and whole < 0 else 0.0  # still falling, at the slower of the two
    left, to_zero = float(avail[-1]), float(avail[-1]) / rate if rate else float("inf")
    return Trend(
        float(t[-1] - t[0]), float(avail[0] - avail[-1]), rate, left, to_zero, run_fall, _own_growth(data, t[0])
    )


def _own_growth(data: RunData, t_from: float) -> float | None:
    """How much the job's own memory (main process and workers, RSS summed per sample) grew from ``t_from``."""
    procs = data.procs
    if procs.empty:
        return None
    own = procs[procs["role"].isin(("main", "worker")) & (procs["ts"] >= t_from)].dropna(subset=["rss_bytes"])
    if own.empty or (own["role"] == "main").sum() < 2:
        return None
    total = own.groupby("ts")["rss_bytes"].sum().sort_index()
    return float(total.iloc[-1] - total.iloc[0])


def memory_pressure(
    data: RunData,
    facts: Facts,
    *,
    low_share: float = 0.10,
    horizon_s: float = 3600.0,
    min_window_s: float = 60.0,
    fall_share: float = 0.05,
    max_projection: float = 4.0,
    own_share: float = 0.5,
    queue_share: float = 0.5,
    growth_share: float = 0.25,
    growth_bytes: float = 64 * MiB,
) -> Symptom | None:
    """Risk of running out of RAM, from three signs.

        available  ‾‾\\__‾‾‾‾\\___     after start-up, falling toward zero within
        worker USS  __/‾‾‾‾‾‾‾‾‾    ``horizon_s``, or below ``low_share`` of RAM;
                  |warm-up|window|  workers' private memory growing (copy-on-write)

    Fires when available memory drops below ``low_share`` (10%) of RAM; when,
    over at least ``min_window_s`` (60 s) after the warm-up, it fell
    ``fall_share`` (5%) of RAM and still falls fast enough to reach zero
    within ``horizon_s`` (1 h), the job's own memory (where sampled) growing
    by ``own_share`` (50%) of that fall, so other programs' memory is not
    this job's (NOTE [ A trend needs a window ]): high when
    zero is under 10 min away and no further than the window seen, medium
    within ``max_projection`` (4x) the window, low beyond; when ``num_workers *
    prefetch_factor`` batches plus the workers' private memory take
    ``queue_share`` (50%) of what is available; or when workers' private memory
    grows by ``growth_share`` (25%) and ``growth_bytes`` (64 MiB) each after the
    warm-up, the sign of a Python-object dataset copied page by page into
    forked workers.
    """
    findings: list[str] = []
    metrics: dict[str, float] = {}
    level = 1  # 0 low, 1 medium, 2 high
    ram = facts.ram_bytes or 0
    trend = available_trend(data, facts) if ram else None
    if trend is not None:
        low = float(facts.mem_available_min_bytes or trend.left_bytes)
        metrics.update(mem_available_min_bytes=low, mem_slope_bps=-trend.rate_bps, trend_window_s=trend.window_s)
        if low < low_share * ram:
            findings.append(f"available memory fell to {low / MiB:.0f} MiB ({low / ram:.0%} of RAM)")
            level = 2 if low < 0.05 * ram else level
        elif (
            trend.window_s >= min_window_s
            and trend.fall_bytes >= fall_share * ram
            and trend.to_zero_s < horizon_s
            and (trend.own_bytes is None or trend.own_bytes >= own_share * trend.fall_bytes)
        ):
            findings.append(
                f"after start-up, available memory fell {trend.fall_bytes / MiB:.0f} MiB in {trend.window_s:.0f} s "
                f"and still falls {trend.rate_bps / MiB:.1f} MiB/s: the {trend.left_bytes / MiB:.0f} MiB left "
                f"last about {trend.to_zero_s / 60:.0f} min"
            )
            metrics["to_zero_s"] = trend.to_zero_s
            if trend.to_zero_s < 600 and trend.to_zero_s <= trend.window_s:
                level = 2
            elif trend.to_zero_s > max_projection * trend.window_s:
                level = 0  # projected far past what was seen: worth a look, no alarm
    worker = worker_private_bytes(data.procs) or 0.0
    queued = facts.num_workers * facts.prefetch_factor * (facts.batch_nbytes or 0.0)
    held = queued + facts.num_workers * worker
    if facts.mem_available_min_bytes and facts.num_workers and held >= queue_share * facts.mem_available_min_bytes:
        findings.append(
            f"{facts.num_workers} workers x prefetch {facts.prefetch_factor} hold {queued / MiB:.0f} MiB of batches "
            f"plus {facts.num_workers * worker / MiB:.0f} MiB of worker memory, "
            f"{held / facts.mem_available_min_bytes:.0%} of the available memory"
        )
        metrics["held_bytes"] = held
        level = max(level, 1)
    t_from = float(data.batches["ts"].iloc[-1]) - facts.wall_s + facts.warmup_s
    growth = _worker_growth(data.procs, t_from)
    if growth is not None and growth[0] >= growth_share and growth[1] >= growth_bytes:
        findings.append(
            f"worker private memory grew {growth[0]:.0%} (+{growth[1] / MiB:.0f} MiB each) after start-up: "
            "copy-on-write of a Python-object dataset; keep its data in numpy arrays or tensors"
        )
        metrics["worker_growth_bytes"] = growth[1]
        level = max(level, 1)
    if not findings:
        return None
    severity = SEVERITIES[level]
    return Symptom(
        id="memory_pressure",
        severity=severity,
        evidence="; ".join(findings) + " (to fit: lower batch_size, num_workers or prefetch_factor)",
        confidence=round(min(1.0, 0.5 + 0.2 * len(findings)), 2),
        metrics=metrics,
    )


def trend_note(data: RunData, facts: Facts, *, min_window_s: float = 60.0, fall_share: float = 0.05) -> str | None:
    """A note where available memory fell but the run was too short to tell a trend (NOTE [ A trend needs a window ])."""
    ram = facts.ram_bytes or 0
    trend = available_trend(data, facts) if ram else None
    if trend is None or trend.window_s >= min_window_s or trend.run_fall_bytes < fall_share * ram:
        return None
    return (
        f"available memory fell {trend.run_fall_bytes / MiB:.0f} MiB during the run, start-up included, but "
        f"{trend.window_s:.0f} s after the warm-up is too short to tell a trend (needs {min_window_s:.0f} s): "
        "no time to exhaustion is projected"
    )


def _worker_growth(procs: pd.DataFrame, t_from: float) -> tuple[float, float] | None:
    """(median relative growth, median growth in bytes) of workers' USS from first to last sample after ``t_from``."""
    workers = procs[procs["role"] == "worker"].dropna(subset=["uss_bytes"]) if not procs.empty else procs
    workers = workers[workers["ts"] >= t_from] if not workers.empty else workers
    if workers.empty:
        return None
    grouped = workers.sort_values("ts").groupby("pid")["uss_bytes"]
    first, last, count = grouped.first(), grouped.last(), grouped.size()
    keep = count >= 3
    if not keep.any():
        return None
    grown = (last - first)[keep]
    return float((grown / first[keep].clip(lower=1)).median()), float(grown.median())


def pageable_memory(facts: Facts, *, min_pinned: float = 0.5) -> Symptom | None:
    """Training on CUDA from pageable (unpinned) batches: each copy to the GPU is staged and synchronous.

        host  |pageable| -> |pinned staging| -> GPU     (pin_memory=True skips a copy
                                                          and lets non_blocking overlap)

    Fires only when CUDA events were recorded (the loop trains on a GPU) and
    fewer than ``min_pinned`` (50%) of the described batches were pinned; never
    for CPU-only training.
    """
    if not facts.cuda:
        return None
    if facts.pinned_share is None:
        if facts.pin_memory:
            return None
        share_text, confidence = "pin_memory=False", 0.5
    elif facts.pinned_share < min_pinned:
        share_text, confidence = f"{1 - facts.pinned_share:.0%} of the batches were pageable", 0.9
    else:
        return None
    return Symptom(
        id="pageable_memory",
        severity="medium" if facts.input_fraction >= 0.05 else "low",
        evidence=(
            f"training on CUDA and {share_text}: the copy to the GPU cannot overlap compute; use "
            "pin_memory=True and batch.to(device, non_blocking=True)"
        ),
        confidence=confidence,
        metrics={"pinned_share": facts.pinned_share},
    )

"""Rules about host memory: running out of RAM, and pageable batches copied to a GPU."""

from __future__ import annotations

import numpy as np
import pandas as pd

from collector.diagnosis.data import RunData
from collector.diagnosis.report_types import Symptom
from collector.diagnosis.stats import Facts

MiB = 2**20


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


def memory_pressure(
    data: RunData,
    facts: Facts,
    *,
    low_share: float = 0.10,
    horizon_s: float = 3600.0,
    queue_share: float = 0.5,
    growth_share: float = 0.25,
    growth_bytes: float = 64 * MiB,
) -> Symptom | None:
    """Risk of running out of RAM, from three signs.

        available  ‾‾‾‾\\____        falling toward zero within ``horizon_s``,
        worker USS  __/‾‾‾‾‾        or below ``low_share`` of RAM; workers'
                                    private memory growing (copy-on-write)

    Fires when available memory drops below ``low_share`` (10%) of RAM or its
    trend reaches zero within ``horizon_s`` (1 h); when ``num_workers *
    prefetch_factor`` batches plus the workers' private memory take
    ``queue_share`` (50%) of what is available; or when workers' private memory
    grows by ``growth_share`` (25%) and ``growth_bytes`` (64 MiB) each, the sign
    of a Python-object dataset copied page by page into forked workers.
    """
    findings: list[str] = []
    metrics: dict[str, float] = {}
    severe = False
    ram = facts.ram_bytes or 0
    host = data.host.dropna(subset=["mem_available_bytes"]) if not data.host.empty else data.host
    if ram and len(host) >= 2:
        avail = host["mem_available_bytes"].to_numpy(dtype=float)
        t = host["ts"].to_numpy(dtype=float)
        low = float(avail.min())
        slope = float(np.polyfit(t - t[0], avail, 1)[0]) if len(host) >= 5 and t[-1] > t[0] else 0.0
        to_zero = avail[-1] / -slope if slope < 0 else float("inf")
        if low < low_share * ram:
            findings.append(f"available memory fell to {low / MiB:.0f} MiB ({low / ram:.0%} of RAM)")
            severe = severe or low < 0.05 * ram
        elif to_zero < horizon_s and avail[0] - avail[-1] >= 0.05 * ram:
            findings.append(f"available memory falls {-slope / MiB:.1f} MiB/s: gone in about {to_zero / 60:.0f} min")
            severe = severe or to_zero < 600
        metrics.update(mem_available_min_bytes=low, mem_slope_bps=slope)
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
    growth = _worker_growth(data.procs)
    if growth is not None and growth[0] >= growth_share and growth[1] >= growth_bytes:
        findings.append(
            f"worker private memory grew {growth[0]:.0%} (+{growth[1] / MiB:.0f} MiB each): copy-on-write of a "
            "Python-object dataset; keep its data in numpy arrays or tensors"
        )
        metrics["worker_growth_bytes"] = growth[1]
    if not findings:
        return None
    return Symptom(
        id="memory_pressure",
        severity="high" if severe else "medium",
        evidence="; ".join(findings) + " (to fit: lower batch_size, num_workers or prefetch_factor)",
        confidence=round(min(1.0, 0.5 + 0.2 * len(findings)), 2),
        metrics=metrics,
    )


def _worker_growth(procs: pd.DataFrame) -> tuple[float, float] | None:
    """(median relative growth, median growth in bytes) of workers' USS from first to last sample."""
    workers = procs[procs["role"] == "worker"].dropna(subset=["uss_bytes"]) if not procs.empty else procs
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

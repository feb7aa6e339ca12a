"""Rules read from the workers' side: too many, uneven, too shallow a queue, waiting on storage."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from collector.diagnosis.calibration import C
from collector.diagnosis.data import RunData
from collector.diagnosis.model import EpochModel
from collector.diagnosis.report_types import Symptom
from collector.diagnosis.stats import Facts, steady_batches
from collector.diagnosis.units import ms

MAX_PREFETCH = 16
FETCH_AGREES = 1.2  # worker_imbalance: a worker whose batches wait longer must fetch at least this much slower


def cpu_share(model: EpochModel) -> float:
    """Share of a batch's production that is CPU work, once core contention is taken out."""
    return model.load_cpu_s / max(model.load_cpu_s + model.load_blocked_s, 1e-12)


def workers_exceed_cores(facts: Facts, model: EpochModel | None, *, cpu_bound: float = 0.5) -> Symptom | None:
    """More CPU-bound workers than usable cores: they take turns on the cores.

        core 0  w0 w2 w0 w2 w0      4 CPU-bound workers, 2 cores:
        core 1  w1 w3 w1 w3 w1      each fetch takes twice its CPU time

    Fires when num_workers > usable cores and CPU is at least ``cpu_bound`` (50%)
    of a fetch. I/O-bound workers beyond the cores are fine (see io_bound_fetch).
    """
    if model is None or facts.num_workers <= facts.usable_cores or not facts.load_cpu_known:
        return None
    share = cpu_share(model)
    if share < cpu_bound or facts.load_wall_s is None or facts.load_cpu_s is None:
        return None
    return Symptom(
        id="workers_exceed_cores",
        severity="high" if facts.num_workers >= 2 * facts.usable_cores else "medium",
        evidence=(
            f"{facts.num_workers} workers on {facts.usable_cores} usable cores, and fetching is CPU-bound "
            f"({ms(facts.load_cpu_s)} CPU per batch, {share:.0%} of the work): a fetch takes "
            f"{ms(facts.load_wall_s)}, {facts.load_wall_s / max(facts.load_cpu_s, 1e-9):.1f}x its CPU time, "
            "because workers wait for a core"
        ),
        confidence=round(min(1.0, share + 0.2), 2),
        metrics={"cpu_share": round(share, 3), "usable_cores": facts.usable_cores},
    )


def io_bound_fetch(
    facts: Facts, model: EpochModel | None, *, io_share: float = 0.5, min_stall: float = 0.05
) -> Symptom | None:
    """Producing a batch is mostly waiting on storage, not computing.

        worker  |cpu|....... waiting on disk/network .......|cpu|

    Fires when I/O is at least ``io_share`` (50%) of a fetch while the loop
    stalls ``min_stall`` (5%) of its steady-state time: more workers than cores pay here,
    and so does caching the data closer.
    """
    if model is None or facts.steady_stall_fraction < min_stall:
        return None
    share = 1.0 - cpu_share(model)
    runq = ""
    if facts.load_blocked_s is not None and facts.load_wall_s:
        # NOTE [ Where the time goes ]: waiting for a core is not storage; name it only when blocked dominates
        share = facts.load_blocked_s / facts.load_wall_s
        runq = f", {ms(facts.load_runq_s)} waiting for a core"
    if share < io_share:
        return None
    how = "estimated from the main process's CPU"
    if facts.load_cpu_known:
        how = "measured in the workers" if facts.num_workers else "measured inside next()"
    disk = "" if facts.disk_read_bps is None else f"; the disks read {facts.disk_read_bps / 2**20:.1f} MiB/s meanwhile"
    return Symptom(
        id="io_bound_fetch",
        severity="medium" if facts.input_fraction >= 0.2 else "low",
        evidence=(
            f"a batch takes {ms(facts.load_wall_s if facts.load_blocked_s is not None else model.load_blocked_s + model.load_cpu_s)} "
            f"to produce: {ms(model.load_cpu_s)} CPU ({how}){runq} and {share:.0%} blocked (storage, sleeps, locks), "
            f"so more workers than cores help, and so does caching the data locally{disk}"
        ),
        confidence=0.9 if facts.load_cpu_known else 0.6,
        metrics={"io_share": round(share, 3), "cpu_known": facts.load_cpu_known, "disk_read_bps": facts.disk_read_bps},
    )


def worker_imbalance(
    data: RunData,
    facts: Facts,
    *,
    slow_ratio: float = 1.5,
    wait_ratio: float = 3.0,
    min_stall: float = 0.05,
    min_per_worker: int = 10,
    consistent: float = 0.8,
) -> Symptom | None:
    """One worker is systematically slower at producing its batches.

        batch   0  1  2  3  4  5  6  7      worker 0 serves 0, 4, 8, ...
        fetch   ██ .  .  .  ██ .  .  .      its own fetches take longer

    Judged from each worker's own production time (its fetches, timed in the
    worker), never from which batch the loop's wait fell on: with round-robin
    hand-out the wait of equal workers falls on the first batch of each round,
    whoever produced it (NOTE [ Imbalance is production time ]). Fires when
    one worker's fetch takes ``slow_ratio`` (1.5x) the others' median, or (with
    the loop stalling ``min_stall``) the batches of one worker wait
    ``wait_ratio`` (3x) longer while it also fetches 1.2x slower, and the same
    worker is the slowest fetcher in ``consistent`` (80%) of the epochs (or of
    5 equal windows): a systematic difference, not the noise two identical
    workers show on a busy machine. Without fetch times it stays silent.
    """
    # NOTE [ Imbalance is production time ]
    # A DataLoader hands indices to its workers in turn and yields their
    # batches in order, so equal workers started together deliver in rounds:
    # the loop waits for the first batch of each round and finds the others
    # ready. Waits that repeat every num_workers batches are therefore the
    # order, not a slow worker (an image pipeline's two identical workers read
    # "worker 0 waits 356 ms vs 5.3 ms"). Only the workers' own fetch times
    # tell one worker from another; where they were not recorded, no verdict.
    if facts.num_workers < 2:
        return None
    steady = steady_batches(data, facts).dropna(subset=["worker_id"])
    counts = steady.groupby("worker_id").size()
    steady = steady[steady["worker_id"].isin(counts[counts >= min_per_worker].index)]
    if steady["worker_id"].nunique() < 2:
        return None
    findings: list[str] = []
    metrics: dict[str, float] = {}
    slow, ratio, share = _systematic(steady.dropna(subset=["worker_wall_s"]), "worker_wall_s")
    if slow is None:  # no fetch times: the waits alone cannot tell a slow worker from the order
        return None
    if slow is not None and ratio >= slow_ratio and share >= consistent:
        fetch = steady.groupby("worker_id")["worker_wall_s"].mean()
        findings.append(
            f"worker {int(slow)} takes {ms(fetch[slow])} per batch, {ratio:.1f}x the others, "
            f"the slowest in {share:.0%} of the windows"
        )
        metrics.update(slow_ratio=ratio, consistent_share=share)
    starved = facts.steady_stall_fraction >= min_stall
    slow_w, w_ratio, w_share = _systematic(steady, "stall_s", floor=1e-4)
    # See NOTE [ Imbalance is production time ]: the worker whose batches wait must also fetch slower, steadily.
    fetch_agrees = slow == slow_w and ratio >= FETCH_AGREES and share >= consistent
    if starved and slow_w is not None and w_ratio >= wait_ratio and w_share >= consistent and fetch_agrees:
        waits = steady.groupby("worker_id")["stall_s"].mean()
        others = float(waits.drop(slow_w).median())
        findings.append(
            f"batches from worker {int(slow_w)} wait {ms(waits[slow_w])} vs {ms(others)} for the others, "
            f"repeating every {facts.num_workers} batches"
        )
        metrics.update(wait_ratio=w_ratio, consistent_share=w_share)
    if not findings:
        return None
    stall = steady["stall_s"].to_numpy()
    metrics["stuck_share"] = float(stall[steady["ready"].to_numpy() > 0].sum() / max(stall.sum(), 1e-12))
    return Symptom(
        id="worker_imbalance",
        severity="medium" if starved else "low",
        evidence="; ".join(findings)
        + " (uneven samples: check the data distribution, shuffle, or in_order=False on torch >= 2.6)",
        confidence=round(min(1.0, 0.4 + 0.2 * len(findings) + len(steady) / 1000), 2),
        metrics=metrics,
    )


def _windows(steady: pd.DataFrame, count: int = 5) -> np.ndarray:
    """A window label per batch: its epoch when there are ``count`` or more, else equal time windows."""
    if steady["epoch"].nunique() >= count:
        return steady["epoch"].to_numpy()
    ts = steady["ts"].to_numpy()
    edges = np.linspace(ts.min(), ts.max() + 1e-9, count + 1)
    return np.searchsorted(edges, ts, side="right")


def _systematic(steady: pd.DataFrame, column: str, floor: float = 1e-9) -> tuple[int | None, float, float]:
    """(the slowest worker overall, its ratio to the others' median, the share of windows where it is slowest)."""
    if steady.empty:
        return None, 0.0, 0.0
    means = steady.groupby("worker_id")[column].mean()
    if len(means) < 2:
        return None, 0.0, 0.0
    slow = means.idxmax()
    ratio = float(means[slow] / max(float(means.drop(slow).median()), floor))
    per = steady.assign(window=_windows(steady)).groupby(["window", "worker_id"])[column].mean().unstack()
    per = per.dropna()
    share = float((per.idxmax(axis=1) == slow).mean()) if len(per) else 0.0
    return slow, ratio, share


def prefetch_too_shallow(
    data: RunData,
    facts: Facts,
    model: EpochModel | None,
    *,
    min_stall: float = 0.05,
    calm_p50: float = 0.25,
) -> Symptom | None:
    """Workers keep up on average, yet bursts of slow batches empty the queue.

        queue  4 3 2 1 0 0 0 4      a slow batch holds up delivery in order;
        wait   . . . . ██████ .     a deeper queue would have started it earlier

    Fires when the workers' capacity exceeds the loop's pace, the loop stalls
    ``min_stall`` (5%) of the time, and the median stall is under ``calm_p50``
    of a step (most batches are ready: the waits are a tail). The suggested
    ``prefetch_factor`` dispatches a batch early enough to hide the tail fetch
    (p99): ``ceil(p99 fetch / (step * num_workers)) + 1``.
    """
    if model is None or facts.num_workers < 1 or facts.steady_stall_fraction < min_stall:
        return None
    if model.headroom(model.recorded) < 1.0:  # the workers cannot keep up on average: no queue would help
        return None
    steady = steady_batches(data, facts)
    stall = steady["stall_s"].to_numpy()
    pace = model.consume_s(model.recorded)
    if float(np.median(stall)) > calm_p50 * pace:
        return None
    fetch = steady["worker_wall_s"].dropna().to_numpy()
    tail = float(np.quantile(fetch, 0.99)) if len(fetch) >= 10 else facts.wait_p99_s + (facts.load_wall_s or 0.0)
    suggested = min(MAX_PREFETCH, max(facts.prefetch_factor + 1, math.ceil(tail / (pace * facts.num_workers)) + 1))
    return Symptom(
        id="prefetch_too_shallow",
        severity="high" if facts.steady_stall_fraction >= 0.2 else "medium",
        evidence=(
            f"{facts.num_workers} workers produce {1 / model.produce_s(facts.num_workers):.0f} batches/s, more than "
            f"the loop's {1 / pace:.0f}/s, yet the loop stalls {facts.steady_stall_fraction:.0%} of the "
            f"time in bursts (median wait {ms(facts.wait_p50_s)}, p99 {ms(facts.wait_p99_s)}; slowest fetches "
            f"{ms(tail)}): prefetch_factor={facts.prefetch_factor} queues too few batches"
        ),
        confidence=0.8,
        metrics={"tail_fetch_s": tail, "suggested_prefetch_factor": suggested},
    )


def idle_workers_note(facts: Facts, model: EpochModel | None, worker_bytes: float | None) -> str | None:
    """A note when fewer workers would keep up and save memory (never a change to make)."""
    if model is None or facts.num_workers < 2 or facts.input_fraction >= 0.05:
        return None
    fed = [n for n in range(1, facts.num_workers) if model.headroom(model.recorded.but(num_workers=n)) >= C.SURPLUS]
    if not fed:
        return None
    needed = min(fed)
    idle = 1.0 - min(1.0, model.produce_s(facts.num_workers) / max(model.cycle(model.recorded), 1e-12))
    saving = ""
    if worker_bytes:
        saving = f", saving up to {(facts.num_workers - needed) * worker_bytes / 2**20:.0f} MiB of worker memory"
    return (
        f"Workers sit idle about {idle:.0%} of the time: {needed} of {facts.num_workers} would keep up "
        f"(a batch takes {ms(facts.load_wall_s or 0.0)} to produce, the loop takes one every "
        f"{ms(facts.cycle_s)}); num_workers={needed} would do{saving}"
    )

"""Where a loader's time went: its own active spans, and the CPU and core waits of the job and of everyone else."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from collector.diagnosis.phases import collector_seconds
from collector.store.schema import COLLECTOR_ROLES

# NOTE [ A loader's active time ]
# A training script runs other things between a loader's epochs: a
# validation loader, checkpointing, logging. Those are not this loader's
# time, so every fraction the report gives for a loader is over its own
# active spans: each epoch from its iter() to the return of the final next()
# (the one that raises StopIteration and, without persistent workers, shuts
# the workers down), and time blocked in the loader is iter(), every next()
# and that final one. A script's own "data time" meter measures the same.
# Where an epoch's end was not recorded (a live run, a loop that broke out,
# a file from before schema 3) it ends at its last batch. The collector's own
# work inside a span (epochs.collector_s: NOTE [ The collector's own time ] in
# collector/record/session.py) is neither the loader's wait nor its active time.


@dataclass(frozen=True)
class Spans:
    """The loader's active spans (wall-clock seconds) and what was blocked in them beyond the batches' waits."""

    starts: np.ndarray
    ends: np.ndarray
    end_wait_s: float  # final next() calls, summed
    collector_s: float = 0.0  # the collector's own work inside the spans, summed

    @property
    def span_s(self) -> float:
        """The spans' wall time, the collector's own work included."""
        return float(np.maximum(0.0, self.ends - self.starts).sum())

    @property
    def active_s(self) -> float:
        """The loader's active time: the spans less the collector's own work in them."""
        return max(0.0, self.span_s - self.collector_s)

    def contains(self, ts: np.ndarray) -> np.ndarray:
        """Which timestamps fall inside a span."""
        i = np.searchsorted(self.starts, ts, side="right") - 1
        ok = i >= 0
        inside = np.zeros(len(ts), dtype=bool)
        inside[ok] = ts[ok] <= self.ends[i[ok]]
        return inside


def active_spans(
    batches: pd.DataFrame, epochs: pd.DataFrame, windowed: bool, rollups: pd.DataFrame | None = None
) -> Spans:
    """Each epoch in the data, from its iter() (a window's first from its first request) to its end.

    ``rollups`` (rollup_queries.epoch_rollups) widen each epoch to its folded batches (NOTE [ Rollups ]).
    """
    per_epoch = batches.groupby("epoch").agg(first=("ts", "min"), last=("ts", "max"), wait=("wait_s", "first"))
    per_epoch["begin"] = per_epoch["first"] - per_epoch["wait"]
    first_idx = batches.groupby("epoch")["idx"].min()
    if rollups is not None and not rollups.empty:
        folded = rollups.groupby("epoch").agg(
            start_ts=("start_ts", "min"), end_ts=("end_ts", "max"), first_idx=("first_idx", "min")
        )
        per_epoch = per_epoch.reindex(per_epoch.index.union(folded.index))
        per_epoch["begin"] = per_epoch["begin"].fillna(np.inf).combine(folded["start_ts"], min, fill_value=np.inf)
        per_epoch["last"] = per_epoch["last"].fillna(-np.inf).combine(folded["end_ts"], max, fill_value=-np.inf)
        first_idx = first_idx.combine(folded["first_idx"], min, fill_value=np.iinfo(np.int64).max)
    rows = epochs.set_index("epoch") if not epochs.empty else pd.DataFrame(columns=["started_at", "ended_at"])
    own = collector_seconds(epochs)
    starts, ends, end_wait, collector = [], [], 0.0, 0.0
    for i, (epoch, span) in enumerate(per_epoch.iterrows()):
        start = float(span["begin"])
        whole = not (windowed and i == 0) and int(first_idx[epoch]) == 0
        if whole and epoch in rows.index and pd.notna(rows.at[epoch, "started_at"]):
            start = min(start, float(rows.at[epoch, "started_at"]))
            collector += float(own.get(epoch, 0.0))  # inside iter(): the span starts at iter() only here
        end = float(span["last"])
        last = rows.at[epoch, "end_wait_s"] if epoch in rows.index and "end_wait_s" in rows.columns else np.nan
        if pd.notna(last) and pd.notna(rows.at[epoch, "ended_at"]):  # ended by its final next(), not dropped
            end = max(end, float(rows.at[epoch, "ended_at"]))
            end_wait += float(last)
        starts.append(start)
        ends.append(end)
    return Spans(np.asarray(starts, dtype=float), np.asarray(ends, dtype=float), end_wait, collector)


@dataclass(frozen=True)
class JobCpu:
    """Cores (1.0 = one core busy) over the loader's active spans."""

    main_cores: float | None  # the training process, every thread
    main_runq_cores: float | None  # its threads waiting for a core, summed (None: no schedstat)
    worker_cores: float | None
    background_cores: float  # busy cores of other processes
    exact: bool  # from cumulative schedstat counters and the workers' own totals, not 2 Hz percentages


def _rates(procs: pd.DataFrame, spans: Spans) -> tuple[float | None, float | None]:
    """The main process's CPU and run-queue cores from its cumulative counters, over sample pairs inside a span."""
    main = procs[(procs["role"] == "main")].dropna(subset=["cpu_s"]).sort_values("ts")
    if len(main) < 2:
        return None, None
    ts = main["ts"].to_numpy()
    inside = spans.contains(ts)
    pair = inside[1:] & inside[:-1]
    same = np.searchsorted(spans.starts, ts[1:], side="right") == np.searchsorted(spans.starts, ts[:-1], side="right")
    pair &= same
    if not pair.any():
        pair = np.ones(len(ts) - 1, dtype=bool)  # spans shorter than the sampling period: the whole run
    dt = np.diff(ts)[pair].sum()
    if dt <= 0:
        return None, None
    cpu = float(np.diff(main["cpu_s"].to_numpy())[pair].sum() / dt)
    runq_col = main["runq_s"].to_numpy(dtype=float)
    runq = None if np.isnan(runq_col).any() else float(np.diff(runq_col)[pair].sum() / dt)
    return max(0.0, cpu), None if runq is None else max(0.0, runq)


def _worker_cores_from_exits(exits: pd.DataFrame, spans: Spans, total_s: float) -> float | None:
    """The workers' whole-life CPU (NOTE [ Worker totals ]) spread over their lives, the part inside the spans."""
    if exits.empty or total_s <= 0:
        return None
    busy = 0.0
    for row in exits.itertuples():
        life = max(1e-9, float(row.ended_at) - float(row.started_at))
        overlap = np.clip(np.minimum(spans.ends, row.ended_at) - np.maximum(spans.starts, row.started_at), 0.0, None)
        busy += float(row.cpu_s) * float(overlap.sum()) / life
    return busy / total_s


def job_cpu(
    procs: pd.DataFrame, host: pd.DataFrame, exits: pd.DataFrame, spans: Spans, logical_cores: int, after_ts: float
) -> JobCpu:
    """The job's and everyone else's CPU over the loader's spans (after warm-up where enough samples remain)."""
    if procs.empty:
        return JobCpu(None, None, None, 0.0, False)
    p = procs[procs["ts"] >= after_ts] if (procs["ts"] >= after_ts).sum() >= 2 else procs
    main_pct = p[p["role"] == "main"].dropna(subset=["cpu_pct"])
    main_cpu, main_runq = _rates(p, spans)
    if main_cpu is None and p is not procs:  # too few samples after the warm-up: its rate, warm-up included
        main_cpu, main_runq = _rates(procs, spans)
    exact = main_cpu is not None
    if main_cpu is None:
        main_cpu = float(main_pct["cpu_pct"].mean()) / 100.0 if len(main_pct) else None
    workers = p[p["role"] == "worker"].dropna(subset=["cpu_pct"])
    per_ts = workers.groupby("ts")["cpu_pct"].sum() / 100.0
    worker_cpu = _worker_cores_from_exits(exits, spans, spans.span_s)
    exact = exact and (worker_cpu is not None or workers.empty)
    if worker_cpu is None:
        worker_cpu = float(per_ts.mean()) if len(per_ts) else (0.0 if main_cpu is not None else None)
    background = 0.0
    if not host.empty and main_cpu is not None:
        # the first sample's share is over the time since the writer started, before the loader ran
        h = host[(host["ts"] >= after_ts) & (host["ts"] > host["ts"].min())].dropna(subset=["cpu_pct"])
        h = h[spans.contains(h["ts"].to_numpy())] if spans.contains(h["ts"].to_numpy()).sum() >= 2 else h
        if len(h):
            busy = h["cpu_pct"].to_numpy() / 100.0 * logical_cores - _collector_cores(procs, h["ts"])
            background = max(0.0, float(np.median(busy)) - main_cpu - (worker_cpu or 0.0))
    return JobCpu(main_cpu, main_runq, worker_cpu, background, exact)


def _collector_cores(procs: pd.DataFrame, ts: pd.Series) -> np.ndarray:
    """At each host sample, the cores the collector's own processes used: ours, not other processes' (NOTE [ Our own processes ])."""
    ours = procs[procs["role"].isin(COLLECTOR_ROLES)].dropna(subset=["cpu_pct"])
    per_ts = ours.groupby("ts")["cpu_pct"].sum() / 100.0
    return per_ts.reindex(ts.to_numpy()).fillna(0.0).to_numpy()


def window_edges(ts: np.ndarray, epoch: np.ndarray, windows: int, per_window: int = 10) -> list[np.ndarray]:
    """Index groups for the uncertainty: one per epoch when there are ``windows`` or more, else equal time windows.

    Equal windows hold ``per_window`` batches at least (fewer windows where the run is short).
    """
    if len(ts) == 0:
        return []
    epochs = np.unique(epoch)
    if len(epochs) >= windows:
        return [np.flatnonzero(epoch == e) for e in epochs]
    n = min(windows, max(1, len(ts) // per_window))
    cuts = np.linspace(ts[0], ts[-1] + 1e-9, n + 1)
    groups = [np.flatnonzero((ts >= lo) & (ts < hi)) for lo, hi in itertools.pairwise(cuts)]
    return [g for g in groups if len(g)]


def t95(dof: int) -> float:
    """Student's t at 95% (two-sided) for ``dof`` degrees of freedom; 2.0 from 8 on, as the long runs use."""
    return (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36)[dof - 1] if 1 <= dof <= 7 else 2.0


def mean_range(values: np.ndarray, weights: np.ndarray | None = None, *, z: float = 2.0) -> tuple[float, float]:
    """The weighted mean's range, plus or minus ``z`` standard errors over windows (the spread across them)."""
    v = np.asarray(values, dtype=float)
    w = np.ones(len(v)) if weights is None else np.asarray(weights, dtype=float)
    if len(v) < 2 or w.sum() <= 0:
        m = float(v.mean()) if len(v) else 0.0
        return m, m
    m = float(np.average(v, weights=w))
    var = float(np.average((v - m) ** 2, weights=w))
    n_eff = w.sum() ** 2 / max(float((w**2).sum()), 1e-12)
    half = z * (var / max(n_eff - 1.0, 1.0)) ** 0.5
    return m - half, m + half

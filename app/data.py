"""What the views draw, read through ``collector.store`` (reduced in SQL) and free of Streamlit; app.state caches it."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from collector.store import series
from collector.store.reader import Reader

HEATMAP_COLUMNS = 600  # time columns in the per-core CPU heatmap
BUSY_BUCKETS = 300  # the loop-derived busy share needs buckets wider than one wait
BATCHES_PER_BUSY_BUCKET = 4
HISTOGRAM_SAMPLE = 100_000  # batches; a longer window's histogram and worker chart read a systematic sample


@dataclass(frozen=True)
class Headline:
    """The numbers at the top of the run view, over the window shown."""

    batches: int
    wait_fraction: float | None  # share of loop time spent waiting for data
    batches_per_s: float | None
    gpu_util_pct: float | None  # mean; None without GPU samples
    ready: int | None  # batches ready in the loader at the newest batch
    in_flight: int | None
    capacity: int | None  # num_workers * prefetch_factor


@dataclass(frozen=True)
class RunViewData:
    """A run's reduced series; times are Unix seconds, ``origin`` is the run start (charts show t - origin)."""

    run: dict[str, Any]
    origin: float
    t0: float
    t1: float
    headline: Headline
    batches: pd.DataFrame  # series.batch_envelope
    waits: pd.DataFrame | None  # exact wait intervals, or None when too many (use batches.wait_sum)
    gpu: pd.DataFrame  # series.gpu_envelope
    hist: pd.DataFrame  # series.wait_histogram
    host: pd.DataFrame  # ts + one column per core (max per bucket)
    mem_available: pd.DataFrame  # ts, mem_available_bytes (min per bucket)
    memory: pd.DataFrame  # series.memory_envelope
    workers: pd.DataFrame  # series.worker_envelope
    epochs: pd.DataFrame
    warnings: list[str] = field(default_factory=list)


def capacity(config: dict[str, Any]) -> int | None:
    """Batches the loader can hold: ``num_workers * prefetch_factor`` (None without workers)."""
    workers, prefetch = config.get("num_workers"), config.get("prefetch_factor")
    if not workers or prefetch is None:
        return None
    return int(workers) * int(prefetch)


def load_run_view(
    reader: Reader, run_id: int, window_s: float | None, buckets: int = series.DEFAULT_BUCKETS
) -> RunViewData:
    """Load one run; ``window_s`` limits it to the newest seconds (the live view), None is the whole run."""
    run = reader.run(run_id)
    bounds = series.batch_bounds(reader, run_id)
    origin = float(run["started_at"])
    end = max(float(run.get("heartbeat_at") or origin), float(run.get("ended_at") or origin))
    t1 = max(end, bounds[1]) if bounds else end
    t0 = origin if window_s is None else max(origin, t1 - window_s)
    t1 = max(t1, t0 + 1e-3)
    epochs = reader.epochs(run_id)
    every = _histogram_stride(epochs, t0, t1, origin)
    with ThreadPoolExecutor(max_workers=3) as pool:  # sqlite3 releases the GIL while a query runs
        batches = pool.submit(series.batch_envelope, reader, run_id, t0, t1, buckets)
        hist = pool.submit(series.wait_histogram, reader, run_id, t0, t1, every=every)
        workers = pool.submit(series.worker_envelope, reader, run_id, t0, t1, every=every)
        waits = series.wait_intervals(reader, run_id, t0, t1)
        gpu = series.gpu_envelope(reader, run_id, t0, t1, buckets)
        host_rows = series.host_samples(reader, run_id, t0, t1)
        memory = series.memory_envelope(reader, run_id, t0, t1, buckets)
        ready, in_flight = series.latest_queue(reader, run_id)
        env = batches.result()
        host, mem_available = _reduce_host(host_rows, t0, t1)
        headline = _headline(env, gpu, t0, t1, ready, in_flight, capacity(run.get("config") or {}))
        return RunViewData(
            run=run,
            origin=origin,
            t0=t0,
            t1=t1,
            headline=headline,
            batches=env,
            waits=waits,
            gpu=gpu,
            hist=hist.result(),
            host=host,
            mem_available=mem_available,
            memory=memory,
            workers=workers.result(),
            epochs=epochs,
            warnings=list(run.get("warnings") or []),
        )


def _histogram_stride(epochs: pd.DataFrame, t0: float, t1: float, origin: float) -> int:
    """Count every n-th batch in the histogram so it reads about ``HISTOGRAM_SAMPLE`` batches at most."""
    if epochs.empty or epochs["batches"].isna().all():
        return 1
    total = float(epochs["batches"].fillna(0).sum())
    last = epochs["ended_at"].max()
    span = max(float(last if pd.notna(last) else t1) - origin, 1e-9)
    estimate = total * min(1.0, (t1 - t0) / span)
    return max(1, int(estimate // HISTOGRAM_SAMPLE))


def _headline(
    env: pd.DataFrame,
    gpu: pd.DataFrame,
    t0: float,
    t1: float,
    ready: int | None,
    in_flight: int | None,
    cap: int | None,
) -> Headline:
    n = int(env["n"].sum()) if not env.empty else 0
    wait, step = float(env["wait_sum"].sum()), float(env["step_sum"].sum())
    rate = None
    if n > 1 and not env.empty:
        width = float(env.attrs.get("width_s", 0.0))
        span = (float(env["t"].iloc[-1]) - float(env["t"].iloc[0])) + width
        rate = n / span if span > 0 else None
    util = None
    if not gpu.empty and gpu["util_mean"].notna().any():
        util = float(gpu["util_mean"].mean())
    return Headline(
        batches=n,
        wait_fraction=wait / (wait + step) if wait + step > 0 else None,
        batches_per_s=rate,
        gpu_util_pct=util,
        ready=ready,
        in_flight=in_flight,
        capacity=cap,
    )


def _reduce_host(rows: pd.DataFrame, t0: float, t1: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-core CPU as a (time x core) frame, max per bucket, at most ``HEATMAP_COLUMNS`` rows."""
    if rows.empty:
        return pd.DataFrame({"ts": []}), pd.DataFrame({"ts": [], "mem_available_bytes": []})
    cores = [json.loads(v) if v else [] for v in rows["per_core_pct"]]
    width = max((len(c) for c in cores), default=0)
    matrix = np.full((len(cores), width), np.nan)
    for i, values in enumerate(cores):
        matrix[i, : len(values)] = [np.nan if v is None else v for v in values]
    frame = pd.DataFrame(matrix, columns=[f"cpu{i}" for i in range(width)])
    frame["ts"] = rows["ts"].to_numpy()
    frame["mem_available_bytes"] = rows["mem_available_bytes"].to_numpy(dtype=float)
    bucket = max((t1 - t0) / HEATMAP_COLUMNS, 1e-6)
    frame["bucket"] = ((frame["ts"] - t0) // bucket).astype(int)
    agg: dict[str, Any] = {c: "max" for c in frame.columns if c.startswith("cpu")}
    agg.update(ts="mean", mem_available_bytes="min")
    reduced = frame.groupby("bucket").agg(agg).reset_index(drop=True)
    return reduced.drop(columns="mem_available_bytes"), reduced[["ts", "mem_available_bytes"]]


@dataclass(frozen=True)
class CompareData:
    """Several runs reduced for overlay: their rows in ``runs`` and long-format series."""

    runs: pd.DataFrame  # one row per run: id, name, config, batches_per_s, wait_fraction, gpu_util_pct
    curves: pd.DataFrame  # run, t (s since start), util_min, util_max, source ("gpu" | "loop")
    progress: pd.DataFrame  # run, t, batches (cumulative)


def load_compare(reader: Reader, run_ids: list[int], buckets: int = 600) -> CompareData:
    """Reduced curves and totals of ``run_ids`` for the compare view."""
    rows, curves, progress = [], [], []
    for run_id in run_ids:
        data = load_run_view(reader, run_id, None, buckets)
        label = f"{data.run['name']} (#{run_id})"
        h = data.headline
        rows.append(
            {
                "id": run_id,
                "run": label,
                "config": data.run.get("config") or {},
                "batches": h.batches,
                "batches_per_s": h.batches_per_s,
                "wait_fraction": h.wait_fraction,
                "gpu_util_pct": h.gpu_util_pct,
            }
        )
        util = busy_curve(data)
        util["run"] = label
        curves.append(util)
        env = data.batches
        progress.append(pd.DataFrame({"run": label, "t": env["t"] - data.origin, "batches": env["n"].cumsum()}))
    return CompareData(
        runs=pd.DataFrame(rows),
        curves=pd.concat(curves, ignore_index=True) if curves else pd.DataFrame(),
        progress=pd.concat(progress, ignore_index=True) if progress else pd.DataFrame(),
    )


def busy_curve(data: RunViewData) -> pd.DataFrame:
    """GPU utilisation envelope (first GPU averaged over GPUs), else the loop's busy share per bucket.

    Without a GPU the loop-derived busy fraction is ``1 - wait / bucket width``:
    the share of wall time the loop was not blocked in ``next()``.
    """
    if not data.gpu.empty:
        g = data.gpu.groupby("bucket").agg(t=("t", "mean"), util_min=("util_min", "min"), util_max=("util_max", "max"))
        out = g.reset_index(drop=True)
        out["source"] = "gpu"
    else:
        env = data.batches
        span = data.t1 - data.t0
        per_batch = span / max(int(env["n"].sum()), 1)  # a bucket must hold several batches to be a share
        width = max(
            span / BUSY_BUCKETS, BATCHES_PER_BUSY_BUCKET * per_batch, float(env.attrs.get("width_s", 0.0)), 1e-6
        )
        groups = ((env["t"] - data.t0) // width).astype(int)
        wait = env["wait_sum"].groupby(groups).sum()
        busy = (100.0 * (1.0 - wait / width)).clip(0.0, 100.0)
        out = pd.DataFrame({"t": data.t0 + (wait.index.to_numpy() + 0.5) * width, "util_min": busy.to_numpy()})
        out["util_max"] = out["util_min"]
        out["source"] = "loop"
    out["t"] = out["t"] - data.origin
    return out


def load_runs_table(reader: Reader) -> pd.DataFrame:
    """Every run with its totals: batches, batches/s, share of time waiting, mean GPU utilisation."""
    runs = reader.runs()
    if runs.empty:
        return runs
    totals = reader.run_totals().set_index("run_id")
    runs["batches"] = [int(totals["batches"].get(i, 0)) for i in runs["id"]]
    rates: list[float | None] = []
    waits: list[float | None] = []
    for run_id in runs["id"]:
        row: Any = totals.loc[run_id] if run_id in totals.index else None
        if row is None or row["batches"] < 2 or row["last_ts"] <= row["first_ts"]:
            rates.append(None)
        else:
            rates.append((row["batches"] - 1) / (row["last_ts"] - row["first_ts"]))
        busy = None if row is None else (row["wait_s"] or 0.0) + (row["step_s"] or 0.0)
        waits.append(None if not busy else row["wait_s"] / busy)
    runs["batches_per_s"] = rates
    runs["wait_fraction"] = waits
    gpu = series.run_gpu_means(reader, [int(i) for i in runs["id"]])
    runs["gpu_util_pct"] = [gpu.get(int(i)) for i in runs["id"]]
    return runs


def encode_table(reader: Reader, run_id: int, table: str, fmt: str) -> bytes:
    """One of a run's tables as CSV or Parquet bytes."""
    df = series.table_rows(reader, table, run_id)
    if fmt == "parquet":
        return df.to_parquet(index=False)
    return df.to_csv(index=False).encode()

"""What the views draw, read through ``collector.store`` (reduced in SQL) and free of Streamlit; app.state caches it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from collector.errors import DamagedRun
from collector.store import series
from collector.store.checked import number_list
from collector.store.reader import Reader

HEATMAP_COLUMNS = 600  # time columns in the per-core CPU heatmap
BATCHES_PER_BUSY_BUCKET = 4
HISTOGRAM_SAMPLE = 100_000  # batches; a longer window's histogram and worker chart read a systematic sample
PHASE_BATCHES = 400  # up to this many batches in the window (3+ px each), the headline chart draws each one
TREND_BUCKETS = 240  # else it draws the busy and waiting share of this many time buckets


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
    phases: pd.DataFrame | None  # series.batch_phases: each batch's compute and wait, None when too many
    gpu: pd.DataFrame  # series.gpu_envelope
    hist: pd.DataFrame  # series.wait_histogram
    host: pd.DataFrame  # ts + one column per core (max per bucket)
    mem_available: pd.DataFrame  # ts, mem_available_bytes (min per bucket)
    memory: pd.DataFrame  # series.memory_envelope
    workers: pd.DataFrame  # series.worker_envelope
    epochs: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    trials: pd.DataFrame = field(default_factory=pd.DataFrame)  # a tuned run's trials (reader.trials)


def capacity(config: dict[str, Any]) -> int | None:
    """Batches the loader can hold: ``num_workers * prefetch_factor`` (None without workers)."""
    workers, prefetch = config.get("num_workers"), config.get("prefetch_factor")
    if not workers or prefetch is None:
        return None
    return int(workers) * int(prefetch)


def load_run_view(
    reader: Reader,
    run_id: int,
    window_s: float | None,
    buckets: int = series.DEFAULT_BUCKETS,
    span: tuple[float, float] | None = None,
    details: bool = True,
) -> RunViewData:
    """Load one run; ``window_s`` limits it to the newest seconds (the live view), None is the whole run.

    ``span`` (seconds since the run started, as the charts' axis) picks a range instead.
    ``details=False`` leaves out what only the detail charts draw (histogram, workers, host, memory).
    """
    run = reader.sound_run(run_id)
    try:
        return _load_view(reader, run, run_id, window_s, buckets, span, details)
    except DamagedRun as exc:  # a value of one of its tables: NOTE [ Values from a file ]
        raise DamagedRun(f"{reader.path}: run {run['name']!r} (id {run_id}): {exc}") from None


def _load_view(
    reader: Reader,
    run: dict[str, Any],
    run_id: int,
    window_s: float | None,
    buckets: int,
    span: tuple[float, float] | None,
    details: bool,
) -> RunViewData:
    bounds = series.batch_bounds(reader, run_id)
    origin = float(run["started_at"])
    end = max(float(run.get("heartbeat_at") or origin), float(run.get("ended_at") or origin))
    t1 = max(end, bounds[1]) if bounds else end
    t0 = origin if window_s is None else max(origin, t1 - window_s)
    if span is not None:
        t0, t1 = origin + max(0.0, span[0]), min(t1, origin + span[1])
    t1 = max(t1, t0 + 1e-3)
    epochs = reader.epochs(run_id)
    every = _histogram_stride(epochs, t0, t1, origin)
    with ThreadPoolExecutor(max_workers=3) as pool:  # sqlite3 releases the GIL while a query runs
        batches = pool.submit(series.batch_envelope, reader, run_id, t0, t1, buckets)
        skip = pool.submit(pd.DataFrame)
        hist = pool.submit(series.wait_histogram, reader, run_id, t0, t1, every=every) if details else skip
        workers = pool.submit(series.worker_envelope, reader, run_id, t0, t1, every=every) if details else skip
        phases = series.batch_phases(reader, run_id, t0, t1, limit=PHASE_BATCHES)
        gpu = series.gpu_envelope(reader, run_id, t0, t1, buckets)
        host_rows = series.host_samples(reader, run_id, t0, t1) if details else pd.DataFrame()
        memory = series.memory_envelope(reader, run_id, t0, t1, buckets) if details else pd.DataFrame()
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
            phases=phases,
            gpu=gpu,
            hist=hist.result(),
            host=host,
            mem_available=mem_available,
            memory=memory,
            workers=workers.result(),
            epochs=epochs,
            warnings=list(run.get("warnings") or []),
            trials=reader.trials(run_id),
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
    cores = [number_list(v, "per_core_pct") for v in rows["per_core_pct"]]
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


def trend_width(data: RunViewData) -> float:
    """Seconds per slice of the zoomed-out chart: ``TREND_BUCKETS`` slices, each holding several batches."""
    env, span = data.batches, data.t1 - data.t0
    per_batch = span / max(int(env["n"].sum()), 1) if not env.empty else 0.0
    return max(span / TREND_BUCKETS, BATCHES_PER_BUSY_BUCKET * per_batch, float(env.attrs.get("width_s", 0.0)), 1e-6)


def trend_shares(data: RunViewData) -> pd.DataFrame:
    """Per slice: t (its middle, s since start), width_s, busy_pct (in steps) and wait_pct (blocked in next())."""
    env = data.batches
    if env.empty:
        return pd.DataFrame({"t": [], "width_s": [], "busy_pct": [], "wait_pct": []})
    width = trend_width(data)
    groups = ((env["t"] - data.t0) // width).astype(int)
    sums = env.groupby(groups)[["wait_sum", "step_sum"]].sum()
    wait = (100.0 * sums["wait_sum"] / width).clip(0.0, 100.0)
    busy = (100.0 * sums["step_sum"] / width).clip(0.0, 100.0 - wait)
    t = data.t0 + (sums.index.to_numpy() + 0.5) * width - data.origin
    return pd.DataFrame({"t": t, "width_s": width, "busy_pct": busy.to_numpy(), "wait_pct": wait.to_numpy()})


def gpu_curve(data: RunViewData, width: float | None = None) -> pd.DataFrame:
    """GPU utilisation over time (s since start), GPUs pooled: min, max and mean per bucket, or per ``width`` s."""
    g = data.gpu
    if g.empty:
        return pd.DataFrame({"t": [], "util_min": [], "util_max": [], "util_mean": []})
    key = g["bucket"] if width is None else ((g["t"] - data.t0) // width).astype(int)
    out = g.groupby(key).agg(
        t=("t", "mean"), util_min=("util_min", "min"), util_max=("util_max", "max"), util_mean=("util_mean", "mean")
    )
    if width is not None:
        out["t"] = data.t0 + (out.index.to_numpy() + 0.5) * width
    out = out.reset_index(drop=True)
    out["t"] = out["t"] - data.origin
    return out


def busy_curve(data: RunViewData) -> pd.DataFrame:
    """GPU utilisation envelope (GPUs pooled), else the loop's busy share per slice (``100 - wait_pct``).

    Without a GPU the loop-derived busy share is the share of wall time the loop
    was not blocked in ``next()``.
    """
    if not data.gpu.empty:
        return gpu_curve(data)[["t", "util_min", "util_max"]].assign(source="gpu")
    busy = 100.0 - trend_shares(data)["wait_pct"]
    return pd.DataFrame({"t": trend_shares(data)["t"], "util_min": busy, "util_max": busy, "source": "loop"})


def load_runs_table(reader: Reader) -> pd.DataFrame:
    """Every run with its totals: batches, batches/s, share of time waiting, mean GPU utilisation."""
    runs = reader.runs()
    if runs.empty:
        return runs
    totals = reader.run_totals().set_index("run_id")
    runs["batches"] = [int(np.nan_to_num(totals["batches"].get(i, 0))) for i in runs["id"]]
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

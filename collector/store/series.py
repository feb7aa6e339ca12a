"""Reduced time series for the dashboard: SQL that buckets a run so no trace exceeds ~10k points."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from collector.errors import NotAStallwatchFile
from collector.store import rollup_queries as rq
from collector.store.checked import numbers_only
from collector.store.reader import Reader

# NOTE [ Min/max envelope ]
# A mean per bucket flattens a sawtooth: GPU utilisation that swings between
# 30% and 90% every few seconds averages to a calm 60% once an hour is squeezed
# into a thousand pixels. Each bucket therefore keeps its minimum and its
# maximum, and the chart draws both, so the swing stays visible at any zoom:
#
#   raw     /\/\/\/\/\/\        bucket k: [min, max]
#   mean    ------------        envelope  |||||||||||| (every trough and peak kept)
#
# Buckets are equal slices of wall-clock time computed in SQL, so the browser
# never receives more than 2 * buckets points per trace, whatever the run length.
DEFAULT_BUCKETS = 2_000
MAX_BUCKETS = 5_000

# Wait histogram bins: three per decade (edges 10**(k/3) s), from 10 us up; bin -15 holds everything shorter.
HIST_MIN_BIN = -15
HIST_MAX_BIN = 6  # 10**(7/3) s ~ 215 s and beyond


def _window(alias: str, run_id: int, t0: float | None, t1: float | None, ts: str = "ts") -> tuple[str, list[Any]]:
    clauses: list[str] = [f"{alias}.run_id = ?"]
    params: list[Any] = [run_id]
    if t0 is not None:
        clauses.append(f"{alias}.{ts} >= ?")
        params.append(t0)
    if t1 is not None:
        clauses.append(f"{alias}.{ts} <= ?")
        params.append(t1)
    return "WHERE " + " AND ".join(clauses), params


def _width(t0: float, t1: float, buckets: int) -> float:
    buckets = max(1, min(int(buckets), MAX_BUCKETS))
    return max((t1 - t0) / buckets, 1e-6)


def batch_bounds(reader: Reader, run_id: int) -> tuple[float, float] | None:
    """(first, last) batch time of a run, read along the primary key (no scan); None with no batches."""
    first = reader.scalar("SELECT ts FROM batches WHERE run_id = ? ORDER BY epoch, idx LIMIT 1", [run_id])
    last = reader.scalar("SELECT ts FROM batches WHERE run_id = ? ORDER BY epoch DESC, idx DESC LIMIT 1", [run_id])
    return None if first is None or last is None else (float(first), float(last))


def latest_queue(reader: Reader, run_id: int) -> tuple[int | None, int | None]:
    """(ready, in_flight) at the newest batch; NULLs for a loader without workers."""
    df = reader.frame(
        "SELECT ready, in_flight FROM batches WHERE run_id = ? ORDER BY epoch DESC, idx DESC LIMIT 1", [run_id]
    )
    if df.empty:
        return None, None
    ready, in_flight = df["ready"].iloc[0], df["in_flight"].iloc[0]
    return (None if pd.isna(ready) else int(ready)), (None if pd.isna(in_flight) else int(in_flight))


def batch_envelope(reader: Reader, run_id: int, t0: float, t1: float, buckets: int = DEFAULT_BUCKETS) -> pd.DataFrame:
    """Per time bucket (``t`` its middle, ``width_s``): count, wait min/max/sum, step sum, ready min/max, in_flight max.

    Aggregates cost about 40 ns per row each in SQLite, so this asks for no more than the charts draw.

    See NOTE [ Min/max envelope ].
    """
    where, params = _window("b", run_id, t0, t1)
    width = _width(t0, t1, buckets)
    df = reader.frame(
        "SELECT CAST((ts - ?) / ? AS INTEGER) AS bucket, COUNT(*) AS n,"
        " MIN(wait_s) AS wait_min, MAX(wait_s) AS wait_max, TOTAL(wait_s) AS wait_sum, TOTAL(step_s) AS step_sum,"
        " MIN(ready) AS ready_min, MAX(ready) AS ready_max, MAX(in_flight) AS in_flight_max"
        f" FROM batches b {where} GROUP BY bucket ORDER BY bucket",
        [t0, width, *params],
    )
    folded = rq.batch_rollup_envelope(reader, run_id, t0, t1, width)
    df = _merged(df, folded, ["bucket"], {"n": "sum", "wait_sum": "sum", "step_sum": "sum"})
    df.attrs["folded"] = int(folded["n"].sum()) if not folded.empty else 0  # batches drawn from rollups
    return _with_time(df, t0, width)


def _merged(rows: pd.DataFrame, folded: pd.DataFrame, keys: list[str], sums: dict[str, str]) -> pd.DataFrame:
    """Buckets from the rows and from the rollups (NOTE [ Rollups ]) as one: sums add, minima and maxima meet."""
    if folded.empty:
        return rows
    folded = folded[[c for c in rows.columns if c in folded.columns]]
    how = {c: sums.get(c, "min" if c.endswith("_min") else "max") for c in rows.columns if c not in keys}
    both = pd.concat([rows, folded], ignore_index=True) if not rows.empty else folded
    return both.groupby(keys, as_index=False).agg(how).sort_values(keys).reset_index(drop=True)


def batch_phases(reader: Reader, run_id: int, t0: float, t1: float, *, limit: int = 2_000) -> pd.DataFrame | None:
    """Each batch in the window as its two phases: ``compute_start`` (its step began), ``wait_start``, ``end``.

    ``step_s`` is the loop's work before it asked for the batch, ``wait_s`` the time
    blocked in ``next()``, and ``ts`` the moment the batch arrived, so::

        compute_start          wait_start        end (= ts)
             |----- step_s -------|---- wait_s -----|

    None when the window holds more than ``limit`` batches: too many to draw one by one.
    """
    where, params = _window("b", run_id, t0, t1)
    df = reader.frame(
        # Primary-key order is time order and lets LIMIT stop early; ORDER BY ts would sort every match first.
        "SELECT ts - wait_s - COALESCE(step_s, 0) AS compute_start, ts - wait_s AS wait_start, ts AS end"
        f" FROM batches b {where} ORDER BY epoch, idx LIMIT ?",
        [*params, limit + 1],
    )
    return None if len(df) > limit else df


def wait_histogram(
    reader: Reader, run_id: int, t0: float | None = None, t1: float | None = None, *, every: int = 1
) -> pd.DataFrame:
    """Counts of waits in log-spaced bins, three per decade: columns lo_s, hi_s, count (empty bins included).

    ``every`` > 1 counts only every n-th batch of each epoch (``attrs["every"]``):
    a long run's distribution from a systematic sample, at a fraction of the cost.
    """
    where, params = _window("b", run_id, t0, t1)
    if every > 1:
        where += f" AND b.idx % {int(every)} = 0"
    counts = reader.frame(
        f"SELECT {_bin_sql(reader)} AS bin, COUNT(*) AS count FROM batches b {where} GROUP BY bin", params
    )
    bins = range(HIST_MIN_BIN, HIST_MAX_BIN + 1)
    df = pd.DataFrame({"bin": list(bins)})
    df["lo_s"] = [0.0 if k == HIST_MIN_BIN else 10 ** (k / 3) for k in bins]
    df["hi_s"] = [float("inf") if k == HIST_MAX_BIN else 10 ** ((k + 1) / 3) for k in bins]
    df = df.merge(counts, on="bin", how="left").fillna({"count": 0})
    df["count"] = df["count"].astype(int)
    df = df.drop(columns="bin")
    df.attrs["every"] = max(1, int(every))
    return df


def _bin_sql(reader: Reader) -> str:
    """The histogram bin of ``wait_s``: one log10 call where SQLite has math functions, else comparisons."""
    try:
        reader.scalar("SELECT floor(log10(10.0))")
    except NotAStallwatchFile:  # the reader's wrapper for sqlite3 errors: no math functions in this build
        edges = " + ".join(f"(wait_s >= {10 ** (k / 3)!r})" for k in range(HIST_MIN_BIN + 1, HIST_MAX_BIN + 1))
        return f"({HIST_MIN_BIN} + {edges})"
    clamp = f"MIN({HIST_MAX_BIN}, CAST(floor(3 * log10(wait_s) + 1e-9) AS INTEGER))"
    return f"CASE WHEN wait_s < {10 ** ((HIST_MIN_BIN + 1) / 3)!r} THEN {HIST_MIN_BIN} ELSE {clamp} END"


def gpu_envelope(reader: Reader, run_id: int, t0: float, t1: float, buckets: int = DEFAULT_BUCKETS) -> pd.DataFrame:
    """Per GPU and time bucket: utilisation min/max/mean and memory used (max)."""
    where, params = _window("g", run_id, t0, t1)
    width = _width(t0, t1, buckets)
    df = reader.frame(
        "SELECT gpu, CAST((ts - ?) / ? AS INTEGER) AS bucket,"
        " MIN(util_pct) AS util_min, MAX(util_pct) AS util_max, AVG(util_pct) AS util_mean,"
        " MAX(mem_used_bytes) AS mem_used_bytes, MAX(mem_total_bytes) AS mem_total_bytes"
        f" FROM gpu_samples g {where} AND util_pct IS NOT NULL GROUP BY gpu, bucket ORDER BY gpu, bucket",
        [t0, width, *params],
    )
    folded = rq.gpu_rollup_envelope(reader, run_id, t0, t1, width)
    if not folded.empty:  # minutes past the window: their mean weighed by their samples
        df["util_n"] = 1.0
        df = pd.concat([df, folded], ignore_index=True)
        df["util_sum"] = df["util_mean"] * df["util_n"]
        how = {"util_min": "min", "util_max": "max", "util_sum": "sum", "util_n": "sum"}
        df = df.groupby(["gpu", "bucket"], as_index=False).agg(
            {**how, "mem_used_bytes": "max", "mem_total_bytes": "max"}
        )
        df["util_mean"] = df["util_sum"] / df["util_n"]
        df = df.drop(columns=["util_sum", "util_n"]).sort_values(["gpu", "bucket"]).reset_index(drop=True)
    return _with_time(df, t0, width)


def _with_time(df: pd.DataFrame, t0: float, width: float) -> pd.DataFrame:
    df["t"] = t0 + (df["bucket"].astype(float) + 0.5) * width
    df.attrs["width_s"] = width
    return df


def host_samples(reader: Reader, run_id: int, t0: float, t1: float, max_rows: int = 20_000) -> pd.DataFrame:
    """Host rows in the window (per-core JSON left as text); the newest ``max_rows`` at most."""
    where, params = _window("h", run_id, t0, t1)
    return reader.frame(
        "SELECT * FROM (SELECT ts, cpu_pct, per_core_pct, mem_available_bytes, disk_read_bps"
        f" FROM host_samples h {where} ORDER BY ts DESC LIMIT ?) ORDER BY ts",
        [*params, max_rows],
    )


def memory_envelope(reader: Reader, run_id: int, t0: float, t1: float, buckets: int = DEFAULT_BUCKETS) -> pd.DataFrame:
    """Per role (main|worker) and bucket: the largest summed memory (PSS, else RSS) at one sample time."""
    where, params = _window("p", run_id, t0, t1)
    width = _width(t0, t1, buckets)
    df = reader.frame(
        "SELECT role, CAST((ts - ?) / ? AS INTEGER) AS bucket, MAX(mem_bytes) AS mem_bytes, MAX(processes) AS processes FROM ("
        " SELECT ts, role, SUM(COALESCE(pss_bytes, rss_bytes)) AS mem_bytes, COUNT(*) AS processes"
        f" FROM proc_samples p {where} GROUP BY ts, role) GROUP BY role, bucket ORDER BY role, bucket",
        [t0, width, *params],
    )
    folded = rq.memory_rollup_envelope(reader, run_id, t0, t1, width)
    df = _merged(df, folded, ["role", "bucket"], {})
    return _with_time(df, t0, width)


def worker_envelope(
    reader: Reader, run_id: int, t0: float, t1: float, buckets: int = 500, *, every: int = 1
) -> pd.DataFrame:
    """Per worker id and bucket: batches produced and their production wall time, max and sum.

    ``every`` > 1 reads only each worker's every n-th fetch (``attrs["every"]``), as ``wait_histogram``.
    """
    where, params = _window("f", run_id, t0, t1, ts="started_at")
    if every > 1:
        where += f" AND f.worker_seq % {int(every)} = 0"
    width = _width(t0, t1, buckets)
    df = reader.frame(
        "SELECT worker_id, CAST((started_at - ?) / ? AS INTEGER) AS bucket, COUNT(*) AS n,"
        " MAX(wall_s) AS wall_max, TOTAL(wall_s) AS wall_sum"
        f" FROM worker_fetches f {where} GROUP BY worker_id, bucket ORDER BY worker_id, bucket",
        [t0, width, *params],
    )
    folded = rq.fetch_rollup_envelope(reader, run_id, t0, t1, width)
    if not folded.empty and every > 1:  # the rows are a sample of every n-th: the rollups count each fetch
        folded = folded.assign(n=folded["n"] / every, wall_sum=folded["wall_sum"] / every)
    df = _merged(df, folded, ["worker_id", "bucket"], {"n": "sum", "wall_sum": "sum"})
    df.attrs["every"] = max(1, int(every))
    return _with_time(df, t0, width)


def run_gpu_means(reader: Reader, run_ids: Sequence[int]) -> dict[int, float]:
    """Mean GPU utilisation per run, for the runs that have GPU samples."""
    if not run_ids:
        return {}
    marks = ",".join("?" * len(run_ids))
    df = reader.frame(
        f"SELECT run_id, TOTAL(util_pct) AS util_sum, COUNT(util_pct) AS util_n FROM gpu_samples"
        f" WHERE run_id IN ({marks}) GROUP BY run_id",
        list(run_ids),
        unchecked=True,  # every run at once: a bad value reads NaN here, and is named by that run's own page
    )
    df = pd.concat([numbers_only(df), rq.gpu_rollup_means(reader, run_ids)]).groupby("run_id").sum()
    return {int(r): float(row.util_sum / row.util_n) for r, row in df.iterrows() if row.util_n > 0}


TABLES = ("batches", "epochs", "worker_fetches", "gpu_samples", "host_samples", "proc_samples")


def table_rows(reader: Reader, table: str, run_id: int) -> pd.DataFrame:
    """Every row of one of a run's tables, for download."""
    if table not in TABLES:
        raise ValueError(f"table must be one of {', '.join(TABLES)}, got {table!r}")
    order = {"batches": "epoch, idx", "epochs": "epoch", "worker_fetches": "started_at"}.get(table, "ts")
    return reader.frame(f"SELECT * FROM {table} WHERE run_id = ? ORDER BY {order}", [run_id])

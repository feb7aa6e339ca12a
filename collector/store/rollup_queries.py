"""Reading the rollups (NOTE [ Rollups ] in fold.py): per-epoch sums for the diagnosis, time buckets for the charts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from collector.store.checked import numbers_only
from collector.store.reader import Reader
from collector.store.rollup_schema import ROLLUP_TABLES

EPOCH_COLUMNS = ("epoch", "first_idx", "last_idx", "start_ts", "end_ts", "batches", "wait_s", "stall_s", "step_s")


def has_rollups(reader: Reader) -> bool:
    """Whether the file has the rollup tables (schema 5): an older file read as it is has none."""
    marks = ",".join("?" * len(ROLLUP_TABLES))
    found = reader.scalar(
        f"SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ({marks})", list(ROLLUP_TABLES)
    )
    return int(found or 0) == len(ROLLUP_TABLES)


def epoch_rollups(reader: Reader, run_id: int) -> pd.DataFrame:
    """Per epoch and minute, the batches folded into rollups: key range, time span and sums (empty: none folded)."""
    if not has_rollups(reader):
        return pd.DataFrame(columns=list(EPOCH_COLUMNS), dtype=float)
    return reader.frame(
        "SELECT epoch, MIN(first_idx) AS first_idx, MAX(last_idx) AS last_idx, MIN(start_ts) AS start_ts,"
        " MAX(end_ts) AS end_ts, SUM(batches) AS batches, TOTAL(wait_s) AS wait_s, TOTAL(stall_s) AS stall_s,"
        " TOTAL(step_s) AS step_s FROM batch_rollups WHERE run_id = ? GROUP BY epoch, second / 60"
        " ORDER BY epoch, second / 60",
        [run_id],
    )


def rollup_aggregates(reader: Reader, run_id: int) -> dict[str, Any]:
    """The folded batches' share of ``batch_aggregates``: sampled sizes, pinning, CUDA idle time."""
    empty = {"described": 0, "samples_sum": None, "nbytes_sum": None, "pinned_known": 0, "pinned_true": 0}
    empty.update({"gpu_idle_known": 0, "gpu_idle_s": None})
    if not has_rollups(reader):
        return empty
    df = reader.frame(
        "SELECT TOTAL(described) AS described, SUM(samples) AS samples_sum, SUM(nbytes) AS nbytes_sum,"
        " TOTAL(pinned_n) AS pinned_known, TOTAL(pinned) AS pinned_true, TOTAL(gpu_idle_n) AS gpu_idle_known,"
        " SUM(gpu_idle_s) AS gpu_idle_s FROM batch_rollups WHERE run_id = ?",
        [run_id],
    )
    row = df.iloc[0].to_dict()
    return {k: (None if pd.isna(v) else (v.item() if hasattr(v, "item") else v)) for k, v in row.items()}


def run_rollup_totals(reader: Reader) -> pd.DataFrame:
    """Per run: the folded batches, their wait and step sums, and their first and last time."""
    if not has_rollups(reader):
        return pd.DataFrame(columns=["run_id", "batches", "wait_s", "step_s", "first_ts", "last_ts"])
    return reader.frame(
        "SELECT run_id, SUM(batches) AS batches, TOTAL(wait_s) AS wait_s, TOTAL(step_s) AS step_s,"
        " MIN(start_ts) AS first_ts, MAX(end_ts) AS last_ts FROM batch_rollups GROUP BY run_id"
    )


def _bucketed(reader: Reader, sql: str, params: Sequence[Any]) -> pd.DataFrame:
    return reader.frame(sql, params) if has_rollups(reader) else pd.DataFrame()


def batch_rollup_envelope(reader: Reader, run_id: int, t0: float, t1: float, width: float) -> pd.DataFrame:
    """``series.batch_envelope``'s columns from the rollups in [t0, t1] (each at its second's middle)."""
    return _bucketed(
        reader,
        "SELECT CAST((second + 0.5 - ?) / ? AS INTEGER) AS bucket, SUM(batches) AS n,"
        " MIN(wait_min_s) AS wait_min, MAX(wait_max_s) AS wait_max, TOTAL(wait_s) AS wait_sum,"
        " TOTAL(step_s) AS step_sum, MIN(ready_min) AS ready_min, MAX(ready_max) AS ready_max,"
        " MAX(in_flight_max) AS in_flight_max FROM batch_rollups WHERE run_id = ? AND second + 1 >= ? AND second <= ?"
        " GROUP BY bucket ORDER BY bucket",
        [t0, width, run_id, t0, t1],
    )


def fetch_rollup_envelope(reader: Reader, run_id: int, t0: float, t1: float, width: float) -> pd.DataFrame:
    """``series.worker_envelope``'s columns from the fetch rollups."""
    return _bucketed(
        reader,
        "SELECT worker_id, CAST((second + 0.5 - ?) / ? AS INTEGER) AS bucket, SUM(fetches) AS n,"
        " MAX(wall_max_s) AS wall_max, TOTAL(wall_s) AS wall_sum FROM fetch_rollups"
        " WHERE run_id = ? AND second + 1 >= ? AND second <= ? GROUP BY worker_id, bucket",
        [t0, width, run_id, t0, t1],
    )


def gpu_rollup_envelope(reader: Reader, run_id: int, t0: float, t1: float, width: float) -> pd.DataFrame:
    """``series.gpu_envelope``'s columns from the GPU rollups (each minute at its middle)."""
    return _bucketed(
        reader,
        "SELECT gpu, CAST((minute + 30.0 - ?) / ? AS INTEGER) AS bucket, MIN(util_min_pct) AS util_min,"
        " MAX(util_max_pct) AS util_max, SUM(util_pct) / SUM(util_n) AS util_mean,"
        " MAX(mem_used_max_bytes) AS mem_used_bytes, MAX(mem_total_bytes) AS mem_total_bytes, SUM(util_n) AS util_n"
        " FROM gpu_rollups WHERE run_id = ? AND minute + 60 >= ? AND minute <= ? AND util_n > 0"
        " GROUP BY gpu, bucket",
        [t0, width, run_id, t0, t1],
    )


def memory_rollup_envelope(reader: Reader, run_id: int, t0: float, t1: float, width: float) -> pd.DataFrame:
    """``series.memory_envelope``'s columns from the process rollups: each minute's largest memory, summed by role."""
    return _bucketed(
        reader,
        "SELECT role, CAST((minute + 30.0 - ?) / ? AS INTEGER) AS bucket, MAX(mem_bytes) AS mem_bytes,"
        " MAX(processes) AS processes FROM (SELECT minute, role, SUM(COALESCE(pss_max_bytes, rss_max_bytes))"
        " AS mem_bytes, COUNT(*) AS processes FROM proc_rollups WHERE run_id = ? AND minute + 60 >= ? AND minute <= ?"
        " GROUP BY minute, role) GROUP BY role, bucket",
        [t0, width, run_id, t0, t1],
    )


def gpu_rollup_means(reader: Reader, run_ids: Sequence[int]) -> pd.DataFrame:
    """Per run, the folded GPU samples' utilisation sum and count, to weigh into a run's mean."""
    if not run_ids or not has_rollups(reader):
        return pd.DataFrame(columns=["run_id", "util_sum", "util_n"])
    marks = ",".join("?" * len(run_ids))
    sql = f"SELECT run_id, TOTAL(util_pct) AS util_sum, TOTAL(util_n) AS util_n FROM gpu_rollups WHERE run_id IN ({marks})"
    return numbers_only(reader.frame(sql + " GROUP BY run_id", list(run_ids), unchecked=True))  # several runs

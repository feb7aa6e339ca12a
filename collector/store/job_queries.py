"""A distributed job's ranks read together: the runs that share ``runs.job_id``, and their waits over time."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from collector.store.reader import Reader
from collector.store.rollup_queries import has_rollups

JOB_BUCKETS = 240  # time slices of the per-rank chart, at most
BATCHES_PER_SLICE = 4  # at least, on the busiest rank: a slice narrower than a batch would read 0% or 100%


def job_ranks(reader: Reader, job_id: str) -> pd.DataFrame:
    """One row per sound run of the job: id, name, rank, world_size, started_at; in rank order (NULL ranks last).

    A run whose row is damaged is left out (NOTE [ Values from a file ]): its own page names the value.
    """
    runs = reader.runs()
    runs = runs[(runs["job_id"] == job_id) & runs["damage"].isna()]
    runs = runs.assign(unranked=runs["rank"].isna()).sort_values(["unranked", "rank", "id"])
    return runs[["id", "name", "rank", "world_size", "started_at"]].reset_index(drop=True)


def rank_wait_shares(
    reader: Reader, job_id: str, buckets: int = JOB_BUCKETS, run_ids: Sequence[int] | None = None
) -> pd.DataFrame:
    """Per rank and time slice of the whole job: the share of the slice spent waiting for data, and in steps.

    ``run_ids`` keeps only those runs of the job (one loader's ranks, when the job
    recorded several loaders, as the job view draws them).

    Columns: run_id, rank, t (middle of the slice, seconds since the job's first batch
    request), width_s (the last slice's is up to twice the others'), n (batches), wait_pct,
    busy_pct. Every rank is cut at the same slice edges, so their lines line up on one
    time axis; each slice holds ``BATCHES_PER_SLICE`` batches or more of the busiest rank.
    Empty for a job with no batches.
    """
    ranks = job_ranks(reader, job_id)
    if run_ids is not None:
        ranks = ranks[ranks["id"].isin([int(i) for i in run_ids])]
    if ranks.empty:
        return _empty()
    ids = [int(i) for i in ranks["id"]]
    marks = ",".join("?" * len(ids))
    # the batches as rows, and those folded into rollups (NOTE [ Rollups ] in collector/store/fold.py)
    source = f"SELECT run_id, ts, wait_s, step_s, 1 AS n FROM batches WHERE run_id IN ({marks})"
    if has_rollups(reader):
        source += (
            " UNION ALL SELECT run_id, second + 0.5 AS ts, wait_s, step_s, batches AS n FROM batch_rollups"
            f" WHERE run_id IN ({marks})"
        )
        ids_twice = [*ids, *ids]
    else:
        ids_twice = ids
    span = reader.frame(
        "SELECT MIN(t0) AS t0, MAX(t1) AS t1, MAX(n) AS n FROM (SELECT MIN(ts - wait_s) AS t0,"
        f" MAX(ts) AS t1, SUM(n) AS n FROM ({source}) GROUP BY run_id)",
        ids_twice,
    )
    t0, t1, most = span["t0"].iloc[0], span["t1"].iloc[0], span["n"].iloc[0]
    if t0 is None or pd.isna(t0):
        return _empty()
    # NOTE [ Slices of whole batches ]: each batch counts in the slice it ends in, so a slice
    # must hold several batches: else one holds a whole wait (100%) and the next none (no point).
    # The last slice takes the remainder (up to twice as wide), so the job's end does not dip.
    length = max(float(t1) - float(t0), 1e-6)
    width = max(length / max(1, int(buckets)), BATCHES_PER_SLICE * length / max(1, int(most)))
    last = max(1, int(length // width)) - 1
    df = reader.frame(
        "SELECT run_id, MIN(CAST((ts - ?) / ? AS INTEGER), ?) AS bucket, SUM(n) AS n,"
        " TOTAL(wait_s) AS wait_sum, TOTAL(step_s) AS step_sum"
        f" FROM ({source}) GROUP BY run_id, bucket ORDER BY run_id, bucket",
        [float(t0), width, last, *ids_twice],
    )
    rank_of = dict(zip(ranks["id"].astype(int), ranks["rank"], strict=True))
    df["rank"] = [rank_of[int(i)] for i in df["run_id"]]
    start = df["bucket"].astype(float) * width
    df["width_s"] = (df["bucket"] == last).map({True: length - last * width, False: width})
    df["t"] = start + df["width_s"] / 2
    df["wait_pct"] = (100.0 * df["wait_sum"] / df["width_s"]).clip(0.0, 100.0)
    df["busy_pct"] = (100.0 * df["step_sum"] / df["width_s"]).clip(0.0, 100.0)
    return df[["run_id", "rank", "t", "width_s", "n", "wait_pct", "busy_pct"]]


def _empty() -> pd.DataFrame:
    return pd.DataFrame(columns=["run_id", "rank", "t", "width_s", "n", "wait_pct", "busy_pct"])

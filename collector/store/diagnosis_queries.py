"""The queries the diagnosis needs: lean numeric batch columns, a recent window, batch aggregates."""

from __future__ import annotations

import numpy as np
import pandas as pd

from collector.store.reader import BATCH_JOIN, Reader

# NOTE [ Lean batch columns ]
# A 1M-batch run through Reader.batches() builds a 16-column DataFrame from
# Python tuples (several seconds). The diagnosis needs ten numeric columns:
# they come back with NULL replaced by NaN through one float64 numpy array,
# which is about twice as fast; batch sizes, pinning and CUDA idle time are
# only needed as aggregates and are summed in SQL.
LEAN_COLUMNS = (
    "epoch",
    "idx",
    "ts",
    "wait_s",
    "step_s",
    "ready",
    "worker_id",
    "worker_wall_s",
    "worker_cpu_s",
    "load_cpu_s",
    "load_runq_s",
    "worker_runq_s",
)
_NULL = -1.0  # no stored value is negative: wait/step/wall/cpu are clamped, ids and depths are counts
_SELECT = (
    "SELECT b.epoch, b.idx, b.ts, b.wait_s, IFNULL(b.step_s, -1.0), IFNULL(b.ready, -1),"
    " IFNULL(b.worker_id, -1), IFNULL(f.wall_s, -1.0), IFNULL(f.cpu_s, -1.0), IFNULL(b.load_cpu_s, -1.0),"
    " {load_runq}, {worker_runq} "
)


def _select(reader: Reader) -> str:
    """The lean SELECT, with -1 (NULL) for the schema-3 columns an older file lacks (NOTE [ Schema versions ])."""
    with reader.connect() as conn:
        batch = {row[1] for row in conn.execute("PRAGMA table_info(batches)")}
        fetch = {row[1] for row in conn.execute("PRAGMA table_info(worker_fetches)")}
    return _SELECT.format(
        load_runq="IFNULL(b.load_runq_s, -1.0)" if "load_runq_s" in batch else "-1.0",
        worker_runq="IFNULL(f.runq_s, -1.0)" if "runq_s" in fetch else "-1.0",
    )


def lean_batches(
    reader: Reader, run_id: int, *, since_ts: float | None = None, last_batches: int | None = None
) -> pd.DataFrame:
    """Batches in (epoch, idx) order with ``LEAN_COLUMNS``; NaN where not available.

    ``last_batches`` keeps the newest n batches; ``since_ts`` those handed out at
    or after that time. Both walk the primary key backwards from the end, so a
    recent window costs the size of the window, not of the run.
    """
    where, params = "WHERE b.run_id = ?", [run_id]
    if since_ts is not None:
        edge = reader.frame(
            "SELECT epoch, idx FROM batches WHERE run_id = ? AND ts < ? ORDER BY epoch DESC, idx DESC LIMIT 1",
            (run_id, since_ts),
        )
        if not edge.empty:
            where += " AND (b.epoch, b.idx) > (?, ?)"
            params += [int(edge["epoch"].iloc[0]), int(edge["idx"].iloc[0])]
    select = _select(reader)
    if last_batches is not None:
        sql = f"{select} {BATCH_JOIN} {where} ORDER BY b.epoch DESC, b.idx DESC LIMIT ?"
        params.append(int(last_batches))
    else:
        sql = f"{select} {BATCH_JOIN} {where} ORDER BY b.epoch, b.idx"
    with reader.connect() as conn:
        rows = conn.execute(sql, params).fetchall()
    values = np.array(rows, dtype=np.float64).reshape(-1, len(LEAN_COLUMNS))
    if last_batches is not None:
        values = values[::-1]
    values[:, 4:][values[:, 4:] == _NULL] = np.nan
    df = pd.DataFrame(values, columns=list(LEAN_COLUMNS))
    df["epoch"] = df["epoch"].astype(np.int64)
    df["idx"] = df["idx"].astype(np.int64)
    return df


def batch_aggregates(
    reader: Reader, run_id: int, *, start: tuple[int, int] | None = None
) -> dict[str, float | int | None]:
    """Counts and sums over the batches' sampled size, pinning and CUDA idle columns.

    ``start`` (epoch, idx) limits them to that batch and the ones after it.
    """
    where, params = "WHERE run_id = ?", [run_id]
    if start is not None:
        where += " AND (epoch, idx) >= (?, ?)"
        params += [int(start[0]), int(start[1])]
    df = reader.frame(
        "SELECT COUNT(samples) AS described, AVG(samples) AS samples_mean, AVG(nbytes) AS nbytes_mean,"
        " COUNT(pinned) AS pinned_known, SUM(pinned) AS pinned_true,"
        " COUNT(gpu_idle_s) AS gpu_idle_known, SUM(gpu_idle_s) AS gpu_idle_s"
        f" FROM batches {where}",
        params,
    )
    row = df.iloc[0].to_dict()
    return {k: (None if pd.isna(v) else (v.item() if hasattr(v, "item") else v)) for k, v in row.items()}

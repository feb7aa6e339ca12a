"""The compare view's data: several runs reduced for overlay, a damaged one left out with its line."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from app.data import busy_curve, load_run_view
from collector.errors import StallwatchError
from collector.store.reader import Reader


@dataclass(frozen=True)
class CompareData:
    """Several runs reduced for overlay: their rows in ``runs`` and long-format series."""

    runs: pd.DataFrame  # one row per run: id, name, config, batches_per_s, wait_fraction, gpu_util_pct
    curves: pd.DataFrame  # run, t (s since start), util_min, util_max, source ("gpu" | "loop")
    progress: pd.DataFrame  # run, t, batches (cumulative)
    damaged: tuple[str, ...] = ()  # one line per run left out: NOTE [ Values from a file ]


def load_compare(reader: Reader, run_ids: list[int], buckets: int = 600) -> CompareData:
    """Reduced curves and totals of ``run_ids`` for the compare view."""
    rows, curves, progress, damaged = [], [], [], []
    for run_id in run_ids:
        try:
            data = load_run_view(reader, run_id, None, buckets)
        except StallwatchError as exc:  # that run's problem (damaged, or gone): the others are compared
            damaged.append(str(exc))
            continue
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
        damaged=tuple(damaged),
    )

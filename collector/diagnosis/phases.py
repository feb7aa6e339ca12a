"""Split a run's batches into warm-up, epoch starts and steady state, and cost each epoch start."""

from __future__ import annotations

import numpy as np
import pandas as pd

WARMUP, EPOCH_START, STEADY = "warmup", "epoch_start", "steady"


def start_batches(num_workers: int | None) -> int:
    """How many batches at the head of an epoch belong to its start.

    Fresh workers each deliver their first batch only after starting up, so the
    first ``num_workers`` batches of an epoch (1 without workers) are its start::

        iter()  w0 starts ... b0 | w1 ... b1 | steady: b2 b3 b4 ...
        |<----- epoch start (num_workers=2) ----->|
    """
    return max(1, int(num_workers or 0))


def label_phases(batches: pd.DataFrame, num_workers: int | None, *, run_start_in_data: bool) -> np.ndarray:
    """One phase label per batch: the run's first epoch start is warm-up, later ones epoch starts."""
    k = start_batches(num_workers)
    idx = batches["idx"].to_numpy()
    epoch = batches["epoch"].to_numpy()
    labels = np.full(len(batches), STEADY, dtype=object)
    head = idx < k
    labels[head] = EPOCH_START
    if run_start_in_data and len(epoch):
        labels[head & (epoch == epoch[0])] = WARMUP
    return labels


def epoch_starts(
    batches: pd.DataFrame, epochs: pd.DataFrame, num_workers: int | None, steady_wait_s: float
) -> pd.DataFrame:
    """Per epoch: seconds spent starting it (iter() plus the head batches' waits) and seconds lost.

    ``iter_s`` is iter() itself (``first_batch_s`` minus batch 0's wait and
    minus ``collector_s``, the collector's own work in it: NOTE [ The
    collector's own time ] in collector/record/session.py), ``first_s`` adds
    batch 0's wait to it, ``start_s`` adds
    the waits of the epoch's first ``start_batches`` batches, and ``lost_s`` is
    what that costs beyond the same number of steady-state waits.
    """
    k = start_batches(num_workers)
    heads = batches[batches["idx"] < k]
    waits = heads.groupby("epoch")["wait_s"].sum()
    first_wait = heads[heads["idx"] == 0].set_index("epoch")["wait_s"]
    out = pd.DataFrame({"epoch": waits.index.to_numpy(dtype=np.int64), "head_wait_s": waits.to_numpy()})
    first = epochs.set_index("epoch")["first_batch_s"] if not epochs.empty else pd.Series(dtype=float)
    own = collector_seconds(epochs)
    iter_s = [
        max(0.0, float(first.get(e, np.nan)) - float(first_wait.get(e, 0.0)) - float(own.get(e, 0.0)))
        if e in first.index and pd.notna(first.get(e))
        else 0.0
        for e in out["epoch"]
    ]
    out["iter_s"] = np.asarray(iter_s, dtype=float)
    out["collector_s"] = np.asarray([float(own.get(e, 0.0)) for e in out["epoch"]], dtype=float)
    out["first_s"] = out["iter_s"] + np.asarray([float(first_wait.get(e, 0.0)) for e in out["epoch"]], dtype=float)
    out["start_s"] = out["iter_s"] + out["head_wait_s"]
    out["lost_s"] = np.maximum(0.0, out["start_s"] - k * steady_wait_s)
    return out


def collector_seconds(epochs: pd.DataFrame) -> pd.Series:
    """epoch -> the collector's own seconds inside its first_batch_s (0 where not recorded: files before schema 4)."""
    if epochs.empty or "collector_s" not in epochs:
        return pd.Series(dtype=float)
    return epochs.set_index("epoch")["collector_s"].astype(float).fillna(0.0).clip(lower=0.0)

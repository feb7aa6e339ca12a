"""The tables one diagnosis reads, loaded once from a stallwatch file (optionally a recent window)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from collector.diagnosis.tuned import at_setting, settled, settled_run
from collector.errors import DamagedRun, InsufficientData, RunInProgress
from collector.store.diagnosis_queries import batch_aggregates, lean_batches
from collector.store.reader import Reader
from collector.store.rollup_queries import epoch_rollups, rollup_aggregates


@dataclass(frozen=True)
class RunData:
    """Everything the rules look at, as plain tables; rules never touch SQLite."""

    run: dict[str, Any]  # id, name, state, config, host, ...
    batches: pd.DataFrame  # see collector.store.diagnosis_queries.LEAN_COLUMNS
    epochs: pd.DataFrame  # epoch, started_at, ended_at, first_batch_s, batches
    gpu: pd.DataFrame  # ts, gpu, util_pct
    host: pd.DataFrame  # ts, cpu_pct, per_core_pct, mem_available_bytes
    procs: pd.DataFrame  # ts, pid, role, worker_id, cpu_pct, rss_bytes, uss_bytes
    aggregates: dict[str, Any] = field(default_factory=dict)  # batch_aggregates()
    worker_exits: pd.DataFrame = field(default_factory=pd.DataFrame)  # each worker's whole life (schema 3)
    window: dict[str, Any] | None = None  # {"window_s": ..} or {"last_batches": ..}; None: whole run
    rollups: pd.DataFrame = field(default_factory=pd.DataFrame)  # per epoch, batches no longer rows (NOTE [ Rollups ])
    trials: pd.DataFrame = field(default_factory=pd.DataFrame)  # a tuned run's trials (schema 6)
    all_epochs: pd.DataFrame = field(default_factory=pd.DataFrame)  # every epoch, a tuned run's trials included
    stages: pd.DataFrame = field(default_factory=pd.DataFrame)  # each worker's time by stage (schema 7)

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.run.get("config") or {})

    @property
    def host_facts(self) -> dict[str, Any]:
        return dict(self.run.get("host") or {})

    @property
    def epoch_length(self) -> float | None:
        """Batches an epoch holds, on average, of those that ended (a running one: those handed out so far).

        Counted, the tuner's second epoch (its first question is answered as it runs) made the photo
        pipeline's 8-batch epochs 4.5, where 4 workers fetch an epoch at once as 8 do: the model tied them.
        """
        e = self.epochs
        known = {"ended_at", "batches"} <= set(e.columns)
        ended = e.loc[e["ended_at"].notna() & (e["batches"] > 0), "batches"] if known else []
        return float(sum(ended) / len(ended)) if len(ended) else None


def load_run(
    db: str | os.PathLike[str] | Reader,
    run: str | int | None = "latest",
    *,
    window_s: float | None = None,
    last_batches: int | None = None,
    live: bool = False,
    at: dict[str, Any] | None = None,
) -> RunData:
    """Read one run's tables; raise a typed error for anything a diagnosis cannot use.

    A tuned run is read at the setting it settled on, or at ``at`` (a stored setting, as epochs.setting holds it).
    """
    if window_s is not None and not window_s > 0:
        raise ValueError(f"window_s must be > 0 seconds, got {window_s!r}")
    if last_batches is not None and (isinstance(last_batches, bool) or int(last_batches) < 2):
        raise ValueError(f"last_batches must be an integer >= 2, got {last_batches!r}")
    reader = db if isinstance(db, Reader) else Reader(db)
    info = reader.sound_run(run)
    try:
        return _load(reader, info, window_s, last_batches, live, at)
    except DamagedRun as exc:  # a value of one of its tables: NOTE [ Values from a file ]
        raise DamagedRun(f"{reader.path}: run {info['name']!r} (id {info['id']}): {exc}") from None


def _load(
    reader: Reader,
    info: dict[str, Any],
    window_s: float | None,
    last_batches: int | None,
    live: bool,
    at: dict[str, Any] | None,
) -> RunData:
    run_id = int(info["id"])
    if info.get("state") == "running" and not live:
        raise RunInProgress(
            f"run {info['name']!r} (id {run_id}) is still being recorded: diagnose it when it ends, "
            "or ask for a live diagnosis (--live, or live=True)"
        )
    since_ts = None
    if window_s is not None:
        last = reader.scalar("SELECT ts FROM batches WHERE run_id = ? ORDER BY epoch DESC, idx DESC LIMIT 1", (run_id,))
        since_ts = None if last is None else float(last) - float(window_s)
    batches = lean_batches(reader, run_id, since_ts=since_ts, last_batches=last_batches)
    all_epochs = reader.epochs(run_id)
    tuned = settled(all_epochs) if at is None else at_setting(all_epochs, at)
    if tuned is not None:  # a tuned run: the epochs at the setting it settled on (NOTE [ Live tuning ])
        batches = batches[batches["epoch"].isin(tuned[0])].reset_index(drop=True)
        info = settled_run(info, tuned[1])
    if len(batches) < 2:
        raise InsufficientData(
            f"run {info['name']!r} (id {run_id}) has {len(batches)} batch{'es' if len(batches) != 1 else ''}"
            f"{' in the window' if since_ts is not None or last_batches is not None else ''}: "
            "at least 2 are needed to say anything"
        )
    windowed = since_ts is not None or last_batches is not None or tuned is not None
    first_ts = float(batches["ts"].iloc[0] - batches["wait_s"].iloc[0]) if windowed else None
    start = (int(batches["epoch"].iloc[0]), int(batches["idx"].iloc[0])) if windowed else None
    epochs = all_epochs
    if tuned is not None:
        epochs = epochs[epochs["epoch"].isin(tuned[0])].reset_index(drop=True)
    if windowed:
        epochs = epochs[epochs["epoch"] >= int(batches["epoch"].iloc[0])].reset_index(drop=True)
    window: dict[str, Any] | None = None
    if window_s is not None:
        window = {"window_s": float(window_s)}
    elif last_batches is not None:
        window = {"last_batches": int(last_batches)}
    rollups = pd.DataFrame() if windowed else epoch_rollups(reader, run_id)
    aggregates = batch_aggregates(reader, run_id, start=start)
    if not rollups.empty:
        aggregates = _with_folded(aggregates, rollup_aggregates(reader, run_id))
    return RunData(
        run=info,
        batches=batches,
        epochs=epochs,
        gpu=reader.gpu_samples(run_id, since_ts=first_ts),
        host=reader.host_samples(run_id, since_ts=first_ts),
        procs=reader.proc_samples(run_id, since_ts=first_ts),
        aggregates=aggregates,
        worker_exits=reader.worker_exits(run_id),
        window=window,
        rollups=rollups,
        trials=reader.trials(run_id),
        all_epochs=all_epochs,
        stages=reader.worker_stages(run_id),
    )


def _with_folded(rows: dict[str, Any], folded: dict[str, Any]) -> dict[str, Any]:
    """``batch_aggregates`` over the rows and the rollups together: counts and sums add, means are weighed."""
    out = dict(rows)
    for key in ("pinned_known", "pinned_true", "gpu_idle_known"):
        out[key] = (rows.get(key) or 0) + int(folded.get(key) or 0)
    if folded.get("gpu_idle_s") is not None:
        out["gpu_idle_s"] = (rows.get("gpu_idle_s") or 0.0) + float(folded["gpu_idle_s"])
    n_rows, n_folded = rows.get("described") or 0, int(folded.get("described") or 0)
    if n_folded:
        for mean, total in (("samples_mean", "samples_sum"), ("nbytes_mean", "nbytes_sum")):
            out[mean] = ((rows.get(mean) or 0.0) * n_rows + float(folded.get(total) or 0.0)) / (n_rows + n_folded)
        out["described"] = n_rows + n_folded
    return out

"""The SQL a sweep needs: memory per trial, a recorded run's step time, and the sweeps for the dashboard."""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

import pandas as pd

from collector.errors import InsufficientData
from collector.store.connection import Store
from collector.store.reader import Reader

SETTING_COLUMNS = ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers", "batch_size")
RESULT_COLUMNS = (
    "samples_per_s",
    "batches_per_s",
    "wait_share",
    "startup_s",
    "batches",
    "warmup_batches",
    "epochs",
    "peak_rss_bytes",
    "worker_rss_bytes",
    "mem_available_bytes",
    "duration_s",
    "error",
)


@dataclass(frozen=True)
class TrialMemory:
    peak_rss_bytes: int | None  # main + workers, summed at the busiest sample
    worker_rss_bytes: int | None  # median RSS of one worker
    mem_available_bytes: int | None  # least memory the machine had left


@dataclass(frozen=True)
class StepTime:
    """What ``--like-run`` takes from a recorded run."""

    run_id: int
    name: str
    step_s: float  # median time from one batch's return to the next request
    batch_size: int | None
    batches: int


def trial_memory(db: str | os.PathLike[str], run_id: int) -> TrialMemory:
    reader = Reader(db)
    peak = reader.scalar(
        "SELECT MAX(total) FROM (SELECT SUM(rss_bytes) AS total FROM proc_samples WHERE run_id = ? GROUP BY ts)",
        (run_id,),
    )
    workers = reader.frame(
        "SELECT rss_bytes FROM proc_samples WHERE run_id = ? AND role = 'worker' AND rss_bytes IS NOT NULL",
        (run_id,),
    )
    available = reader.scalar("SELECT MIN(mem_available_bytes) FROM host_samples WHERE run_id = ?", (run_id,))
    worker_rss = int(statistics.median(workers["rss_bytes"])) if len(workers) else None
    return TrialMemory(None if peak is None else int(peak), worker_rss, None if available is None else int(available))


def step_time(db: str | os.PathLike[str], run: str | int) -> StepTime:
    """The median step of a recorded run (its loop's compute time per batch)."""
    reader = Reader(db)
    row = reader.run(run)
    steps = reader.frame("SELECT step_s FROM batches WHERE run_id = ? AND step_s IS NOT NULL", (row["id"],))
    if len(steps) < 3:
        raise InsufficientData(
            f"run {row['name']!r} in {reader.path} has {len(steps)} measured steps; record a longer run first"
        )
    config = row.get("config") or {}
    batch_size = config.get("batch_size") if isinstance(config, dict) else None
    return StepTime(int(row["id"]), str(row["name"]), float(statistics.median(steps["step_s"])), batch_size, len(steps))


def update_tags(db: str | os.PathLike[str], run_id: int, tags: dict[str, Any]) -> None:
    """Replace a run's tags (a trial's result is known only after its run ends)."""
    store = Store(db)
    try:
        store.write({}, run_update={"tags": json.dumps(tags, default=str)}, run_id=run_id)
    finally:
        store.close()


def record_failed_trial(db: str | os.PathLike[str], name: str, tags: dict[str, Any], error: str) -> int:
    """A crashed run for a setting whose factory raised, so the dashboard shows it too."""
    store = Store(db)
    try:
        now = time.time()
        run_id = store.create_run(
            name,
            config={key: tags.get("trial", {}).get(key) for key in SETTING_COLUMNS},
            host={},
            versions={},
            hostname="",
            pid=os.getpid(),
            command="python -m collector sweep",
            rank=None,
            world_size=None,
            tags=tags,
            started_at=now,
        )
        store.write({}, run_update={"status": "crashed", "error": error, "ended_at": now}, run_id=run_id)
        return run_id
    finally:
        store.close()


def sweep_trials(reader: Reader, sweep: str | None = None) -> pd.DataFrame:
    """One row per trial: run id, sweep, settings, results and ``chosen``, oldest first."""
    runs = reader.runs()  # each row checked alone: a damaged trial is not the sweep's problem
    rows = []
    for raw in runs.sort_values("id").to_dict("records"):
        tags = raw["tags"] if isinstance(raw["tags"], dict) else {}
        if tags.get("sweep") is None or (sweep is not None and tags.get("sweep") != sweep):
            continue
        record = {"run_id": int(raw["id"]), **{key: raw[key] for key in ("name", "status", "started_at")}}
        trial = tags.get("trial") or {}
        result = tags.get("result") or {}
        row: dict[str, Any] = {
            **record,
            "sweep": tags.get("sweep"),
            **{key: trial.get(key) for key in SETTING_COLUMNS},
            **{key: result.get(key) for key in RESULT_COLUMNS},
            "paced_step_s": tags.get("step_s"),
            "chosen": bool(tags.get("chosen", False)),
        }
        rows.append(row)
    columns = ["run_id", "name", "status", "started_at", "sweep", *SETTING_COLUMNS, *RESULT_COLUMNS]
    return pd.DataFrame(rows, columns=[*columns, "paced_step_s", "chosen"])


def sweeps(reader: Reader) -> pd.DataFrame:
    """One row per sweep, newest first: id, start, trials, failed trials, paced step."""
    trials = sweep_trials(reader)
    if trials.empty:
        return pd.DataFrame(columns=["sweep", "started_at", "trials", "failed", "paced_step_s"])
    grouped = trials.groupby("sweep", sort=False).agg(
        started_at=("started_at", "min"),
        trials=("run_id", "count"),
        failed=("error", lambda s: int(s.notna().sum())),
        paced_step_s=("paced_step_s", "first"),
    )
    return grouped.reset_index().sort_values("started_at", ascending=False, ignore_index=True)

"""One run's figures for an experiment tracker (TensorBoard, W&B, MLflow): the exporter's window, under tracker keys."""

from __future__ import annotations

import time
from dataclasses import dataclass

from collector.export.tail import RunSnapshot, RunTail
from collector.store import export_queries as q
from collector.store.reader import Reader

PREFIX = "stallwatch/"
WAITING = PREFIX + "waiting_for_data"  # the stall fraction: NOTE [ One waiting figure ] in collector/diagnosis/text.py
WAIT_MS = PREFIX + "wait_ms"  # mean time inside next() per batch of the window, in milliseconds
STEP_MS = PREFIX + "step_ms"  # mean time between batches (the loop's own work), in milliseconds
READY = PREFIX + "batches_ready"  # mean batches already waiting in the loader's queue at each next()
GPU_UTIL = PREFIX + "gpu_util_pct"  # mean GPU utilisation over the window, in percent (per GPU where several)
KEYS = (WAITING, WAIT_MS, STEP_MS, READY, GPU_UTIL)


@dataclass(frozen=True)
class Figures:
    """One window's figures: ``metrics`` by tracker key, ``step`` the batches the run has handed out so far."""

    metrics: dict[str, float]
    step: int


# NOTE [ Tracker figures ]
# A tracker gets the figures the Prometheus exporter exports, computed by the
# same code (RunTail over the run's file, read-only): waiting_for_data is the
# exporter's stallwatch_data_stall_ratio over the last ``window_s`` seconds,
# the one waiting figure of the report and the dashboard, computed over a
# window. wait_ms and step_ms are the means over the batches written since
# the previous figures; batches_ready the queue depth's mean over the window
# (absent without workers, where there is no queue); GPU utilisation is the
# writer's NVML samples of the window (absent where none were taken).


class RunFigures:
    """Follows one run of one file and turns each new window into ``Figures``."""

    def __init__(self, path: str, run_id: int, window_s: float) -> None:
        self.reader = Reader(path)
        self.tail = RunTail(run_id, window_s)
        self._seen = (0, 0.0, 0.0)  # batches, wait_s, step_s at the previous figures

    def read(self, now: float | None = None) -> Figures | None:
        """The figures of the batches written since the last call; None where there are none."""
        with self.reader.connect() as conn:
            row = q.exported_run(conn, self.tail.run_id)
            if row is None:
                return None
            self.tail.advance(conn)
            if self.tail.batches <= self._seen[0]:
                return None
            snap = self.tail.snapshot(conn, row, "running", time.time() if now is None else now)
        return self._figures(snap)

    def _figures(self, snap: RunSnapshot) -> Figures:
        batches, wait_s, step_s = self._seen
        n = snap.batches - batches
        self._seen = (snap.batches, snap.wait_s, snap.step_s)
        metrics = {WAIT_MS: (snap.wait_s - wait_s) / n * 1000.0, STEP_MS: (snap.step_s - step_s) / n * 1000.0}
        if snap.stall.batches >= 2:  # one batch has no stall fraction (window_stall gives 0.0): left out
            metrics[WAITING] = float(snap.stall.stall_fraction)
        if snap.stall.ready_mean is not None:
            metrics[READY] = float(snap.stall.ready_mean)
        gpus = snap.gpu_util_pct
        if len(gpus) == 1:
            metrics[GPU_UTIL] = float(next(iter(gpus.values())))
        for index, util in sorted(gpus.items()) if len(gpus) > 1 else ():
            metrics[f"{PREFIX}gpu{index}_util_pct"] = float(util)
        return Figures(metrics, snap.batches)

"""``Trainer(callbacks=[StallwatchCallback()])``: record every loader a Lightning Trainer iterates, then its verdict.

Importing this module imports Lightning (``lightning.pytorch``, else
``pytorch_lightning``); ``import collector`` never does.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback  # type: ignore[assignment]

from collector.errors import CollectorWarning
from collector.record.scoped import Scoped
from collector.sample.sampler import DEFAULT_GPU_HZ, DEFAULT_HOST_HZ, DEFAULT_KEEP_BATCHES
from collector.verdict.helper import VerdictHelper, start_helper, verdict_text_of

VERDICT_KEY = "stallwatch/verdict"


class StallwatchCallback(Callback):
    """Records each train / val / test / predict DataLoader of every ``fit``, ``validate``, ``test`` and ``predict``.

    One run per loader and rank, named after the user's line that built it and
    the stage (``train.py:41 train``, ``train.py:44 val``), with ``runs.stage``,
    rank and job id; at the end of each, rank 0 prints the job's verdict on
    stderr (``verdict=False``: not). Training is unchanged: the loaders are
    Lightning's own, timed as ``collector run`` times them.

    Through the trainer's loggers, as ``DeviceStatsMonitor`` logs (``log=False``:
    not): every ``log_every_n_steps``, the training loader's newest figures
    (``stallwatch/waiting_for_data``, ``wait_ms``, ``step_ms``,
    ``batches_ready``, ``gpu_util_pct``: docs/trackers.md), the last ones when
    ``fit`` ends, and the verdict's text as ``stallwatch/verdict`` where the
    logger takes text (TensorBoard, W&B, MLflow).

    ``tune=True`` tunes each loader live, an epoch at a time (docs/tuning.md):
    the framework iterates the same DataLoader every epoch, so the tuner's
    setting holds; a loader the framework rebuilds each epoch
    (``reload_dataloaders_every_n_epochs``) starts a new run and is left at its setting.
    """

    def __init__(
        self,
        db: str | os.PathLike[str] | None = None,
        *,
        gpu_hz: float = DEFAULT_GPU_HZ,
        host_hz: float = DEFAULT_HOST_HZ,
        verdict: bool = True,
        keep_batches: int | None = DEFAULT_KEEP_BATCHES,
        tune: bool | int = False,
        log: bool = True,
    ) -> None:
        super().__init__()
        self._recording = Scoped(db, gpu_hz, host_hz, {"callback": "lightning"}, keep_batches, tune=tune, log=log)
        self._verdict = verdict
        self._log = log
        self._helper: VerdictHelper | None = None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._recording.start()
        if self._verdict and self._helper is None:
            self._helper = start_helper()  # NOTE [ Verdict beside the job ]

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        connector = getattr(trainer, "_logger_connector", None)  # as DeviceStatsMonitor decides
        due = connector.should_update_logs if connector is not None else batch_idx % trainer.log_every_n_steps == 0
        if self._log and trainer.loggers and due:
            self._log_figures(trainer)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        runs = self._recording.finish()  # the runs' last figures are computed as they close
        helper, self._helper = self._helper, None
        if self._log and trainer.loggers:
            self._log_figures(trainer)
        if not runs or not (self._verdict or (self._log and trainer.loggers)):
            if helper is not None:
                helper.close()
            return
        text = verdict_text_of(helper, self._recording.db, runs)
        if self._verdict:
            sys.stderr.write(text)
            sys.stderr.flush()
        if self._log:
            self._guarded(log_text, trainer, text)

    def _log_figures(self, trainer: Any) -> None:
        figures = self._recording.figures("train")
        if figures is not None:
            self._guarded(log_metrics, trainer, figures)

    def _guarded(self, action: Any, trainer: Any, value: Any) -> None:
        """A logger that fails is warned about once and not logged to again: training goes on."""
        try:
            action(trainer, value)
        except Exception as exc:  # noqa: BLE001 - a callback must never stop training
            self._log = False
            warnings.warn(
                f"stallwatch: logging through the trainer's logger failed ({type(exc).__name__}: {exc}); "
                "stallwatch logs no more in this run",
                CollectorWarning,
                stacklevel=2,
            )


def _step(trainer: Any) -> int:
    loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    return int(getattr(loop, "_batches_that_stepped", trainer.global_step))  # the step DeviceStatsMonitor logs at


def log_metrics(trainer: Any, figures: dict[str, float]) -> None:
    """The figures through every logger of the trainer, at the step Lightning's own metrics are logged at."""
    for logger in trainer.loggers:
        logger.log_metrics(figures, step=_step(trainer))


def log_text(trainer: Any, text: str) -> None:
    """The verdict's text to each logger that takes text: TensorBoard, W&B, MLflow; the others have no text."""
    for logger in trainer.loggers:
        kind = type(logger).__name__
        if kind == "TensorBoardLogger":
            logger.experiment.add_text(VERDICT_KEY, "```\n" + text + "```", _step(trainer))  # markdown: kept as typed
        elif kind == "WandbLogger":
            logger.experiment.summary[VERDICT_KEY] = text
        elif kind == "MLFlowLogger":
            logger.experiment.log_text(logger.run_id, text, VERDICT_KEY + ".txt")

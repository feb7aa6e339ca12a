"""``Trainer(callbacks=[StallwatchCallback()])``: record every loader a Lightning Trainer iterates, then its verdict.

Importing this module imports Lightning (``lightning.pytorch``, else
``pytorch_lightning``); ``import collector`` never does.
"""

from __future__ import annotations

import os
import sys
from typing import Any

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback  # type: ignore[assignment]

from collector.record.scoped import Scoped
from collector.sample.sampler import DEFAULT_GPU_HZ, DEFAULT_HOST_HZ, DEFAULT_KEEP_BATCHES
from collector.verdict.helper import VerdictHelper, print_verdict_text, start_helper


class StallwatchCallback(Callback):
    """Records each train / val / test / predict DataLoader of every ``fit``, ``validate``, ``test`` and ``predict``.

    One run per loader and rank, named after the user's line that built it and
    the stage (``train.py:41 train``, ``train.py:44 val``), with ``runs.stage``,
    rank and job id; at the end of each, rank 0 prints the job's verdict on
    stderr (``verdict=False``: not). Training is unchanged: the loaders are
    Lightning's own, timed as ``collector run`` times them.

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
    ) -> None:
        super().__init__()
        self._recording = Scoped(db, gpu_hz, host_hz, {"callback": "lightning"}, keep_batches, tune=tune)
        self._verdict = verdict
        self._helper: VerdictHelper | None = None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._recording.start()
        if self._verdict and self._helper is None:
            self._helper = start_helper()  # NOTE [ Verdict beside the job ]

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        runs = self._recording.finish()
        helper, self._helper = self._helper, None
        if self._verdict and runs:
            print_verdict_text(helper, self._recording.db, runs, sys.stderr)
        elif helper is not None:
            helper.close()

"""``Trainer(..., callbacks=[StallwatchCallback()])``: record every loader a Hugging Face Trainer iterates.

Importing this module imports ``transformers``; ``import collector`` never does.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from transformers import TrainerCallback

from collector.record.scoped import Scoped
from collector.sample.sampler import DEFAULT_GPU_HZ, DEFAULT_HOST_HZ, DEFAULT_KEEP_BATCHES
from collector.verdict.helper import VerdictHelper, print_verdict_text, start_helper


class StallwatchCallback(TrainerCallback):
    """Records the train, eval and predict DataLoaders of ``train()``, ``evaluate()`` and ``predict()``.

    One run per loader and rank, named after the user's line (``train.py:70
    train``, ``train.py:70 val``), with ``runs.stage``, rank and job id. The
    DataLoader inside accelerate's DataLoaderShard is the one recorded, so worker
    and queue fields are filled. When training ends, and after an ``evaluate()``
    or ``predict()`` outside training, rank 0 prints the job's verdict on stderr.

    ``tune=True`` tunes each loader live, an epoch at a time (docs/tuning.md):
    the Trainer iterates the same DataLoader every epoch, so the tuner's
    setting holds; a loader built anew each epoch starts a new run and is left at its setting.
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
        self._recording = Scoped(db, gpu_hz, host_hz, {"callback": "hf"}, keep_batches, tune=tune)
        self._verdict = verdict
        self._training = False
        self._helper: VerdictHelper | None = None

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._recording.start()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._recording.start()
        self._training = True
        if self._verdict and self._helper is None:
            self._helper = start_helper()  # NOTE [ Verdict beside the job ]

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._training = False
        self._report()

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self._training:
            self._report()

    def on_predict(self, args: Any, state: Any, control: Any, metrics: Any = None, **kwargs: Any) -> None:
        if not self._training:
            self._report()

    def _report(self) -> None:
        # The Trainer may evaluate or predict again: keep recording, close only what ran so far.
        runs = self._recording.finish(uninstall=False)
        helper, self._helper = self._helper, None
        if self._verdict and runs:
            print_verdict_text(helper, self._recording.db, runs, sys.stderr)
        elif helper is not None:
            helper.close()

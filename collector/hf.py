"""``Trainer(..., callbacks=[StallwatchCallback()])``: record every loader a Hugging Face Trainer iterates.

Importing this module imports ``transformers``; ``import collector`` never does.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

from transformers import TrainerCallback

from collector.errors import CollectorWarning
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

    Each ``on_log`` adds the training loader's newest figures
    (``stallwatch/waiting_for_data``, ``wait_ms``, ``step_ms``,
    ``batches_ready``, ``gpu_util_pct``: docs/trackers.md) to the Trainer's
    logs, so every ``report_to`` integration logs them (``log=False``: not).

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
        log: bool = True,
    ) -> None:
        self._recording = Scoped(db, gpu_hz, host_hz, {"callback": "hf"}, keep_batches, tune=tune, log=log)
        self._verdict = verdict
        self._log = log
        self._training = False
        self._helper: VerdictHelper | None = None

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._recording.start()
        if self._log:
            first_in_line(self, sys._getframe(1))

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        figures = self._recording.figures("train") if self._log and isinstance(logs, dict) else None
        if figures is not None:
            logs.update(figures)

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


# NOTE [ First in line ]
# The Trainer hands one ``logs`` dict to each callback's on_log in turn, and
# puts the report_to integrations (TensorBoardCallback, WandbCallback,
# MLflowCallback) before the callbacks a user passes: keys added by a
# callback after them would reach no tracker. So at on_init_end, called by
# the Trainer's CallbackHandler, this callback moves itself to the front of
# the handler's list. Moving an earlier index to the front while the handler
# iterates leaves every later callback's index, so each is still called once.


def first_in_line(callback: Any, caller: Any) -> None:
    """Move ``callback`` to the front of the CallbackHandler calling it (NOTE [ First in line ]). Never raises."""
    from transformers.trainer_callback import CallbackHandler

    handler = caller.f_locals.get("self") if caller is not None else None
    if not isinstance(handler, CallbackHandler) or callback not in handler.callbacks:
        warnings.warn(
            "stallwatch: the Trainer's callback list was not found; the report_to integrations may miss "
            "stallwatch's figures",
            CollectorWarning,
            stacklevel=3,
        )
        return
    handler.callbacks.remove(callback)
    handler.callbacks.insert(0, callback)

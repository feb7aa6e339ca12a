"""A recording as long as a trainer's: what the Lightning and Hugging Face callbacks start and stop."""

from __future__ import annotations

import os
import warnings
from typing import Any

from collector.errors import CollectorWarning
from collector.record import autowatch
from collector.record.runinfo import job_start
from collector.record.tuning import tune_every
from collector.sample.sampler import Rates
from collector.store.fold import DEFAULT_KEEP_BATCHES
from collector.store.schema import DEFAULT_DB, default_db_path


class Scoped:
    """Records every DataLoader iterated between ``start`` and ``finish``, as ``collector run`` does.

    Under ``collector run`` (or beside another callback) the recording already
    in place records those loaders, and this one stands aside. Built before the
    framework launches its ranks, it exports the job's start time for them (NOTE [ Job id ]).
    """

    def __init__(
        self,
        db: str | os.PathLike[str] | None,
        gpu_hz: float,
        host_hz: float,
        tags: dict[str, Any],
        keep_batches: int | None = DEFAULT_KEEP_BATCHES,
        tune: bool | int = False,
    ) -> None:
        path = os.fspath(db) if db is not None else default_db_path()
        if os.path.isdir(path):
            raise ValueError(f"db={path!r} is a directory: pass a file path such as {os.path.join(path, DEFAULT_DB)!r}")
        self.db = os.path.abspath(path)
        self.rates = Rates(gpu_hz=gpu_hz, host_hz=host_hz, keep_batches=keep_batches)
        self.tags = dict(tags)
        self.tune = tune_every(tune)  # bad values raise here, in the callback's constructor
        self.auto: autowatch.AutoWatch | None = None
        os.environ.update(job_start(os.environ))

    def start(self) -> None:
        """Install the recording unless one is installed already. Never raises."""
        if self.auto is not None or autowatch.active is not None:
            return
        try:
            self.auto = autowatch.AutoWatch(self.db, self.rates, tags=self.tags, tune=self.tune)
            self.auto.install()
        except Exception as exc:  # noqa: BLE001 - a callback must never stop training
            self.auto = None
            warnings.warn(f"stallwatch: not recording: {type(exc).__name__}: {exc}", CollectorWarning, stacklevel=2)

    def finish(self, *, uninstall: bool = True) -> list[tuple[str, int | None]]:
        """Flush and close the runs recorded so far; (name, run id) of each. Never raises."""
        auto = self.auto
        if auto is None:
            return []
        try:
            if uninstall:
                auto.uninstall()
                self.auto = None
            return auto.finish()
        except Exception as exc:  # noqa: BLE001 - a callback must never stop training
            warnings.warn(
                f"stallwatch: closing the runs failed: {type(exc).__name__}: {exc}", CollectorWarning, stacklevel=2
            )
            return []

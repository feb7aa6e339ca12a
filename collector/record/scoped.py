"""A recording as long as a trainer's: what the Lightning and Hugging Face callbacks start and stop."""

from __future__ import annotations

import os
import warnings
from typing import Any

from collector.errors import CollectorWarning
from collector.record import autowatch
from collector.record.live import keep_only, prepare_reading
from collector.record.runinfo import job_start
from collector.sample.sampler import Rates
from collector.store.fold import DEFAULT_KEEP_BATCHES
from collector.store.schema import DEFAULT_DB, default_db_path
from collector.tune.every import tune_every


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
        log: bool = False,
    ) -> None:
        path = os.fspath(db) if db is not None else default_db_path()
        if os.path.isdir(path):
            raise ValueError(f"db={path!r} is a directory: pass a file path such as {os.path.join(path, DEFAULT_DB)!r}")
        self.db = os.path.abspath(path)
        self.rates = Rates(gpu_hz=gpu_hz, host_hz=host_hz, keep_batches=keep_batches)
        self.tags = dict(tags)
        self.tune = tune_every(tune)  # bad values raise here, in the callback's constructor
        self.auto: autowatch.AutoWatch | None = None
        self.log = log  # keep each run's figures for the callback to log: figures()
        self._logged: dict[int, int] = {}  # id(session) -> figures already handed out
        self._ended: list[Any] = []  # the sessions the last finish() closed
        if log:
            prepare_reading()  # NOTE [ Log on the monitor thread ] in collector/record/live.py
        os.environ.update(job_start(os.environ))

    def start(self) -> None:
        """Install the recording unless one is installed already. Never raises."""
        if self.auto is not None or autowatch.active is not None:
            return
        try:
            self.auto = autowatch.AutoWatch(
                self.db, self.rates, tags=self.tags, tune=self.tune, log=keep_only if self.log else None
            )
            self.auto.install()
        except Exception as exc:  # noqa: BLE001 - a callback must never stop training
            self.auto = None
            warnings.warn(f"stallwatch: not recording: {type(exc).__name__}: {exc}", CollectorWarning, stacklevel=2)

    def finish(self, *, uninstall: bool = True) -> list[tuple[str, int | None]]:
        """Flush and close the runs recorded so far; (name, run id) of each. Never raises."""
        auto = self.auto
        if auto is None:
            return []
        self._ended = [session for _, session in auto.sessions]  # their last figures: figures()
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

    def figures(self, stage: str = "train", *, new_only: bool = True) -> dict[str, float] | None:
        """The newest figures of the newest run of ``stage`` (NOTE [ Tracker figures ]); None: none (new) yet."""
        sessions = self._ended + ([] if self.auto is None else [session for _, session in self.auto.sessions])
        for session in reversed(sessions):
            live = session.monitor.live
            if live is None or session.stage != stage:
                continue
            latest, count = live.newest()
            if latest is None or (new_only and self._logged.get(id(session)) == count):
                return None
            self._logged[id(session)] = count
            return dict(latest.metrics)
        return None

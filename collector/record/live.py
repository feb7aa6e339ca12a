"""``watch(log=fn)``: each window's figures handed to a tracker on the monitor thread, never raising into the loop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collector.export.live import Figures, RunFigures

LogFn = Callable[[dict[str, float], int], Any]
LOG_WINDOW_S = 5.0  # how often, and over how many recent seconds, the figures are computed


def keep_only(metrics: dict[str, float], step: int) -> None:
    """A ``log`` that calls nothing: the framework callbacks read ``LiveLog.latest`` instead."""


def check_log(log: Any) -> None:
    """Bad arguments raise at watch(): ``log`` must be a function of (metrics, step), or None."""
    if log is not None and not callable(log):
        raise TypeError(
            f"log must be a function called as log(metrics, step), e.g. log=writer.add_scalars or "
            f"log=lambda m, step: wandb.log(m, step=step), got {type(log).__name__}"
        )


def prepare_reading() -> None:
    """Import the module that reads the figures now, before the loop: see NOTE [ Log on the monitor thread ]."""
    import collector.export.live  # noqa: F401 - imported once, here


# NOTE [ Log on the monitor thread ]
# The figures are read back from the run's file (NOTE [ Tracker figures ] in
# collector/export/live.py) and ``log`` is called on the monitor thread,
# every LOG_WINDOW_S seconds while batches arrive and once more when the run
# ends, never on the loop's thread. The reading module (and with it numpy and
# pandas) is imported where watch(log=...) is called, before the loop, not on
# the monitor thread mid-epoch, where its half-second import would contend
# with the loop for the GIL. A ``log`` that raises is warned about once and
# not called again; reading failures likewise: the loop never sees either.


class LiveLog:
    """Computes a run's figures every window and hands them to ``log``; ``latest`` keeps the newest."""

    def __init__(self, log: LogFn, window_s: float | None = None) -> None:
        check_log(log)
        window_s = LOG_WINDOW_S if window_s is None else window_s  # read now: tests shorten it
        if not window_s > 0:
            raise ValueError(f"log_window_s must be > 0 seconds, got {window_s!r}")
        self.log = log
        self.window_s = window_s
        self.due = time.monotonic() + window_s
        self.latest: Figures | None = None
        self.count = 0  # figures computed so far: a callback logs each once
        self.stopped = False
        self._figures: RunFigures | None = None
        self._lock = threading.Lock()

    def tick(self, db_path: str, run_id: int | None, warn: Callable[[str, str], None], final: bool = False) -> None:
        """On the monitor thread: when due (or at the run's end), the new figures, handed to ``log``. Never raises."""
        now = time.monotonic()
        if self.stopped or run_id is None or (now < self.due and not final):
            return
        self.due = now + self.window_s
        try:
            if self._figures is None:
                from collector.export.live import RunFigures  # imported already: prepare_reading

                self._figures = RunFigures(db_path, run_id, self.window_s)
            figures = self._figures.read()
        except Exception as exc:  # noqa: BLE001 - see NOTE [ Log on the monitor thread ]
            self.stopped = True
            warn("log-read", f"the figures for log= could not be read ({type(exc).__name__}: {exc}); no more are sent")
            return
        if figures is None:
            return
        with self._lock:
            self.latest = figures
            self.count += 1
        try:
            self.log(dict(figures.metrics), figures.step)
        except Exception as exc:  # noqa: BLE001 - the user's function must never reach the loop
            self.stopped = True
            warn("log-call", f"log= raised {type(exc).__name__}: {exc}; stallwatch calls it no more in this run")

    def newest(self) -> tuple[Figures | None, int]:
        """The newest figures and how many have been computed (read from another thread)."""
        with self._lock:
            return self.latest, self.count

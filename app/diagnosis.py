"""The one place the app calls the diagnosis (a run's, a job's): guarded, so the charts render even when it fails."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import collector.diagnosis
from collector.diagnosis.report_types import Report
from collector.errors import InsufficientData, StallwatchError


@dataclass(frozen=True)
class Unavailable:
    """Why there is no diagnosis to show; the rest of the page still renders."""

    message: str
    insufficient: bool = False


def diagnose(path: str, run_id: int, window_s: float | None = None, *, live: bool = False) -> Report | Unavailable:
    """The diagnosis of one run, of its newest ``window_s`` seconds (None: the whole run).

    ``live`` says the run is still being recorded (the diagnosis refuses such a run without it).
    """
    return _guarded(lambda: collector.diagnosis.diagnose(path, run_id, window_s=window_s, live=live))


def diagnose_job(path: str, run_id: int, *, live: bool = False) -> Report | Unavailable:
    """The diagnosis of the distributed job ``run_id`` is a rank of: every rank, the straggler, the job's verdict.

    ``live`` says a rank is still being recorded.
    """
    return _guarded(lambda: collector.diagnosis.diagnose_job(path, run_id, live=live))


def _guarded(call: Callable[[], Report]) -> Report | Unavailable:
    try:
        return call()
    except InsufficientData as exc:
        return Unavailable(f"Not enough data for a diagnosis yet: {exc}", insufficient=True)
    except StallwatchError as exc:
        return Unavailable(f"No diagnosis: {exc}")
    except Exception as exc:  # noqa: BLE001 - the boundary: a failing diagnosis must not take the charts down
        return Unavailable(f"The diagnosis failed ({type(exc).__name__}: {exc}); the charts below are unaffected.")

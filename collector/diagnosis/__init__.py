"""Diagnosis: pure rules over a run's recorded tables that name its stalls and suggest DataLoader settings."""

from __future__ import annotations

from collector.diagnosis.data import RunData, RunInProgress, load_run
from collector.diagnosis.diagnose import diagnose, diagnose_data
from collector.diagnosis.job import diagnose_job

__all__ = ["RunData", "RunInProgress", "diagnose", "diagnose_data", "diagnose_job", "load_run"]

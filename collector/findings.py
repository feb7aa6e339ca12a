"""The report types' public import path (``collector.findings.Report``); defined in collector/diagnosis/findings.py."""

from collector.diagnosis.findings import Report, Suggestion, Symptom

__all__ = ["Report", "Suggestion", "Symptom"]

"""The report types' public import path (``collector.report.Report``); defined in collector/diagnosis/report_types.py."""

from collector.diagnosis.report_types import Report, Suggestion, Symptom

__all__ = ["Report", "Suggestion", "Symptom"]

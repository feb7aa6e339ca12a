"""The one place the app calls ``collector.diagnose``: guarded, so the charts render even when it fails."""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from collector.diagnosis.findings import Report
from collector.errors import InsufficientData, StallwatchError

# Names the diagnosis may give its "only the newest seconds" argument (for the live view).
WINDOW_PARAMETERS = ("window_s", "recent_s", "last_s", "window", "since_s")


@dataclass(frozen=True)
class Unavailable:
    """Why there is no diagnosis to show; the rest of the page still renders."""

    message: str
    insufficient: bool = False


def _diagnose_function() -> Callable[..., Report] | None:
    """``collector.diagnosis.diagnose`` (its signature names the window argument), else ``collector.diagnose``."""
    try:
        fn = getattr(importlib.import_module("collector.diagnosis"), "diagnose", None)
    except ImportError:
        fn = None
    if fn is None:
        fn = getattr(importlib.import_module("collector"), "diagnose", None)
    return fn if callable(fn) else None


def window_parameter(fn: Callable[..., Any]) -> str | None:
    """The name of ``fn``'s recent-window argument, if it has one."""
    try:
        names = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    return next((name for name in WINDOW_PARAMETERS if name in names), None)


def accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def diagnose(path: str, run_id: int, window_s: float | None = None, *, live: bool = False) -> Report | Unavailable:
    """The diagnosis of one run (of its newest ``window_s`` seconds when the diagnosis supports it).

    ``live`` says the run is still being recorded; it is passed on when the diagnosis takes it.
    """
    fn = _diagnose_function()
    if fn is None:
        return Unavailable("The diagnosis is not available in this installation; the charts below are complete.")
    kwargs: dict[str, Any] = {"run": run_id}
    name = window_parameter(fn)
    if window_s is not None and name is not None:
        kwargs[name] = window_s
    if live and accepts(fn, "live"):
        kwargs["live"] = True
    try:
        report = fn(path, **kwargs)
    except InsufficientData as exc:
        return Unavailable(f"Not enough data for a diagnosis yet: {exc}", insufficient=True)
    except StallwatchError as exc:
        return Unavailable(f"No diagnosis: {exc}")
    except Exception as exc:  # noqa: BLE001 - the boundary: a failing diagnosis must not take the charts down
        return Unavailable(f"The diagnosis failed ({type(exc).__name__}: {exc}); the charts below are unaffected.")
    if not isinstance(report, Report):
        return Unavailable(f"The diagnosis returned {type(report).__name__}, not a Report.")
    return report


def report_text(report: Report) -> str:
    """The text report: ``python -m collector report``'s own rendering when present, else a plain one."""
    try:
        module = importlib.import_module("collector.cli.report")
    except ImportError:
        module = None
    for name in ("render", "render_text", "format_text", "text_report"):
        fn = getattr(module, name, None)
        if callable(fn):
            try:
                return str(fn(report))
            except Exception:  # noqa: BLE001 - fall back to the plain rendering below
                break
    return plain_text(report)


def plain_text(report: Report) -> str:
    data = report.to_dict()
    run = data.get("run") or {}
    lines = [f"stallwatch report: run {run.get('name', '?')} (#{run.get('id', '?')})", f"verdict: {report.verdict}", ""]
    lines += [f"{key}: {json.dumps(value, default=str)}" for key, value in (report.summary or {}).items()]
    if report.symptoms:
        lines += ["", "symptoms:"]
        lines += [f"  [{s.severity}] {s.id}: {s.evidence} (confidence {s.confidence:.0%})" for s in report.symptoms]
    if report.suggestions:
        lines += ["", "suggestions:"]
        for s in report.suggestions:
            speed = f", expected x{s.expected_speedup:.2f}" if s.expected_speedup else ""
            lines.append(f"  {s.parameter}: {s.current!r} -> {s.suggested!r}{speed}: {s.reason}")
        change = report.code_change()
        if change:
            lines += ["", f"  {change}"]
    if report.notes:
        lines += ["", "notes:", *[f"  {n}" for n in report.notes]]
    return "\n".join(lines) + "\n"

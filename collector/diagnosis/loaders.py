"""A program's loaders: every loader the latest run's program recorded, each diagnosed, the costliest first."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from collector.diagnosis.advice import evaluating
from collector.diagnosis.job import diagnose_job, job_runs
from collector.diagnosis.report_types import Report
from collector.errors import InsufficientData, RunInProgress, StallwatchError
from collector.store.reader import Reader

# NOTE [ The program's report ]
# One script records several loaders (a training loader and an evaluation
# loader, each its own run). `report FILE` without `--run` reports them all:
# the runs of the latest run's program (its `collector run` launch tag, else
# its host and process id), one per distributed job (its lowest rank stands
# for the job: collector/diagnosis/job.py diagnoses every rank). Each is
# weighed by what it costs the program: the seconds it left the loop
# stalled, over the program's time. The costliest leads: the report's
# verdict, symptoms and suggestions are its own, so a script that reads a
# one-loader file's JSON sees no change, and `loaders` lists every one in
# that order, as the end-of-run summary lists them. A loader too short for
# a verdict ranks after those with one: its cost is not established.
ROW_KEYS = (
    "run_id", "name", "stage", "evaluation", "verdict", "batches", "stall_fraction", "active_s", "lost_s",
    "time_share", "cost_share", "symptoms", "code_change", "why",
)  # fmt: skip


def program_runs(runs: pd.DataFrame, info: Mapping[str, Any]) -> pd.DataFrame:
    """The runs of ``info``'s program, oldest first: its launch tag's, else its host's and process's.

    A distributed job's ranks are one loader: only the lowest rank's run of each is kept.
    """
    if runs.empty:
        return runs
    launch = (info.get("tags") or {}).get("launch")
    if launch is not None:
        mine = runs[[(t or {}).get("launch") == launch for t in runs["tags"]]]
    else:
        mine = runs[(runs["hostname"] == info.get("hostname")) & (runs["pid"] == info.get("pid"))]
    if mine.empty:  # no pid or host recorded: the latest run stands alone
        mine = runs[runs["id"] == info.get("id")]
    mine = mine.sort_values("id")
    kept, seen = [], set()
    for _, row in mine.iterrows():
        peers = tuple(int(i) for i in job_runs(runs, row.to_dict())["id"])
        if peers and peers in seen:
            continue
        seen.add(peers)
        kept.append(int(peers[0]) if peers else int(row["id"]))
    return mine[mine["id"].isin(kept)]


def diagnose_loaders(db: str | os.PathLike[str] | Reader, *, live: bool = False) -> Report:
    """The latest run's program: the costliest loader's report, with every loader's line in ``loaders``."""
    reader = db if isinstance(db, Reader) else Reader(db)
    runs = reader.runs()
    chosen = program_runs(runs, reader.run("latest"))
    reports: list[Report] = []
    skipped: list[dict[str, Any]] = []
    error: StallwatchError | None = None
    for _, row in chosen.iterrows():
        try:
            reports.append(diagnose_job(reader, int(row["id"]), live=live))
        except (InsufficientData, RunInProgress) as exc:  # that loader's line says why; the others are reported
            error = exc
            skipped.append({**dict.fromkeys(ROW_KEYS), "run_id": int(row["id"]), "name": row["name"], "why": str(exc)})
    if not reports:
        raise error or InsufficientData("no loader recorded enough batches")
    return program_report(reports, program_s=_span(chosen), skipped=skipped)


def program_report(
    reports: Sequence[Report], *, program_s: float | None = None, skipped: Sequence[dict[str, Any]] = ()
) -> Report:
    """The pure part: each loader's report in, the costliest's out with ``loaders``, costliest first."""
    total = program_s if program_s and program_s > 0 else sum(r.summary.get("active_s") or 0.0 for r in reports)
    rows = sorted((loader_row(r, total) for r in reports), key=_cost)
    lead = next(r for r in reports if r.run.get("id") == rows[0]["run_id"])
    rows += [dict(s) for s in skipped]
    notes = lead.notes
    if len(rows) > 1:
        others = ", ".join(f"{r['name']!r} (run {r['run_id']})" for r in rows[1:])
        notes = (
            f"{len(rows)} loaders in this program: this is {rows[0]['name']!r} (run {rows[0]['run_id']}), the one "
            f"that cost it most; the others: {others} (--run ID for one)",
            *notes,
        )
    return dataclasses.replace(lead, notes=notes, loaders=tuple(rows))


def loader_row(report: Report, program_s: float) -> dict[str, Any]:
    """One loader's line in ``Report.loaders``: its verdict, its time and what its stalls cost the program."""
    s, run = report.summary, report.run
    active = float(s.get("active_s") or 0.0)
    lost = float(s.get("stall_fraction") or 0.0) * max(0.0, active - float(s.get("warmup_s") or 0.0))
    loader = {**(run.get("config") or {}), "stage": run.get("stage")}
    return {
        "run_id": run.get("id"),
        "name": run.get("name"),
        "stage": run.get("stage"),
        "evaluation": evaluating(loader),
        "verdict": report.verdict,
        "batches": s.get("batches"),
        "stall_fraction": s.get("stall_fraction"),
        "active_s": round(active, 4),
        "lost_s": round(lost, 4),
        "time_share": round(min(1.0, active / program_s), 4) if program_s > 0 else None,
        "cost_share": round(min(1.0, lost / program_s), 4) if program_s > 0 else None,
        "symptoms": [f"{x.severity}: {x.id}" for x in report.symptoms],
        "code_change": report.code_change(),
        "why": None,
    }


def _cost(row: Mapping[str, Any]) -> tuple[bool, float, float]:
    """The sort key: a loader with a verdict before one without, then the seconds its stalls cost, its time."""
    return row["verdict"] == "insufficient-data", -row["lost_s"], -row["active_s"]


def _span(runs: pd.DataFrame) -> float | None:
    """The program's time: its first run's start to its last run's end (None where a run has no end yet)."""
    ends = runs["ended_at"].astype(float)
    if runs.empty or ends.isna().any():
        return None
    return float(ends.max() - runs["started_at"].astype(float).min())

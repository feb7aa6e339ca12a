"""A file's distributed jobs, grouped as ``diagnose_job`` groups them, and the job view's per-rank table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from collector.diagnosis.job import job_runs
from collector.diagnosis.report_types import Report


@dataclass(frozen=True)
class Job:
    """One loader's ranks in one distributed job: what the job view shows and ``diagnose_job`` diagnoses together."""

    job_id: str | None  # runs.job_id; None for ranks an older stallwatch recorded without one
    name: str
    run_ids: tuple[int, ...]  # in rank order
    ranks: tuple[int, ...]
    world_size: int | None
    live: bool  # a rank is still being recorded
    version: tuple[Any, ...]  # changes when any rank's row does: the cache key of a finished job's diagnosis

    @property
    def key(self) -> int:
        """The job's handle in the page's state and links: its lowest rank's run id."""
        return self.run_ids[0]

    def label(self) -> str:
        job = f"job {self.job_id}" if self.job_id else "job without an id"
        return f"{self.name} · {job} · {len(self.run_ids)} ranks{' · live' if self.live else ''}"


def _record(row: dict[str, Any]) -> dict[str, Any]:
    """A runs row with pandas' missing values as None, as ``Reader.run`` gives it."""
    return {k: None if not isinstance(v, dict | list) and pd.isna(v) else v for k, v in row.items()}


def jobs_of(runs: pd.DataFrame) -> list[Job]:
    """Every group of two or more ranks recording one loader of one job (``job_runs``), newest first."""
    if runs.empty or runs["rank"].isna().all():
        return []
    found: dict[tuple[int, ...], Job] = {}
    for row in runs[runs["rank"].notna()].to_dict("records"):
        info = _record(row)
        peers = job_runs(runs, info)
        ids = tuple(int(i) for i in peers["id"])
        if len(ids) < 2 or ids in found:
            continue
        rows = [_record(r) for r in peers.to_dict("records")]
        found[ids] = Job(
            job_id=info.get("job_id"),
            name=str(info["name"]),
            run_ids=ids,
            ranks=tuple(int(r["rank"]) for r in rows),
            world_size=None if info.get("world_size") is None else int(info["world_size"]),
            live=any(r["state"] == "running" for r in rows),
            version=tuple((r["id"], r["status"], r["heartbeat_at"], r["ended_at"]) for r in rows),
        )
    return sorted(found.values(), key=lambda job: max(job.run_ids), reverse=True)


def job_of(runs: pd.DataFrame, run_id: int) -> Job | None:
    """The job ``run_id`` is a rank of, or None for a run outside any job of two or more recorded ranks."""
    return next((job for job in jobs_of(runs) if run_id in job.run_ids), None)


def rank_table(job: Job, report: Report | None) -> pd.DataFrame:
    """One row per rank: rank, run, verdict, waiting share (%), step p50 and time waiting at the collective.

    From the job's report; without one (the diagnosis failed), the ranks and runs alone.
    """
    rows = {int(r["rank"]): r for r in (report.ranks if report is not None else ())}
    out = []
    for rank, run_id in zip(job.ranks, job.run_ids, strict=True):
        r = rows.get(rank, {})
        stall, step, collective = r.get("stall_fraction"), r.get("step_p50_s"), r.get("collective_wait_s")
        out.append(
            {
                "rank": f"{rank} (straggler)" if r.get("straggler") else str(rank),
                "run": f"{job.name} (#{run_id})",
                "verdict": r.get("verdict", "n/a"),
                "wait share": None if stall is None else 100.0 * stall,
                "step p50": _ms(step),
                "waiting at the collective": _ms(collective, "— (the straggler)" if r.get("straggler") else "—"),
                "batches": r.get("batches"),
            }
        )
    frame = pd.DataFrame(out)
    for column in ("wait share", "batches"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def _ms(seconds: float | None, missing: str = "—") -> str:
    return missing if seconds is None else f"{1000.0 * seconds:.1f} ms"


def straggler_rank(report: Report | None) -> int | None:
    """The rank the job's diagnosis names as the straggler (its ``straggler_rank`` symptom), else None."""
    if report is None:
        return None
    symptom = next((s for s in report.symptoms if s.id == "straggler_rank"), None)
    return None if symptom is None else int(symptom.metrics["rank"])

"""A distributed job: every rank diagnosed, the straggler named, the job's verdict taken from it."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping
from typing import Any

import pandas as pd

from collector.diagnosis.diagnose import diagnose
from collector.diagnosis.report_types import Report, Symptom
from collector.errors import DamagedRun, InsufficientData, UnknownRun
from collector.store.reader import Reader


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.1f} ms"


def job_runs(runs: pd.DataFrame, info: Mapping[str, Any], now: float | None = None) -> pd.DataFrame:
    """The runs of ``info``'s job that record the same loader (same name), one per rank, in rank order.

    Ranks share ``job_id`` (NOTE [ Job id ]). A run recorded without one but
    with a rank and ``world_size > 1`` (an older stallwatch) is grouped with
    the runs of that name, size and overlapping time span.
    """
    if runs.empty or info.get("rank") is None:
        return runs.iloc[0:0]
    same = runs[(runs["name"] == info["name"]) & runs["rank"].notna()]
    if info.get("job_id"):
        same = same[same["job_id"] == info["job_id"]]
    else:
        if (info.get("world_size") or 1) <= 1:
            return runs.iloc[0:0]
        now = time.time() if now is None else now
        end = info.get("ended_at") or now
        same = same[same["job_id"].isna() & (same["world_size"] == info["world_size"])]
        same = same[(same["started_at"] <= end) & (same["ended_at"].fillna(now) >= info["started_at"])]
    # One loader can make several runs on each rank (a val loader built anew by validate() after fit()):
    # pair the k-th run of the name on each rank.
    same = same.sort_values(["started_at", "id"])
    order = same.groupby("rank").cumcount()
    mine = order[same["id"] == info["id"]]
    if mine.empty:
        return same.iloc[0:0]
    same = same[order == int(mine.iloc[0])]
    return same.sort_values("rank").reset_index(drop=True)


def diagnose_job(
    db: str | os.PathLike[str] | Reader,
    run: str | int | None = "latest",
    *,
    rank: int | None = None,
    live: bool = False,
) -> Report:
    """The run's diagnosis; for a run of a distributed job, the job's: every rank, the straggler, its verdict.

    ``rank`` picks one rank of the job (``UnknownRun`` when the job has no
    such rank). A run outside any job is diagnosed alone, as ``diagnose`` does.
    """
    reader = db if isinstance(db, Reader) else Reader(db)
    info = reader.run(run)
    peers = job_runs(reader.runs(), info)
    if rank is not None:
        chosen = peers[peers["rank"] == rank] if not peers.empty else pd.DataFrame()
        if chosen.empty:
            if info.get("rank") == rank or (rank == 0 and info.get("rank") is None):
                return diagnose(reader, int(info["id"]), live=live)
            have = sorted(int(r) for r in peers["rank"]) if not peers.empty else [info.get("rank")]
            raise UnknownRun(f"run {info['name']!r} has no rank {rank} (ranks recorded: {have})")
        return diagnose(reader, int(chosen["id"].iloc[0]), live=live)
    if len(peers) <= 1:
        return diagnose(reader, int(info["id"]), live=live)
    reports: dict[int, Report] = {}
    skipped: list[str] = []
    for _, row in peers.iterrows():
        try:
            reports[int(row["rank"])] = diagnose(reader, int(row["id"]), live=live)
        except (InsufficientData, DamagedRun) as exc:  # one rank's problem, not the job's
            skipped.append(f"rank {int(row['rank'])}: {exc}")
    if not reports:
        raise InsufficientData("; ".join(skipped))
    report = job_report(reports, world_size=info.get("world_size"))
    return dataclasses.replace(report, notes=(*report.notes, *skipped))


def rank_row(rank: int, report: Report) -> dict[str, Any]:
    """One rank's line in ``Report.ranks``."""
    s = report.summary
    return {
        "rank": rank,
        "run_id": report.run.get("id"),
        "verdict": report.verdict,
        "batches": s.get("batches"),
        "stall_fraction": s.get("stall_fraction"),
        "data_wait_fraction": s.get("data_wait_fraction"),
        "wait_p50_s": (s.get("wait_s") or {}).get("p50"),
        "step_p50_s": (s.get("step_s") or {}).get("p50"),
        "steady_batches_per_s": s.get("steady_batches_per_s"),
        "straggler": False,
        "collective_wait_s": None,
    }


def straggler(rows: list[dict[str, Any]], *, min_stall: float = 0.05, ratio: float = 1.5) -> Symptom | None:
    """The rank whose data wait holds the others back.

        rank 0  |w|--- step ---|...all-reduce...|w|--- step ...   its step is inflated: it waits at the
        rank 1  |===== wait for data =====|-step-|===== wait ...  collective for rank 1, the straggler

    In data-parallel training every step ends in a collective, so the ranks
    run at the pace of the slowest. A rank starved of data waits in next();
    the others finish their batch sooner and wait inside their step for it.
    Fires when one rank's stall fraction is at least ``min_stall`` (5%) and
    ``ratio`` (1.5x) every other rank's, each rank with enough batches for a verdict; the others' extra step time over the
    straggler's is their waiting at the collective, not compute.
    """
    stalls = [(r["stall_fraction"] or 0.0, r["rank"]) for r in rows]
    if len(stalls) < 2 or any(r["verdict"] == "insufficient-data" for r in rows):
        return None
    top, rank = max(stalls)
    others = [s for s, k in stalls if k != rank]
    if top < min_stall or top < ratio * max(others):
        return None
    row = next(r for r in rows if r["rank"] == rank)
    step = row["step_p50_s"] or 0.0
    rest = [r for r in rows if r["rank"] != rank]
    others_step = float(pd.Series([r["step_p50_s"] for r in rest], dtype=float).median())
    waiting = max(0.0, others_step - step) if others_step == others_step else 0.0
    names = ", ".join(str(r["rank"]) for r in rest)
    evidence = (
        f"rank {rank} waited for data {top:.0%} of the time after warm-up (wait p50 {_ms(row['wait_p50_s'])}), "
        f"rank{'s' if len(rest) > 1 else ''} {names} at most {max(others):.0%}: their step p50 ({_ms(others_step)}) is "
        f"{_ms(waiting)} longer than rank {rank}'s ({_ms(step)}), time spent waiting at the collective for rank "
        f"{rank}, not computing; rank {rank}'s loader sets the job's pace"
    )
    return Symptom(
        id="straggler_rank",
        severity="high" if top >= 0.2 else "medium",
        evidence=evidence,
        confidence=round(min(1.0, 1.0 - max(others) / top + 0.2), 2),
        metrics={
            "rank": rank,
            "stall_fraction": round(top, 4),
            "others_stall_fraction": round(max(others), 4),
            "step_p50_s": step,
            "others_step_p50_s": others_step,
            "collective_wait_s": round(waiting, 6),
            "ranks": len(rows),
        },
    )


def job_report(reports: Mapping[int, Report], *, world_size: int | None = None) -> Report:
    """The pure part: per-rank reports in, the job's report out (the straggler's, with the ranks beside it)."""
    rows = [rank_row(rank, report) for rank, report in sorted(reports.items())]
    found = straggler(rows)
    if found is not None:
        lead_rank = int(found.metrics["rank"])
        step = found.metrics["step_p50_s"]
        for row in rows:
            row["straggler"] = row["rank"] == lead_rank
            if row["rank"] != lead_rank and row["step_p50_s"] is not None:
                row["collective_wait_s"] = round(max(0.0, row["step_p50_s"] - step), 6)
        note = (
            f"job of {len(rows)} ranks: the verdict, symptoms and suggestions are rank {lead_rank}'s, the straggler; "
            "the other ranks' longer steps are waiting for it, not compute"
        )
    else:
        lead_rank = max(rows, key=lambda r: r["stall_fraction"] or 0.0)["rank"]
        note = (
            f"job of {len(rows)} ranks, none holding the others back: the verdict, symptoms and suggestions are "
            f"rank {lead_rank}'s, the most starved"
        )
    if world_size and len(rows) < world_size:
        missing = sorted(set(range(world_size)) - {r["rank"] for r in rows})
        note += f"; ranks {missing} were not recorded"
    lead = reports[lead_rank]
    symptoms = lead.symptoms if found is None else (found, *lead.symptoms)
    return dataclasses.replace(lead, symptoms=symptoms, notes=(note, *lead.notes), ranks=tuple(rows))

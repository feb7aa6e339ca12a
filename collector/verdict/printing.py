"""The verdict printed when a recorded script or trainer ends: one block per loader, one per distributed job."""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from collector.errors import StallwatchError

PEER_WAIT_S = 60.0  # how long rank 0 waits for the other ranks' runs to end
MISSING_WAIT_S = 5.0  # ... and for a rank that has recorded nothing at all
POLL_S = 0.2
STAGE_ORDER = {"train": 0, None: 1, "val": 2, "test": 3, "predict": 4}


def print_verdicts(
    db: str,
    runs: Sequence[tuple[str, int | None]],
    out: TextIO,
    *,
    launch: str | None = None,
    peer_wait_s: float = PEER_WAIT_S,
    waiting: Callable[[], None] = lambda: None,
) -> None:
    """One block per recorded loader: its verdict, or once per distributed job, its job's.

    ``runs`` are this process's (name, run id); ``launch`` adds the runs its
    child processes recorded under that tag (``collector run``: NOTE [ Child
    processes ]). A process that is a rank other than 0 prints nothing: rank 0
    prints the job's verdict (collector.diagnosis.job), after waiting up to
    ``peer_wait_s`` for the other ranks' runs to end, so it comes once, whole;
    ``waiting()`` is called at every poll meanwhile (the helper's heartbeat).
    """
    table = _runs(db)
    rows = {} if table is None else {int(r["id"]): r for r in table.to_dict("records")}
    if any(_rank(rows.get(run_id)) not in (None, 0) for _, run_id in runs if run_id is not None):
        return  # rank 0 prints the job's verdict
    runs = list(runs)
    if launch is not None:
        known = _ids(runs)
        children = [r for r in rows.values() if (r.get("tags") or {}).get("launch") == launch and r["id"] not in known]
        runs += [(str(r["name"]), int(r["id"])) for r in sorted(children, key=lambda r: r["id"])]
    if not runs:
        print("stallwatch: no DataLoader was iterated; nothing recorded", file=out)
        return
    jobs = [rows[run_id] for _, run_id in runs if run_id in rows and _world(rows[run_id]) > 1]
    if jobs:
        _wait_for_peers(db, jobs, peer_wait_s, waiting)
    runs = _one_per_job(runs, rows)
    print(f"\nstallwatch: {len(runs)} DataLoader(s) recorded in {db}", file=out)
    for name, run_id in runs:
        if run_id is None:
            print(f"  {name}: not recorded (see the warning above)", file=out)
            continue
        head, *details = verdict_lines(db, run_id)
        print(f"  {name} (run {run_id}): {head}", file=out)
        for line in details:
            print(f"      {line}", file=out)
    recorded = [(STAGE_ORDER.get(_stage(rows.get(run_id)), 1), run_id) for _, run_id in runs if run_id is not None]
    if recorded:
        print(f"  details: python -m collector report {db} --run {min(recorded)[1]}", file=out)


def verdict_text(
    db: str,
    runs: Sequence[tuple[str, int | None]],
    launch: str | None = None,
    waiting: Callable[[], None] = lambda: None,
) -> str:
    """What ``print_verdicts`` prints, as text (the verdict's helper computes it: collector/verdict/helper.py)."""
    out = io.StringIO()
    print_verdicts(db, runs, out, launch=launch, waiting=waiting)
    return out.getvalue()


def _one_per_job(runs: list[tuple[str, int | None]], rows: dict[int, dict[str, Any]]) -> list[tuple[str, int | None]]:
    """Drop the runs of ranks other than the lowest where a job's runs of one loader were all collected."""
    from collector.diagnosis.job import job_runs

    table = None
    kept, seen = [], set()
    for name, run_id in runs:
        row = rows.get(run_id) if run_id is not None else None
        if row is None or _world(row) <= 1:
            kept.append((name, run_id))
            continue
        if table is None:
            table = _runs_frame(rows)
        peers = tuple(int(i) for i in job_runs(table, row)["id"])
        if peers and peers in seen:
            continue
        seen.add(peers)
        kept.append((name, run_id))
    return kept


def _runs_frame(rows: dict[int, dict[str, Any]]) -> Any:
    import pandas as pd

    return pd.DataFrame(list(rows.values()))


def _ids(runs: Sequence[tuple[str, int | None]]) -> set[int]:
    return {run_id for _, run_id in runs if run_id is not None}


def _rank(row: dict[str, Any] | None) -> int | None:
    rank = None if row is None else row.get("rank")
    return None if rank is None or rank != rank else int(rank)  # NaN: no rank


def _world(row: dict[str, Any]) -> int:
    world = row.get("world_size")
    return 1 if world is None or world != world else int(world)  # NaN: not distributed


def _stage(row: dict[str, Any] | None) -> str | None:
    return None if row is None else row.get("stage")


def _runs(db: str) -> Any:
    from collector.store.reader import Reader

    try:
        return Reader(db).runs()
    except StallwatchError:
        return None


def _wait_for_peers(db: str, ours: list[dict[str, Any]], timeout_s: float, waiting: Callable[[], None]) -> None:
    """Poll the file until every rank of our jobs has a run of each loader that has ended, or the time is up."""
    from collector.diagnosis.job import job_runs

    started = time.monotonic()
    while True:
        table = _runs(db)
        if table is None:
            return
        running = missing = False
        for row in ours:
            peers = job_runs(table, row)
            running |= bool((peers["state"] == "running").any())
            missing |= len(peers) < _world(row)
        waited = time.monotonic() - started
        if (not running and (not missing or waited >= min(MISSING_WAIT_S, timeout_s))) or waited >= timeout_s:
            return
        waiting()
        time.sleep(POLL_S)


def verdict_lines(db: str, run_id: int) -> list[str]:
    """The verdict line, the top symptoms, the rank lines of a job and the change to paste."""
    try:
        from collector.diagnosis import diagnose_job
        from collector.diagnosis.text import WAITING_LABEL
    except ImportError:
        return [_summary(db, run_id)]
    try:
        report = diagnose_job(db, run_id)
    except StallwatchError as exc:
        return [f"no verdict: {exc}"]
    except Exception as exc:  # noqa: BLE001 - the script already ran; a diagnosis bug must not hide its result
        return [f"no verdict ({type(exc).__name__}: {exc}); {_summary(db, run_id)}"]
    head = f"{report.verdict}; {_summary(db, run_id)}"
    if report.ranks:
        lead = next((r for r in report.ranks if r["straggler"]), None)
        head = f"job of {len(report.ranks)} ranks: {report.verdict}" + (
            f", held back by rank {lead['rank']}" if lead else ""
        )
    lines = [head]
    for r in report.ranks:
        stall = r.get("stall_fraction") or 0.0
        extra = ": the straggler" if r["straggler"] else ""
        if r.get("collective_wait_s"):
            extra = f" ({r['collective_wait_s'] * 1000:.1f} ms of its step waiting at the collective)"
        step = r.get("step_p50_s")
        step_text = "n/a" if step is None else f"{step * 1000:.1f} ms"
        lines.append(
            f"rank {r['rank']} (run {r['run_id']}): {r['verdict']}, {WAITING_LABEL} {stall:.0%}, "
            f"step p50 {step_text}{extra}"
        )
    lines += [f"{s.severity}: {s.evidence}" for s in report.symptoms[:3]]
    change = report.code_change()
    if change:
        lines.append(f"try: {change}")
    return lines


def _summary(db: str, run_id: int) -> str:
    from collector.store.reader import Reader

    try:
        totals = Reader(db).run_totals()
    except StallwatchError as exc:
        return f"cannot read {db}: {exc}"
    row = totals[totals["run_id"] == run_id]
    if row.empty:
        return "0 batches"
    batches = int(row["batches"].iloc[0])
    wait, step = float(row["wait_s"].iloc[0] or 0.0), float(row["step_s"].iloc[0] or 0.0)
    share = wait / (wait + step) if wait + step > 0 else None
    waited = "" if share is None else f", waiting for data {share:.0%} of the loop"
    return f"{batches} batches{waited}"

"""The stage table: where the workers' fetch time goes, stage by stage, from the worker_stages rows."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from collector.diagnosis.report_types import StageRow

FETCH = "fetch"  # the timed fetches themselves: NOTE [ Worker stages ] in collector/store/stage_sql.py
GETITEM = "__getitem__"
HANDOVER = "hand-over"
FILE = "file "  # a row naming an image file the worker opened, no time (NOTE [ Stage hooks ])
MAX_FILES = 8


@dataclass(frozen=True)
class StageFacts:
    """One stage's figures the advice rules read: the table's row, its pixels and its seconds."""

    row: StageRow
    wall_s: float
    cpu_s: float | None
    pixels_in: float | None  # a call's mean, where known
    pixels_out: float | None


@dataclass(frozen=True)
class Stages:
    """The table and what it divides by."""

    rows: tuple[StageFacts, ...]
    fetch_wall_s: float
    fetch_cpu_s: float
    samples: int
    files: tuple[str, ...] = ()  # image files the workers named, for replaying their decode

    def table(self) -> tuple[StageRow, ...]:
        return tuple(f.row for f in self.rows)

    def get(self, prefix: str) -> list[StageFacts]:
        return [f for f in self.rows if f.row.stage.startswith(prefix)]


def stages(df: pd.DataFrame) -> Stages | None:
    """Every worker's stage rows summed by stage, largest share first; None without timed fetches.

    ``share`` divides by the timed fetches' wall time (row FETCH), ``ms_per_sample`` by their samples, so a
    stage's figures are a timed fetch's (NOTE [ Stage timing ]).
    """
    if df is None or df.empty or not {"stage", "calls", "samples", "wall_s", "cpu_s"} <= set(df.columns):
        return None
    fetch = df[df["stage"] == FETCH]
    fetch_wall = float(pd.to_numeric(fetch["wall_s"], errors="coerce").sum())
    samples = int(pd.to_numeric(fetch["samples"], errors="coerce").fillna(0).sum())
    if not fetch_wall > 0 or samples <= 0:
        return None
    fetch_cpu = float(pd.to_numeric(fetch["cpu_s"], errors="coerce").sum())
    rest = df[(df["stage"] != FETCH) & ~df["stage"].astype(str).str.startswith(FILE)].copy()
    for column in ("calls", "wall_s", "cpu_s", "pixels_in", "pixels_out"):
        if column in rest:
            rest[column] = pd.to_numeric(rest[column], errors="coerce")
    rows: list[StageFacts] = []
    for stage, group in rest.groupby("stage", sort=False):
        wall = float(group["wall_s"].sum())
        calls = int(group["calls"].fillna(0).sum())
        if not wall > 0 or calls <= 0:
            continue
        known_cpu = group["cpu_s"].notna().any()
        cpu = float(group["cpu_s"].sum()) if known_cpu else None
        row = StageRow(
            stage=str(stage),
            calls=calls,
            ms_per_sample=wall / samples * 1000,
            share=wall / fetch_wall,
            cpu_share=None if cpu is None else min(1.0, max(0.0, cpu / wall)),
        )
        rows.append(StageFacts(row, wall, cpu, _mean(group, "pixels_in", calls), _mean(group, "pixels_out", calls)))
    rows.sort(key=lambda f: -f.row.share)
    files = tuple(sorted({s[len(FILE) :] for s in df["stage"].astype(str) if s.startswith(FILE)}))[:MAX_FILES]
    return Stages(tuple(rows), fetch_wall, fetch_cpu, samples, files)


def _mean(group: pd.DataFrame, column: str, calls: int) -> float | None:
    if column not in group or not group[column].notna().any():
        return None
    total = float(group[column].sum())
    return total / calls if math.isfinite(total) and calls else None

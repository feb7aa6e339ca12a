"""Sweep charts: throughput and memory against num_workers, one curve per other setting, the chosen one marked."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from app.charts.common import COLORS, SERIES, layout, placeholder

WORKERS_AXIS = "num_workers"
CHOSEN_COLOR = "#f08c00"


def curve_label(row: pd.Series) -> str:
    """Every setting but num_workers, e.g. ``prefetch 2 · pin off · persistent off``."""
    parts = []
    if _present(row.get("prefetch_factor")):
        parts.append(f"prefetch {int(row['prefetch_factor'])}")
    parts.append(f"pin {'on' if row.get('pin_memory') else 'off'}")
    if _present(row.get("prefetch_factor")):
        parts.append(f"persistent {'on' if row.get('persistent_workers') else 'off'}")
    if _present(row.get("batch_size")):
        parts.append(f"batch {int(row['batch_size'])}")
    return " · ".join(parts)


def curves(trials: pd.DataFrame, value: str) -> dict[str, pd.DataFrame]:
    """Measured trials grouped into curves by their other settings, sorted by num_workers.

    A num_workers=0 trial has no prefetch or persistence, so it starts every
    curve with the same pin_memory and batch_size.
    """
    ok = trials[trials[value].notna() & trials["error"].isna()].copy()
    if ok.empty:
        return {}
    ok["curve"] = [curve_label(r) for _, r in ok.iterrows()]
    zero = ok[ok["num_workers"] == 0]
    parallel = ok[ok["num_workers"] > 0]
    out: dict[str, pd.DataFrame] = {}
    for label, part in parallel.groupby("curve", sort=False):
        first = part.iloc[0]
        same = zero[(zero["pin_memory"] == first["pin_memory"]) & _same(zero["batch_size"], first["batch_size"])]
        out[str(label)] = pd.concat([same, part]).sort_values("num_workers")
    used = {int(i) for part in out.values() for i in part["run_id"]}
    for label, part in zero[~zero["run_id"].isin(used)].groupby("curve", sort=False):
        out[str(label)] = part
    return out


def throughput_figure(trials: pd.DataFrame) -> go.Figure:
    """samples/s against num_workers; the paced model's demand as a dashed line when there is one."""
    title = "Throughput against num_workers (warm-up and start-up excluded)"
    lines = curves(trials, "samples_per_s")
    if not lines:
        return placeholder(title, "No trial of this sweep measured any batches")
    fig = _figure(lines, "samples_per_s", trials)
    demand = _demand(trials)
    if demand is not None:
        fig.add_hline(
            y=demand,
            line={"dash": "dash", "color": COLORS["capacity"], "width": 1},
            annotation_text="the model's pace",
            annotation_position="top left",
        )
    return layout(fig, title, "samples/s", x_title=WORKERS_AXIS)


def memory_figure(trials: pd.DataFrame) -> go.Figure:
    """Peak RSS of the main process and workers together (shared pages counted in each process)."""
    title = "Peak memory against num_workers (RSS, main + workers)"
    frame = trials.assign(peak_rss_mib=trials["peak_rss_bytes"].astype(float) / 2**20)
    lines = curves(frame, "peak_rss_mib")
    if not lines:
        return placeholder(title, "No memory samples in this sweep")
    fig = _figure(lines, "peak_rss_mib", frame)
    return layout(fig, title, "MiB", x_title=WORKERS_AXIS)


def _figure(lines: dict[str, pd.DataFrame], value: str, trials: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    for i, (label, part) in enumerate(lines.items()):
        fig.add_trace(
            go.Scatter(
                x=part["num_workers"],
                y=part[value],
                mode="lines+markers",
                name=label,
                line={"color": SERIES[i % len(SERIES)], "width": 2},
                marker={"size": 7},
                customdata=part["run_id"],
                hovertemplate=f"{label}<br>num_workers=%{{x}}<br>%{{y:,.1f}}<br>run %{{customdata}}<extra></extra>",
            )
        )
    chosen = trials[trials["chosen"].astype(bool) & trials[value].notna()] if "chosen" in trials else trials.iloc[0:0]
    if not chosen.empty:
        row = chosen.iloc[0]
        fig.add_trace(
            go.Scatter(
                x=[row["num_workers"]],
                y=[row[value]],
                mode="markers",
                name="chosen",
                marker={"symbol": "star", "size": 18, "color": CHOSEN_COLOR, "line": {"width": 1, "color": "#495057"}},
                hovertemplate=f"chosen: {curve_label(row)}<br>num_workers=%{{x}}<br>%{{y:,.1f}}<extra></extra>",
            )
        )
    workers = sorted({int(w) for w in trials["num_workers"].dropna()})
    fig.update_xaxes(tickmode="array", tickvals=workers)
    fig.update_layout(hovermode="closest")
    return fig


def _demand(trials: pd.DataFrame) -> float | None:
    """The paced model's demand in samples/s: samples per batch over the step time."""
    paced = trials[trials["paced_step_s"].notna() & trials["samples_per_s"].notna() & trials["batches_per_s"].notna()]
    paced = paced[paced["batches_per_s"] > 0]
    if paced.empty:
        return None
    row = paced.iloc[0]
    samples_per_batch = float(row["samples_per_s"]) / float(row["batches_per_s"])
    return samples_per_batch / float(row["paced_step_s"])


def _present(value: object) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _same(column: pd.Series, value: object) -> pd.Series:
    if not _present(value):
        return column.isna()
    return column == value

"""Compare charts: several runs' curves overlaid on time since start, and their throughput side by side."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from app.charts.common import SERIES, envelope_xy, layout, placeholder


def overlay_figure(curves: pd.DataFrame) -> go.Figure:
    """``curves``: run, t, util_min, util_max, source; one envelope line per run."""
    title = "Utilisation over time, runs overlaid"
    if curves.empty:
        return placeholder(title, "No data in the runs chosen")
    fig = go.Figure()
    for i, (run, part) in enumerate(curves.groupby("run", sort=False)):
        gpu = (part["source"] == "gpu").any()
        x, y = envelope_xy(part["t"], part["util_min"], part["util_max"])
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines",
                name=f"{run}: {'GPU util' if gpu else 'loop busy'}",
                line={"color": SERIES[i % len(SERIES)], "width": 1.3},
            )
        )
    layout(fig, title + " (GPU utilisation where recorded, else loop busy share)", "%", height=340)
    fig.update_yaxes(range=[0, 105])
    return fig


def progress_figure(progress: pd.DataFrame) -> go.Figure:
    """Cumulative batches against time since start: the steeper line is the faster loop."""
    title = "Batches done over time (steeper is faster)"
    if progress.empty:
        return placeholder(title, "No batches in the runs chosen")
    fig = go.Figure()
    for i, (run, part) in enumerate(progress.groupby("run", sort=False)):
        fig.add_trace(
            go.Scatter(
                x=part["t"],
                y=part["batches"],
                mode="lines",
                name=str(run),
                line={"color": SERIES[i % len(SERIES)], "width": 2},
            )
        )
    return layout(fig, title, "batches")


def throughput_figure(runs: pd.DataFrame) -> go.Figure:
    """Batches/s and the share of time waiting for data, one bar per run."""
    title = "Throughput and time waiting for data"
    if runs.empty:
        return placeholder(title, "No runs chosen")
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=runs["run"],
            y=runs["batches_per_s"],
            name="batches/s",
            marker_color=SERIES[0],
            offsetgroup=0,
            texttemplate="%{y:.1f}/s",
            textposition="outside",
        )
    )
    fig.add_trace(
        go.Bar(
            x=runs["run"],
            y=pd.to_numeric(runs["wait_fraction"], errors="coerce") * 100,
            name="waiting for data (%)",
            yaxis="y2",
            marker_color=SERIES[1],
            offsetgroup=1,
            texttemplate="%{y:.0f}%",
            textposition="outside",
        )
    )
    layout(fig, title, "batches/s", x_title="run")
    fig.update_layout(
        yaxis2={
            "title": {"text": "% of the time waiting"},
            "overlaying": "y",
            "side": "right",
            "range": [0, 110],
            "tickmode": "array",
            "tickvals": [0, 25, 50, 75, 100],
            "showgrid": False,
        },
        hovermode="closest",
        margin={"r": 60},
    )
    return fig

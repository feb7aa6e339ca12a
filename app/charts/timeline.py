"""The headline chart: GPU utilisation (or the loop's busy share) with data waits shaded and epochs marked."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from app.charts.common import COLORS, envelope_xy, layout, placeholder, vertical_lines

TITLE_GPU = "GPU utilisation, with the time the loop waited for data shaded"
TITLE_LOOP = "Loop busy share (no GPU data), with the time the loop waited for data shaded"
LOOP_LABEL = "loop busy % (no GPU data: time not waiting for data)"


def utilisation_figure(
    curve: pd.DataFrame,
    batches: pd.DataFrame,
    waits: pd.DataFrame | None,
    epoch_starts: pd.Series | None,
) -> go.Figure:
    """``curve``: t, util_min, util_max, source (gpu|loop); ``batches``: the batch envelope (t, wait_sum).

    ``waits`` holds exact [start, end] wait intervals; when None (too many to
    draw) the share of each bucket spent waiting is shaded instead.
    """
    gpu = not curve.empty and (curve["source"] == "gpu").any()
    title = TITLE_GPU if gpu else TITLE_LOOP
    if curve.empty and batches.empty:
        return placeholder(title, "No batches recorded yet")
    fig = go.Figure()
    if waits is not None and not waits.empty:
        x: list[float | None] = []
        y: list[float | None] = []
        for start, end in zip(waits["start"], waits["end"], strict=True):
            x += [start, start, end, end, None]
            y += [0, 100, 100, 0, None]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                fill="toself",
                fillcolor=COLORS["wait_fill"],
                line={"width": 0},
                mode="lines",
                name="waiting for data",
                hoverinfo="skip",
            )
        )
    elif not batches.empty:
        width = float(batches.attrs.get("width_s", 1.0)) or 1.0
        share = (100.0 * batches["wait_sum"] / width).clip(0, 100)
        fig.add_trace(
            go.Scatter(
                x=batches["t"],
                y=share,
                fill="tozeroy",
                fillcolor=COLORS["wait_fill"],
                line={"width": 0},
                mode="lines",
                name="share of time waiting for data",
                line_shape="hv",
            )
        )
    if not curve.empty:
        xs, ys = envelope_xy(curve["t"], curve["util_min"], curve["util_max"])
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name="GPU utilisation %" if gpu else LOOP_LABEL,
                line={"color": COLORS["gpu" if gpu else "loop"], "width": 1.6},
            )
        )
    if epoch_starts is not None and len(epoch_starts) > 1:
        ex, ey = vertical_lines(list(epoch_starts.iloc[1:]), 0, 105)
        fig.add_trace(
            go.Scatter(
                x=ex,
                y=ey,
                mode="lines",
                name="epoch start",
                hoverinfo="skip",
                line={"color": COLORS["epoch"], "dash": "dash", "width": 1},
            )
        )
    layout(fig, title, "%", height=340)
    fig.update_yaxes(range=[0, 105])
    return fig

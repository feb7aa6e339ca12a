"""Shared look of the charts: colours, layout, the min/max envelope as a line, an empty-chart placeholder."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

COLORS = {
    "gpu": "#2b8a3e",
    "loop": "#5c7cfa",
    "wait": "#d9480f",
    "wait_fill": "rgba(217, 72, 15, 0.18)",
    "wait_fill_strong": "rgba(217, 72, 15, 0.55)",
    "step_fill": "rgba(28, 126, 214, 0.5)",
    "step": "#1c7ed6",
    "ready": "#2b8a3e",
    "in_flight": "#868e96",
    "capacity": "#495057",
    "epoch": "#adb5bd",
    "main": "#1c7ed6",
    "worker": "#e8590c",
    "available": "#868e96",
    "trial_kept": "rgba(43, 138, 62, 0.12)",
    "trial_reverted": "rgba(134, 142, 150, 0.15)",
}
SERIES = ("#1c7ed6", "#e8590c", "#2b8a3e", "#ae3ec9", "#f08c00", "#0c8599", "#c2255c", "#5c940d")
TIME_AXIS = "time since the run started (s)"
HEIGHT = 350
LEGEND_Y = -0.3  # paper units: under the x axis title and its tick labels


# NOTE [ Cheap figures ]
# A live page rebuilds its figures every refresh, and plotly validates every
# property it is given: naming the template on each figure cost 7 ms of the
# 14 ms a layout took. The template is therefore the process default (set once
# here: the dashboard server draws only these charts), and each layout is one
# update_layout call.
pio.templates.default = "plotly_white"


def layout(fig: go.Figure, title: str, y_title: str, *, height: int = HEIGHT, x_title: str = TIME_AXIS) -> go.Figure:
    grid = {"showgrid": True, "gridcolor": "#eef0f2"}
    fig.update_layout(
        {
            "title": {"text": title, "x": 0.0, "xanchor": "left", "font": {"size": 15}},
            "height": height,
            "margin": {"l": 60, "r": 20, "t": 50, "b": 45},
            # Below the plot, where a long legend grows downwards (the margin grows with it),
            # never up into the title.
            "legend": {"orientation": "h", "yanchor": "top", "y": LEGEND_Y, "xanchor": "left", "x": 0.0},
            "hovermode": "x",
            "xaxis": {"title": {"text": x_title}, **grid},
            "yaxis": {"title": {"text": y_title}, **grid, "rangemode": "tozero"},
        }
    )
    return fig


def envelope_xy(t: pd.Series, low: pd.Series, high: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Interleave each bucket's min and max at its time, so a line through them keeps every peak and trough.

    See NOTE [ Min/max envelope ] in collector/store/series.py.
    """
    tt = np.asarray(t, dtype=float)
    x = np.repeat(tt, 2)
    y = np.empty(len(tt) * 2)
    y[0::2] = np.asarray(low, dtype=float)
    y[1::2] = np.asarray(high, dtype=float)
    same = np.repeat(np.asarray(low, dtype=float) == np.asarray(high, dtype=float), 2)
    keep = ~same | (np.arange(len(x)) % 2 == 0)  # a bucket of one value needs one point
    return x[keep], y[keep]


def vertical_lines(xs: Sequence[float], y0: float, y1: float) -> tuple[list[float | None], list[float | None]]:
    """Many vertical segments as one trace (shapes are slow by the hundred)."""
    x: list[float | None] = []
    y: list[float | None] = []
    for value in xs:
        x += [float(value), float(value), None]
        y += [y0, y1, None]
    return x, y


def placeholder(title: str, message: str, *, height: int = HEIGHT) -> go.Figure:
    """An empty chart that says why it is empty."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font={"size": 13})
    fig.update_layout(
        {
            "title": {"text": title, "x": 0.0, "font": {"size": 15}},
            "height": height,
            "xaxis": {"visible": False},
            "yaxis": {"visible": False},
        }
    )
    return fig

"""Per-batch charts: wait and step time, the loader's queue against its capacity, and the wait histogram."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from app.charts.common import COLORS, envelope_xy, layout, placeholder


def wait_step_figure(batches: pd.DataFrame) -> go.Figure:
    """Each batch's wait (blocked in next(), min/max envelope) and step (the loop's own work, mean), in ms.

    The step line is drawn last so a dense wait envelope cannot hide it.
    """
    title = "Per-batch wait for data and step time"
    if batches.empty:
        return placeholder(title, "No batches recorded yet")
    fig = go.Figure()
    x, y = envelope_xy(batches["t"], batches["wait_min"] * 1e3, batches["wait_max"] * 1e3)
    fig.add_trace(
        go.Scatter(
            x=x, y=y, mode="lines", name="wait for data (ms, min–max)", line={"color": COLORS["wait"], "width": 1.2}
        )
    )
    step_ms = batches["step_sum"] / batches["n"] * 1e3
    fig.add_trace(
        go.Scatter(
            x=batches["t"].to_numpy(),
            y=step_ms.to_numpy(),
            mode="lines",
            name="step (ms, mean)",
            line={"color": COLORS["step"], "width": 1.6},
        )
    )
    return layout(fig, title, "ms")


def queue_figure(batches: pd.DataFrame, capacity: int | None) -> go.Figure:
    """Batches ready and in flight at each next(), against ``num_workers * prefetch_factor``."""
    title = "Batches ready and in flight in the loader"
    if batches.empty or batches["ready_max"].isna().all():
        return placeholder(
            title, "No queue to show: num_workers=0, the main process loads<br>each batch itself when the loop asks"
        )
    fig = go.Figure()
    x, y = envelope_xy(batches["t"], batches["ready_min"], batches["ready_max"])
    fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name="ready", line={"color": COLORS["ready"], "width": 1.2}))
    if batches["in_flight_max"].notna().any():
        fig.add_trace(
            go.Scatter(
                x=batches["t"],
                y=batches["in_flight_max"],
                mode="lines",
                name="in flight (max)",
                line={"color": COLORS["in_flight"], "width": 1},
            )
        )
    if capacity:
        fig.add_hline(
            y=capacity,
            line={"color": COLORS["capacity"], "dash": "dash"},
            annotation_text=f"capacity {capacity} (num_workers × prefetch_factor)",
            annotation_position="top left",
        )
    return layout(fig, title, "batches")


def histogram_figure(hist: pd.DataFrame) -> go.Figure:
    """Waits in log-spaced bins (columns lo_s, hi_s, count), empty bins at both ends trimmed."""
    every = int(hist.attrs.get("every", 1))
    title = "How long the loop waited for each batch" + (f" (every {every}th batch)" if every > 1 else "")
    nonzero = hist.index[hist["count"] > 0]
    if len(nonzero) == 0:
        return placeholder(title, "No batches recorded yet")
    shown = hist.loc[nonzero.min() : nonzero.max()]
    labels = [_range_label(lo, hi) for lo, hi in zip(shown["lo_s"], shown["hi_s"], strict=True)]
    fig = go.Figure(go.Bar(x=labels, y=shown["count"], marker_color=COLORS["wait"], name="batches"))
    layout(fig, title, "batches", x_title="wait for data")
    fig.update_layout(bargap=0.05, hovermode="closest")
    return fig


def _range_label(lo_s: float, hi_s: float) -> str:
    if lo_s == 0:
        return f"< {duration(hi_s)}"
    if hi_s == float("inf"):
        return f"≥ {duration(lo_s)}"
    return f"{duration(lo_s)}–{duration(hi_s)}"


def duration(seconds: float) -> str:
    """A short human duration: 46 µs, 2.2 ms, 215 ms, 1.5 s."""
    for scale, unit in ((1e-3, "µs"), (1.0, "ms"), (float("inf"), "s")):
        if seconds < scale or unit == "s":
            value = seconds / scale * 1e3 if unit != "s" else seconds
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    raise AssertionError("unreachable")

"""Host charts: a per-core CPU heatmap (one core pegged shows as one hot row) and process memory."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from app.charts.common import COLORS, layout, placeholder

GIB = float(1 << 30)


def cpu_heatmap_figure(host: pd.DataFrame) -> go.Figure:
    """``host``: ts plus one column per core (``cpu0``, ``cpu1``, ...), values in percent."""
    title = "CPU use per core"
    cores = [c for c in host.columns if c.startswith("cpu")]
    if host.empty or not cores:
        return placeholder(title, "No host samples recorded")
    fig = go.Figure(
        go.Heatmap(
            x=host["ts"],
            y=cores,
            z=host[cores].T.to_numpy(),
            zmin=0,
            zmax=100,
            colorscale="YlOrRd",
            colorbar={"title": {"text": "%"}, "thickness": 12},
            hovertemplate="%{y} at %{x:.1f} s: %{z:.0f}%<extra></extra>",
        )
    )
    layout(fig, title, "core")
    fig.update_yaxes(rangemode="normal", showgrid=False)
    fig.update_xaxes(showgrid=False)
    return fig


def memory_figure(memory: pd.DataFrame, available: pd.DataFrame) -> go.Figure:
    """Main process and workers (PSS, else RSS, summed over workers) and the host's available memory, in GiB."""
    title = "Memory: main process, workers, and available"
    if memory.empty and available.empty:
        return placeholder(title, "No memory samples recorded")
    fig = go.Figure()
    for role, name in (("main", "main"), ("worker", "workers")):
        part = memory[memory["role"] == role] if not memory.empty else memory
        if not part.empty:
            fig.add_trace(
                go.Scatter(
                    x=part["t"],
                    y=part["mem_bytes"] / GIB,
                    mode="lines",
                    name=name,
                    line={"color": COLORS[role], "width": 1.6},
                )
            )
    if not available.empty and available["mem_available_bytes"].notna().any():
        fig.add_trace(
            go.Scatter(
                x=available["ts"],
                y=available["mem_available_bytes"] / GIB,
                mode="lines",
                name="available →",
                yaxis="y2",
                line={"color": COLORS["available"], "dash": "dot", "width": 1.4},
            )
        )
        fig.update_layout(
            yaxis2={
                "title": {"text": "available GiB"},
                "overlaying": "y",
                "side": "right",
                "rangemode": "tozero",
                "showgrid": False,
            }
        )
    layout(fig, title, "GiB")
    fig.update_layout(margin={"r": 60})
    return fig

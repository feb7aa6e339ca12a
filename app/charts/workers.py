"""Per-worker production time: how long each worker took to make one batch, over time."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from app.charts.common import SERIES, layout, placeholder


def worker_figure(workers: pd.DataFrame) -> go.Figure:
    """``workers``: series.worker_envelope (worker_id, t, n, wall_min, wall_max, wall_sum); mean per bucket in ms."""
    every = int(workers.attrs.get("every", 1))
    title = "Time each worker took to produce a batch" + (f" (every {every}th batch)" if every > 1 else "")
    if workers.empty:
        return placeholder(title, "No worker timing: num_workers=0, or the workers<br>could not be instrumented")
    fig = go.Figure()
    for i, (worker_id, part) in enumerate(workers.groupby("worker_id", sort=True)):
        color = SERIES[i % len(SERIES)]
        mean_ms = part["wall_sum"] / part["n"] * 1e3
        fig.add_trace(
            go.Scatter(
                x=part["t"],
                y=mean_ms,
                mode="lines",
                name=f"worker {worker_id}",
                line={"color": color, "width": 1.4},
                customdata=part[["n"]].assign(max_ms=part["wall_max"] * 1e3).to_numpy(),
                hovertemplate="%{y:.1f} ms mean, %{customdata[1]:.1f} ms max over %{customdata[0]} batches"
                "<extra>worker " + str(worker_id) + "</extra>",
            )
        )
    return layout(fig, title, "ms per batch")

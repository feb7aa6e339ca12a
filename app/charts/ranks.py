"""A distributed job's ranks on one chart: each rank's share of time waiting for data, over the job's time."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from app.charts.common import SERIES, layout, placeholder

TITLE = "Waiting for data, per rank"
JOB_AXIS = "time since the job's first batch request (s)"
STRAGGLER_COLOR = "#c92a2a"


def rank_label(rank: object, run_id: object) -> str:
    return f"rank {int(rank)}" if rank is not None and not pd.isna(rank) else f"run #{run_id} (no rank)"  # type: ignore[call-overload]


def rank_wait_figure(shares: pd.DataFrame, straggler_rank: int | None = None) -> go.Figure:
    """``shares``: collector.store.job_queries.rank_wait_shares. One line per rank, on the job's time axis.

    ``straggler_rank`` (from the job's diagnosis) is drawn thick and named; the others thin.
    """
    if shares.empty:
        return placeholder(TITLE, "No batches recorded for this job yet")
    fig = go.Figure()
    ordered = shares.sort_values(["rank", "run_id", "t"], na_position="last")
    for i, ((run_id, rank), part) in enumerate(ordered.groupby(["run_id", "rank"], sort=False, dropna=False)):
        label = rank_label(rank, run_id)
        straggler = straggler_rank is not None and rank == straggler_rank
        fig.add_trace(
            go.Scatter(
                x=part["t"],
                y=part["wait_pct"],
                mode="lines",
                name=label + (" (straggler)" if straggler else ""),
                line={
                    "color": STRAGGLER_COLOR if straggler else SERIES[i % len(SERIES)],
                    "width": 3 if straggler else 1.5,
                    "shape": "hv",
                },
                hovertemplate="%{y:.0f}% waiting<extra>" + label + "</extra>",
            )
        )
    layout(fig, TITLE, "% of the time waiting", x_title=JOB_AXIS)
    fig.update_yaxes(range=[0, 105])
    return fig

"""Chart builders: pure functions from DataFrames to plotly figures; none of them calls Streamlit."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from app.data import RunViewData


def build_run_figures(data: RunViewData) -> dict[str, go.Figure]:
    """Every figure of the run view, by name."""
    return {"utilisation": headline_figure(data), **detail_figures(data)}


def headline_figure(data: RunViewData) -> go.Figure:
    """The loop's compute and waits (per batch zoomed in, shares zoomed out), GPU utilisation, epochs."""
    from app.charts import timeline
    from app.data import gpu_curve, trend_shares, trend_width

    origin = data.origin
    phases = None if data.phases is None else data.phases - origin
    epochs = data.epochs["started_at"] - origin if not data.epochs.empty else None
    gpu = gpu_curve(data) if phases is not None else gpu_curve(data, trend_width(data))
    trials = (
        data.trials.assign(start=data.trials["started_at"] - origin, end=data.trials["ended_at"] - origin)
        if not data.trials.empty
        else None
    )
    return timeline.utilisation_figure(trend_shares(data), phases, gpu, epochs, trials)


def detail_figures(data: RunViewData) -> dict[str, go.Figure]:
    """The six charts under the findings, by name."""
    from app.charts import batches, host, workers

    origin = data.origin
    env = data.batches.assign(t=data.batches["t"] - origin)
    return {
        "wait_step": batches.wait_step_figure(env),
        "queue": batches.queue_figure(env, data.headline.capacity),
        "histogram": batches.histogram_figure(data.hist),
        "cpu": host.cpu_heatmap_figure(data.host.assign(ts=data.host["ts"] - origin)),
        "memory": host.memory_figure(
            data.memory.assign(t=data.memory["t"] - origin),
            data.mem_available.assign(ts=data.mem_available["ts"] - origin),
        ),
        "workers": workers.worker_figure(data.workers.assign(t=data.workers["t"] - origin)),
    }

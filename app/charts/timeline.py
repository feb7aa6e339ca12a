"""The headline chart: the loop's time as compute and wait, per batch when zoomed in, as shares when zoomed out.

NOTE [ Two zooms, one chart ]
The source articles' picture is a sawtooth: compute, wait for data, compute,
wait. It shows only when single batches are wider than a pixel. Over a whole
run the same picture fuses into a uniform wash, and what reads at a glance
is the trend: how much of each stretch of time the loop spent busy and how
much waiting. So the chart has two forms on one time axis, chosen by how
many batches the window holds (``app.data.PHASE_BATCHES``):

  zoomed in (each batch)     ████░░░░████░░░░████░░░░   █ compute  ░ waiting
  zoomed out (per bucket)    ▆▆▆▆▅▅▅▅▇▇▇▇▆▆▆▆           stacked shares, 0-100%

GPU utilisation, when it was sampled, is a line over both, on the same axis.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.charts.common import COLORS, envelope_xy, layout, placeholder, vertical_lines

TITLE_PHASES = "Each batch: the loop's step (compute), then its wait for data"
TITLE_TREND = "Share of the loop's time busy and waiting for data, per time slice"
GPU_SUFFIX = ", with GPU utilisation"
COMPUTE = "step (computing)"
WAITING = "waiting for data"
GPU = "GPU utilisation %"


def utilisation_figure(
    trend: pd.DataFrame,
    phases: pd.DataFrame | None,
    gpu: pd.DataFrame,
    epoch_starts: pd.Series | None,
    trials: pd.DataFrame | None = None,
) -> go.Figure:
    """``phases`` (compute_start, wait_start, end) draws each batch; without it, ``trend`` (t, width_s, busy_pct,
    wait_pct) draws shares per bucket. ``gpu``: t, util_min, util_max, util_mean (may be empty). Times in s."""
    has_gpu = not gpu.empty
    title = (TITLE_PHASES if phases is not None else TITLE_TREND) + (GPU_SUFFIX if has_gpu else "")
    if (phases is None or phases.empty) and trend.empty:
        return placeholder(title, "No batches recorded yet")
    fig = go.Figure()
    if phases is not None:
        _phase_traces(fig, phases)
    else:
        _trend_traces(fig, trend)
    if has_gpu:
        _gpu_traces(fig, gpu, fine=phases is not None)
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
    if trials is not None:
        _trial_bands(fig, trials)
    layout(fig, title, "% of the time" if phases is None else "%", height=360)
    fig.update_yaxes(range=[0, 105])
    return fig


def _trial_bands(fig: go.Figure, trials: pd.DataFrame) -> None:
    """A band per live-tuning trial (start, end, setting, baseline, measured_speedup, kept), labelled with its result."""
    for t in trials.to_dict("records"):
        setting, baseline = json.loads(t["setting"]), json.loads(t["baseline"])
        changes = ", ".join(f"{k}={v}" for k, v in setting.items() if baseline.get(k) != v and k != "prefetch_factor")
        kept = bool(t["kept"])
        fig.add_vrect(
            x0=t["start"],
            x1=t["end"],
            fillcolor=COLORS["trial_kept" if kept else "trial_reverted"],
            line_width=0,
            layer="below",
            annotation={
                "text": f"trial {changes}: {_measured(t['measured_speedup'])} {'kept' if kept else 'reverted'}",
                "font": {"size": 10},
            },
            annotation_position="top left",
        )


def _measured(speedup: object) -> str:
    """A trial's measured speed-up, or "not judged" (NOTE [ Trials never hurt ])."""
    return "not judged" if speedup is None or pd.isna(speedup) else f"{float(speedup):.2f}x"  # type: ignore[arg-type]


def square_wave(starts: pd.Series, ends: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Intervals as an ``hv`` line at 100 inside them and 0 between: two points per interval."""
    x = np.empty(len(starts) * 2)
    x[0::2] = np.asarray(starts, dtype=float)
    x[1::2] = np.asarray(ends, dtype=float)
    y = np.tile([100.0, 0.0], len(starts))
    return x, y


def _phase_traces(fig: go.Figure, phases: pd.DataFrame) -> None:
    for name, start, end, color in (
        (COMPUTE, "compute_start", "wait_start", COLORS["step_fill"]),
        (WAITING, "wait_start", "end", COLORS["wait_fill_strong"]),
    ):
        x, y = square_wave(phases[start], phases[end])
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines",
                line={"width": 0, "shape": "hv"},
                fill="tozeroy",
                fillcolor=color,
                name=name,
                hoverinfo="skip",
            )
        )


def _trend_traces(fig: go.Figure, trend: pd.DataFrame) -> None:
    for name, column, color, line in (
        (COMPUTE, "busy_pct", COLORS["step_fill"], COLORS["step"]),
        (WAITING, "wait_pct", COLORS["wait_fill_strong"], COLORS["wait"]),
    ):
        fig.add_trace(
            go.Scatter(
                x=trend["t"],
                y=trend[column],
                mode="lines",
                stackgroup="share",
                line={"width": 0.8, "shape": "hv", "color": line},
                fillcolor=color,
                name=name,
                hovertemplate="%{y:.0f}%<extra>" + name + "</extra>",
            )
        )


def _gpu_traces(fig: go.Figure, gpu: pd.DataFrame, *, fine: bool) -> None:
    """Zoomed in: every sample (the min/max envelope). Zoomed out: the mean per slice, as the shares are."""
    if fine:
        x, y = envelope_xy(gpu["t"], gpu["util_min"], gpu["util_max"])
    else:
        x, y = gpu["t"].to_numpy(), gpu["util_mean"].to_numpy()
    fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=GPU, line={"color": COLORS["gpu"], "width": 2}))

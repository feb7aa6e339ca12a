"""Chart builders are pure functions from DataFrames to plotly figures; the series behind them are reduced in SQL."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app.charts import batches, build_run_figures, compare, host, timeline, workers
from app.charts.common import envelope_xy
from app.data import TREND_BUCKETS, busy_curve, capacity, load_run_view, trend_shares
from collector.store import series
from collector.store.reader import Reader

MAX_POINTS_PER_TRACE = 10_000


def sawtooth(n: int = 5_000) -> pd.DataFrame:
    t = np.arange(n, dtype=float) * 0.1
    util = np.where((t % 6.0) < 4.0, 90.0, 30.0)
    return pd.DataFrame({"t": t, "util": util})


def test_envelope_keeps_every_peak_and_trough_of_a_sawtooth() -> None:
    raw = sawtooth()
    buckets = raw.groupby(raw.index // 50)
    env = pd.DataFrame({"t": buckets["t"].mean(), "lo": buckets["util"].min(), "hi": buckets["util"].max()})
    x, y = envelope_xy(env["t"], env["lo"], env["hi"])
    assert len(x) <= 2 * len(env)
    assert max(y) == 90.0 and min(y) == 30.0
    assert buckets["util"].mean().min() > 30.0  # a mean would have lost the trough


def test_envelope_of_single_value_buckets_is_one_point_each() -> None:
    x, y = envelope_xy(pd.Series([0.0, 1.0]), pd.Series([5.0, 6.0]), pd.Series([5.0, 6.0]))
    assert list(x) == [0.0, 1.0] and list(y) == [5.0, 6.0]


def test_zoomed_in_headline_chart_draws_each_batch_as_compute_then_wait_with_gpu_and_epochs() -> None:
    phases = pd.DataFrame({"compute_start": [0.0, 0.5], "wait_start": [0.1, 0.6], "end": [0.5, 1.0]})
    gpu = pd.DataFrame({"t": [0.0, 0.5], "util_min": [30.0, 35.0], "util_max": [90.0, 92.0], "util_mean": [60, 63]})
    fig = timeline.utilisation_figure(pd.DataFrame(), phases, gpu, pd.Series([0.0, 0.5]))
    assert [trace.name for trace in fig.data] == [timeline.COMPUTE, timeline.WAITING, timeline.GPU, "epoch start"]
    assert fig.layout.title.text == timeline.TITLE_PHASES + timeline.GPU_SUFFIX
    compute, wait = fig.data[0], fig.data[1]
    assert list(compute.x) == [0.0, 0.1, 0.5, 0.6] and list(compute.y) == [100, 0, 100, 0]  # the sawtooth
    assert list(wait.x) == [0.1, 0.5, 0.6, 1.0] and compute.line.shape == "hv" and wait.fill == "tozeroy"
    assert [v for v in fig.data[3].x if v is not None] == [0.5, 0.5]  # epochs after the first


def test_zoomed_out_headline_chart_stacks_busy_and_waiting_shares_per_slice() -> None:
    trend = pd.DataFrame({"t": [0.5, 1.5], "width_s": 1.0, "busy_pct": [30.0, 70.0], "wait_pct": [60.0, 20.0]})
    fig = timeline.utilisation_figure(trend, None, pd.DataFrame(), None)
    assert fig.layout.title.text == timeline.TITLE_TREND  # no GPU data: no GPU in the title
    assert [t.name for t in fig.data] == [timeline.COMPUTE, timeline.WAITING]
    assert {t.stackgroup for t in fig.data} == {"share"} and list(fig.data[1].y) == [60.0, 20.0]


def test_trend_shares_split_each_slice_into_step_and_wait_time(recorded_db: str) -> None:
    data = load_run_view(Reader(recorded_db), 1, None)  # starved: waits about 3x its step
    shares = trend_shares(data)
    assert len(shares) <= TREND_BUCKETS and (shares["busy_pct"] + shares["wait_pct"] <= 100.0 + 1e-9).all()
    steady = shares.iloc[1:-1]
    assert (steady["wait_pct"] > steady["busy_pct"]).mean() > 0.8


def test_queue_figure_draws_capacity_or_explains_a_loader_without_workers() -> None:
    env = pd.DataFrame({"t": [0.0, 1.0], "ready_min": [0, 3], "ready_max": [2, 8], "in_flight_max": [8, 8]})
    fig = batches.queue_figure(env, capacity({"num_workers": 4, "prefetch_factor": 2}))
    assert fig.layout.shapes[0].y0 == 8
    assert "capacity 8" in fig.layout.annotations[0].text
    empty = batches.queue_figure(env.assign(ready_min=np.nan, ready_max=np.nan), None)
    assert "num_workers=0" in empty.layout.annotations[0].text and not empty.data


def test_capacity_is_workers_times_prefetch() -> None:
    assert capacity({"num_workers": 6, "prefetch_factor": 4}) == 24
    assert capacity({"num_workers": 0, "prefetch_factor": None}) is None


def test_histogram_trims_empty_bins_and_labels_ranges() -> None:
    hist = pd.DataFrame(
        {"lo_s": [0.0, 1e-3, 2.15e-3, 4.64e-3], "hi_s": [1e-3, 2.15e-3, 4.64e-3, 1e-2], "count": [0, 5, 0, 2]}
    )
    fig = batches.histogram_figure(hist)
    assert list(fig.data[0].x) == ["1.0 ms–2.1 ms", "2.1 ms–4.6 ms", "4.6 ms–10 ms"]
    assert list(fig.data[0].y) == [5, 0, 2]


def test_wait_step_figure_shows_step_mean_and_wait_envelope() -> None:
    env = pd.DataFrame(
        {"t": [0.0, 1.0], "n": [2, 4], "step_sum": [0.02, 0.08], "wait_min": [0.001, 0.0], "wait_max": [0.03, 0.05]}
    )
    fig = batches.wait_step_figure(env)
    assert [trace.name for trace in fig.data] == ["wait for data (ms, min–max)", "step (ms, mean)"]
    assert max(fig.data[0].y) == pytest.approx(50.0)
    assert list(fig.data[1].y) == pytest.approx([10.0, 20.0])


def test_cpu_heatmap_has_one_row_per_core() -> None:
    frame = pd.DataFrame({"ts": [0.0, 0.5, 1.0], "cpu0": [100.0, 100.0, 99.0], "cpu1": [3.0, 2.0, 1.0]})
    fig = host.cpu_heatmap_figure(frame)
    assert list(fig.data[0].y) == ["cpu0", "cpu1"]
    assert np.asarray(fig.data[0].z).shape == (2, 3)


def test_memory_figure_has_main_workers_and_available() -> None:
    memory = pd.DataFrame({"role": ["main", "worker"], "t": [0.0, 0.0], "mem_bytes": [2 << 30, 4 << 30]})
    available = pd.DataFrame({"ts": [0.0], "mem_available_bytes": [8 << 30]})
    fig = host.memory_figure(memory, available)
    assert [trace.name for trace in fig.data] == ["main", "workers", "available →"]
    assert list(fig.data[1].y) == [4.0]


def test_worker_figure_has_one_line_per_worker_in_ms() -> None:
    frame = pd.DataFrame(
        {
            "worker_id": [0, 0, 1],
            "t": [0.0, 1.0, 0.0],
            "n": [2, 2, 1],
            "wall_sum": [0.04, 0.06, 0.5],
            "wall_max": [0.03, 0.04, 0.5],
        }
    )
    fig = workers.worker_figure(frame)
    assert [trace.name for trace in fig.data] == ["worker 0", "worker 1"]
    assert list(fig.data[1].y) == pytest.approx([500.0])
    assert "num_workers=0" in workers.worker_figure(frame.iloc[0:0]).layout.annotations[0].text


def test_compare_figures_overlay_each_run() -> None:
    curves = pd.DataFrame(
        {
            "run": ["a", "a", "b", "b"],
            "t": [0.0, 1.0, 0.0, 1.0],
            "util_min": [30.0, 40.0, 85.0, 90.0],
            "util_max": [30.0, 40.0, 85.0, 90.0],
            "source": ["loop"] * 4,
        }
    )
    assert [trace.name for trace in compare.overlay_figure(curves).data] == ["a: loop busy", "b: loop busy"]
    runs = pd.DataFrame({"run": ["a", "b"], "batches_per_s": [10.0, 25.0], "wait_fraction": [0.6, 0.1]})
    bars = compare.throughput_figure(runs)
    assert list(bars.data[0].y) == [10.0, 25.0] and list(bars.data[1].y) == [60.0, 10.0]
    progress = pd.DataFrame({"run": ["a", "b"], "t": [1.0, 1.0], "batches": [10, 25]})
    assert len(compare.progress_figure(progress).data) == 2


def test_sql_envelope_keeps_the_gpu_sawtooth_of_a_long_run(gpu_db: str) -> None:
    reader = Reader(gpu_db)
    data = load_run_view(reader, 1, None, buckets=100)
    assert len(data.gpu) <= 100
    assert data.gpu["util_min"].min() < 40 and data.gpu["util_max"].max() > 85  # troughs and peaks survive
    assert 55 < data.gpu["util_mean"].mean() < 80  # what a mean would have shown instead
    assert busy_curve(data)["source"].eq("gpu").all()


def test_every_trace_of_a_long_run_stays_under_ten_thousand_points(gpu_db: str) -> None:
    figures = build_run_figures(load_run_view(Reader(gpu_db), 1, None))
    for name, fig in figures.items():
        for trace in fig.data:
            assert len(trace.x if trace.x is not None else ()) <= MAX_POINTS_PER_TRACE, name
    assert sum(series.wait_histogram(Reader(gpu_db), 1)["count"]) == 20_000


def test_recorded_run_figures_have_data(recorded_db: str) -> None:
    data = load_run_view(Reader(recorded_db), 2, None)  # the healthy run: 4 workers
    assert data.headline.capacity == 16 and data.headline.batches > 20
    figures = build_run_figures(data)
    assert len(figures["workers"].data) == 4
    assert figures["queue"].data and figures["utilisation"].layout.title.text == timeline.TITLE_PHASES


def test_a_trial_ended_unjudged_is_labelled_so_on_the_timeline() -> None:
    phases = pd.DataFrame({"compute_start": [0.0], "wait_start": [0.1], "end": [0.5]})
    setting = '{"num_workers": 2, "threads": 2}'
    trials = pd.DataFrame(
        {
            "start": [0.0, 1.0],
            "end": [0.5, 1.5],
            "setting": [setting, setting],
            "baseline": ['{"num_workers": 0, "threads": 2}'] * 2,
            "measured_speedup": [1.42, None],
            "kept": [1, 0],
        }
    )
    fig = timeline.utilisation_figure(pd.DataFrame(), phases, pd.DataFrame(), None, trials)
    labels = [shape.text for shape in fig.layout.annotations]
    assert labels == ["trial num_workers=2: 1.42x kept", "trial num_workers=2: not judged reverted"]

"""Chart builders are pure functions from DataFrames to plotly figures; the series behind them are reduced in SQL."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app.charts import batches, build_run_figures, compare, host, timeline, workers
from app.charts.common import envelope_xy
from app.data import busy_curve, capacity, load_run_view
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


def test_utilisation_figure_shades_exact_waits_and_marks_epochs() -> None:
    curve = pd.DataFrame({"t": [0.0, 1.0, 2.0], "util_min": [30.0, 35.0, 88.0], "util_max": [90.0, 92.0, 95.0]})
    curve["source"] = "gpu"
    env = pd.DataFrame({"t": [0.5, 1.5], "wait_sum": [0.2, 0.1]})
    waits = pd.DataFrame({"start": [0.2, 1.1], "end": [0.5, 1.3]})
    fig = timeline.utilisation_figure(curve, env, waits, pd.Series([0.0, 1.0, 2.0]))
    names = [trace.name for trace in fig.data]
    assert names == ["waiting for data", "GPU utilisation %", "epoch start"]
    assert fig.layout.title.text == timeline.TITLE_GPU
    shade = fig.data[0]
    assert shade.fill == "toself" and [v for v in shade.x if v is not None][:4] == [0.2, 0.2, 0.5, 0.5]
    assert [v for v in fig.data[2].x if v is not None] == [1.0, 1.0, 2.0, 2.0]  # epochs after the first


def test_utilisation_figure_without_gpu_is_labelled_as_the_loop_busy_share() -> None:
    curve = pd.DataFrame({"t": [0.0, 1.0], "util_min": [40.0, 60.0], "util_max": [40.0, 60.0], "source": "loop"})
    env = pd.DataFrame({"t": [0.5, 1.5], "wait_sum": [0.6, 0.4]})
    env.attrs["width_s"] = 1.0
    fig = timeline.utilisation_figure(curve, env, None, None)
    assert fig.layout.title.text == timeline.TITLE_LOOP
    assert fig.data[0].name == "share of time waiting for data" and list(fig.data[0].y) == [60.0, 40.0]
    assert fig.data[1].name == timeline.LOOP_LABEL


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
    assert figures["queue"].data and figures["utilisation"].layout.title.text == timeline.TITLE_LOOP

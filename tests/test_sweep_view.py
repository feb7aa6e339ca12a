"""The dashboard's sweep view: chart functions on hand-made trials, the view headless through AppTest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from helpers import shown
from streamlit.testing.v1 import AppTest

from app.charts import sweep as charts
from collector.store import sweep_queries
from collector.store.connection import Store
from collector.store.reader import Reader

SWEEP = "sweep-20250101-120000"


def trial(workers: int, prefetch: int | None, sps: float | None, rss_mib: int, **extra: Any) -> dict[str, Any]:
    settings = {
        "num_workers": workers,
        "prefetch_factor": prefetch,
        "pin_memory": False,
        "persistent_workers": False,
        "batch_size": None,
    }
    result = {
        "samples_per_s": sps,
        "batches_per_s": None if sps is None else sps / 4,
        "peak_rss_bytes": rss_mib * 2**20,
    }
    result["error"] = extra.pop("error", None)
    return {"sweep": SWEEP, "trial": settings, "result": result, **extra}


TRIALS = [
    trial(0, None, 190.0, 300),
    trial(1, 2, 186.0, 500),
    trial(2, 2, 380.0, 700, chosen=True),
    trial(4, 2, 385.0, 1100),
    trial(2, 4, 378.0, 710),
    trial(4, 4, None, 0, error="factory raised RuntimeError: no"),
]


def write_sweep(path: str, tags_list: list[dict[str, Any]]) -> None:
    store = Store(path)
    try:
        for i, tags in enumerate(tags_list, 1):
            run_id = store.create_run(
                f"{tags['sweep']} #{i}",
                config={},
                host={},
                versions={},
                hostname="h",
                pid=1,
                command="sweep",
                rank=None,
                world_size=None,
                tags=tags,
            )
            store.write({}, run_update={"status": "completed", "ended_at": 1.0}, run_id=run_id)
    finally:
        store.close()


def trials_frame(tmp_path: Path, tags_list: list[dict[str, Any]] = TRIALS) -> pd.DataFrame:
    path = str(tmp_path / "sweep.sqlite")
    write_sweep(path, tags_list)
    return sweep_queries.sweep_trials(Reader(path), SWEEP)


def test_sweep_trials_reads_settings_results_and_the_chosen_mark(tmp_path: Path) -> None:
    df = trials_frame(tmp_path)
    assert list(df["num_workers"]) == [0, 1, 2, 4, 2, 4]
    assert list(df["chosen"]) == [False, False, True, False, False, False]
    assert df["error"].notna().sum() == 1
    listed = sweep_queries.sweeps(Reader(str(tmp_path / "sweep.sqlite")))
    assert listed.iloc[0]["sweep"] == SWEEP and listed.iloc[0]["trials"] == 6 and listed.iloc[0]["failed"] == 1


def test_throughput_chart_has_one_curve_per_other_setting_each_starting_at_zero_workers(tmp_path: Path) -> None:
    fig = charts.throughput_figure(trials_frame(tmp_path))
    lines = {t.name: list(t.x) for t in fig.data if t.name != "chosen"}
    assert lines == {
        "prefetch 2 · pin off · persistent off": [0, 1, 2, 4],
        "prefetch 4 · pin off · persistent off": [0, 2],
    }
    (star,) = [t for t in fig.data if t.name == "chosen"]
    assert list(star.x) == [2] and list(star.y) == [380.0]


def test_memory_chart_plots_peak_rss_in_mib_and_marks_the_chosen_setting(tmp_path: Path) -> None:
    fig = charts.memory_figure(trials_frame(tmp_path))
    curve = next(t for t in fig.data if t.name == "prefetch 2 · pin off · persistent off")
    assert list(curve.y) == [300.0, 500.0, 700.0, 1100.0]
    assert any(t.name == "chosen" and list(t.y) == [700.0] for t in fig.data)


def test_a_paced_sweep_draws_the_models_demand(tmp_path: Path) -> None:
    paced = [{**t, "step_s": 0.03} for t in TRIALS]
    fig = charts.throughput_figure(trials_frame(tmp_path, paced))
    demand = [s for s in fig.layout.shapes if s.y0 == s.y1]
    assert len(demand) == 1 and abs(demand[0].y0 - 4 / 0.03) < 1e-6  # 4 samples a batch every 30 ms


def test_charts_of_a_sweep_without_measurements_say_so(tmp_path: Path) -> None:
    df = trials_frame(tmp_path, [trial(2, 2, None, 0, error="factory raised OSError: x")])
    fig = charts.throughput_figure(df)
    assert len(fig.data) == 0 and "measured" in fig.layout.annotations[0].text


def view_script(path: str) -> None:
    from app.views.sweeps import render
    from collector.store.reader import Reader

    render(Reader(path))


def test_the_view_shows_the_chosen_line_charts_and_table(tmp_path: Path) -> None:
    path = str(tmp_path / "sweep.sqlite")
    write_sweep(path, TRIALS)
    at = AppTest.from_function(view_script, args=(path,), default_timeout=30).run()
    assert not at.exception
    assert at.title[0].value == "Sweeps"
    assert at.selectbox[0].value == SWEEP
    assert at.code[0].value == (
        "DataLoader(..., num_workers=2, prefetch_factor=2, persistent_workers=False, pin_memory=False)"
    )
    assert len(at.get("plotly_chart")) == 2
    assert len(at.dataframe) == 1 and len(at.dataframe[0].value) == 6
    assert any("factory raised RuntimeError" in shown(c.value) for c in at.caption)


def test_the_view_of_a_file_without_sweeps_says_how_to_make_one(tmp_path: Path) -> None:
    path = str(tmp_path / "empty.sqlite")
    Store(path).close()
    at = AppTest.from_function(view_script, args=(path,), default_timeout=30).run()
    assert not at.exception
    assert "python -m collector sweep" in at.info[0].value

"""The dashboard run headless with AppTest against files recorded by the collector, and against bad files."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from helpers import file_digest, make_bad_file, shown, texts, writers_done
from streamlit.testing.v1 import AppTest

from app import state
from app.charts.timeline import GPU_SUFFIX, TITLE_PHASES, TITLE_TREND
from app.components.report_panel import VERDICTS
from app.settings import db_from_args, default_db
from app.views.run import REFRESH_S

AppFor = Callable[..., AppTest]
VERDICT_TITLES = [title for title, _ in VERDICTS.values()]


def chart_titles(at: AppTest) -> list[str]:
    return [json.loads(chart.proto.spec)["layout"]["title"]["text"] for chart in at.get("plotly_chart")]


def painted(at: AppTest, run_id: int) -> AppTest:
    """Say what the browser says once the first chart has painted, and rerun: the detail charts follow."""
    at.session_state[f"sw_painted_{run_id}"] = {"painted": True}
    return at.run()


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


@pytest.mark.slow
def test_run_view_shows_the_newest_run_with_verdict_headline_and_charts(app_for: AppFor, recorded_db: str) -> None:
    at = app_for(recorded_db)
    assert_clean(at)
    assert [t.value for t in at.title] == ["demo-healthy"]
    page = texts(at)
    assert any(title in page for title in VERDICT_TITLES)
    labels = [m.label for m in at.metric]
    assert labels == [
        "Time waiting for data",
        "Batches per second",
        "Loop busy (no GPU data)",
        "Batches ready in the loader",
    ]
    assert at.metric[3].value.endswith("/ 16")  # num_workers=4 * prefetch_factor=4
    assert chart_titles(at) == [TITLE_PHASES]  # 60 batches: each one drawn; the others wait for the browser
    titles = chart_titles(painted(at, 2))
    assert len(titles) == 7 and titles[0] == TITLE_PHASES


def test_starved_run_shows_input_bound_and_the_line_to_paste(app_for: AppFor, recorded_db: str) -> None:
    at = app_for(recorded_db, run_id=1)
    assert_clean(at)
    assert [t.value for t in at.title] == ["demo-starved"]
    assert "Input-bound" in at.error[0].value  # the verdict banner
    code = [c.value for c in at.code]
    assert any(c.startswith("DataLoader(...,") and "num_workers=" in c for c in code)
    assert "expected **×" in texts(at)


def test_runs_view_lists_every_run_with_verdict_and_opens_one(app_for: AppFor, recorded_db: str) -> None:
    at = app_for(recorded_db, "routes/runs.py")
    assert_clean(at)
    table = at.dataframe[0].value
    assert list(table["run"]) == ["demo-healthy (#2)", "demo-starved (#1)"]
    from app.diagnosis import diagnose

    assert list(table["verdict"]) == [diagnose(recorded_db, 2).verdict, "input-bound"]  # type: ignore[union-attr]
    assert table["wait share"].iloc[1] > table["wait share"].iloc[0]
    assert "num_workers=4" in table["configuration"].iloc[0]
    at.selectbox(key="sw_runs_open").set_value(1)
    at.button(key="sw_runs_open_button").click().run()
    assert_clean(at)
    assert [t.value for t in at.title] == ["demo-starved"]


def test_compare_view_shows_config_difference_throughput_and_overlays(app_for: AppFor, recorded_db: str) -> None:
    at = app_for(recorded_db, "routes/compare.py")
    assert_clean(at)
    summary, diff = at.dataframe[0].value, at.dataframe[1].value
    assert list(summary["run"]) == ["demo-starved (#1)", "demo-healthy (#2)"]
    assert summary["speed-up vs baseline"].iloc[1] > 1.5  # 4 workers beat num_workers=0
    assert diff.loc["num_workers"].tolist() == ["0", "4"]
    assert "batch_size" not in diff.index  # the same in both: not a difference
    assert len(at.get("plotly_chart")) == 3


def test_sweeps_page_shows_the_sweep_view_of_the_file_open(app_for: AppFor, recorded_db: str) -> None:
    at = app_for(recorded_db, "routes/sweeps.py")
    assert_clean(at)
    assert [t.value for t in at.title] == ["Sweeps"]
    (info,) = [i.value for i in at.info]
    assert info.startswith("No sweeps recorded in this file.") and "python -m collector sweep" in info


def test_downloads_give_every_batch_as_csv_and_parquet(recorded_db: str) -> None:
    import io

    csv = pd.read_csv(io.BytesIO(state.table_bytes(recorded_db, 1, "batches", "csv")))
    parquet = pd.read_parquet(io.BytesIO(state.table_bytes(recorded_db, 1, "batches", "parquet")))
    expected = sqlite3.connect(recorded_db).execute("SELECT COUNT(*) FROM batches WHERE run_id = 1").fetchone()[0]
    assert len(csv) == len(parquet) == expected > 0
    assert {"wait_s", "step_s", "ts"} <= set(parquet.columns)


def test_text_report_names_the_verdict_and_the_change(recorded_db: str) -> None:
    from app.components import downloads
    from app.diagnosis import Report, diagnose
    from collector.diagnosis.text import render

    report = diagnose(recorded_db, 1)
    assert isinstance(report, Report)
    text = downloads.report_text(report)
    assert "input-bound" in text.lower() and "num_workers" in text
    assert downloads.report_text is render  # the download is `python -m collector report`'s text


def test_a_failing_diagnosis_is_unavailable_and_the_charts_still_render(
    app_for: AppFor, recorded_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import collector.diagnosis
    from app.diagnosis import Unavailable, diagnose

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("a column the diagnosis expected")

    monkeypatch.setattr(collector.diagnosis, "diagnose", broken)
    report = diagnose(recorded_db, 1)
    assert isinstance(report, Unavailable) and "The diagnosis failed (KeyError" in report.message
    st_cache_clear()
    at = app_for(recorded_db)
    assert_clean(at)
    assert any("The diagnosis failed (KeyError" in shown(w.value) for w in at.warning)
    assert len(chart_titles(painted(at, 2))) == 7
    st_cache_clear()


def test_run_without_gpu_data_shows_loop_busy_and_gpu_run_shows_utilisation(app_for: AppFor, gpu_db: str) -> None:
    at = app_for(gpu_db)
    assert_clean(at)
    assert "Mean GPU utilisation" in [m.label for m in at.metric]
    assert chart_titles(at)[0] == TITLE_TREND + GPU_SUFFIX  # 20,000 batches: shares per slice


@pytest.mark.parametrize("kind", ["empty", "not-sqlite", "foreign", "newer-schema", "corrupt"])
def test_bad_file_gets_a_clear_message_and_is_not_written(
    kind: str, app_for: AppFor, recorded_db: str, tmp_path: Path
) -> None:
    path = make_bad_file(kind, tmp_path, recorded_db)
    before = file_digest(path)
    at = app_for(path)
    assert_clean(at)
    message = " ".join(shown(e.value) for e in at.error)
    expected = {
        "empty": "empty",
        "not-sqlite": "not",
        "foreign": "another program",
        "newer-schema": "newer",
        "corrupt": "not",
    }
    assert "cannot be shown" in message and expected[kind] in message
    for page in ("routes/runs.py", "routes/compare.py"):
        at.switch_page(page).run()
        assert_clean(at)
        assert at.error
    assert file_digest(path) == before


def test_missing_file_offers_the_demo(app_for: AppFor, tmp_path: Path) -> None:
    at = app_for(str(tmp_path / "nothing.sqlite"))
    assert_clean(at)
    assert at.button(key="sw_start_demo").label == "Start the demo"
    assert not (tmp_path / "nothing.sqlite").exists()


def test_file_being_written_shows_committed_rows_and_is_not_touched(
    app_for: AppFor, recorded_db: str, tmp_path: Path
) -> None:
    path = str(tmp_path / "writing.sqlite")
    make_bad_file("newer-schema", tmp_path, recorded_db)  # reuse the copy helper, then restore the version
    os.replace(str(tmp_path / "newer-schema.sqlite"), path)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE runs SET name = 'uncommitted' WHERE id = 2")
    try:
        before = file_digest(path)
        at = app_for(path)
        assert_clean(at)
        assert [t.value for t in at.title] == ["demo-healthy"]
        assert file_digest(path) == before
        writer.execute("COMMIT")  # the writer was never blocked by the page ...
        busy, _, _ = writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0  # ... and no read transaction outlived the page: the WAL checkpoints fully
    finally:
        if writer.in_transaction:
            writer.execute("ROLLBACK")
        writer.close()


def test_crashed_run_is_shown_as_crashed_with_its_error(app_for: AppFor, odd_runs_db: str) -> None:
    at = app_for(odd_runs_db, run_id=1)
    assert_clean(at)
    assert any("crashed" in e.value and "CUDA out of memory (test)" in shown(e.value) for e in at.error)
    assert "live, refreshed" not in texts(at)


def test_run_whose_process_vanished_reads_stopped_not_live(app_for: AppFor, odd_runs_db: str) -> None:
    at = app_for(odd_runs_db, run_id=2)
    assert_clean(at)
    assert any("stopped reporting" in w.value for w in at.warning)
    assert "live, refreshed" not in texts(at)


def test_run_with_zero_batches_says_so(app_for: AppFor, odd_runs_db: str) -> None:
    at = app_for(odd_runs_db)  # the newest run has no batches
    assert_clean(at)
    assert [t.value for t in at.title] == ["no-batches"]
    assert any("no batches recorded" in i.value for i in at.info)
    assert not at.get("plotly_chart")


def test_live_run_refreshes_in_a_fragment(app_for: AppFor, live_db: str) -> None:
    at = app_for(live_db)
    assert_clean(at)
    assert f"live, refreshed every {REFRESH_S:g} s" in texts(at)
    assert at.metric[1].label == "Batches per second" and at.metric[1].value != "—"


def test_banner_cards_and_findings_show_one_waiting_figure(app_for: AppFor, recorded_db: str) -> None:
    """See NOTE [ One waiting figure ]: the card, the banner and the CLI text read summary.stall_fraction."""
    from app.diagnosis import diagnose
    from collector.diagnosis.text import WAITING_DEFINITION, render

    report = diagnose(recorded_db, 1)
    figure = f"{report.summary['stall_fraction']:.0%}"  # type: ignore[union-attr]
    at = app_for(recorded_db, run_id=1)
    card = at.metric[0]
    assert card.label == "Time waiting for data" and card.value == figure
    assert WAITING_DEFINITION in card.proto.help
    assert at.error[0].value.startswith(f"**Input-bound** — {figure} of the time after warm-up")
    assert f"waiting for data {figure} of the time after warm-up" in render(report)  # type: ignore[arg-type]
    assert "of all time in next()" not in render(report)  # type: ignore[arg-type]


def test_new_run_in_an_open_file_reruns_the_page_onto_it(app_for: AppFor, tmp_path: Path) -> None:
    """NOTE [ Live from the first second ]: the watcher fragment sees the file change and reruns the page."""
    from app.components import sidebar

    path = str(tmp_path / "later.sqlite")
    at = app_for(path)
    assert "Nothing recorded yet" in texts(at) and sidebar.signature(path, fresh=True) == ()
    _foreign_run_now(path)
    assert sidebar.signature(path, fresh=True) != ()
    at.run()  # what the watcher's rerun does
    assert [t.value for t in at.title] == ["late-run"]


@pytest.mark.slow
def test_demo_button_records_a_real_run_and_shows_it(
    app_for: AppFor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STALLWATCH_DEMO_SECONDS", "2")
    at = app_for(str(tmp_path / "stallwatch.sqlite"))
    at.button(key="sw_start_demo").click().run()
    demo = at.session_state["sw_demo"]
    try:
        assert demo["db"] == str(tmp_path / "stallwatch-demo.sqlite")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and [t.value for t in at.title] != ["demo-starved"]:
            at.run()
        assert_clean(at)
        assert [t.value for t in at.title] == ["demo-starved"]
        assert demo["process"].wait(timeout=60) == 0
    finally:
        if demo["process"].poll() is None:
            os.killpg(demo["process"].pid, signal.SIGTERM)


def test_db_comes_from_args_then_environment_then_default() -> None:
    assert db_from_args(["--db", "a.sqlite", "-q"]) == "a.sqlite"
    assert default_db(["-x"], {"STALLWATCH_DB": "b.sqlite"}) == "b.sqlite"
    assert default_db([], {}) == "stallwatch.sqlite"


def test_runs_with_and_without_collector_warnings_open(app_for: AppFor, tmp_path: Path) -> None:
    """Runs with NULL warnings beside runs with a list (Reader.runs() once raised TypeError on this)."""
    import collector
    from collector.store.connection import Store

    path = str(tmp_path / "mixed.sqlite")
    with collector.watch(list(range(5)), db=path, run="with-warnings") as watched:
        for _ in watched:
            pass
    writers_done()
    store = Store(path)
    store.create_run(
        "no-warnings", config={}, host={}, versions={}, hostname="h", pid=1, command="c", rank=None, world_size=None
    )
    store.close()
    before = file_digest(path)
    at = app_for(path)
    assert_clean(at)
    assert [t.value for t in at.title] == ["no-warnings"]
    assert file_digest(path) == before


def test_a_failing_page_shows_a_message_not_a_traceback(
    app_for: AppFor, recorded_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.data

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("a column the app expected")

    monkeypatch.setattr(app.data, "load_run_view", broken)
    monkeypatch.setattr(state, "load_run_view", broken)
    st_cache_clear()
    at = app_for(recorded_db)
    assert_clean(at)
    assert any("could not show" in e.value and "KeyError" in shown(e.value) for e in at.error)
    st_cache_clear()


def st_cache_clear() -> None:
    import streamlit as st

    st.cache_data.clear()


def test_sidebar_opens_another_file(
    app_for: AppFor, recorded_db: str, odd_runs_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(odd_runs_db).parents[1])  # the dashboard opens files under its folder
    at = app_for(recorded_db)
    assert [t.value for t in at.title] == ["demo-healthy"]
    at.sidebar.text_input[0].set_value(odd_runs_db).run()
    assert_clean(at)
    assert [t.value for t in at.title] == ["no-batches"]
    assert at.sidebar.selectbox[0].options == [
        "no-batches · #3 · completed",
        "vanished · #2 · stopped",
        "crashes · #1 · crashed",
    ]


def test_runs_view_compare_button_opens_compare_with_the_runs_picked(app_for: AppFor, recorded_db: str) -> None:
    at = app_for(recorded_db, "routes/runs.py")
    at.multiselect(key="sw_runs_compare").set_value([1, 2])
    at.button(key="sw_runs_compare_button").click().run()
    assert_clean(at)
    assert [t.value for t in at.title] == ["Compare runs"]
    assert list(at.dataframe[0].value["run"]) == ["demo-starved (#1)", "demo-healthy (#2)"]


def _foreign_run_now(path: str) -> None:
    from collector.store.connection import Store

    store = Store(path)
    try:
        store.create_run(
            "late-run",
            config={"num_workers": 0},
            host={},
            versions={},
            hostname="elsewhere",
            pid=1,
            command="train.py",
            rank=None,
            world_size=None,
            started_at=time.time(),
        )
    finally:
        store.close()


def test_run_page_shows_where_the_workers_time_goes(app_for: AppFor, recorded_db: str) -> None:
    at = app_for(recorded_db, run_id=2)  # demo-healthy: four workers
    assert_clean(at)
    assert "Inside the workers" in [s.value for s in at.subheader]
    tables = [df.value for df in at.dataframe if "stage" in df.value.columns]
    assert tables, "a stage table"
    table = tables[0]
    assert {"calls", "ms a sample", "share", "CPU", "blocked"} <= set(table.columns)
    assert "collate" in set(table["stage"])
    assert table["share"].between(0, 1).all()

"""The job view: one row per rank, every rank's wait on one chart with the straggler marked, the job's verdict."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import streamlit as st
from app_fixtures import JOB_ID
from diagnosis_fixtures import Synthetic, write_synthetic
from helpers import shown, texts
from streamlit.testing.v1 import AppTest

from app.charts import ranks
from app.jobs import jobs_of, rank_table
from collector.store import job_queries
from collector.store.reader import Reader

AppFor = Callable[..., AppTest]
JOB_PAGE = "routes/job.py"


def chart_traces(at: AppTest) -> list[list[str]]:
    return [[t.get("name") for t in json.loads(c.proto.spec)["data"]] for c in at.get("plotly_chart")]


@pytest.fixture
def fresh_caches() -> Iterator[None]:
    st.cache_data.clear()
    yield
    st.cache_data.clear()


def job_file(path: str, names: tuple[str, ...] = ("train.py:41 train",), status: str = "completed") -> None:
    """A 2-rank job: rank 1 waits 30 ms for each 10 ms step, rank 0 1 ms for a 39 ms step (29 ms at the collective)."""
    for name in names:
        for rank, wait, step in ((0, 0.001, 0.039), (1, 0.030, 0.010)):
            spec = Synthetic(
                wait_s=np.full(120, wait),
                step_s=step,
                rank=rank,
                world_size=2,
                job_id=JOB_ID,
                name=name,
                status=status,
            )
            write_synthetic(path, spec)


def test_job_view_has_a_row_per_rank_names_the_straggler_and_marks_it_on_the_chart(
    app_for: AppFor, tmp_path: Path
) -> None:
    path = str(tmp_path / "job.sqlite")
    job_file(path)
    at = app_for(path, JOB_PAGE)
    assert not at.exception
    assert [t.value for t in at.title] == ["Job"]
    table = at.dataframe[0].value
    assert list(table["rank"]) == ["0", "1 (straggler)"]
    assert list(table["run"]) == ["train.py:41 train (#1)", "train.py:41 train (#2)"]
    assert list(table["verdict"]) == ["not-input-bound", "input-bound"]
    assert table["wait share"].iloc[1] > 50 > 10 > table["wait share"].iloc[0]
    assert list(table["step p50"]) == ["39.0 ms", "10.0 ms"]
    assert list(table["waiting at the collective"]) == ["29.0 ms", "— (the straggler)"]
    assert chart_traces(at) == [["rank 0", "rank 1 (straggler)"]]
    banner = at.error[0].value  # the job's verdict: input-bound, from rank 1
    assert banner.startswith("**Input-bound**") and "rank 1 waited for data" in banner
    assert "job of 2 ranks: the verdict, symptoms and suggestions are rank 1's" in texts(at)
    assert any(c.value.startswith("DataLoader(...,") for c in at.code)  # the straggler's line to paste


def test_job_view_waiting_column_is_the_diagnosis_stall_fraction_labelled_as_elsewhere(
    app_for: AppFor, tmp_path: Path
) -> None:
    from collector.diagnosis import diagnose

    path = str(tmp_path / "job.sqlite")
    job_file(path)
    table = app_for(path, JOB_PAGE).dataframe[0].value
    for rank, run_id in ((0, 1), (1, 2)):
        assert table["wait share"].iloc[rank] == pytest.approx(100.0 * diagnose(path, run_id).summary["stall_fraction"])


def test_run_view_of_a_rank_points_to_its_job_view(app_for: AppFor, two_rank_db: str) -> None:
    at = app_for(two_rank_db, run_id=1)
    assert not at.exception
    assert any(f"of job `{JOB_ID}`" in i.value for i in at.info)
    at.button(key="sw_run_job").click().run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Job"]
    assert list(at.dataframe[0].value["rank"]) == ["0", "1 (straggler)"]
    at.button(key="sw_job_open_2").click().run()  # and back to one rank
    assert [t.value for t in at.title] == ["train.py\\:41"] and "Rank 1 of 2" in at.info[0].value  # Markdown-escaped


def test_runs_page_opens_a_jobs_view(app_for: AppFor, two_rank_db: str) -> None:
    at = app_for(two_rank_db, "routes/runs.py")
    at.button(key=f"sw_job_view_{JOB_ID}").click().run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Job"] and len(at.dataframe[0].value) == 2


def test_a_failing_job_diagnosis_leaves_the_table_and_chart(
    app_for: AppFor, two_rank_db: str, monkeypatch: pytest.MonkeyPatch, fresh_caches: None
) -> None:
    import collector.diagnosis

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("a column the diagnosis expected")

    monkeypatch.setattr(collector.diagnosis, "diagnose_job", broken)
    at = app_for(two_rank_db, JOB_PAGE)
    assert not at.exception
    assert any("The diagnosis failed (KeyError" in shown(w.value) for w in at.warning)
    table = at.dataframe[0].value
    assert list(table["rank"]) == ["0", "1"] and list(table["verdict"]) == ["n/a", "n/a"]
    assert chart_traces(at) == [["rank 0", "rank 1"]]  # no straggler to mark, the lines still drawn


@pytest.mark.slow
def test_a_file_without_jobs_says_so_and_its_runs_have_no_job_link(app_for: AppFor, recorded_db: str) -> None:
    at = app_for(recorded_db, JOB_PAGE)
    assert not at.exception and "No distributed job in this file" in at.info[0].value
    run_page = app_for(recorded_db)
    assert not [b for b in run_page.button if b.key == "sw_run_job"]


def test_a_live_job_refreshes_in_a_fragment(app_for: AppFor, tmp_path: Path, fresh_caches: None) -> None:
    path = str(tmp_path / "live.sqlite")
    job_file(path, status="running")
    at = app_for(path, JOB_PAGE)
    assert not at.exception
    assert "live, refreshed every" in texts(at)
    assert list(at.dataframe[0].value["rank"]) == ["0", "1 (straggler)"]


def test_each_loader_of_a_job_is_its_own_job_view_with_only_its_ranks(tmp_path: Path) -> None:
    path = str(tmp_path / "job.sqlite")
    job_file(path, names=("train.py:41 train", "train.py:44 val"))
    jobs = jobs_of(Reader(path).runs())
    assert [(j.name, j.run_ids, j.ranks) for j in jobs] == [
        ("train.py:44 val", (3, 4), (0, 1)),
        ("train.py:41 train", (1, 2), (0, 1)),
    ]
    shares = job_queries.rank_wait_shares(Reader(path), JOB_ID, run_ids=jobs[0].run_ids)
    assert set(shares["run_id"]) == {3, 4}
    assert [t.name for t in ranks.rank_wait_figure(shares).data] == ["rank 0", "rank 1"]


def test_rank_table_without_a_report_lists_the_ranks() -> None:
    from app.jobs import Job

    job = Job("j", "train.py:41", (5, 6), (0, 1), 2, live=False, version=())
    table = rank_table(job, None)
    assert list(table["rank"]) == ["0", "1"] and table["wait share"].isna().all()


def test_a_short_jobs_slices_hold_several_batches_so_each_rank_reads_its_own_share(tmp_path: Path) -> None:
    """120 batches of 40 ms: 240 slices would be narrower than a batch and read 0% or 100% (NOTE [ Slices ... ])."""
    path = str(tmp_path / "job.sqlite")
    job_file(path)
    shares = job_queries.rank_wait_shares(Reader(path), JOB_ID)
    assert shares.groupby("run_id")["n"].median().min() >= job_queries.BATCHES_PER_SLICE
    by_rank = {int(r): part["wait_pct"] for r, part in shares.groupby("rank")}
    assert 65 < by_rank[1].median() < 85 and by_rank[0].median() < 10  # 30 of 40 ms; 1 of 40 ms

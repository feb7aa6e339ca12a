"""A distributed job's ranks: grouped on the Runs page, and their waits over time on one chart (a 2-rank file)."""

from __future__ import annotations

import json
from collections.abc import Callable

from app_fixtures import JOB_ID
from streamlit.testing.v1 import AppTest

from app.charts import ranks
from collector.store import job_queries
from collector.store.reader import Reader

AppFor = Callable[..., AppTest]


def test_rank_wait_shares_put_every_rank_on_one_time_axis(two_rank_db: str) -> None:
    shares = job_queries.rank_wait_shares(Reader(two_rank_db), JOB_ID, buckets=20)
    assert sorted(shares["rank"].unique()) == [0, 1]
    by_rank = {int(r): part for r, part in shares.groupby("rank")}
    assert set(by_rank[0]["t"]).issubset(set(shares["t"])) and shares.groupby("t")["width_s"].nunique().max() == 1
    assert shares["width_s"].max() < 2 * shares["width_s"].min()  # the last slice takes the remainder
    assert by_rank[0]["n"].sum() == by_rank[1]["n"].sum() == 200
    # rank 1 waits 30 ms of each 40 ms cycle; rank 0 1 ms of 11 ms (its slices end early: it finishes first)
    assert 70 < by_rank[1]["wait_pct"].median() < 80
    assert by_rank[0]["wait_pct"].median() < 12


def test_rank_wait_shares_of_an_unknown_job_are_empty(two_rank_db: str) -> None:
    assert job_queries.rank_wait_shares(Reader(two_rank_db), "no-such-job").empty
    assert list(job_queries.job_ranks(Reader(two_rank_db), JOB_ID)["rank"]) == [0, 1]


def test_rank_chart_draws_one_line_per_rank_and_marks_the_straggler_it_is_given(two_rank_db: str) -> None:
    shares = job_queries.rank_wait_shares(Reader(two_rank_db), JOB_ID)
    plain = ranks.rank_wait_figure(shares)
    assert [t.name for t in plain.data] == ["rank 0", "rank 1"] and plain.layout.title.text == ranks.TITLE
    marked = ranks.rank_wait_figure(shares, straggler_rank=1)
    assert [t.name for t in marked.data] == ["rank 0", "rank 1 (straggler)"]
    assert marked.data[1].line.width > marked.data[0].line.width


def test_runs_page_shows_rank_and_job_with_the_ranks_listed_together(app_for: AppFor, two_rank_db: str) -> None:
    at = app_for(two_rank_db, "routes/runs.py")
    assert not at.exception
    table = at.dataframe[0].value
    assert list(table["run"]) == ["single (#3)", "train.py:41 (#1)", "train.py:41 (#2)"]
    assert list(table["rank"]) == ["—", "0 of 2", "1 of 2"] and list(table["job"]) == ["—", JOB_ID, JOB_ID]
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert titles == [ranks.TITLE]


def test_a_file_without_jobs_shows_no_rank_or_job_columns(app_for: AppFor, recorded_db: str) -> None:
    table = app_for(recorded_db, "routes/runs.py").dataframe[0].value
    assert "rank" not in table.columns and "job" not in table.columns

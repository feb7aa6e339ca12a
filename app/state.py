"""The open file and chosen run in session state, the cached reader (cache_resource) and cached queries (cache_data)."""

from __future__ import annotations

import os
import sys
from typing import Any

import pandas as pd
import streamlit as st

from app import diagnosis
from app.compare_data import CompareData, load_compare
from app.data import RunViewData, encode_table, load_run_view, load_runs_table
from app.settings import default_db, refusal
from collector.diagnosis.report_types import Report
from collector.errors import StallwatchError
from collector.store import job_queries
from collector.store.reader import Reader

DB_KEY = "sw_db"  # the file the user opened in the sidebar (overrides --db / STALLWATCH_DB)
RUN_KEY = "sw_run"  # the run id picked in the sidebar
COMPARE_KEY = "sw_compare"  # run ids picked for the compare view
JOB_KEY = "sw_job"  # the job view's job: the run id of one of its ranks (app.jobs.Job.key)
LIVE_TTL_S = 1.0
STATIC_TTL_S = 600.0
LIVE_DIAGNOSIS_TTL_S = 10.0  # a live run's banner, cards and findings: re-diagnosed at most this often


def take_run_from_url() -> None:
    """``?run=ID`` in the address opens that run (once per session, so the sidebar can change it after)."""
    value = st.query_params.get("run")
    if value and value.isdigit() and not st.session_state.get("sw_url_taken"):
        st.session_state[RUN_KEY] = int(value)
    st.session_state["sw_url_taken"] = True


def db_path() -> str:
    """The sidebar's file where the dashboard may open it (NOTE [ What the dashboard opens ]), else the default."""
    chosen = st.session_state.get(DB_KEY)
    if chosen and refusal(str(chosen), sys.argv[1:], os.environ) is None:
        return str(chosen)
    return default_db(sys.argv[1:], os.environ)


def may_open(path: str) -> str | None:
    """None where the dashboard may open ``path``, else why not."""
    return refusal(path, sys.argv[1:], os.environ)


def _identity(path: str) -> tuple[int, int] | None:
    """(device, inode): a file replaced under the same name gets a new reader."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


@st.cache_resource(show_spinner=False, max_entries=16)
def _reader(path: str, identity: tuple[int, int] | None) -> Reader:
    return Reader(path)


def open_reader(path: str) -> Reader | str:
    """The file's reader, or the message saying why it cannot be read (never raises)."""
    refused = may_open(path)
    if refused is not None:
        return refused
    try:
        return _reader(path, _identity(path))
    except StallwatchError as exc:
        return str(exc)
    except OSError as exc:
        return f"{path} cannot be read: {exc}"


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False, max_entries=32)
def run_list(path: str) -> pd.DataFrame:
    """Every run without totals: cheap (no batch scan), for the sidebar and the empty-file check."""
    return _reader(path, _identity(path)).runs()


@st.cache_data(ttl=2.0, show_spinner=False, max_entries=32)
def runs_table(path: str) -> pd.DataFrame:
    """Every run with its totals: batches, batches/s, share of time waiting, mean GPU utilisation."""
    return load_runs_table(_reader(path, _identity(path)))


Span = tuple[float, float] | None  # a range in seconds since the run started


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False, max_entries=8)
def _live_view(path: str, run_id: int, window_s: float | None, span: Span, details: bool) -> RunViewData:
    return load_run_view(_reader(path, _identity(path)), run_id, window_s, span=span, details=details)


@st.cache_data(ttl=STATIC_TTL_S, show_spinner=False, max_entries=16)
def _static_view(path: str, run_id: int, window_s: float | None, span: Span, version: Any) -> RunViewData:
    return load_run_view(_reader(path, _identity(path)), run_id, window_s, span=span)


def run_view(
    path: str, run_id: int, window_s: float | None, run: dict[str, Any], span: Span = None, details: bool = True
) -> RunViewData:
    """A live run is re-read each refresh (``details=False``: only what the headline draws); a finished one once."""
    if run.get("state") == "running":
        return _live_view(path, run_id, window_s, span, details)
    version = (run.get("status"), run.get("heartbeat_at"), run.get("ended_at"))
    return _static_view(path, run_id, window_s, span, version)


@st.cache_data(ttl=LIVE_DIAGNOSIS_TTL_S, show_spinner=False, max_entries=8)
def _live_diagnosis(path: str, run_id: int, window_s: float | None) -> Report | diagnosis.Unavailable:
    return diagnosis.diagnose(path, run_id, window_s, live=True)


@st.cache_data(ttl=STATIC_TTL_S, show_spinner=False, max_entries=64)
def _static_diagnosis(path: str, run_id: int, window_s: float | None, version: Any) -> Report | diagnosis.Unavailable:
    return diagnosis.diagnose(path, run_id, window_s)


def run_diagnosis(
    path: str, run_id: int, window_s: float | None, run: dict[str, Any]
) -> Report | diagnosis.Unavailable:
    if run.get("state") == "running":
        return _live_diagnosis(path, run_id, window_s)
    return _static_diagnosis(path, run_id, window_s, (run.get("status"), run.get("heartbeat_at"), run.get("ended_at")))


@st.cache_data(ttl=5.0, show_spinner=False, max_entries=8)
def compare_data(path: str, run_ids: tuple[int, ...]) -> CompareData:
    return load_compare(_reader(path, _identity(path)), list(run_ids))


def table_bytes(path: str, run_id: int, table: str, fmt: str) -> bytes:
    """One of a run's tables as CSV or Parquet bytes (built when the user clicks download)."""
    return encode_table(_reader(path, _identity(path)), run_id, table, fmt)


@st.cache_data(ttl=2.0, show_spinner=False, max_entries=16)
def job_shares(path: str, job_id: str, run_ids: tuple[int, ...] | None = None) -> pd.DataFrame:
    """Each rank's share of time waiting for data over the job (job_queries.rank_wait_shares), of ``run_ids`` only."""
    return job_queries.rank_wait_shares(_reader(path, _identity(path)), job_id, run_ids=run_ids)


@st.cache_data(ttl=LIVE_DIAGNOSIS_TTL_S, show_spinner=False, max_entries=8)
def _live_job_diagnosis(path: str, run_id: int) -> Report | diagnosis.Unavailable:
    return diagnosis.diagnose_job(path, run_id, live=True)


@st.cache_data(ttl=STATIC_TTL_S, show_spinner=False, max_entries=32)
def _static_job_diagnosis(path: str, run_id: int, version: Any) -> Report | diagnosis.Unavailable:
    return diagnosis.diagnose_job(path, run_id)


def job_diagnosis(path: str, run_id: int, live: bool, version: Any) -> Report | diagnosis.Unavailable:
    """The job's diagnosis (every rank, the straggler), cached as a run's.

    A live job's for ``LIVE_DIAGNOSIS_TTL_S``; a finished one's until a rank's row changes (``version``).
    """
    if live:
        return _live_job_diagnosis(path, run_id)
    return _static_job_diagnosis(path, run_id, version)

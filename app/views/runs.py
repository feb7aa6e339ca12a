"""The runs table: every run in the file with its configuration, throughput, wait share and verdict."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import streamlit as st

from app import state
from app.charts.ranks import rank_wait_figure
from app.components import welcome
from app.diagnosis import Unavailable
from app.plain import md
from app.views.job import open_job, switch_if_asked
from collector.diagnosis.text import WAITING_DEFINITION

VERDICT_RUNS = 25  # diagnose at most this many of the newest runs for the table
JOB_CHARTS = 5  # per-rank charts of the newest distributed jobs
CONFIG_COLUMNS = ("num_workers", "batch_size", "pin_memory", "prefetch_factor", "persistent_workers")


def page() -> None:
    path = state.db_path()
    if welcome.reader_or_welcome(path) is None:
        return
    st.title("Runs", anchor=False)
    runs = group_by_job(state.runs_table(path))
    table = runs_frame(path, runs)
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        column_config={
            "started": st.column_config.DatetimeColumn("started", format="YYYY-MM-DD HH:mm:ss"),
            "wait share": st.column_config.ProgressColumn(
                "waiting for data",
                format="%.0f%%",  # as the cards round it
                min_value=0,
                max_value=100,
                help=WAITING_DEFINITION + f" Computed with the verdict, for the newest {VERDICT_RUNS} runs.",
            ),
            "batches/s": st.column_config.NumberColumn(format="%.1f"),
            "job": st.column_config.TextColumn(help="A distributed job's id: its ranks are listed together."),
            "configuration": st.column_config.TextColumn(width="large"),
        },
    )
    for line in runs["damage"].dropna() if "damage" in runs else ():  # NOTE [ Values from a file ]
        st.caption(f":material/report: {md(line)}: the run is listed, its pages say what cannot be read")
    _jobs(path, runs)
    labels = {int(r["id"]): f"{r['name']} (#{r['id']}, {r['state']})" for r in runs.to_dict("records")}
    open_col, compare_col = st.columns(2, gap="large", vertical_alignment="bottom")
    with open_col:
        st.selectbox("Open a run", list(labels), format_func=labels.__getitem__, key="sw_runs_open")
        st.button("Open", icon=":material/open_in_new:", on_click=_open, key="sw_runs_open_button")
    with compare_col:
        default = list(labels)[:2]
        chosen = st.multiselect(
            "Compare runs", list(labels), default=default, format_func=labels.__getitem__, key="sw_runs_compare"
        )
        st.button(
            "Compare",
            icon=":material/compare_arrows:",
            on_click=_compare,
            disabled=len(chosen) < 2,
            key="sw_runs_compare_button",
        )
    if st.session_state.pop("sw_goto", None) == "run":
        st.switch_page("routes/run.py")
    if st.session_state.pop("sw_goto_compare", None):
        st.switch_page("routes/compare.py")
    switch_if_asked()


def _jobs(path: str, runs: pd.DataFrame) -> None:
    """Each distributed job of the file (two or more runs sharing a job id): its ranks' waits on one chart."""
    if runs.empty or runs["job_id"].isna().all():
        return
    counts = runs.dropna(subset=["job_id"]).groupby("job_id", sort=False)["id"].agg(["count", "min"])
    for job_id, ranks, first in list(counts[counts["count"] >= 2].itertuples())[:JOB_CHARTS]:
        with st.expander(f"Job `{job_id}`: {ranks} ranks, waiting for data per rank", expanded=True):
            st.button(
                "Job view: every rank's verdict and the straggler",
                icon=":material/hub:",
                on_click=open_job,
                args=(int(first),),
                key=f"sw_job_view_{job_id}",
            )
            st.plotly_chart(
                rank_wait_figure(state.job_shares(path, str(job_id))),
                width="stretch",
                config={"displaylogo": False},
                key=f"sw_job_{job_id}",
            )


def _open() -> None:
    # Callbacks read the widget's value from session state: args would hold the previous run's value.
    st.session_state[state.RUN_KEY] = st.session_state["sw_runs_open"]
    st.session_state["sw_goto"] = "run"


def _compare() -> None:
    st.session_state[state.COMPARE_KEY] = list(st.session_state["sw_runs_compare"])
    st.session_state["sw_goto_compare"] = True


def runs_frame(path: str, runs: pd.DataFrame) -> pd.DataFrame:
    """The table as shown: one row per run, configuration spread into columns, verdict from the diagnosis."""
    rows = []
    newest = set(runs["id"].nlargest(VERDICT_RUNS)) if not runs.empty else set()
    for r in runs.to_dict("records"):
        config = r.get("config") or {}
        verdict, waiting = "—", None
        if r["id"] in newest:
            report = state.run_diagnosis(path, int(r["id"]), None, {str(k): v for k, v in r.items()})
            verdict = "n/a" if isinstance(report, Unavailable) else report.verdict
            waiting = None if isinstance(report, Unavailable) else report.summary["stall_fraction"]
        rows.append(
            {
                "run": f"{r['name']} (#{r['id']})",
                "job": _text(r.get("job_id"), "—"),
                "rank": _rank(r.get("rank"), r.get("world_size")),
                "state": "live" if r["state"] == "running" else r["state"],
                "started": _started(r["started_at"]),
                "verdict": verdict,
                "batches/s": r["batches_per_s"],
                "wait share": None if waiting is None else 100.0 * waiting,
                "GPU util": "no GPU data" if r["gpu_util_pct"] is None else f"{r['gpu_util_pct']:.0f}%",
                "batches": int(r["batches"]),
                "configuration": ", ".join(f"{k}={config[k]}" for k in CONFIG_COLUMNS if config.get(k) is not None),
            }
        )
    frame = pd.DataFrame(rows)
    for column in ("batches/s", "wait share"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    if not runs.empty and runs["job_id"].isna().all() and runs["rank"].isna().all():
        frame = frame.drop(columns=["job", "rank"])  # a single-process file: no columns of dashes
    return frame


def group_by_job(runs: pd.DataFrame) -> pd.DataFrame:
    """Newest first, with the ranks of one job together (rank order) at the place of the job's newest run."""
    if runs.empty or runs["job_id"].isna().all():
        return runs
    key = runs["job_id"].where(runs["job_id"].notna(), "#" + runs["id"].astype(str))
    newest = runs.groupby(key)["id"].transform("max")
    order = runs.assign(_newest=newest, _rank=runs["rank"].fillna(-1))
    order = order.sort_values(["_newest", "_rank", "id"], ascending=[False, True, True])
    return order.drop(columns=["_newest", "_rank"]).reset_index(drop=True)


def _started(started_at: object) -> dt.datetime | None:
    """A run's start as a datetime; None where the file's value was damaged (read as NULL)."""
    return None if started_at is None or pd.isna(started_at) else dt.datetime.fromtimestamp(float(started_at))  # type: ignore[arg-type]


def _rank(rank: object, world_size: object) -> str:
    if not isinstance(rank, int | float) or pd.isna(rank):
        return "—"
    if not isinstance(world_size, int | float) or pd.isna(world_size):
        return f"{int(rank)}"
    return f"{int(rank)} of {int(world_size)}"


def _text(value: object, missing: str) -> str:
    return missing if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)

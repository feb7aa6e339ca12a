"""The job view: a distributed job's ranks side by side, its straggler marked, and the job's verdict."""

from __future__ import annotations

import streamlit as st

from app import state
from app.charts.ranks import rank_wait_figure
from app.components import welcome
from app.components.report_panel import findings, verdict_banner
from app.diagnosis import Unavailable
from app.guard import page_boundary
from app.jobs import Job, job_of, jobs_of, rank_table, straggler_rank
from app.plain import md
from collector.diagnosis.text import WAITING_DEFINITION

REFRESH_S = 10.0  # a live job: its whole-job chart and diagnosis re-read this often (the diagnosis is cached 10 s)
COLLECTIVE_HELP = (
    "Step time this rank spent waiting at the collective (the all-reduce that ends each step) for the "
    "straggler: its step p50 minus the straggler's. It is waiting, not compute."
)
PLOT_CONFIG = {"displaylogo": False, "scrollZoom": False}


def open_job(run_id: int) -> None:
    """Show the job ``run_id`` is a rank of on the job view (a button's callback; the page switches on its rerun)."""
    st.session_state[state.JOB_KEY] = run_id
    st.session_state["sw_goto_job"] = True


def switch_if_asked() -> None:
    """Go to the job view when ``open_job`` asked for it (called in the body of the page with the button)."""
    if st.session_state.pop("sw_goto_job", None):
        st.switch_page("routes/job.py")


def page() -> None:
    path = state.db_path()
    if welcome.reader_or_welcome(path) is None:
        return
    st.title("Job", anchor=False)
    jobs = jobs_of(state.run_list(path))
    if not jobs:
        st.info(
            "No distributed job in this file. The ranks of a job (torchrun, torch.multiprocessing.spawn, Lightning "
            "or Hugging Face DDP) each record a run with the same job id; with two or more recorded, their job "
            "shows here.",
            icon=":material/hub:",
        )
        return
    job = _pick(path, jobs)
    world = f" of {job.world_size}" if job.world_size else ""
    st.caption(
        f"{md(job.job_id or 'no job id')} · ranks {', '.join(map(str, job.ranks))}{world} recorded · "
        f"runs {', '.join(f'#{i}' for i in job.run_ids)}"
    )
    columns = st.columns(max(len(job.run_ids), 4))
    for column, rank, run_id in zip(columns, job.ranks, job.run_ids, strict=False):
        column.button(
            f"Rank {rank} in the Run view",
            icon=":material/monitoring:",
            on_click=_open_run,
            args=(run_id,),
            key=f"sw_job_open_{run_id}",
        )
    if st.session_state.pop("sw_goto", None) == "run":
        st.switch_page("routes/run.py")
    if job.live:
        st.fragment(run_every=REFRESH_S)(_live)(path, job.key)
    else:
        _body(path, job)


def _pick(path: str, jobs: list[Job]) -> Job:
    """The job asked for (a button's ``open_job``), else the sidebar's run's, else the newest."""
    by_key = {job.key: job for job in jobs}
    asked = st.session_state.get(state.JOB_KEY)
    sidebar_run = st.session_state.get(state.RUN_KEY)
    current = next((job for job in jobs if asked in job.run_ids), None)
    if current is None and sidebar_run is not None:
        current = next((job for job in jobs if sidebar_run in job.run_ids), None)
    current = current or jobs[0]
    picked = st.selectbox(
        "Job",
        list(by_key),
        index=list(by_key).index(current.key),
        format_func=lambda key: by_key[key].label(),
        key=f"sw_job_pick_{path}_{current.key}",
    )
    st.session_state[state.JOB_KEY] = picked
    return by_key[picked]


def _live(path: str, key: int) -> None:
    with page_boundary(path):  # a fragment rerun raises here, not in the router
        job = job_of(state.run_list(path), key)
        if job is None or not job.live:
            st.rerun(scope="app")  # it just finished (or went away): redraw the page once, without the timer
            return
        st.caption(f":green[●] live, refreshed every {REFRESH_S:g} s")
        _body(path, job)


def _body(path: str, job: Job) -> None:
    with st.spinner("Diagnosing every rank…"):
        report = state.job_diagnosis(path, job.key, job.live, job.version)
    found = None if isinstance(report, Unavailable) else report
    st.markdown("**Job verdict**, from every rank's diagnosis")
    verdict_banner(report)
    st.dataframe(
        rank_table(job, found),
        hide_index=True,
        width="stretch",
        column_config={
            "wait share": st.column_config.ProgressColumn(
                "waiting for data", format="%.0f%%", min_value=0, max_value=100, help=WAITING_DEFINITION
            ),
            "step p50": st.column_config.TextColumn(help="Median step: from a batch's arrival to the next request."),
            "waiting at the collective": st.column_config.TextColumn(help=COLLECTIVE_HELP),
        },
    )
    if job.job_id is None:
        st.caption("These ranks were recorded without a job id (an older stallwatch): no per-rank chart.")
    else:
        shares = state.job_shares(path, job.job_id, job.run_ids)
        st.plotly_chart(
            rank_wait_figure(shares, straggler_rank=straggler_rank(found)),
            width="stretch",
            config=PLOT_CONFIG,
            key="sw_job_ranks",
        )
    findings(report)


def _open_run(run_id: int) -> None:
    st.session_state[state.RUN_KEY] = run_id
    st.session_state["sw_goto"] = "run"

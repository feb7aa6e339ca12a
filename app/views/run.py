"""The run view: live (an ``st.fragment`` refreshed every second) while the run beats, post-hoc once it stopped."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any, Literal

import streamlit as st

from app import state
from app.charts import detail_figures, headline_figure
from app.charts.batches import duration
from app.components import welcome
from app.components.after_paint import first_chart_painted
from app.components.downloads import downloads
from app.components.report_panel import findings, verdict_banner
from app.data import PHASE_BATCHES, RunViewData
from app.diagnosis import Unavailable
from app.guard import page_boundary
from app.jobs import job_of
from app.plain import md
from app.views.job import open_job, switch_if_asked
from collector.diagnosis.report_types import Report
from collector.diagnosis.text import WAITING_DEFINITION
from collector.errors import StallwatchError, UnknownRun
from collector.store.reader import STALE_AFTER_S

BadgeColor = Literal["red", "orange", "blue", "green", "gray"]
REFRESH_S = 2.0  # the headline of a live run
DETAIL_REFRESH_S = 10.0  # the detail charts of a live run
RANGE = "Pick a range"
WINDOWS: dict[str, float | None] = {
    "Last 10 s": 10.0,
    "Last 30 s": 30.0,
    "Last 2 min": 120.0,
    "Last 10 min": 600.0,
    "Whole run": None,
    RANGE: None,
}
PLOT_CONFIG = {"displaylogo": False, "scrollZoom": False}


def page() -> None:
    path = state.db_path()
    reader = welcome.reader_or_welcome(path)
    if reader is None:
        return
    run_id = st.session_state.get(state.RUN_KEY)
    try:
        run = reader.sound_run(run_id if run_id is not None else "latest")
    except UnknownRun as exc:
        st.warning(md(exc))
        return
    except StallwatchError as exc:
        st.error(md(exc), icon=":material/error:")
        return
    live = run["state"] == "running"
    _header(run)
    _job_link(path, run)
    window_label = st.segmented_control(
        "Time shown",
        list(WINDOWS),
        default="Last 2 min" if live else "Whole run",
        key=f"sw_window_{run['id']}_{live}",
        label_visibility="collapsed",
    )
    window_s = WINDOWS[window_label or "Whole run"]
    span = _range_slider(run) if window_label == RANGE else None
    _body(path, int(run["id"]), window_s, span, live)


def _range_slider(run: dict[str, Any]) -> tuple[float, float]:
    """A range of the run, in seconds since it started: zoom in until each batch shows as its compute and wait."""
    end = max(float(run.get("heartbeat_at") or 0.0), float(run.get("ended_at") or 0.0)) - float(run["started_at"])
    end = max(round(end, 1), 1.0)
    low, high = st.slider(
        "Range shown (seconds since the run started)",
        min_value=0.0,
        max_value=end,
        value=(max(0.0, end - 10.0), end),
        step=0.1,
        key=f"sw_range_{run['id']}",
        help=f"With {PHASE_BATCHES:,} batches or fewer in the range, the first chart draws every batch.",
    )
    return float(low), float(high)


def _job_link(path: str, run: dict[str, Any]) -> None:
    """A rank of a distributed job points to its job view, where the ranks are read together."""
    if run.get("rank") is None:
        return
    job = job_of(state.run_list(path), int(run["id"]))
    if job is None:
        return
    text, button = st.columns([5, 1], vertical_alignment="center")
    text.info(
        f"Rank {int(run['rank'])} of {len(job.ranks)} recorded ranks of job `{job.job_id or 'without an id'}`: "
        "the job view reads them together and names the straggler, the rank that holds the others back.",
        icon=":material/hub:",
    )
    button.button("Job view", icon=":material/hub:", on_click=open_job, args=(int(run["id"]),), key="sw_run_job")
    switch_if_asked()


def _header(run: dict[str, Any]) -> None:
    title, badge = st.columns([5, 1], vertical_alignment="center")
    title.title(md(run["name"]), anchor=False)  # plain text, not Markdown: NOTE [ File text is text ]
    state_name = run["state"]
    colors: dict[str, BadgeColor] = {
        "running": "green",
        "completed": "blue",
        "crashed": "red",
        "interrupted": "orange",
        "stopped": "orange",
    }
    labels = {"running": "live", "stopped": "stopped (no heartbeat)"}
    badge.badge(labels.get(state_name, state_name), color=colors.get(state_name, "gray"))
    config = run.get("config") or {}
    started = dt.datetime.fromtimestamp(float(run["started_at"])).strftime("%Y-%m-%d %H:%M:%S")
    settings = ", ".join(
        f"{k}={config.get(k)!r}"
        for k in ("num_workers", "batch_size", "pin_memory", "prefetch_factor", "persistent_workers")
        if k in config
    )
    st.caption(f"run #{run['id']} · started {started} on {md(run.get('hostname') or '?')} · DataLoader({md(settings)})")
    if state_name == "crashed":
        st.error(f"This run crashed: {md(run.get('error') or 'no error text recorded')}", icon=":material/dangerous:")
    elif state_name == "interrupted":
        st.warning(
            "This run was interrupted (Ctrl-C or a signal). Showing what it recorded.", icon=":material/stop_circle:"
        )
    elif state_name == "stopped":
        st.warning(
            f"This run stopped reporting: no heartbeat for over {STALE_AFTER_S:g} s, so its process was killed or lost."
            " Showing what it recorded; it is not live.",
            icon=":material/heart_broken:",
        )


def _body(path: str, run_id: int, window_s: float | None, span: tuple[float, float] | None, live: bool) -> None:
    if live:
        # NOTE [ Cheap live page ]: the headline (banner, cards, first chart) refreshes every
        # REFRESH_S; the six detail charts, slower-moving and most of the drawing cost, every
        # DETAIL_REFRESH_S; the diagnosis behind the banner is cached for state.LIVE_DIAGNOSIS_TTL_S.
        st.fragment(run_every=REFRESH_S)(_live_top)(path, run_id, window_s, span)
        st.fragment(run_every=DETAIL_REFRESH_S)(_live_details)(path, run_id, window_s, span)
    else:
        st.fragment(_finished)(path, run_id, window_s, span)


def _load(
    path: str, run_id: int, window_s: float | None, span: tuple[float, float] | None, live: bool, details: bool = True
) -> tuple[dict[str, Any], RunViewData] | None:
    """The run and its series, or None after saying why not; a live run that just stopped reruns the page."""
    reader = state.open_reader(path)
    if isinstance(reader, str):
        st.error(md(reader), icon=":material/error:")
        return None
    try:
        run = reader.run(run_id)
        if live and run["state"] != "running":
            st.rerun(scope="app")  # it just stopped: redraw the whole page as a finished run, without the timer
        return run, state.run_view(path, run_id, window_s, run, span, details)
    except StallwatchError as exc:
        st.error(md(exc), icon=":material/error:")
        return None


# NOTE [ One report per moment ]
# The banner, the cards and the findings all read one Report, so they cannot
# disagree (See NOTE [ One waiting figure ]). It covers the window shown; a
# picked range is not a window the diagnosis takes, so it covers the whole run
# then, and the cards say so.
def _live_top(path: str, run_id: int, window_s: float | None, span: tuple[float, float] | None) -> None:
    with page_boundary(path):  # a fragment rerun raises here, not in the router
        loaded = _load(path, run_id, window_s, span, live=True, details=False)
        if loaded is None:
            return
        run, data = loaded
        st.caption(f":green[●] live, refreshed every {REFRESH_S:g} s · last record {_ago(data.t1)}")
        scope = None if span is not None else window_s
        report = state.run_diagnosis(path, run_id, scope, run)
        _summary(report, data, scope)
        if data.headline.batches == 0:
            st.info(
                "This run has no batches recorded yet: the loop has not asked for its first batch.",
                icon=":material/hourglass_empty:",
            )
            return
        st.plotly_chart(headline_figure(data), width="stretch", config=PLOT_CONFIG, key="sw_fig_utilisation")
        findings(report)


def _live_details(path: str, run_id: int, window_s: float | None, span: tuple[float, float] | None) -> None:
    with page_boundary(path):
        loaded = _load(path, run_id, window_s, span, live=True)
        if loaded is not None and loaded[1].headline.batches:
            _details(loaded[1])


def _finished(path: str, run_id: int, window_s: float | None, span: tuple[float, float] | None) -> None:
    with page_boundary(path):
        loaded = _load(path, run_id, window_s, span, live=False)
        if loaded is None:
            return
        run, data = loaded
        if data.headline.batches == 0:
            st.info("This run has no batches recorded.", icon=":material/hourglass_empty:")
            return
        # NOTE [ Diagnosis after the charts ]
        # The diagnosis of a long finished run takes longer than its reduced series:
        # draw the first chart first and fill the banner and cards in above it when it
        # is ready; the detail charts follow once the browser has painted the first,
        # after the diagnosis if it is still running (See NOTE [ First chart first ]).
        # (A live view diagnoses only its recent window, fast, and renders in order:
        # a placeholder filled late inside a run_every fragment did not reach the page.)
        scope = None if span is not None else window_s
        banner = st.empty()
        st.plotly_chart(headline_figure(data), width="stretch", config=PLOT_CONFIG, key="sw_fig_utilisation")
        findings_slot = st.container()
        st.fragment(_details_after_paint)(path, run_id, data)
        with banner.container(), st.spinner("Diagnosing…"):
            report = state.run_diagnosis(path, run_id, scope, run)
        with banner.container():
            _summary(report, data, scope)
        with findings_slot:
            findings(report)
        downloads(path, run, report)


def _details_after_paint(path: str, run_id: int, data: RunViewData) -> None:
    """A fragment: the detail charts of a finished run, once the browser has painted the first chart."""
    with page_boundary(path):
        if first_chart_painted(f"sw_painted_{run_id}"):
            _details(data)


def _details(data: RunViewData) -> None:
    folded = int(data.batches.attrs.get("folded", 0))
    if folded:  # NOTE [ Rollups ] in collector/store/fold.py
        st.caption(
            f":material/compress: {folded:,} batches past the file's window (keep_batches) are drawn from "
            "per-second rollups; the wait histogram shows the batches kept as rows (the first epoch and the newest)."
        )
    figures = detail_figures(data)
    for left, right in (("wait_step", "histogram"), ("queue", "workers"), ("cpu", "memory")):
        a, b = st.columns(2, gap="medium")
        a.plotly_chart(figures[left], width="stretch", config=PLOT_CONFIG, key=f"sw_fig_{left}")
        b.plotly_chart(figures[right], width="stretch", config=PLOT_CONFIG, key=f"sw_fig_{right}")
    for warning in data.warnings:
        # One quiet line each, as the command line shows them (the text may start "stallwatch: " too).
        st.caption(f":material/info: collector note: {md(str(warning).removeprefix('stallwatch: '))}")


def _summary(report: Report | Unavailable, data: RunViewData, scope_s: float | None) -> None:
    verdict_banner(report)
    if data.headline.batches:
        _headline(report, data, scope_s)


def _headline(report: Report | Unavailable, data: RunViewData, scope_s: float | None) -> None:
    """The cards: the report's numbers (the banner's), and the loader's queue at the newest batch."""
    h = data.headline
    summary = report.summary if isinstance(report, Report) else {}
    over = "the whole run" if scope_s is None else f"the last {duration(scope_s)}"
    waiting = summary.get("stall_fraction")
    rate = summary.get("batches_per_s", h.batches_per_s)
    util = (summary.get("gpu_util_pct") or {}).get("mean") if summary else h.gpu_util_pct
    c1, c2, c3, c4 = st.columns(4, border=True)
    c1.metric(
        "Time waiting for data",
        "—" if waiting is None else f"{waiting:.0%}",
        help=f"{WAITING_DEFINITION} Over {over}." + ("" if waiting is not None else " Not enough batches for it yet."),
    )
    c2.metric(
        "Batches per second",
        "—" if rate is None else f"{rate:,.1f}",
        help=f"Over {over}: {summary.get('batches', h.batches):,} batches.",
    )
    if util is not None:
        c3.metric("Mean GPU utilisation", f"{util:.0f}%", help=f"NVML samples over {over}.")
    else:
        c3.metric(
            "Loop busy (no GPU data)",
            "—" if waiting is None else f"{1 - waiting:.0%}",
            help="No GPU samples were recorded (no NVIDIA driver/GPU). Shown instead: 100% minus the time "
            "waiting for data.",
        )
    if h.ready is None:
        c4.metric(
            "Batches ready in the loader",
            "—",
            help="num_workers=0: there is no prefetch queue, the main process loads each batch on demand.",
        )
    else:
        cap = f" / {h.capacity}" if h.capacity else ""
        c4.metric(
            "Batches ready in the loader",
            f"{h.ready}{cap}",
            help="Ready at the newest batch, out of num_workers × prefetch_factor.",
        )


def _ago(ts: float) -> str:
    return f"{duration(max(0.0, time.time() - ts))} ago"

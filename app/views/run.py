"""The run view: live (an ``st.fragment`` refreshed every second) while the run beats, post-hoc once it stopped."""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import Any, Literal

import streamlit as st

from app import state
from app.charts import build_run_figures
from app.charts.batches import duration
from app.components import welcome
from app.components.downloads import downloads
from app.components.findings import findings, verdict_banner
from app.data import RunViewData
from app.guard import page_boundary
from collector.errors import StallwatchError, UnknownRun
from collector.store.reader import STALE_AFTER_S

BadgeColor = Literal["red", "orange", "blue", "green", "gray"]
REFRESH_S = 1.0
WINDOWS: dict[str, float | None] = {"Last 30 s": 30.0, "Last 2 min": 120.0, "Last 10 min": 600.0, "Whole run": None}
PLOT_CONFIG = {"displaylogo": False, "scrollZoom": False}


def page() -> None:
    path = state.db_path()
    reader = welcome.reader_or_welcome(path)
    if reader is None:
        return
    run_id = st.session_state.get(state.RUN_KEY)
    try:
        run = reader.run(run_id if run_id is not None else "latest")
    except UnknownRun as exc:
        st.warning(str(exc))
        return
    except StallwatchError as exc:
        st.error(str(exc), icon=":material/error:")
        return
    live = run["state"] == "running"
    _header(run)
    window_label = st.segmented_control(
        "Time shown",
        list(WINDOWS),
        default="Last 2 min" if live else "Whole run",
        key=f"sw_window_{run['id']}_{live}",
        label_visibility="collapsed",
    )
    window_s = WINDOWS[window_label or "Whole run"]
    body = st.fragment(run_every=REFRESH_S if live else None)(_body)
    body(path, int(run["id"]), window_s, live)


def _header(run: dict[str, Any]) -> None:
    title, badge = st.columns([5, 1], vertical_alignment="center")
    title.title(re.sub(r"([\\`*_\[\]<>#|~$:])", r"\\\1", str(run["name"])), anchor=False)  # plain text, not Markdown
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
    st.caption(f"run #{run['id']} · started {started} on {run.get('hostname') or '?'} · `DataLoader({settings})`")
    if state_name == "crashed":
        st.error(f"This run crashed: {run.get('error') or 'no error text recorded'}", icon=":material/dangerous:")
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


def _body(path: str, run_id: int, window_s: float | None, live: bool) -> None:
    with page_boundary(path):  # a fragment rerun raises here, not in the router
        _draw(path, run_id, window_s, live)


def _draw(path: str, run_id: int, window_s: float | None, live: bool) -> None:
    reader = state.open_reader(path)
    if isinstance(reader, str):
        st.error(reader, icon=":material/error:")
        return
    try:
        run = reader.run(run_id)
        if live and run["state"] != "running":
            st.rerun()  # it just stopped: redraw the whole page as a finished run, without the timer
        data = state.run_view(path, run_id, window_s, run)
    except StallwatchError as exc:
        st.error(str(exc), icon=":material/error:")
        return
    if live:
        st.caption(f":green[●] live, refreshed every {REFRESH_S:g} s · last record {_ago(data.t1)}")
    # NOTE [ Diagnosis after the charts ]
    # The diagnosis of a long finished run takes longer than its reduced series:
    # draw the charts first and fill the banner in above them when it is ready.
    # A live view diagnoses only its recent window (fast) and renders in order:
    # a placeholder filled late inside a run_every fragment did not reach the page.
    report = state.run_diagnosis(path, run_id, window_s, run) if live else None
    banner = st.empty()
    if report is not None:
        verdict_banner(report)
    if data.headline.batches == 0:
        st.info(
            "This run has no batches recorded" + (" yet: the loop has not asked for its first batch." if live else "."),
            icon=":material/hourglass_empty:",
        )
        return
    _headline(data)
    figures = build_run_figures(data)
    st.plotly_chart(figures["utilisation"], width="stretch", config=PLOT_CONFIG, key="sw_fig_utilisation")
    findings_slot = st.container()
    for left, right in (("wait_step", "histogram"), ("queue", "workers"), ("cpu", "memory")):
        a, b = st.columns(2, gap="medium")
        a.plotly_chart(figures[left], width="stretch", config=PLOT_CONFIG, key=f"sw_fig_{left}")
        b.plotly_chart(figures[right], width="stretch", config=PLOT_CONFIG, key=f"sw_fig_{right}")
    for warning in data.warnings:
        st.caption(f":material/info: collector: {warning}")
    if report is None:
        with banner.container(), st.spinner("Diagnosing…"):
            report = state.run_diagnosis(path, run_id, None, run)
        with banner.container():
            verdict_banner(report)
    with findings_slot:
        findings(report)
    if not live:
        downloads(path, run, report)


def _headline(data: RunViewData) -> None:
    h = data.headline
    c1, c2, c3, c4 = st.columns(4, border=True)
    c1.metric(
        "Time waiting for data",
        "—" if h.wait_fraction is None else f"{h.wait_fraction:.0%}",
        help="Share of the loop's time spent blocked in next(), waiting for the DataLoader.",
    )
    c2.metric(
        "Batches per second",
        "—" if h.batches_per_s is None else f"{h.batches_per_s:,.1f}",
        help=f"{h.batches:,} batches in the time shown.",
    )
    if h.gpu_util_pct is not None:
        c3.metric("Mean GPU utilisation", f"{h.gpu_util_pct:.0f}%")
    else:
        busy = "—" if h.wait_fraction is None else f"{1 - h.wait_fraction:.0%}"
        c3.metric(
            "Loop busy (no GPU data)",
            busy,
            help="No GPU samples were recorded (no NVIDIA driver/GPU). Shown instead: the share of the loop's "
            "time not spent waiting for data.",
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

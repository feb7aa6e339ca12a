"""The runs table: every run in the file with its configuration, throughput, wait share and verdict."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import streamlit as st

from app import state
from app.components import welcome
from app.diagnosis import Unavailable

VERDICT_RUNS = 25  # diagnose at most this many of the newest runs for the table
CONFIG_COLUMNS = ("num_workers", "batch_size", "pin_memory", "prefetch_factor", "persistent_workers")


def page() -> None:
    path = state.db_path()
    if welcome.reader_or_welcome(path) is None:
        return
    st.title("Runs", anchor=False)
    runs = state.runs_table(path)
    table = runs_frame(path, runs)
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        column_config={
            "started": st.column_config.DatetimeColumn("started", format="YYYY-MM-DD HH:mm:ss"),
            "wait share": st.column_config.ProgressColumn(
                "waiting for data", format="percent", min_value=0, max_value=1
            ),
            "batches/s": st.column_config.NumberColumn(format="%.1f"),
            "GPU util %": st.column_config.NumberColumn(format="%.0f"),
            "configuration": st.column_config.TextColumn(width="large"),
        },
    )
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
    for i, r in enumerate(runs.to_dict("records")):
        config = r.get("config") or {}
        verdict = "—"
        if i < VERDICT_RUNS:
            report = state.run_diagnosis(path, int(r["id"]), None, {str(k): v for k, v in r.items()})
            verdict = "n/a" if isinstance(report, Unavailable) else report.verdict
        rows.append(
            {
                "run": f"{r['name']} (#{r['id']})",
                "state": "live" if r["state"] == "running" else r["state"],
                "started": dt.datetime.fromtimestamp(float(r["started_at"])),
                "verdict": verdict,
                "batches/s": r["batches_per_s"],
                "wait share": r["wait_fraction"],
                "GPU util %": r["gpu_util_pct"],
                "batches": int(r["batches"]),
                "configuration": ", ".join(f"{k}={config[k]}" for k in CONFIG_COLUMNS if config.get(k) is not None),
            }
        )
    frame = pd.DataFrame(rows)
    for column in ("batches/s", "wait share", "GPU util %"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame

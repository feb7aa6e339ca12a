"""Compare two or more runs: what differs in their configuration, throughput, wait share, and overlaid curves."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import state
from app.charts import compare as charts
from app.components import welcome
from app.diagnosis import Unavailable
from app.plain import md
from collector.diagnosis.text import WAITING_DEFINITION
from collector.errors import StallwatchError

PLOT_CONFIG = {"displaylogo": False}


def page() -> None:
    path = state.db_path()
    if welcome.reader_or_welcome(path) is None:
        return
    st.title("Compare runs", anchor=False)
    runs = state.run_list(path)
    labels = {int(r["id"]): f"{r['name']} (#{r['id']})" for r in runs.to_dict("records")}
    default = [i for i in st.session_state.get(state.COMPARE_KEY, []) if i in labels] or list(labels)[:2][::-1]
    chosen = st.multiselect(
        "Runs to compare (the first is the baseline)",
        list(labels),
        default=default,
        format_func=labels.__getitem__,
        key="sw_compare_pick",
    )
    if len(chosen) < 2:
        st.info("Pick two or more runs, e.g. one before and one after applying a suggestion.")
        return
    try:
        data = state.compare_data(path, tuple(int(i) for i in chosen))
    except StallwatchError as exc:
        st.error(md(exc), icon=":material/error:")
        return
    for line in data.damaged:  # a damaged run is left out, with its one line: NOTE [ Values from a file ]
        st.warning(md(line), icon=":material/report:")
    if len(data.runs) < 2:
        return
    rows = {int(r["id"]): r for r in runs.to_dict("records")}
    compared = data.runs.assign(wait_fraction=[_waiting(path, int(i), rows[int(i)]) for i in data.runs["id"]])
    summary = summary_frame(compared)
    st.dataframe(
        summary,
        hide_index=True,
        width="stretch",
        column_config={
            "waiting for data": st.column_config.ProgressColumn(
                format="%.0f%%", min_value=0, max_value=100, help=WAITING_DEFINITION
            ),
            "batches/s": st.column_config.NumberColumn(format="%.1f"),
            "speed-up vs baseline": st.column_config.NumberColumn(format="×%.2f"),
        },
    )
    st.subheader("Configuration", anchor=False)
    diff = config_diff(data.runs)
    if diff.empty:
        st.caption("The runs have the same DataLoader configuration.")
    else:
        st.dataframe(diff, width="stretch")
    st.plotly_chart(charts.overlay_figure(data.curves), width="stretch", config=PLOT_CONFIG)
    a, b = st.columns(2, gap="medium")
    a.plotly_chart(charts.throughput_figure(compared), width="stretch", config=PLOT_CONFIG)
    b.plotly_chart(charts.progress_figure(data.progress), width="stretch", config=PLOT_CONFIG)


def summary_frame(runs: pd.DataFrame) -> pd.DataFrame:
    base = runs["batches_per_s"].iloc[0]
    frame = pd.DataFrame(
        {
            "run": runs["run"],
            "batches": runs["batches"],
            "batches/s": runs["batches_per_s"],
            "speed-up vs baseline": [None if not base or r is None else r / base for r in runs["batches_per_s"]],
            "waiting for data": pd.to_numeric(runs["wait_fraction"], errors="coerce") * 100,
            "GPU util": ["no GPU data" if u is None or pd.isna(u) else f"{u:.0f}%" for u in runs["gpu_util_pct"]],
        }
    )
    for column in ("batches/s", "speed-up vs baseline", "waiting for data"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def _waiting(path: str, run_id: int, run: dict) -> float | None:
    """The run's one waiting figure, from its diagnosis (NOTE [ One waiting figure ]); None without one."""
    report = state.run_diagnosis(path, run_id, None, {str(k): v for k, v in run.items()})
    return None if isinstance(report, Unavailable) else float(report.summary["stall_fraction"])


def config_diff(runs: pd.DataFrame) -> pd.DataFrame:
    """Configuration keys whose values differ between the runs: one row per key, one column per run."""
    configs = dict(zip(runs["run"], runs["config"], strict=True))
    keys = sorted({k for c in configs.values() for k in c})
    rows = {k: {run: _text(c.get(k)) for run, c in configs.items()} for k in keys}
    frame = pd.DataFrame.from_dict(rows, orient="index")
    if frame.empty:
        return frame
    return frame[frame.nunique(axis=1) > 1]


def _text(value: object) -> str:
    return "—" if value is None else str(value)

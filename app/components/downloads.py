"""Downloads of a run: any of its tables as CSV or Parquet, and the diagnosis as text or JSON."""

from __future__ import annotations

import json
from functools import partial

import streamlit as st

from app import state
from app.diagnosis import Unavailable
from app.plain import md
from collector.diagnosis.report_types import Report
from collector.diagnosis.text import render as report_text
from collector.store.series import TABLES


def downloads(path: str, run: dict, report: Report | Unavailable) -> None:
    run_id, name = int(run["id"]), str(run["name"])
    with st.expander("Download this run's records and report", icon=":material/download:"):
        table_col, format_col, button_col = st.columns([2, 1, 2], vertical_alignment="bottom")
        table = table_col.selectbox("Table", TABLES, key="sw_dl_table")
        fmt = format_col.radio("Format", ("csv", "parquet"), horizontal=True, key="sw_dl_format")
        button_col.download_button(
            f"Download {table}.{fmt}",
            data=partial(state.table_bytes, path, run_id, table, fmt),
            file_name=f"{name}-{table}.{fmt}",
            mime="text/csv" if fmt == "csv" else "application/vnd.apache.parquet",
            on_click="ignore",
            key="sw_dl_table_button",
        )
        if isinstance(report, Report):
            text_col, json_col = st.columns(2)
            text_col.download_button(
                "Download the text report",
                data=report_text(report),
                file_name=f"{name}-report.txt",
                mime="text/plain",
                on_click="ignore",
                key="sw_dl_report",
            )
            json_col.download_button(
                "Download the report as JSON",
                data=json.dumps(report.to_dict(), indent=2, default=str),
                file_name=f"{name}-report.json",
                mime="application/json",
                on_click="ignore",
                key="sw_dl_json",
            )
        else:
            st.caption(f"No report to download: {md(report.message)}")

"""The sweeps view: each `python -m collector sweep` as a table, two charts and the winning line."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import state
from app.charts import sweep as charts
from app.components import welcome
from collector.store import sweep_queries
from collector.store.reader import Reader
from collector.sweep.grid import Setting

PLOT_CONFIG = {"displaylogo": False}
PICK_KEY = "sw_sweep_pick"


def page() -> None:
    reader = welcome.reader_or_welcome(state.db_path())
    if reader is not None:
        render(reader)


def render(reader: Reader) -> None:
    st.title("Sweeps", anchor=False)
    sweeps = sweep_queries.sweeps(reader)
    if sweeps.empty:
        st.info(
            "No sweeps recorded in this file. Tune a loader on your own data with "
            "`python -m collector sweep train.py:make_loader` (see docs/sweep.md).",
            icon=":material/tune:",
        )
        return
    labels = {str(r.sweep): sweep_label(r) for r in sweeps.itertuples()}
    sweep = st.selectbox("Sweep", list(labels), format_func=labels.__getitem__, key=PICK_KEY)
    trials = sweep_queries.sweep_trials(reader, sweep)
    chosen = trials[trials["chosen"]]
    if chosen.empty:
        st.warning("This sweep chose no setting (it was stopped, or every setting failed).", icon=":material/warning:")
    else:
        row = chosen.iloc[0]
        setting = Setting.from_dict({k: _plain(row[k]) for k in sweep_queries.SETTING_COLUMNS})
        st.success(f"Chosen: run #{int(row['run_id'])}, {row['samples_per_s']:,.0f} samples/s", icon=":material/star:")
        st.code(setting.code(), language="python")
    left, right = st.columns(2, gap="medium")
    left.plotly_chart(charts.throughput_figure(trials), width="stretch", config=PLOT_CONFIG)
    right.plotly_chart(charts.memory_figure(trials), width="stretch", config=PLOT_CONFIG)
    st.dataframe(
        trials_table(trials),
        hide_index=True,
        width="stretch",
        column_config={
            "samples/s": st.column_config.NumberColumn(format="%.1f"),
            "waits": st.column_config.ProgressColumn(format="percent", min_value=0, max_value=1),
            "start-up s": st.column_config.NumberColumn(format="%.2f"),
            "peak RSS MiB": st.column_config.NumberColumn(format="%.0f"),
        },
    )
    failed = trials[trials["error"].notna()]
    for run_id, name, error in zip(failed["run_id"], failed["name"], failed["error"], strict=True):
        st.caption(f"Run #{run_id} ({name}) failed: {error}")


def sweep_label(row: object) -> str:
    """``sweep-20250101-120000 · 6 trials · paced 30 ms``."""
    step = getattr(row, "paced_step_s", None)
    pace = "unpaced" if step is None or pd.isna(step) else f"paced {float(step) * 1000:.0f} ms"
    failed = int(getattr(row, "failed", 0) or 0)
    extra = f" · {failed} failed" if failed else ""
    return f"{getattr(row, 'sweep', '?')} · {int(getattr(row, 'trials', 0))} trials · {pace}{extra}"


def trials_table(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials as shown: settings, results, and a star on the chosen one."""
    return pd.DataFrame(
        {
            "": ["★" if c else "" for c in trials["chosen"]],
            "run": trials["run_id"],
            "num_workers": trials["num_workers"],
            "prefetch_factor": trials["prefetch_factor"],
            "pin_memory": trials["pin_memory"],
            "persistent_workers": trials["persistent_workers"],
            "batch_size": trials["batch_size"],
            "samples/s": trials["samples_per_s"],
            "waits": trials["wait_share"],
            "start-up s": trials["startup_s"],
            "peak RSS MiB": trials["peak_rss_bytes"].astype(float) / 2**20,
            "error": trials["error"],
        }
    )


def _plain(value: object) -> object:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    return value.item() if hasattr(value, "item") else value

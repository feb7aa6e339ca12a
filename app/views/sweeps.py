"""The sweeps view: each `python -m collector sweep` as a table, two charts and the winning line."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import state
from app.charts import sweep as charts
from app.components import welcome
from app.plain import md
from collector.store import sweep_queries
from collector.store.reader import Reader
from collector.sweep.grid import code, from_row

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
        # a sweep's rows keep no threads, and the line to paste names none
        setting = from_row({k: _plain(row[k]) for k in sweep_queries.SETTING_COLUMNS}, threads=1)
        st.success(f"Chosen: run #{int(row['run_id'])}, {row['samples_per_s']:,.0f} samples/s", icon=":material/star:")
        st.code(code(setting), language="python", wrap_lines=True)
    left, right = st.columns(2, gap="medium")
    left.plotly_chart(charts.throughput_figure(trials), width="stretch", config=PLOT_CONFIG)
    right.plotly_chart(charts.memory_figure(trials), width="stretch", config=PLOT_CONFIG)
    paced = bool(trials["paced_step_s"].notna().any())
    st.dataframe(
        trials_table(trials, paced=paced),
        hide_index=True,
        width="stretch",
        column_config={  # as `collector sweep` prints it
            "waits": st.column_config.ProgressColumn(format="%.0f%%", min_value=0, max_value=100)
        },
    )
    if not paced:
        st.caption(
            "Unpaced sweep: each trial's loop only fetches batches, with no training step between them, so it "
            "waits nearly all the time whatever the setting; throughput is what tells the settings apart. "
            "Pace it like your model (`--step-ms`, or `--like-run DB:RUN`) to see which setting keeps it fed."
        )
    failed = trials[trials["error"].notna()]
    for run_id, name, error in zip(failed["run_id"], failed["name"], failed["error"], strict=True):
        st.caption(f"Run #{run_id} ({md(name)}) failed: {md(error)}")


def sweep_label(row: object) -> str:
    """``sweep-20250101-120000 · 6 trials · paced 30 ms``."""
    step = getattr(row, "paced_step_s", None)
    pace = "unpaced" if step is None or pd.isna(step) else f"paced {float(step) * 1000:.0f} ms"
    failed = int(getattr(row, "failed", 0) or 0)
    extra = f" · {failed} failed" if failed else ""
    return f"{getattr(row, 'sweep', '?')} · {int(getattr(row, 'trials', 0))} trials · {pace}{extra}"


def trials_table(trials: pd.DataFrame, *, paced: bool = True) -> pd.DataFrame:
    """The trials as shown: settings, results, a star on the chosen one; "—" where a value does not apply.

    ``waits`` only for a paced sweep: unpaced, every trial waits ~100% by construction.
    """
    workers = trials["num_workers"]
    table = pd.DataFrame(
        {
            "": ["★" if c else "" for c in trials["chosen"]],
            "run": trials["run_id"],
            "num_workers": workers,
            "prefetch_factor": _cells(trials["prefetch_factor"], "{:.0f}", "— (no workers)"),
            "pin_memory": _cells(trials["pin_memory"], "{}", "—", on_off=True),
            "persistent_workers": [
                "— (no workers)" if w == 0 else c
                for w, c in zip(workers, _cells(trials["persistent_workers"], "{}", "—", on_off=True), strict=True)
            ],
            "batch_size": _cells(trials["batch_size"], "{:.0f}", "factory's"),
            "samples/s": _cells(trials["samples_per_s"], "{:,.1f}", "—"),
            "waits": pd.to_numeric(trials["wait_share"], errors="coerce") * 100,
            "start-up": _cells(trials["startup_s"], "{:.2f} s", "—"),
            "peak RSS": _cells(trials["peak_rss_bytes"].astype(float) / 2**20, "{:,.0f} MiB", "—"),
            "error": _cells(trials["error"], "{}", ""),
        }
    )
    return table if paced else table.drop(columns="waits")


def _cells(column: pd.Series, fmt: str, missing: str, *, on_off: bool = False) -> list[str]:
    """Values as text, ``missing`` for NULL: a table cell never reads "None"."""
    out = []
    for value in column:
        plain = _plain(value)
        if plain is None:
            out.append(missing)
        else:
            out.append(("on" if plain else "off") if on_off else fmt.format(plain))
    return out


def _plain(value: object) -> object:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    return value.item() if hasattr(value, "item") else value

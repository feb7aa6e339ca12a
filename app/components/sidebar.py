"""The sidebar: which file is open (and opening another) and which run the run view shows."""

from __future__ import annotations

import os

import streamlit as st

from app import state
from app.components import welcome
from app.plain import md
from collector.store.reader import Reader

WATCH_S = 1.0  # how often an open page checks the file for a new run (NOTE [ Live from the first second ])


def render() -> None:
    demo = st.session_state.get(welcome.DEMO_KEY)
    if demo is not None and demo.get("process") is not None:
        demo["process"].poll()  # reap the demo once it has finished (no zombie)
    state.take_run_from_url()
    path = state.db_path()
    with st.sidebar:
        _watch_file(path, signature(path))
        st.markdown("### :material/hourglass_top: stallwatch")
        typed = st.text_input(
            "Database file",
            value=path,
            key=f"sw_db_input_{path}",
            help="A stallwatch SQLite file. Opened read-only; nothing is ever written to it.",
        )
        refused = state.may_open(typed) if typed and typed != path else None
        if refused is not None:
            st.error(md(refused), icon=":material/block:")
        elif typed and typed != path:
            st.session_state[state.DB_KEY] = typed
            st.session_state[state.RUN_KEY] = None
            st.rerun()
        reader = state.open_reader(path)
        if not isinstance(reader, Reader):
            st.caption("No runs to pick: " + ("file not found." if not os.path.exists(path) else "see the page."))
            return
        try:
            runs = state.run_list(path)
        except Exception:  # noqa: BLE001 - the page itself explains an unreadable file
            return
        if runs.empty:
            st.caption("No runs in this file yet.")
            return
        labels = {
            int(r["id"]): f"{r['name']} · #{r['id']} · {'live' if r['state'] == 'running' else r['state']}"
            for r in runs.to_dict("records")
        }
        current = st.session_state.get(state.RUN_KEY)
        ids = list(labels)
        index = ids.index(current) if current in labels else 0
        picked = st.selectbox(
            "Run", ids, index=index, format_func=labels.__getitem__, key=f"sw_run_pick_{path}_{current}"
        )
        if picked != current:
            st.session_state[state.RUN_KEY] = picked
        st.caption(f"{len(runs)} run(s) in the file.")


def signature(path: str, *, fresh: bool = False) -> tuple[tuple[int, str], ...]:
    """(id, state) of every run in ``path``; empty for a missing, unreadable or empty file.

    ``fresh`` reads the file now instead of the run list cached for a second (one small query).
    """
    reader = state.open_reader(path)
    if not isinstance(reader, Reader):
        return ()
    try:
        runs = reader.runs() if fresh else state.run_list(path)
    except Exception:  # noqa: BLE001 - the page itself explains an unreadable file
        return ()
    return tuple(zip(runs["id"].astype(int).tolist(), runs["state"].astype(str).tolist(), strict=True))


# NOTE [ Live from the first second ]
# The natural order is: open the dashboard, then start training. The page
# (welcome, run view or run picker) was drawn from the file as it was then,
# so a small fragment re-reads the file's run list every WATCH_S and reruns
# the whole page when a run appears or changes state. It draws nothing and
# reads one cached query, so it costs next to nothing while nothing changes.
@st.fragment(run_every=WATCH_S)
def _watch_file(path: str, known: tuple[tuple[int, str], ...]) -> None:
    if signature(path, fresh=True) != known:
        st.rerun(scope="app")

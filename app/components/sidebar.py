"""The sidebar: which file is open (and opening another) and which run the run view shows."""

from __future__ import annotations

import os

import streamlit as st

from app import state
from app.components import welcome
from collector.store.reader import Reader


def render() -> None:
    demo = st.session_state.get(welcome.DEMO_KEY)
    if demo is not None and demo.get("process") is not None:
        demo["process"].poll()  # reap the demo once it has finished (no zombie)
    state.take_run_from_url()
    path = state.db_path()
    with st.sidebar:
        st.markdown("### :material/hourglass_top: stallwatch")
        typed = st.text_input(
            "Database file",
            value=path,
            key=f"sw_db_input_{path}",
            help="A stallwatch SQLite file. Opened read-only; nothing is ever written to it.",
        )
        if typed and typed != path:
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

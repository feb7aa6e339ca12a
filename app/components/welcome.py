"""What the page shows when there is nothing to show: a bad file explained, or an empty one with a one-click demo."""

from __future__ import annotations

import os
import sys

import streamlit as st

from app import demo_launcher, state
from app.plain import md
from app.settings import DEFAULT_DB, default_db, demo_db_for
from collector.store.reader import Reader

DEMO_KEY = "sw_demo"  # (pid, db, log) of the demo this session started
RECORD_SNIPPET = f"""import collector

loader = DataLoader(dataset, batch_size=64, num_workers=4)
# records every batch's wait into {DEFAULT_DB}
for images, labels in collector.watch(loader):
    ...  # your training step, unchanged"""


def reader_or_welcome(path: str) -> Reader | None:
    """The reader when ``path`` holds runs; otherwise render why not (and the demo offer) and return None."""
    reader = state.open_reader(path)
    if isinstance(reader, Reader):
        try:
            has_runs = not state.run_list(path).empty
        except Exception as exc:  # noqa: BLE001 - a file that breaks mid-read gets a message, not a traceback
            st.error(md(f"{path} cannot be read: {exc}"), icon=":material/error:")
            return None
        if has_runs:
            return reader
        welcome(path, f"`{path}` holds no runs yet.")
        return None
    if not os.path.exists(path):
        welcome(path, f"Nothing recorded yet: there is no `{path}` here.")
        return None
    st.error(f"**This file cannot be shown.** {md(reader)}", icon=":material/error:")
    st.caption("Nothing was written to it. Open another file in the sidebar, or record a run into a new one.")
    return None


def welcome(path: str, reason: str) -> None:
    st.title("stallwatch", anchor=False)
    st.markdown(
        "See when your GPU sits idle waiting for the PyTorch DataLoader, and which setting to change. " + reason
    )
    demo = st.session_state.get(DEMO_KEY)
    if demo is not None and demo["db"] == os.path.abspath(path):
        _demo_starting(demo)
        return
    left, right = st.columns(2, gap="large", border=True)
    with left:
        st.subheader("Try it in one click", anchor=False)
        seconds = demo_launcher.demo_seconds()
        st.write(
            f"Starts a real {seconds:g}-second CPU training loop whose DataLoader is starved (`num_workers=0` over "
            "slow storage), records it, and shows it here live with its diagnosis."
        )
        demo_db = demo_db_for(default_db(sys.argv[1:], os.environ))  # NOTE [ What the dashboard opens ]
        if st.button("Start the demo", type="primary", icon=":material/play_arrow:", key="sw_start_demo"):
            process, log = demo_launcher.start_demo(demo_db)
            st.session_state[DEMO_KEY] = {"pid": process.pid, "db": demo_db, "log": log, "process": process}
            st.session_state[state.DB_KEY] = demo_db
            st.session_state[state.RUN_KEY] = None
            st.rerun()
        if os.path.exists(demo_db) and os.path.abspath(demo_db) != os.path.abspath(path):
            if st.button("Open the earlier demo recording", key="sw_open_demo"):
                st.session_state[state.DB_KEY] = demo_db
                st.session_state[state.RUN_KEY] = None
                st.rerun()
            st.caption(f"The demo writes to `{demo_db}`.")
    with right:
        st.subheader("Record your own loop", anchor=False)
        st.code(RECORD_SNIPPET, language="python", wrap_lines=True)
        st.caption(
            "Or point the dashboard at a file: `stallwatch dashboard PATH`. This page shows the first run "
            "recorded here as soon as it starts; no need to reload."
        )


@st.fragment(run_every=1.0)
def _demo_starting(demo: dict) -> None:
    """Polls until the demo's first run is in its file, then reruns the whole page onto it."""
    process = demo.get("process")
    reader = state.open_reader(demo["db"])
    if isinstance(reader, Reader) and not reader.runs().empty:
        st.rerun()
    code = process.poll() if process is not None else None
    if code is not None and code != 0:
        st.error(f"The demo exited with status {code}.", icon=":material/error:")
        st.code(demo_launcher.tail(demo["log"]) or "(no output)", language="text")
        if st.button("Forget it", key="sw_forget_demo"):
            del st.session_state[DEMO_KEY]
            st.rerun(scope="app")
        return
    st.info(
        f"Starting the demo (importing PyTorch, then recording into `{demo['db']}`)…", icon=":material/rocket_launch:"
    )

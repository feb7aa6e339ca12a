"""The dashboard's entry script, a router: ``streamlit run app [-- --db PATH]`` from the repository root."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Streamlit puts only app/ on sys.path; the app's modules import each other as app.xxx.
REPO_ROOT = str(Path(__file__).resolve().parents[1])
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

import streamlit as st  # noqa: E402

from app import state  # noqa: E402
from app.components import sidebar  # noqa: E402
from app.guard import page_boundary  # noqa: E402

st.set_page_config(page_title="stallwatch", page_icon=":material/hourglass_top:", layout="wide")

HERE = os.path.dirname(os.path.abspath(__file__))
pages = [
    st.Page(os.path.join(HERE, "routes", "run.py"), title="Run", icon=":material/monitoring:", default=True),
    st.Page(os.path.join(HERE, "routes", "runs.py"), title="Runs", icon=":material/table_rows:"),
    st.Page(os.path.join(HERE, "routes", "compare.py"), title="Compare", icon=":material/compare_arrows:"),
    st.Page(os.path.join(HERE, "routes", "sweeps.py"), title="Sweeps", icon=":material/tune:"),
]
navigation = st.navigation(pages)
with page_boundary(state.db_path()):
    sidebar.render()
with page_boundary(state.db_path()):
    navigation.run()

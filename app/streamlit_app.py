"""The dashboard's entry script, a router: ``stallwatch dashboard [DB]``, or ``streamlit run app`` in a clone."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Streamlit puts only this folder on sys.path; in a clone, the collector sits beside it.
REPO_ROOT = str(HERE.parent)
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)


def _bind_app_package() -> None:
    """Make ``import app`` mean this folder: app/ in a clone, stallwatch_app/ once installed.

    See NOTE [ The app's package name ] in pyproject.toml. Binding the name to this
    folder's file also keeps a user's own ``app/`` in the working directory from being
    picked up instead.
    """
    bound = sys.modules.get("app")
    if bound is not None and Path(getattr(bound, "__file__", "") or "").resolve().parent == HERE:
        return
    spec = importlib.util.spec_from_file_location("app", HERE / "__init__.py", submodule_search_locations=[str(HERE)])
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the dashboard package from {HERE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["app"] = module
    spec.loader.exec_module(module)


_bind_app_package()

import streamlit as st  # noqa: E402

from app import state  # noqa: E402
from app.components import sidebar  # noqa: E402
from app.guard import page_boundary  # noqa: E402

st.set_page_config(page_title="stallwatch", page_icon=":material/hourglass_top:", layout="wide")

pages = [
    st.Page(os.path.join(HERE, "routes", "run.py"), title="Run", icon=":material/monitoring:", default=True),
    st.Page(os.path.join(HERE, "routes", "runs.py"), title="Runs", icon=":material/table_rows:"),
    st.Page(os.path.join(HERE, "routes", "job.py"), title="Job", icon=":material/hub:"),
    st.Page(os.path.join(HERE, "routes", "compare.py"), title="Compare", icon=":material/compare_arrows:"),
    st.Page(os.path.join(HERE, "routes", "sweeps.py"), title="Sweeps", icon=":material/tune:"),
]
navigation = st.navigation(pages)
with page_boundary(state.db_path()):
    sidebar.render()
with page_boundary(state.db_path()):
    navigation.run()

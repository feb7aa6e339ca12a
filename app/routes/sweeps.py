"""Page script for st.navigation: the sweeps view when it is installed, else a plain note."""

import importlib
from types import ModuleType

import streamlit as st

from app import state
from app.views import welcome

sweeps: ModuleType | None
try:
    sweeps = importlib.import_module("app.views.sweeps")
except ImportError:
    sweeps = None

path = state.db_path()
if sweeps is None or not hasattr(sweeps, "render"):
    st.title("Sweeps", anchor=False)
    st.info("No sweeps recorded.", icon=":material/tune:")
else:
    reader = welcome.reader_or_welcome(path)
    if reader is not None:
        sweeps.render(reader)

"""The app's one broad ``except``: a page that fails shows a short message instead of a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from app.plain import md
from collector.errors import StallwatchError


@contextmanager
def page_boundary(path: str) -> Iterator[None]:
    """Streamlit's rerun/stop signals are BaseExceptions and pass through untouched."""
    try:
        yield
    except StallwatchError as exc:
        st.error(md(exc), icon=":material/error:")
    except Exception as exc:  # noqa: BLE001 - the boundary: never a traceback on the page
        st.error(
            f"stallwatch could not show {md(path)}: {type(exc).__name__}: {md(exc)}. Nothing was written to the file.",
            icon=":material/error:",
        )

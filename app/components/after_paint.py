"""A signal from the browser that the page's first chart has painted, so the charts below it can mount after it."""

from __future__ import annotations

from functools import cache

import streamlit as st
from streamlit.components.v2.types import ComponentRenderer

# NOTE [ First chart first ]
# The browser evaluates Plotly's 4.7 MB bundle when the first chart arrives, and
# every chart that arrives meanwhile mounts with the first in one long task before
# anything paints: on a warm reload of a 1.2M-batch run the six detail charts held
# the first back by about half a second. So a finished run's detail charts wait in
# a fragment for this signal. It sets its state once the first chart's SVG is in the
# page and a frame has painted it (or after WAIT_MS if none comes), which reruns that
# fragment alone (queued behind a full run still diagnosing, never preempting it)
# and it draws the charts. The state lasts the session, so a rerun draws them at
# once; a reload is a new session and waits again. (The live page keeps its two
# timed fragments, NOTE [ Cheap live page ] in app/views/run.py.)
WAIT_MS = 5000  # in milliseconds
JS = """
export default function ({ setStateValue }) {
  let asked = false;
  const ask = () => { if (!asked) { asked = true; setStateValue("painted", true); } };
  const poll = setInterval(() => {
    if (document.querySelector(".js-plotly-plot .main-svg")) {
      clearInterval(poll);
      requestAnimationFrame(() => setTimeout(ask, 0));  // after the frame that paints it
    }
  }, 50);
  const limit = setTimeout(ask, WAIT_MS);
  return () => { clearInterval(poll); clearTimeout(limit); };
}
""".replace("WAIT_MS", str(WAIT_MS))


@cache
def _signal() -> ComponentRenderer:
    return st.components.v2.component("stallwatch.after_paint", js=JS)


def first_chart_painted(key: str) -> bool:
    """Whether the browser has painted the page's first chart; once it has, True for the rest of the session."""
    return bool(_signal()(key=key, height=0).get("painted"))

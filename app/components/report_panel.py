"""The diagnosis on the page: the verdict banner, symptoms with evidence, suggestions with the line to paste."""

from __future__ import annotations

import streamlit as st

from app.diagnosis import Unavailable
from app.plain import md
from collector.diagnosis.report_types import Report

VERDICTS = {
    "input-bound": ("Input-bound", "The training loop is starved: it spends most of its time waiting for data."),
    "partly-input-bound": ("Partly input-bound", "The loop waits for data often enough to cost real time."),
    "not-input-bound": (
        "Not input-bound",
        "Data arrives before the loop asks for it; the DataLoader is not the bottleneck.",
    ),
    "insufficient-data": ("Not enough data yet", "Too few batches to say anything; keep it running."),
}
SEVERITY_ICONS = {"high": ":material/error:", "medium": ":material/warning:", "low": ":material/info:"}


def verdict_banner(report: Report | Unavailable) -> None:
    if isinstance(report, Unavailable):
        (st.info if report.insufficient else st.warning)(md(report.message), icon=":material/troubleshoot:")
        return
    title, sentence = VERDICTS.get(report.verdict, (report.verdict, ""))
    lead = report.symptoms[0].evidence if report.symptoms else sentence
    if report.verdict == "insufficient-data":  # the cards show the figure already: the banner must agree
        s = report.summary
        lead = f"waiting for data {s['stall_fraction']:.0%} of the time so far, over {s['batches']} batches; keep it running."
    text = f"**{title}** — {lead}"
    if report.verdict == "input-bound":
        st.error(text, icon=":material/hourglass_top:")
    elif report.verdict == "partly-input-bound":
        st.warning(text, icon=":material/hourglass_bottom:")
    elif report.verdict == "not-input-bound":
        st.success(text, icon=":material/check_circle:")
    else:
        st.info(text, icon=":material/hourglass_empty:")


def findings(report: Report | Unavailable) -> None:
    """Symptoms on the left, what to change on the right."""
    if isinstance(report, Unavailable):
        return
    left, right = st.columns([1, 1], gap="large")
    with left:
        st.subheader("What we see", divider="gray")
        if not report.symptoms:
            st.write("No symptoms of data-loading starvation.")
        for symptom in report.symptoms:
            icon = SEVERITY_ICONS.get(symptom.severity, "")
            st.markdown(f"{icon} **{symptom.id.replace('_', ' ')}** · {symptom.severity}  \n{symptom.evidence}")
            st.caption(f"confidence {symptom.confidence:.0%}")
    with right:
        st.subheader("What to change", divider="gray")
        change = report.code_change()
        if change:
            st.code(change, language="python", wrap_lines=True)
        rec = report.recommendation
        if rec is not None:
            st.markdown(f"{_speedup(rec.expected_speedup, rec.expected_speedup_range)} for this whole change")
            if rec.alternatives:
                st.caption(
                    "considered: "
                    + "; ".join(
                        ", ".join(f"{k}={v}" for k, v in a.changes.items())
                        + f" {_speedup(a.expected_speedup, a.expected_speedup_range, bold=False)}"
                        for a in rec.alternatives
                    )
                )
        if not report.suggestions:
            st.write("Nothing to change in the DataLoader.")
        for s in report.suggestions:
            speed = "" if s.expected_speedup is None else f" · {_speedup(s.expected_speedup, s.expected_speedup_range)}"
            st.markdown(f"`{s.parameter}`: `{s.current!r}` → `{s.suggested!r}`{speed}  \n{s.reason}")
            if s.rule_of_thumb not in (None, ""):
                st.caption(f"rule of thumb: {s.rule_of_thumb}")
    _tuning(report)
    stage_table(report)
    for note in report.notes:
        st.caption(md(note))


def _tuning(report: Report) -> None:
    """A tuned run's trials: each setting tried, predicted against measured, kept or reverted."""
    if not report.tuning:
        return
    st.subheader("Tuned live", divider="gray")
    if report.tuned:
        st.markdown(f"**{report.tuned}**")
    rows = [
        {
            "epoch": t["epoch"],
            "tried": ", ".join(f"{k}={v}" for k, v in t["setting"].items() if t["baseline"].get(k) != v),
            "predicted": t["predicted_speedup"],
            "measured": t["measured_speedup"],
            "noise": t["noise"],
            "result": "kept" if t["kept"] else "reverted",
            "why": t["why"],
        }
        for t in report.tuning
    ]
    st.dataframe(
        rows,
        hide_index=True,
        column_config={
            "predicted": st.column_config.NumberColumn(format="%.2fx"),
            "measured": st.column_config.NumberColumn(format="%.2fx"),
            "noise": st.column_config.NumberColumn("its noise", format="percent"),
        },
    )


def stage_table(report: Report) -> None:
    """Where the workers' fetch time goes, stage by stage (NOTE [ Stage timing ] in collector/record/stage_clock.py)."""
    if not report.stages:
        return
    st.subheader("Inside the workers", divider="gray")
    rows = [
        {
            "stage": row.stage,
            "calls": row.calls,
            "ms a sample": row.ms_per_sample,
            "share": row.share,
            "CPU": row.cpu_share,
            "blocked": None if row.cpu_share is None else 1.0 - row.cpu_share,
        }
        for row in report.stages
    ]
    st.dataframe(
        rows,
        hide_index=True,
        key="sw_stages",
        column_config={
            "ms a sample": st.column_config.NumberColumn(format="%.3f"),
            "share": st.column_config.ProgressColumn("share of the workers' time", format="percent", min_value=0.0),
            "CPU": st.column_config.NumberColumn("on a CPU", format="percent"),
            "blocked": st.column_config.NumberColumn("blocked", format="percent"),
        },
    )
    st.caption(
        "Each stage's own time in the timed fetches: a torchvision Compose step by position and class, PIL's open "
        "and decode, the dataset's own __getitem__, collate, the hand-over to the training process (beside the "
        "fetch); 'code file:function' rows are the stack sampler's. Blocked: waiting on storage, locks, sleeps "
        "or a core."
    )


def _speedup(speedup: float, low_high: tuple[float, float] | None, *, bold: bool = True) -> str:
    """``expected ×1.22 (0.98-1.61: uncertain on this machine, try it for an epoch)``: NOTE [ Honest ranges ]."""
    figure = f"**×{speedup:.2f}**" if bold else f"×{speedup:.2f}"
    if low_high is None:
        return f"expected {figure}"
    low, high = low_high
    doubt = ": uncertain on this machine, try it for an epoch" if low <= 1.0 else ""
    return f"expected {figure} ({low:.2f}-{high:.2f}{doubt})"

"""The report as text: what ``python -m collector report`` prints and the dashboard offers for download."""

from __future__ import annotations

from collector.diagnosis.report_types import PIPELINE_PARAMETERS, Report, Suggestion
from collector.diagnosis.units import ms

# NOTE [ One waiting figure ]
# A run has several honest "waiting" ratios: time inside next() over all time
# (summary.data_wait_fraction, which counts the hand-off of a batch that was
# already ready and the warm-up), wait over wait + step, the stall fraction.
# Shown side by side they read as three answers to one question (5%, 15.6%,
# 18% on one run). Every place a person reads "waiting for data" (this text,
# the dashboard's banner, cards, runs table, comparison) shows one of them:
# summary.stall_fraction, the figure the verdict reads, defined below.
WAITING_LABEL = "waiting for data"
OWN_TIME_SHOWN_S = 0.001  # the collector's own time in the epochs' starts, said from 1 ms
WAITING_DEFINITION = (
    "Share of the run's time after warm-up that the training loop sat blocked waiting for its next batch, "
    "beyond the normal hand-off of a batch that was already ready (later epochs' worker start-up included). "
    "The verdict reads this figure: input-bound from 20%, not input-bound under 5%."
)


def headline(report: Report) -> str:
    """``verdict: INPUT-BOUND: waiting for data 76% of the time after warm-up``: the one waiting figure."""
    return (
        f"{'job verdict' if report.ranks else 'verdict'}: {report.verdict.upper()}: "
        f"{WAITING_LABEL} {report.summary['stall_fraction']:.0%} "
        "of the time after warm-up" + _range(report.summary)
    )


def render(report: Report) -> str:
    """The report as readable text."""
    run, s = report.run, report.summary
    cfg, host = run.get("config") or {}, run.get("host") or {}
    gpus = host.get("gpus") or []
    where = "" if run.get("rank") is None else f" rank {run.get('rank')} of {run.get('world_size')}"
    where += "" if not run.get("job_id") else f", job {run.get('job_id')}"
    lines = [
        f"run {run.get('id')} {run.get('name')!r} ({run.get('status')}{where}): "
        f"{s['batches']} batches in {s['wall_s']:.1f} s" + ("" if not s.get("window") else f" (window {s['window']})"),
        "config: "
        + " ".join(
            f"{k}={cfg.get(k)}"
            for k in ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
        ),
        f"host: {host.get('usable_cores')} usable cores ({host.get('physical_cores')} physical), "
        f"{(host.get('ram_bytes') or 0) / 2**30:.1f} GiB RAM, " + (f"{len(gpus)} GPU(s)" if gpus else "no GPU sampled"),
        "",
        headline(report),
    ]
    edge = s.get("borderline")
    if edge:
        lines.append(
            f"  borderline: {edge['between'][0]} / {edge['between'][1]} (stall {edge['stall_fraction_range'][0]:.1%}"
            f"-{edge['stall_fraction_range'][1]:.1%} over epochs or windows straddles a threshold)"
        )
    util = s.get("gpu_util_pct")
    util_text = "n/a" if not util else f"mean {util['mean']:.0f}% p5 {util['p5']:.0f}% p95 {util['p95']:.0f}%"
    lines.append(
        f"  {s['batches_per_s']:.1f} batches/s (steady {s['steady_batches_per_s']:.1f}); wait p50 "
        f"{ms(s['wait_s']['p50'])} p95 {ms(s['wait_s']['p95'])}; step p50 {ms(s['step_s']['p50'])}; "
        f"GPU util {util_text}"
    )
    if s.get("folded_batches"):
        lines.append(
            f"  {s['folded_batches']} of the batches are past the file's window and read from per-second rollups: "
            f"the totals and the stall include them; percentiles and workers are over the {s['batches'] - s['folded_batches']} "
            "kept as rows (the first epoch and the newest)"
        )
    if s.get("warmup_s") or s.get("epoch_start_lost_s"):
        lines.append(f"  warm-up {s['warmup_s']:.2f} s; epoch starts lost {s['epoch_start_lost_s']:.2f} s")
    own = s.get("collector_s") or 0.0
    if own >= OWN_TIME_SHOWN_S:
        lines.append(f"  the collector's own set-up: {ms(own)}, not counted as waiting")
    lines += render_ranks(report)
    lines += render_loaders(report)
    if report.symptoms:
        lines += ["", "symptoms:"]
        lines += [
            f"  [{x.severity}] {x.id} (confidence {x.confidence:.2f}{', borderline' if x.borderline else ''}): {x.evidence}"
            for x in report.symptoms
        ]
    lines += render_tuning(report)
    lines += render_recommendation(report)
    loader = [g for g in report.suggestions if g.parameter not in PIPELINE_PARAMETERS]
    inside = [g for g in report.suggestions if g.parameter in PIPELINE_PARAMETERS]
    if loader:
        lines += ["", "each change:" if report.recommendation else "suggestions:"]
        lines += [line for g in loader for line in _suggestion(g)]
    lines += render_stages(report)
    if inside:
        lines += ["", "inside the pipeline (beyond the loader's settings):"]
        lines += [line for g in inside for line in _suggestion(g)]
    if loader:
        change = report.code_change()
        if change and report.recommendation is None:
            lines.append(f"  paste: {change}")
    if report.notes:
        lines += ["", "notes:"]
        lines += [f"  - {n}" for n in report.notes]
    return "\n".join(lines)


def _suggestion(g: Suggestion) -> list[str]:
    gain = "" if g.expected_speedup is None else f", {speedup_text(g.expected_speedup, g.expected_speedup_range)}"
    thumb = "" if g.rule_of_thumb is None else f"; rule of thumb: {g.rule_of_thumb}"
    return [f"  {g.parameter}: {g.current} -> {g.suggested}{gain}{thumb}", f"      {g.reason}"]


def render_stages(report: Report) -> list[str]:
    """The stage table: where the workers' fetch time goes (NOTE [ Stage timing ])."""
    if not report.stages:
        return []
    width = max(len(row.stage) for row in report.stages)
    lines = ["", "where the workers' time goes (share of their fetch time; cpu: of the stage's own time):"]
    lines.append(f"  {'stage':<{width}}  {'calls':>7}  {'ms/sample':>9}  {'share':>5}  {'cpu':>4}")
    for row in report.stages:
        cpu = "" if row.cpu_share is None else f"{row.cpu_share:.0%}"
        lines.append(f"  {row.stage:<{width}}  {row.calls:>7}  {row.ms_per_sample:>9.3f}  {row.share:>5.0%}  {cpu:>4}")
    return lines


def speedup_text(speedup: float, low_high: tuple[float, float] | None) -> str:
    """``expected 1.22x (0.98-1.61x: uncertain on this machine: try it for an epoch)``: NOTE [ Honest ranges ]."""
    if low_high is None:
        return f"expected {speedup:.2f}x"
    low, high = low_high
    doubt = ": uncertain on this machine: try it for an epoch" if low <= 1.0 else ""
    return f"expected {speedup:.2f}x ({low:.2f}-{high:.2f}x{doubt})"


def render_recommendation(report: Report) -> list[str]:
    """The one line to paste with the speed-up of that whole change, and the settings it was chosen over."""
    rec = report.recommendation
    if rec is None:
        return []
    lines = ["", "recommended:", f"  paste: {report.code_change()}"]
    unpriced = f" ({', '.join(rec.unpriced)}: not priced, counted as no change)" if rec.unpriced else ""
    lines.append(f"  {speedup_text(rec.expected_speedup, rec.expected_speedup_range)} for the whole change{unpriced}")
    if rec.alternatives:
        lines.append("  considered:")
        for a in rec.alternatives:
            what = ", ".join(f"{k}={v}" for k, v in a.changes.items())
            lines.append(f"    {what}: {speedup_text(a.expected_speedup, a.expected_speedup_range)}")
    return lines


def render_ranks(report: Report) -> list[str]:
    """One line per rank of a job: its verdict, stall and step, and the step time spent waiting for the straggler."""
    if not report.ranks:
        return []
    lines = ["", "ranks:"]
    for r in report.ranks:
        stall = r.get("stall_fraction")
        line = (
            f"  rank {r['rank']} (run {r['run_id']}): {r['verdict']}, "
            f"{WAITING_LABEL} {0.0 if stall is None else stall:.0%}, "
            f"wait p50 {ms(r.get('wait_p50_s'))}, step p50 {ms(r.get('step_p50_s'))}"
        )
        if r.get("straggler"):
            line += ": the straggler"
        elif r.get("collective_wait_s"):
            line += f" ({ms(r['collective_wait_s'])} of it waiting at the collective, not compute)"
        lines.append(line)
    return lines


def render_loaders(report: Report) -> list[str]:
    """One line per loader of the program, the costliest first: its verdict and what its stalls cost."""
    if len(report.loaders) < 2:
        return []
    lines = ["", "loaders (the costliest first; the report below is the first's):"]
    for r in report.loaders:
        head = f"  {r['name']} (run {r['run_id']}{', evaluation' if r.get('evaluation') else ''})"
        if r.get("verdict") is None:
            lines.append(f"{head}: no verdict: {r.get('why')}")
            continue
        share = "" if r.get("time_share") is None else f", {r['time_share']:.0%} of the program's time"
        lines.append(
            f"{head}: {r['verdict']}, {WAITING_LABEL} {r['stall_fraction'] or 0.0:.0%} over {r['batches']} batches"
            f"{share}, stalls cost {r['lost_s']:.1f} s"
        )
        if r.get("symptoms"):
            lines.append(f"      {'; '.join(r['symptoms'])}")
    return lines


def _range(s: dict[str, object]) -> str:
    r = s.get("stall_fraction_range")
    if not isinstance(r, list) or len(r) != 2:
        return ""
    return f" (range {r[0]:.0%}-{r[1]:.0%})"


def render_tuning(report: Report) -> list[str]:
    """A tuned run's trials, predicted against measured, and the line it ended with."""
    if not report.tuning:
        return []
    lines = ["", "tuning (each trial against the setting before it):"]
    for t in report.tuning:
        where = f"epoch {t['epoch']}" + (f" from batch {t['start_idx']}" if t["start_idx"] else "")
        changes = ", ".join(f"{k}={v}" for k, v in t["setting"].items() if t["baseline"].get(k) != v)
        low, high = t["predicted_range"]
        predicted = "n/a" if t["predicted_speedup"] is None else f"{t['predicted_speedup']:.2f}x"
        if low is not None and high is not None:
            predicted += f" ({low:.2f}-{high:.2f}x)"
        measured = "n/a" if t["measured_speedup"] is None else f"{t['measured_speedup']:.2f}x"
        lines.append(
            f"  {where}: {changes}: predicted {predicted}, measured {measured}: {'kept' if t['kept'] else 'reverted'}"
        )
        lines.append(f"      {t['why']}")
    if report.tuned:
        lines.append(f"  {report.tuned}")
    return lines

"""The report as text: what ``python -m collector report`` prints and the dashboard offers for download."""

from __future__ import annotations

from collector.diagnosis.findings import Report
from collector.diagnosis.units import ms


def render(report: Report) -> str:
    """The report as readable text."""
    run, s = report.run, report.summary
    cfg, host = run.get("config") or {}, run.get("host") or {}
    gpus = host.get("gpus") or []
    lines = [
        f"run {run.get('id')} {run.get('name')!r} ({run.get('status')}): {s['batches']} batches in {s['wall_s']:.1f} s"
        + ("" if not s.get("window") else f" (window {s['window']})"),
        "config: "
        + " ".join(
            f"{k}={cfg.get(k)}"
            for k in ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
        ),
        f"host: {host.get('usable_cores')} usable cores ({host.get('physical_cores')} physical), "
        f"{(host.get('ram_bytes') or 0) / 2**30:.1f} GiB RAM, " + (f"{len(gpus)} GPU(s)" if gpus else "no GPU sampled"),
        "",
        f"verdict: {report.verdict.upper()}: stalled {s['stall_fraction']:.0%} of the time after warm-up"
        + _range(s)
        + f"; waiting for data {s['data_wait_fraction']:.0%} of the loader's {s.get('active_s', s['wall_s']):.1f} s",
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
    if s.get("warmup_s") or s.get("epoch_start_lost_s"):
        lines.append(f"  warm-up {s['warmup_s']:.2f} s; epoch starts lost {s['epoch_start_lost_s']:.2f} s")
    if report.symptoms:
        lines += ["", "symptoms:"]
        lines += [
            f"  [{x.severity}] {x.id} (confidence {x.confidence:.2f}{', borderline' if x.borderline else ''}): {x.evidence}"
            for x in report.symptoms
        ]
    if report.suggestions:
        lines += ["", "suggestions:"]
        for g in report.suggestions:
            gain = "" if g.expected_speedup is None else f", expected {g.expected_speedup:.2f}x"
            thumb = "" if g.rule_of_thumb is None else f"; rule of thumb: {g.rule_of_thumb}"
            lines.append(f"  {g.parameter}: {g.current} -> {g.suggested}{gain}{thumb}")
            lines.append(f"      {g.reason}")
        change = report.code_change()
        if change:
            lines.append(f"  paste: {change}")
    if report.notes:
        lines += ["", "notes:"]
        lines += [f"  - {n}" for n in report.notes]
    return "\n".join(lines)


def _range(s: dict[str, object]) -> str:
    r = s.get("stall_fraction_range")
    if not isinstance(r, list) or len(r) != 2:
        return ""
    return f" (range {r[0]:.0%}-{r[1]:.0%})"

"""``python -m collector report DB``: the diagnosis of a recorded run, as text or as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from collector.cli.args import positive_float
from collector.diagnosis.findings import Report
from collector.errors import StallwatchError

EXIT_USAGE = 2


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report",
        help="diagnose a recorded run: verdict, symptoms with evidence, suggested DataLoader settings",
        description="Diagnose one run of a stallwatch file. Reads the file only; never writes to it. "
        "The JSON (--json) is a stable contract documented in docs/report.md.",
    )
    parser.add_argument("db", help="the stallwatch SQLite file")
    parser.add_argument("--run", default="latest", help="run name, id, or 'latest' (default)")
    parser.add_argument(
        "--rank",
        type=_rank,
        default=None,
        help="one rank of a distributed job (default: every rank, the job's verdict from its straggler)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--live", action="store_true", help="diagnose a run that is still being recorded")
    window = parser.add_mutually_exclusive_group()
    window.add_argument("--window-s", type=positive_float, default=None, help="only the last SECONDS of batches")
    window.add_argument("--last-batches", type=_batch_count, default=None, help="only the last N batches")
    parser.set_defaults(handler=_main)


def _rank(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a rank number >= 0, got {text!r}")
    return int(text)


def _batch_count(text: str) -> int:
    if not text.isdigit() or int(text) < 2:
        raise argparse.ArgumentTypeError(f"must be an integer >= 2, got {text!r}")
    return int(text)


def _main(args: argparse.Namespace) -> int:
    from collector.diagnosis import diagnose, diagnose_job

    try:
        if args.window_s is None and args.last_batches is None:
            report = diagnose_job(args.db, args.run, rank=args.rank, live=args.live)
        elif args.rank is not None:
            raise StallwatchError("--rank cannot be combined with --window-s or --last-batches: give --run ID instead")
        else:
            report = diagnose(args.db, args.run, window_s=args.window_s, last_batches=args.last_batches, live=args.live)
    except StallwatchError:
        raise  # cli.main prints it on one line and exits 2
    except Exception as exc:  # noqa: BLE001 - the CLI's boundary: one line, never a traceback
        print(f"stallwatch: cannot diagnose {args.db}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        print(json.dumps(report.to_dict(), indent=2, default=str) if args.json else render(report), flush=True)
    except BrokenPipeError:  # `report ... | head`: the reader left; not an error
        sys.stderr.close()
    return 0


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.1f} ms"


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
        f"{'job verdict' if report.ranks else 'verdict'}: {report.verdict.upper()}: stalled for data {s['stall_fraction']:.0%} of the time after warm-up "
        f"({s['data_wait_fraction']:.0%} of all time in next())",
    ]
    util = s.get("gpu_util_pct")
    util_text = "n/a" if not util else f"mean {util['mean']:.0f}% p5 {util['p5']:.0f}% p95 {util['p95']:.0f}%"
    lines.append(
        f"  {s['batches_per_s']:.1f} batches/s (steady {s['steady_batches_per_s']:.1f}); wait p50 "
        f"{_ms(s['wait_s']['p50'])} p95 {_ms(s['wait_s']['p95'])}; step p50 {_ms(s['step_s']['p50'])}; "
        f"GPU util {util_text}"
    )
    if s.get("warmup_s") or s.get("epoch_start_lost_s"):
        lines.append(f"  warm-up {s['warmup_s']:.2f} s; epoch starts lost {s['epoch_start_lost_s']:.2f} s")
    lines += render_ranks(report)
    if report.symptoms:
        lines += ["", "symptoms:"]
        lines += [f"  [{x.severity}] {x.id} (confidence {x.confidence:.2f}): {x.evidence}" for x in report.symptoms]
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


def render_ranks(report: Report) -> list[str]:
    """One line per rank of a job: its verdict, stall and step, and the step time spent waiting for the straggler."""
    if not report.ranks:
        return []
    lines = ["", "ranks:"]
    for r in report.ranks:
        stall = r.get("stall_fraction")
        line = (
            f"  rank {r['rank']} (run {r['run_id']}): {r['verdict']}, stalled {0.0 if stall is None else stall:.0%}, "
            f"wait p50 {_ms(r.get('wait_p50_s'))}, step p50 {_ms(r.get('step_p50_s'))}"
        )
        if r.get("straggler"):
            line += ": the straggler"
        elif r.get("collective_wait_s"):
            line += f" ({_ms(r['collective_wait_s'])} of it waiting at the collective, not compute)"
        lines.append(line)
    return lines

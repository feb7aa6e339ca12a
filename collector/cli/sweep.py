"""``python -m collector sweep FACTORY``: tune a DataLoader on the user's own data, print the winner."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, TextIO

from collector.cli.args import add_db_option, positive_float
from collector.diagnosis.decide_measured import FED_WAIT_SHARE, TOLERANCE, MeasuredSearch
from collector.diagnosis.setting import Setting
from collector.errors import StallwatchError
from collector.sweep.grid import DEFAULT_PREFETCH, Grid, code, default_workers, parse_bools, parse_ints
from collector.sweep.loop import DEFAULT_BUDGET_S, DEFAULT_TRIAL_S, Progress, SweepConfig, SweepResult, run_sweep
from collector.sweep.trial import Trial

BAR_WIDTH = 24


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="try DataLoader settings on your own data and print the cheapest one that keeps up",
        description="Build your DataLoader with several settings through your own factory function, "
        "measure each (warm-up and worker start-up kept out of the throughput), record each as a run, "
        "and print a table and the winning DataLoader(...) line. The next setting is chosen from what "
        "was measured: num_workers stops rising once throughput plateaus or memory runs short.",
    )
    parser.add_argument(
        "factory",
        help="FILE.py:FUNCTION or MODULE:FUNCTION; the function takes DataLoader keyword arguments "
        "(num_workers, prefetch_factor, pin_memory, persistent_workers, batch_size) and returns a DataLoader",
    )
    add_db_option(parser)
    parser.add_argument(
        "--budget-s",
        type=positive_float,
        default=DEFAULT_BUDGET_S,
        help=f"time for the whole sweep (default {DEFAULT_BUDGET_S:g})",
    )
    parser.add_argument(
        "--trial-s",
        type=positive_float,
        default=DEFAULT_TRIAL_S,
        help=f"measured seconds per setting, after warm-up (default {DEFAULT_TRIAL_S:g})",
    )
    parser.add_argument("--workers", help="num_workers values, e.g. 0,2,4,8 (default 0,1,2,4,... up to 2x the cores)")
    parser.add_argument("--prefetch", help=f"prefetch_factor values (default {','.join(map(str, DEFAULT_PREFETCH))})")
    parser.add_argument("--pin-memory", help="pin_memory values, e.g. false,true (default true with CUDA, else false)")
    parser.add_argument("--persistent-workers", help="persistent_workers values (default false,true)")
    parser.add_argument("--batch-size", help="batch_size values, e.g. 32,64 (default: the factory's own)")
    paced = parser.add_mutually_exclusive_group()
    paced.add_argument("--step-ms", type=positive_float, help="pace consumption: the model's step per batch, in ms")
    paced.add_argument("--like-run", metavar="DB:RUN", help="pace like a recorded run: its median step time")
    parser.add_argument(
        "--warmup-batches", type=int, help="batches kept out of throughput (default workers x prefetch + 1)"
    )
    parser.add_argument(
        "--max-memory-gb", type=positive_float, help="do not raise num_workers past this RSS (main + workers)"
    )
    parser.add_argument("--full-grid", action="store_true", help="try every setting on the grid, in cost order")
    parser.set_defaults(handler=_main)


def _main(args: argparse.Namespace) -> int:
    from collector.sweep.factory import load_factory

    if os.path.isdir(args.db):
        raise StallwatchError(f"--db {args.db} is a directory; pass a file path")
    factory = load_factory(args.factory)  # first: a wrong name is the likeliest mistake
    grid = build_grid(args)
    step_s, step_batch, pace_note = _pace(args, grid)
    policy = MeasuredSearch(memory_limit_bytes=None if args.max_memory_gb is None else int(args.max_memory_gb * 2**30))
    config = SweepConfig(
        db=args.db,
        grid=grid,
        budget_s=args.budget_s,
        trial_s=args.trial_s,
        step_s=step_s,
        step_batch_size=step_batch,
        warmup_batches=args.warmup_batches,
        policy=policy,
        full_grid=args.full_grid,
    )
    print(
        f"sweeping {args.factory}: {pace_note}; up to {len(grid.settings())} settings in {args.budget_s:g} s",
        flush=True,
    )
    result = run_sweep(factory, config, BarProgress(sys.stderr, args.budget_s))
    print(render(result, args.db))
    return 0 if result.chosen is not None else 1


def build_grid(args: argparse.Namespace) -> Grid:
    try:
        workers = parse_ints(args.workers, "--workers") if args.workers else default_workers()
        prefetch = parse_ints(args.prefetch, "--prefetch") if args.prefetch else DEFAULT_PREFETCH
        pin = parse_bools(args.pin_memory, "--pin-memory") if args.pin_memory else (_cuda(),)
        persistent = (
            parse_bools(args.persistent_workers, "--persistent-workers") if args.persistent_workers else (False, True)
        )
        batch: tuple[int | None, ...] = parse_ints(args.batch_size, "--batch-size") if args.batch_size else (None,)
        return Grid(workers, prefetch, pin, persistent, batch)
    except ValueError as exc:
        raise StallwatchError(str(exc)) from None


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _pace(args: argparse.Namespace, grid: Grid) -> tuple[float, int | None, str]:
    """(step per batch in s, the batch size it was measured at, a phrase for the header)."""
    if args.step_ms is not None:
        return args.step_ms / 1000.0, grid.batch_size[0], f"paced at a {args.step_ms:g} ms step per batch"
    if args.like_run:
        from collector.store.sweep_queries import step_time

        db, run = split_like_run(args.like_run)
        step = step_time(db, run)
        return (
            step.step_s,
            step.batch_size,
            f"paced like run {step.name!r}: median step {step.step_s * 1000:.1f} ms over {step.batches} batches",
        )
    return 0.0, None, "unpaced: loader throughput alone, as fast as it can deliver"


def split_like_run(text: str) -> tuple[str, str]:
    """``DB:RUN`` -> (DB, RUN); RUN may hold colons itself (``collector run`` names runs ``train.py:42``)."""
    parts = text.split(":")
    for i in range(1, len(parts)):
        db, run = ":".join(parts[:i]), ":".join(parts[i:])
        if db and run and os.path.isfile(db):
            return db, run
    db, sep, run = text.partition(":")
    if not sep or not db or not run:
        raise StallwatchError(f"--like-run takes DB:RUN, e.g. stallwatch.sqlite:latest, got {text!r}")
    return db, run


class BarProgress(Progress):
    """A one-line bar on a terminal (redrawn), one line per trial elsewhere."""

    def __init__(self, stream: TextIO, budget_s: float) -> None:
        self.stream = stream
        self.budget_s = budget_s
        self.tty = stream.isatty()
        self.label = ""
        self._last_draw = 0.0

    def trial_started(self, index: int, setting: Setting, elapsed_s: float) -> None:
        self.label = f"trial {index}: {_short(setting)}"
        self._draw(elapsed_s, force=True)

    def tick(self, elapsed_s: float) -> None:
        self._draw(elapsed_s)

    def trial_done(self, index: int, trial: Trial, elapsed_s: float) -> None:
        outcome = f"{trial.samples_per_s:,.0f} samples/s" if trial.ok else f"failed: {trial.error}"
        line = (
            f"{_bar(elapsed_s / self.budget_s)} {elapsed_s:5.1f}s trial {index}: {_short(trial.setting)} -> {outcome}"
        )
        self.stream.write(("\r\033[K" if self.tty else "") + line + "\n")
        self.stream.flush()

    def _draw(self, elapsed_s: float, force: bool = False) -> None:
        now = time.monotonic()
        if not self.tty or (not force and now - self._last_draw < 0.2):
            return
        self._last_draw = now
        self.stream.write(f"\r\033[K{_bar(elapsed_s / self.budget_s)} {elapsed_s:5.1f}s {self.label}")
        self.stream.flush()


def _bar(fraction: float) -> str:
    filled = round(BAR_WIDTH * min(1.0, max(0.0, fraction)))
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"


def _short(setting: Setting) -> str:
    parts = [f"workers={setting.num_workers}"]
    if setting.num_workers:
        parts.append(f"prefetch={setting.prefetch_factor}")
        parts.append(f"persistent={_on(setting.persistent_workers)}")
    parts.append(f"pin={_on(setting.pin_memory)}")
    if setting.batch_size is not None:
        parts.append(f"batch={setting.batch_size}")
    return " ".join(parts)


def _on(flag: bool) -> str:
    return "on" if flag else "off"


def render(result: SweepResult, db: str) -> str:
    """The table, the notes and the winning line, as printed."""
    lines = [
        "",
        f"{result.sweep_id}: {len(result.trials)} of {result.grid_size} settings tried in {result.elapsed_s:.1f} s,"
        f" each recorded as a run in {db}",
        "",
        f"  {'#':>2}  {'workers':>7}  {'prefetch':>8}  {'pin':>3}  {'persistent':>10}  {'batch':>5}"
        f"  {'samples/s':>10}  {'vs best':>7}"
        + (f"  {'waits':>5}" if result.paced else "")
        + f"  {'start-up':>8}  {'peak RSS':>9}",
    ]
    best = max((t.samples_per_s or 0.0 for t in result.trials if t.ok), default=0.0)
    for index, trial in enumerate(result.trials, 1):
        s = trial.setting
        mark = "*" if result.chosen is not None and trial is result.chosen else " "
        head = (
            f"{mark} {index:>2}  {s.num_workers:>7}  {s.prefetch_factor or '-':>8}  {_on(s.pin_memory):>3}"
            f"  {_on(s.persistent_workers) if s.num_workers else '-':>10}  {s.batch_size or '-':>5}"
        )
        if not trial.ok:
            lines.append(f"{head}  failed: {trial.error}")
            continue
        waits = f"  {_pct(trial.wait_share):>5}" if result.paced else ""
        lines.append(
            f"{head}  {trial.samples_per_s or 0.0:>10,.1f}  {(trial.samples_per_s or 0.0) / best:>7.0%}{waits}"
            f"  {_secs(trial.startup_s):>8}  {_mib(trial.peak_rss_bytes):>9}"
        )
    lines.append("")
    lines += [f"note: {note}" for note in result.notes]
    lines.append(_verdict(result))
    return "\n".join(lines)


def _verdict(result: SweepResult) -> str:
    chosen = result.chosen
    if chosen is None:
        return "no setting could be measured: see the errors above"
    base = next((t for t in result.trials if t.ok and t.setting.num_workers == 0), None)
    speedup = ""
    if base is not None and base is not chosen and base.samples_per_s:
        speedup = f", {(chosen.samples_per_s or 0.0) / base.samples_per_s:.1f}x what num_workers=0 gives"
    figures = f"{chosen.samples_per_s or 0.0:,.0f} samples/s{speedup}"
    if result.paced:
        if chosen.wait_share is not None and chosen.wait_share > FED_WAIT_SHARE:
            head = (
                f"no setting tried keeps this model fed (the best still waits {chosen.wait_share:.0%} of the time);"
                f" the cheapest of the fastest ({figures}) is"
            )
        else:
            head = f"the cheapest setting that keeps this model fed ({figures}, waits {_pct(chosen.wait_share)}):"
    else:
        head = f"the cheapest setting within {TOLERANCE:.0%} of the fastest ({figures}):"
    return f"\n{head}\n    {code(chosen.setting)}\n"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f} MiB"

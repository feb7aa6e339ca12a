"""``python -m collector demo``: a real, recorded CPU training loop with a known bottleneck."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from collector.cli.args import add_db_option, positive_float
from collector.errors import StallwatchError

if TYPE_CHECKING:
    from torch.utils.data import Dataset

# The datasets need torch, which takes seconds to import: `--help` must not wait for it.
LAZY = {"SleepDataset", "ComputeDataset"}


def __getattr__(name: str) -> Any:
    """``collector.cli.demo.SleepDataset`` and ``ComputeDataset`` live in demo_datasets (imported on first use)."""
    if name in LAZY:
        from collector.cli import demo_datasets

        return getattr(demo_datasets, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _sleep(length: int, sleep_s: float) -> Dataset[Any]:
    from collector.cli.demo_datasets import SleepDataset

    return SleepDataset(length, sleep_s)


def _compute(length: int, cpu_s: float) -> Dataset[Any]:
    from collector.cli.demo_datasets import ComputeDataset

    return ComputeDataset(length, cpu_s)


class SlowStartWorker:
    """A worker_init_fn that imitates an expensive worker start (a dataset cache being built)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, worker_id: int) -> None:
        time.sleep(self.seconds)


@dataclass(frozen=True)
class Scenario:
    """A loader with a known bottleneck and a step that sleeps like GPU compute."""

    description: str
    make_dataset: Callable[[], Dataset[Any]]
    loader_kwargs: dict[str, Any] = field(default_factory=dict)
    step_s: float = 0.010


SCENARIOS: dict[str, Scenario] = {
    "starved": Scenario(
        "num_workers=0 over slow storage: the loop waits about 3x longer than it computes",
        lambda: _sleep(4096, 0.002),
        {"batch_size": 16, "num_workers": 0},
    ),
    "healthy": Scenario(
        "4 workers, prefetch 4, persistent: batches are ready before the step ends",
        lambda: _sleep(4096, 0.002),
        {"batch_size": 16, "num_workers": 4, "prefetch_factor": 4, "persistent_workers": True},
    ),
    "cpu": Scenario(
        "num_workers=0 with CPU-heavy decoding: one core pegged, the GPU starved",
        lambda: _compute(4096, 0.001),
        {"batch_size": 16, "num_workers": 0},
    ),
    "oversubscribed": Scenario(
        "8 CPU-bound workers on a machine with fewer cores: they fight for the CPU",
        lambda: _compute(4096, 0.001),
        {"batch_size": 16, "num_workers": 8},
    ),
    "epoch-stall": Scenario(
        "short epochs, workers restarted each epoch with a slow start (persistent_workers=False)",
        lambda: _sleep(320, 0.0005),
        {"batch_size": 16, "num_workers": 2, "worker_init_fn": SlowStartWorker(0.5)},
    ),
}


def run_demo(
    db: str,
    seconds: float,
    scenario: str = "starved",
    run: str | None = None,
    progress: Callable[[float], None] | None = None,
    max_batches: int | None = None,
) -> int | None:
    """Train a tiny model on the CPU for ``seconds`` (or ``max_batches``) through ``watch``; returns the run id."""
    import torch
    from torch.utils.data import DataLoader

    from collector.record.watch import watch

    spec = SCENARIOS[scenario]
    torch.set_num_threads(1)  # the tiny model must not compete with the loader for cores
    loader = DataLoader(spec.make_dataset(), shuffle=True, **spec.loader_kwargs)
    model = torch.nn.Linear(256, 10)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01)
    deadline = time.monotonic() + seconds
    started = time.monotonic()
    batches = 0
    with watch(loader, db=db, run=run or f"demo-{scenario}", tags={"demo": scenario}) as watched:
        done = False
        while not done:
            for features, labels in watched:
                loss = torch.nn.functional.cross_entropy(model(features), labels)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                time.sleep(spec.step_s)  # the GPU's share of the step
                if progress is not None:
                    progress(min(1.0, (time.monotonic() - started) / seconds))
                batches += 1
                done = time.monotonic() >= deadline or batches == max_batches
                if done:
                    break
        return watched.run_id


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="record a real CPU training loop with a known data-loading bottleneck",
        description="Train a small model on the CPU through a real DataLoader and record it, "
        "so the dashboard has a real run to show. Scenarios: "
        + "; ".join(f"{k}: {v.description}" for k, v in SCENARIOS.items()),
    )
    add_db_option(parser)
    parser.add_argument("--seconds", type=positive_float, default=20.0, help="how long to train (default 20)")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="starved")
    parser.add_argument("--run", default=None, help="run name (default demo-SCENARIO)")
    parser.set_defaults(handler=_main)


def _main(args: argparse.Namespace) -> int:
    if os.path.isdir(args.db):
        raise SystemExit(f"stallwatch: --db {args.db} is a directory; pass a file path")
    print(f"demo '{args.scenario}': {SCENARIOS[args.scenario].description}")
    print(f"recording {args.seconds:g} s into {args.db} ...", flush=True)
    run_id = run_demo(args.db, args.seconds, args.scenario, args.run)
    if run_id is None:
        raise StallwatchError(f"nothing was recorded into {args.db} (see the warning above)")
    print(f"done: run {run_id} in {args.db}")
    print(_verdict(args.db, run_id))
    print(f"next: stallwatch dashboard {args.db}   (or the full report: stallwatch report {args.db})", flush=True)
    return 0


def _verdict(db: str, run_id: int | None) -> str:
    """The recorded run's verdict and the line to paste, as ``report`` would print them."""
    from collector.diagnosis import diagnose
    from collector.diagnosis.text import headline
    from collector.errors import StallwatchError

    try:
        report = diagnose(db, run_id if run_id is not None else "latest")
    except StallwatchError as exc:
        return f"no verdict: {exc}"
    change = report.code_change()
    return headline(report) + (f"\nto change: {change}" if change else "")

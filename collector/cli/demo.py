"""``python -m collector demo``: a real, recorded CPU training loop with a known bottleneck."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from collector.cli.args import add_db_option, positive_float
from collector.errors import StallwatchError


class SleepDataset(Dataset[tuple[torch.Tensor, int]]):
    """Imitates reading from slow storage: each sample sleeps ``sleep_s`` (no CPU used)."""

    def __init__(self, length: int, sleep_s: float, features: int = 256) -> None:
        self.length = length
        self.sleep_s = sleep_s
        self.features = features

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.sleep_s)
        return torch.full((self.features,), float(index % 97)), index % 10


class ComputeDataset(Dataset[tuple[torch.Tensor, int]]):
    """Imitates decoding and augmenting: each sample keeps one core busy for ``cpu_s``."""

    def __init__(self, length: int, cpu_s: float, features: int = 256) -> None:
        self.length = length
        self.cpu_s = cpu_s
        self.features = features

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        end = time.thread_time() + self.cpu_s
        x = float(index)
        while time.thread_time() < end:
            for _ in range(200):
                x = (x * 1.000001 + 0.5) % 1000.0
        return torch.full((self.features,), x), index % 10


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
        lambda: SleepDataset(4096, 0.002),
        {"batch_size": 16, "num_workers": 0},
    ),
    "healthy": Scenario(
        "4 workers, prefetch 4, persistent: batches are ready before the step ends",
        lambda: SleepDataset(4096, 0.002),
        {"batch_size": 16, "num_workers": 4, "prefetch_factor": 4, "persistent_workers": True},
    ),
    "cpu": Scenario(
        "num_workers=0 with CPU-heavy decoding: one core pegged, the GPU starved",
        lambda: ComputeDataset(4096, 0.001),
        {"batch_size": 16, "num_workers": 0},
    ),
    "oversubscribed": Scenario(
        "8 CPU-bound workers on a machine with fewer cores: they fight for the CPU",
        lambda: ComputeDataset(4096, 0.001),
        {"batch_size": 16, "num_workers": 8},
    ),
    "epoch-stall": Scenario(
        "short epochs, workers restarted each epoch with a slow start (persistent_workers=False)",
        lambda: SleepDataset(320, 0.0005),
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
    return 0

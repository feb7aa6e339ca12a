"""Tune a DataLoader on the user's own data: try settings within a budget, record each, pick one."""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from collector.diagnosis.decide import MeasuredSearch, Plan, cheapest, cost, next_setting
from collector.diagnosis.setting import Setting
from collector.sweep.grid import Grid, to_row
from collector.sweep.trial import Factory, Trial, TrialSpec, run_trial

DEFAULT_BUDGET_S = 120.0
DEFAULT_TRIAL_S = 3.0


@dataclass(frozen=True)
class SweepConfig:
    """Everything a sweep needs besides the factory. ``step_s=0``: consume as fast as possible."""

    db: str
    grid: Grid
    budget_s: float = DEFAULT_BUDGET_S
    trial_s: float = DEFAULT_TRIAL_S
    step_s: float = 0.0  # the model's step per batch, measured at ``step_batch_size``
    step_batch_size: int | None = None  # sweeping batch_size scales the step in proportion
    warmup_batches: int | None = None
    policy: MeasuredSearch = field(default_factory=MeasuredSearch)
    full_grid: bool = False  # try every setting instead of choosing adaptively
    sweep_id: str | None = None

    def step_for(self, setting: Setting) -> float:
        if self.step_s and setting.batch_size and self.step_batch_size:
            return self.step_s * setting.batch_size / self.step_batch_size
        return self.step_s


@dataclass(frozen=True)
class SweepResult:
    sweep_id: str
    trials: tuple[Trial, ...]
    chosen: Trial | None
    notes: tuple[str, ...]
    grid_size: int  # distinct settings on the grid
    budget_spent: bool  # stopped by --budget-s with settings left to try
    elapsed_s: float
    paced: bool


class Progress:
    """What a sweep reports as it goes; the CLI draws a bar, tests record the calls."""

    def trial_started(self, index: int, setting: Setting, elapsed_s: float) -> None:
        pass

    def tick(self, elapsed_s: float) -> None:
        pass

    def trial_done(self, index: int, trial: Trial, elapsed_s: float) -> None:
        pass


def run_sweep(
    factory: Factory,
    config: SweepConfig,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> SweepResult:
    """Try settings until the plan is done or the budget is spent; record every trial as a run."""
    from collector.store import sweep_queries

    progress = progress or Progress()
    sweep_id = config.sweep_id or time.strftime("sweep-%Y%m%d-%H%M%S")
    policy = replace(config.policy, paced=config.step_s > 0)
    started = clock()
    trials: list[Trial] = []
    written: dict[int, dict[str, Any]] = {}  # run id -> the tags stored with it
    grid_settings = config.grid.settings()
    budget_spent = False
    plan = Plan(None)
    while True:
        plan = _next(config, grid_settings, trials, policy)
        if plan.setting is None:
            break
        elapsed = clock() - started
        if trials and elapsed + _expected_s(trials, config) > config.budget_s:
            budget_spent = True
            break
        index = len(trials) + 1
        setting = plan.setting
        progress.trial_started(index, setting, elapsed)
        step = config.step_for(setting)
        tags: dict[str, Any] = {"sweep": sweep_id, "trial": to_row(setting), "index": index, "step_s": step or None}
        spec = TrialSpec(
            config.db, f"{sweep_id} #{index}", tags, config.trial_s, step, warmup_batches=config.warmup_batches
        )
        with warnings.catch_warnings():
            # torch warns for each loader whose workers outnumber the cores; trying that is the point here.
            warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
            trial = run_trial(factory, setting, spec, on_tick=lambda: progress.tick(clock() - started))
        trial, tags = _record(config.db, spec.name, tags, trial, sweep_queries)
        if trial.run_id is not None:
            written[trial.run_id] = tags
        trials.append(trial)
        progress.trial_done(index, trial, clock() - started)
    chosen = cheapest(trials, policy.tolerance)
    if chosen is not None and chosen.run_id in written:
        sweep_queries.update_tags(config.db, chosen.run_id, {**written[chosen.run_id], "chosen": True})
    notes = list(dict.fromkeys(plan.notes))
    if budget_spent:
        notes.append(f"budget of {config.budget_s:g} s spent after {len(trials)} trials: raise --budget-s to try more")
    return SweepResult(
        sweep_id, tuple(trials), chosen, tuple(notes), len(grid_settings), budget_spent, clock() - started, policy.paced
    )


def _next(
    config: SweepConfig, grid_settings: Sequence[Setting], trials: Sequence[Trial], policy: MeasuredSearch
) -> Plan:
    if not config.full_grid:
        return next_setting(config.grid, trials, policy)
    tried = {t.setting for t in trials}
    left = sorted((s for s in grid_settings if s not in tried), key=cost)
    return Plan(left[0] if left else None)


def _expected_s(trials: Sequence[Trial], config: SweepConfig) -> float:
    """How long the next trial will likely take: the median so far (failed ones are quick)."""
    durations = [t.duration_s for t in trials if t.ok] or [config.trial_s]
    return float(statistics.median(durations))


def _record(db: str, name: str, tags: dict[str, Any], trial: Trial, queries: Any) -> tuple[Trial, dict[str, Any]]:
    """Add the trial's memory from its recorded run and store the result in the run's tags."""
    if trial.run_id is None:
        tags = {**tags, "result": trial.to_dict()}
        if trial.error is not None:  # the factory raised: no loader, so no run yet
            trial = replace(trial, run_id=queries.record_failed_trial(db, name, tags, trial.error))
        return trial, tags
    memory = queries.trial_memory(db, trial.run_id)
    trial = replace(
        trial,
        peak_rss_bytes=memory.peak_rss_bytes,
        worker_rss_bytes=memory.worker_rss_bytes,
        mem_available_bytes=memory.mem_available_bytes,
    )
    tags = {**tags, "result": trial.to_dict()}
    queries.update_tags(db, trial.run_id, tags)
    return trial, tags

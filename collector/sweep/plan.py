"""Which setting a sweep tries next, from what it has measured, and which one wins."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from collector.sweep.grid import Grid, Setting

PLATEAU_GAIN = 0.10  # raising num_workers must buy at least this much throughput
TOLERANCE = 0.05  # settings this close to the best count as "as fast"; the cheapest wins
FED_WAIT_SHARE = 0.05  # paced: the loop waits for data at most this share of the time
MEMORY_HEADROOM = 0.8  # never plan to use more than this share of the memory still available
OTHER_AXES = ("prefetch_factor", "pin_memory", "persistent_workers", "batch_size")
GRID_AXIS = {
    "prefetch_factor": "prefetch",
    "pin_memory": "pin_memory",
    "persistent_workers": "persistent_workers",
    "batch_size": "batch_size",
}


@dataclass(frozen=True)
class Trial:
    """What one setting measured. ``error`` set: the factory or the loader raised."""

    setting: Setting
    samples_per_s: float | None = None  # after warm-up, start-up excluded
    batches_per_s: float | None = None
    wait_share: float | None = None  # share of the measured time the loop waited in next()
    startup_s: float | None = None  # iter() to the first batch: worker start-up
    batches: int = 0  # measured batches, warm-up excluded
    warmup_batches: int = 0
    epochs: int = 0  # epochs started
    peak_rss_bytes: int | None = None  # main process + workers, at the busiest sample
    worker_rss_bytes: int | None = None  # median RSS of one worker
    mem_available_bytes: int | None = None  # least memory the machine had left during the trial
    duration_s: float = 0.0  # wall time the trial took, start-up included
    run_id: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.samples_per_s is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples_per_s": self.samples_per_s,
            "batches_per_s": self.batches_per_s,
            "wait_share": self.wait_share,
            "startup_s": self.startup_s,
            "batches": self.batches,
            "warmup_batches": self.warmup_batches,
            "epochs": self.epochs,
            "peak_rss_bytes": self.peak_rss_bytes,
            "worker_rss_bytes": self.worker_rss_bytes,
            "mem_available_bytes": self.mem_available_bytes,
            "duration_s": self.duration_s,
            "error": self.error,
        }


@dataclass(frozen=True)
class Policy:
    """The planner's thresholds; see the module constants for what each means."""

    plateau_gain: float = PLATEAU_GAIN
    tolerance: float = TOLERANCE
    paced: bool = False
    fed_wait_share: float = FED_WAIT_SHARE
    memory_limit_bytes: int | None = None  # user's cap on main + workers RSS


@dataclass(frozen=True)
class Plan:
    """The next setting to try (None: the sweep is done) and why axes were cut short."""

    setting: Setting | None
    notes: tuple[str, ...] = field(default_factory=tuple)


def choose(trials: Sequence[Trial], tolerance: float = TOLERANCE) -> Trial | None:
    """The cheapest successful trial within ``tolerance`` of the best throughput."""
    ok = [t for t in trials if t.ok]
    if not ok:
        return None
    best = max(t.samples_per_s or 0.0 for t in ok)
    close = [t for t in ok if (t.samples_per_s or 0.0) >= (1.0 - tolerance) * best]
    return min(close, key=lambda t: (t.setting.cost(), -(t.samples_per_s or 0.0)))


def next_setting(grid: Grid, trials: Sequence[Trial], policy: Policy | None = None) -> Plan:
    """Replay the search over what was measured and return the first setting not yet tried.

    1. Raise num_workers from the grid's lowest value, other settings at their
       defaults, until throughput stops rising by ``plateau_gain``, the paced
       loop is fed, or the next step would not fit in memory.
    2. From the best of those, try each other value of prefetch_factor,
       pin_memory, persistent_workers and batch_size, one axis at a time,
       keeping the best of each axis.
    3. If step 2 moved away from the defaults, raise num_workers again from there.
    """
    policy = policy or Policy()
    tried = {t.setting: t for t in trials}
    notes: list[str] = []
    proposal, anchor = _walk_workers(grid, grid.base(), tried, policy, notes)
    if proposal is not None:
        return Plan(proposal, tuple(notes))
    start = anchor
    for axis in OTHER_AXES:
        values: tuple[Any, ...] = getattr(grid, GRID_AXIS[axis])
        if len(values) < 2:
            continue
        if axis in ("prefetch_factor", "persistent_workers") and anchor.num_workers == 0:
            notes.append(f"{axis} not tried: the best setting has no workers")
            continue
        if axis == "persistent_workers" and not any(t.ok and t.epochs >= 2 for t in trials):
            notes.append(
                "persistent_workers not tried: no trial reached a second epoch, so worker restarts never "
                "showed (the sources advise True for short epochs and long runs)"
            )
            continue
        line = [replace(anchor, **{axis: v}) for v in values]
        for setting in line:
            if setting not in tried:
                return Plan(setting, tuple(notes))
        anchor = (choose([tried[s] for s in line], policy.tolerance) or tried[anchor]).setting
    if anchor != start:
        proposal, _ = _walk_workers(grid, anchor, tried, policy, notes, from_workers=anchor.num_workers)
        if proposal is not None:
            return Plan(proposal, tuple(notes))
    return Plan(None, tuple(notes))


def _walk_workers(
    grid: Grid,
    start: Setting,
    tried: dict[Setting, Trial],
    policy: Policy,
    notes: list[str],
    from_workers: int = 0,
) -> tuple[Setting | None, Setting]:
    """(the next worker count to try, or None; the best setting on this line so far)."""
    line: list[Trial] = []
    for workers in (w for w in grid.workers if w >= from_workers):
        setting = grid.with_workers(start, workers)
        reason = _stop_raising(line, workers, policy)
        if reason is not None:
            notes.append(reason)
            break
        if setting not in tried:
            return setting, start
        trial = tried[setting]
        if trial.ok:
            line.append(trial)
        else:
            notes.append(f"{workers} workers failed: {trial.error}")
    best = choose(line, policy.tolerance)
    return None, (start if best is None else best.setting)


def _stop_raising(line: Sequence[Trial], workers: int, policy: Policy) -> str | None:
    """Why not to try ``workers`` after the trials in ``line`` (ascending workers); None: go on."""
    if not line:
        return None
    if policy.paced:
        fed = [t for t in line if t.wait_share is not None and t.wait_share <= policy.fed_wait_share]
        if fed:
            return f"stopped at {fed[0].setting.num_workers} workers: the paced loop is fed (waits {fed[0].wait_share:.0%})"
    parallel = [t for t in line if t.setting.num_workers >= 1]
    if len(parallel) >= 2:
        last = parallel[-1]
        before = max(parallel[:-1], key=lambda t: t.samples_per_s or 0.0)
        gain = (last.samples_per_s or 0.0) / (before.samples_per_s or 1e-12) - 1.0
        if gain < policy.plateau_gain:
            return (
                f"stopped raising num_workers at {last.setting.num_workers}: throughput plateaued "
                f"({gain:+.0%} over {before.setting.num_workers} workers)"
            )
    last = line[-1]
    if last.setting.num_workers and last.worker_rss_bytes:
        extra = (workers - last.setting.num_workers) * last.worker_rss_bytes
        limit = policy.memory_limit_bytes
        if limit is not None and last.peak_rss_bytes is not None and last.peak_rss_bytes + extra > limit:
            return f"stopped before {workers} workers: about {_gib(last.peak_rss_bytes + extra)} would pass the memory limit {_gib(limit)}"
        if last.mem_available_bytes is not None and extra > MEMORY_HEADROOM * last.mem_available_bytes:
            return f"stopped before {workers} workers: they would need about {_gib(extra)} more, only {_gib(last.mem_available_bytes)} is free"
    return None


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"

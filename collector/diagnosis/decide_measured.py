"""The sweep's half of the one decision (collector/diagnosis/decide.py): the next setting to measure, and the winner.

The report and the live tuner rank settings by the model; a sweep ranks what it
measured. Its rules and its ``MeasuredSearch`` are here beside ``decide``; its
trial records (collector/sweep/trial.py's ``Trial``) and grid (collector/sweep/grid.py)
are read through ``Measured`` and ``Axes``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from collector.diagnosis.calibration import C
from collector.diagnosis.setting import Setting

PLATEAU_GAIN = float(C.PLATEAU_GAIN)  # raising num_workers must buy at least this much throughput
TOLERANCE = float(C.TOLERANCE)  # settings this close to the best count as "as fast"; the cheapest wins
FED_WAIT_SHARE = float(C.FED_WAIT_SHARE)  # paced: the loop waits for data at most this share of the time
MEMORY_HEADROOM = float(C.MEMORY_HEADROOM)  # never plan to use more than this share of the memory still available
OTHER_AXES = ("prefetch_factor", "pin_memory", "persistent_workers", "batch_size")
GRID_AXIS = {
    "prefetch_factor": "prefetch",
    "pin_memory": "pin_memory",
    "persistent_workers": "persistent_workers",
    "batch_size": "batch_size",
}


class Measured(Protocol):
    """What the decision reads of one measured setting. ``ok``: it ran and has a throughput."""

    @property
    def setting(self) -> Setting: ...
    @property
    def ok(self) -> bool: ...
    @property
    def samples_per_s(self) -> float | None: ...
    @property
    def wait_share(self) -> float | None: ...
    @property
    def epochs(self) -> int: ...
    @property
    def peak_rss_bytes(self) -> int | None: ...
    @property
    def worker_rss_bytes(self) -> int | None: ...
    @property
    def mem_available_bytes(self) -> int | None: ...
    @property
    def error(self) -> str | None: ...


class Axes(Protocol):
    """The values each setting may take, in the order the walk explores them."""

    @property
    def workers(self) -> tuple[int, ...]: ...
    @property
    def prefetch(self) -> tuple[int, ...]: ...
    @property
    def pin_memory(self) -> tuple[bool, ...]: ...
    @property
    def persistent_workers(self) -> tuple[bool, ...]: ...
    @property
    def batch_size(self) -> tuple[int | None, ...]: ...
    def base(self) -> Setting: ...
    def with_workers(self, setting: Setting, workers: int) -> Setting: ...


T = TypeVar("T", bound=Measured)


@dataclass(frozen=True)
class MeasuredSearch:
    """The sweep's options: how the walk stops (the constants' NOTE [ Decision constants ] entries)."""

    plateau_gain: float = PLATEAU_GAIN
    tolerance: float = TOLERANCE
    paced: bool = False
    fed_wait_share: float = FED_WAIT_SHARE
    memory_limit_bytes: int | None = None  # user's cap on main + workers RSS
    memory_headroom: float = MEMORY_HEADROOM


@dataclass(frozen=True)
class Plan:
    """The next setting to try (None: the sweep is done) and why axes were cut short."""

    setting: Setting | None
    notes: tuple[str, ...] = field(default_factory=tuple)


def cost(setting: Setting) -> tuple[int, int, int, int]:
    """Cheaper first: fewer workers, fewer batches held in memory, no pinned memory."""
    return (setting.num_workers, setting.depth, int(setting.pin_memory), int(setting.persistent_workers))


def cheapest(trials: Sequence[T], tolerance: float = TOLERANCE) -> T | None:
    """The cheapest successful trial within ``tolerance`` of the best throughput."""
    ok = [t for t in trials if t.ok]
    if not ok:
        return None
    best = max(t.samples_per_s or 0.0 for t in ok)
    close = [t for t in ok if (t.samples_per_s or 0.0) >= (1.0 - tolerance) * best]
    return min(close, key=lambda t: (cost(t.setting), -(t.samples_per_s or 0.0)))


def next_setting(grid: Axes, trials: Sequence[Measured], search: MeasuredSearch | None = None) -> Plan:
    """Replay the search over what was measured and return the first setting not yet tried.

    1. Raise num_workers from the grid's lowest value, other settings at their
       defaults, until throughput stops rising by ``plateau_gain``, the paced
       loop is fed, or the next step would not fit in memory.
    2. From the best of those, try each other value of prefetch_factor,
       pin_memory, persistent_workers and batch_size, one axis at a time,
       keeping the best of each axis.
    3. If step 2 moved away from the defaults, raise num_workers again from there.
    """
    search = search or MeasuredSearch()
    tried = {t.setting: t for t in trials}
    notes: list[str] = []
    proposal, anchor = _walk_workers(grid, grid.base(), tried, search, notes)
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
        anchor = (cheapest([tried[s] for s in line], search.tolerance) or tried[anchor]).setting
    if anchor != start:
        proposal, _ = _walk_workers(grid, anchor, tried, search, notes, from_workers=anchor.num_workers)
        if proposal is not None:
            return Plan(proposal, tuple(notes))
    return Plan(None, tuple(notes))


def _walk_workers(
    grid: Axes,
    start: Setting,
    tried: dict[Setting, Measured],
    search: MeasuredSearch,
    notes: list[str],
    from_workers: int = 0,
) -> tuple[Setting | None, Setting]:
    """(the next worker count to try, or None; the best setting on this line so far)."""
    line: list[Measured] = []
    for workers in (w for w in grid.workers if w >= from_workers):
        setting = grid.with_workers(start, workers)
        reason = _stop_raising(line, workers, search)
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
    best = cheapest(line, search.tolerance)
    return None, (start if best is None else best.setting)


def _stop_raising(line: Sequence[Measured], workers: int, search: MeasuredSearch) -> str | None:
    """Why not to try ``workers`` after the trials in ``line`` (ascending workers); None: go on."""
    if not line:
        return None
    if search.paced:
        fed = [t for t in line if t.wait_share is not None and t.wait_share <= search.fed_wait_share]
        if fed:
            return f"stopped at {fed[0].setting.num_workers} workers: the paced loop is fed (waits {fed[0].wait_share:.0%})"
    parallel = [t for t in line if t.setting.num_workers >= 1]
    if len(parallel) >= 2:
        last = parallel[-1]
        before = max(parallel[:-1], key=lambda t: t.samples_per_s or 0.0)
        gain = (last.samples_per_s or 0.0) / (before.samples_per_s or 1e-12) - 1.0
        if gain < search.plateau_gain:
            return (
                f"stopped raising num_workers at {last.setting.num_workers}: throughput plateaued "
                f"({gain:+.0%} over {before.setting.num_workers} workers)"
            )
    last = line[-1]
    if last.setting.num_workers and last.worker_rss_bytes:
        extra = (workers - last.setting.num_workers) * last.worker_rss_bytes
        limit = search.memory_limit_bytes
        if limit is not None and last.peak_rss_bytes is not None and last.peak_rss_bytes + extra > limit:
            return f"stopped before {workers} workers: about {_gib(last.peak_rss_bytes + extra)} would pass the memory limit {_gib(limit)}"
        if last.mem_available_bytes is not None and extra > search.memory_headroom * last.mem_available_bytes:
            return f"stopped before {workers} workers: they would need about {_gib(extra)} more, only {_gib(last.mem_available_bytes)} is free"
    return None


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"

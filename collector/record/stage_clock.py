"""Where a worker's fetch time goes: nested stage timers, their totals, and the budget that keeps them cheap."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from collector.record.stage_board import MAX_STAGES, StageBoards, Totals

# NOTE [ Stage timing ]
# Inside a worker (collector/record/stage_hooks.py installs the hooks) a
# fetch is the root region and every hooked call inside it a nested one:
# each transform of a torchvision Compose by position and class, PIL's open
# and decode, collate. A region keeps its own (exclusive) wall and thread CPU
# time, its children's subtracted, so the stages of a fetch add up to the
# fetch: what the dataset's ``__getitem__`` did outside every hooked call is
# the root's own time (stage GETITEM). The fetch's whole time is row FETCH,
# the denominator of every share; the hand-over (pickling the batch on the
# queue's feeder thread, the tensors copied into shared memory) runs beside
# the next fetch and is row HANDOVER.
#
#   fetch  |--------------------------------------------------|
#   open    |-|      decode |-------|    0 Resize |---|  collate |--|
#   GETITEM = fetch - (open + decode + Resize + collate)
#
# Clocks: a region reads the wall clock first as it opens and last as it
# closes, the thread's CPU clock (a system call) inside: on a crowded machine
# a thread is often descheduled at a system call's return, and that wait
# belongs to the region that made the call (read the other way round, a
# hand timing of the same stages in the same workers gave decode 16 points
# more of the wall time than the table). The fetch's root region opens after
# TimedFetcher's own clock reads and closes before them, for the same reason.
#
# Budget: four clock reads a region cost about a microsecond, which a
# 20 microsecond sample would feel. After each timed fetch the clock knows
# how many regions it timed and what one costs (measured once, calibrate())
# and times the next only after ``stride`` untimed fetches, so timing stays
# under BUDGET of the worker's fetch time. Untimed fetches pay one flag test
# a hooked call. Shares and ms a sample come from timed fetches only, which
# are every fetch's equals.

FETCH = "fetch"
GETITEM = "__getitem__"
HANDOVER = "hand-over"
BUDGET = 0.005  # of the worker's fetch time; the sampler and the board take less than the other half
PUBLISH_S = 0.2  # the monitor drains every 0.2 s; a publish (a marshal of a few dozen rows) costs a few us
REPLAY_FILES = 4  # image files a worker names, for replaying their decode (NOTE [ Stage hooks ])
FILE = "file "  # the prefix of those rows


class StageClock:
    """One process's stage timers: a stack of open regions and each stage's cumulative totals."""

    def __init__(
        self,
        publish: Callable[[Totals], object] | None = None,
        base: Totals | None = None,
        clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.active = False  # timing this fetch: hooked calls test this and nothing else when it is off
        self.in_compose = False  # inside a timed Compose: nested ones count in their parent's step
        self.in_fetch = False  # inside a fetch, timed or not: the stack sampler looks only then
        self._publish = publish
        self._base = dict(base or {})
        self._totals: dict[str, list[float]] = {}
        self._stack: list[list[float]] = []
        self._clock, self._cpu = clock, cpu_clock
        self._regions = 0  # regions timed in this fetch
        self._region_cost_s = 2e-6
        self._skip = 0  # untimed fetches before the next timed one
        self._published_at = -math.inf  # the first timed fetch publishes: a short run shows its table
        self.sampled: dict[str, int] = {}  # the stack sampler's ticks by stage (NOTE [ Stack sampling ])
        self.ticks = 0
        self.files = 0  # image files named (note_file)
        self.retry: Callable[[StageClock], None] | None = None  # hooks still waiting for their module
        self.retries = 0
        self.handovers = 0  # timed fetches whose batch the queue's feeder has not pickled yet

    def calibrate(self, rounds: int = 20, tries: int = 5) -> None:
        """Measure what one region costs here, the best of a few tries (a busy machine stretches some)."""
        best = math.inf
        for _ in range(tries):
            t0 = self._clock()
            for _ in range(rounds):
                self.enter()
                self.leave("calibration")
            best = min(best, (self._clock() - t0) / rounds)
        self._region_cost_s = max(1e-7, best)
        self._totals.pop("calibration", None)
        self._regions = 0

    def begin(self) -> bool:
        """At a fetch's start: True (and the root region open) when this fetch is timed."""
        self.in_fetch = True
        if self._skip > 0:
            self._skip -= 1
            return False
        self._regions = 0
        self._stack.clear()
        self.enter()
        self.active = True
        return True

    def end(self, samples: int) -> None:
        """At a timed fetch's end: close the root, book it, set the next stride, publish when due."""
        self.active = self.in_fetch = False
        self.in_compose = False
        if len(self._stack) != 1:  # a region left open by an exception we did not see: drop this fetch
            self._stack.clear()
            return
        c1, t1 = self._cpu(), self._clock()  # wall last: a wait in the CPU clock's syscall is the region's
        t0, c0, child_wall, child_cpu = self._stack.pop()
        wall, cpu = max(0.0, t1 - t0), max(0.0, c1 - c0)
        self._add(GETITEM, 1, max(0.0, wall - child_wall), max(0.0, cpu - child_cpu), None, None)
        self._add(FETCH, 1, wall, cpu, None, None, samples)
        self.handovers = min(self.handovers + 1, 4)
        overhead_s = (self._regions + 1) * self._region_cost_s
        self._skip = max(0, math.ceil(overhead_s / (BUDGET * max(wall, 1e-9))) - 1)
        if self.retry is not None:
            self.retries -= 1
            self.retry(self)
            if self.retries <= 0:
                self.retry = None
        if t1 - self._published_at >= PUBLISH_S:
            self.publish()

    def finish(self, timed: bool, args: tuple[Any, ...]) -> None:
        """At a fetch's end, timed or not; whatever goes wrong here stays here (the batch is not ours)."""
        try:
            if timed:
                self.end(samples_in(args[0]) if args else 1)
            else:
                self.in_fetch = False
        except Exception:  # noqa: BLE001 - stage timing is optional; the batch is not
            self.abandon()

    def abandon(self) -> None:
        """A fetch that raised or ended the data: nothing booked."""
        self.active = self.in_fetch = self.in_compose = False
        self._stack.clear()

    def enter(self) -> None:
        self._stack.append([self._clock(), self._cpu(), 0.0, 0.0])

    def leave(self, stage: str, pixels_in: float | None = None, pixels_out: float | None = None) -> None:
        """Close the innermost region as ``stage``: its own time to the stage, its whole time to its parent."""
        c1, t1 = self._cpu(), self._clock()  # wall last: a wait in the CPU clock's syscall is the region's
        if not self._stack:
            return
        try:
            t0, c0, child_wall, child_cpu = self._stack.pop()
            wall, cpu = max(0.0, t1 - t0), max(0.0, c1 - c0)
            self._regions += 1
            self._add(stage, 1, max(0.0, wall - child_wall), max(0.0, cpu - child_cpu), pixels_in, pixels_out)
            if self._stack:
                parent = self._stack[-1]
                parent[2] += wall
                parent[3] += cpu
        except Exception:  # noqa: BLE001 - called from a hook's finally: it must not replace the user's exception
            self._stack.clear()

    def note_file(self, path: str) -> None:
        """Keep an image file's path as a row of its own (calls 1, no time) for replaying its decode."""
        if FILE + path not in self._totals:
            self.files += 1
            self._add(FILE + path, 1, 0.0, 0.0, None, None)

    def add_beside(self, stage: str, wall_s: float, cpu_s: float) -> None:
        """A stage timed on another thread (the hand-over): booked as it is, no parent."""
        self._add(stage, 1, wall_s, cpu_s, None, None)

    def _add(
        self,
        stage: str,
        calls: int,
        wall_s: float,
        cpu_s: float,
        pixels_in: float | None,
        pixels_out: float | None,
        samples: int = 0,
    ) -> None:
        row = self._totals.get(stage)
        if row is None:
            if len(self._totals) >= MAX_STAGES:
                return
            row = self._totals[stage] = [0.0, 0.0, 0.0, 0.0, math.nan, math.nan]
        row[0] += calls
        row[1] += samples
        row[2] += wall_s
        row[3] += cpu_s
        if pixels_in is not None:
            row[4] = pixels_in if row[4] != row[4] else row[4] + pixels_in
        if pixels_out is not None:
            row[5] = pixels_out if row[5] != row[5] else row[5] + pixels_out

    def totals(self) -> Totals:
        """The board's totals: what it held when this process started, plus this process's own."""
        own = {stage: tuple(row) for stage, row in self._totals.items()}
        own.update(sampled_rows(own, self.sampled, self.ticks))
        merged = dict(self._base)
        for stage, row in own.items():
            before = merged.get(stage)
            merged[stage] = row if before is None else tuple(_plus(a, b) for a, b in zip(row, before, strict=False))
        return merged

    def publish(self) -> None:
        self._published_at = self._clock()
        if self._publish is not None:
            self._publish(self.totals())


def sampled_rows(own: Totals, sampled: dict[str, int], ticks: int) -> Totals:
    """The stack sampler's stages: GETITEM's own time split by its ticks (NOTE [ Stack sampling ]); GETITEM keeps the rest."""
    getitem = own.get(GETITEM)
    if getitem is None or ticks <= 0 or not sampled:
        return {}
    calls, samples, wall, cpu, *_ = getitem
    rows: Totals = {}
    given = 0.0
    for stage, count in sampled.items():
        share = count / ticks
        rows[stage] = (float(count), 0.0, wall * share, cpu * share, math.nan, math.nan)
        given += share
    rest = max(0.0, 1.0 - given)
    rows[GETITEM] = (calls, samples, wall * rest, cpu * rest, math.nan, math.nan)
    return rows


def _plus(a: float, b: float) -> float:
    if a != a:
        return b
    if b != b:
        return a
    return a + b


def board_publisher(boards: StageBoards, worker_id: int) -> Callable[[Totals], object]:
    """What a worker's clock publishes through: its worker id's board."""

    def publish(totals: Totals) -> object:
        return boards.write(worker_id, totals)

    return publish


def pixels(value: Any) -> float | None:
    """An image's pixel count: a PIL image's size, an array's or tensor's last two dimensions; None otherwise."""
    try:
        size = getattr(value, "size", None)
        if isinstance(size, tuple) and len(size) == 2 and all(isinstance(n, int) for n in size):
            return float(size[0] * size[1])
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) >= 2:
            return float(int(shape[-1]) * int(shape[-2]))
    except Exception:  # noqa: BLE001 - a user's object whose size cannot be read: no size
        return None
    return None


def samples_in(index: Any) -> int:
    """The samples a fetch of ``index`` makes: a batch's indices, else one."""
    try:
        return len(index)
    except TypeError:
        return 1

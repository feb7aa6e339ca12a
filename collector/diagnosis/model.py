"""The prediction model: an epoch's time at any DataLoader setting and thread count, from the run's own measurements."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from collector.diagnosis.calibration import C
from collector.diagnosis.cores import share
from collector.diagnosis.fresh import Epoch
from collector.diagnosis.setting import Setting
from collector.diagnosis.threads import amdahl


@dataclass(frozen=True)
class EpochModel:
    """Per batch, uncontended: the step's work and threads, loading's CPU and blocked time; the machine.

    NOTE [ Sharing the cores ]
    The one model behind every predicted speed-up (``expected_speedup`` is
    always epoch time before / after, both from this model). Our runnable
    threads, r of them, get a share S(r) of a core each beside B, other
    processes' runnable threads, on C cores (NOTE [ Crowded cores ]). Ours are
    the step's q threads while it runs, the k workers computing, the main
    thread loading (with no workers). A step on q intra-op threads advances
    only while all its threads hold a core (its parallel regions end at a
    barrier, the waiting ones spin), so its work slows by S ** -q::

        step(q, k) = step_blocked + alone(q) * S(q + k) ** -q        alone: NOTE [ Intra-op threads ]
        fetch(n)   = load_blocked + load_cpu / S(k + s * q)           s: share of time stepping
        cycle(n)   = max(step + handoff, fetch(n) / n, (q * alone(q) + load_cpu) / C) + queue_loss
        cycle(0)   = step(q, 0) + load_blocked + load_cpu / S(1)
        epoch      = batches * cycle                     no workers
        epoch      = start + played out + end           fresh workers each epoch (NOTE [ Fresh workers each epoch ])
        epoch      = played out                         persistent workers: no start or end, the same fill

    solved as a fixed point. The step's uncontended work comes out of its
    recorded wall time by the same model at the recorded setting (with
    workers, the played epoch's steps at the batches the run measured: NOTE
    [ The step beside computing workers ]); loading's
    CPU and blocked time, the waits for a core, fresh workers' start and end
    were measured where the run could (NOTE [ Where the time goes ]). A run
    that could not measure the waits for a core (no Linux schedstat) gets the
    same model with none assumed beyond what its fetch concurrency shows: the
    closed form is this model's degenerate case, not a second one.
    ``prefetch_factor`` enters twice: as the batches a fresh epoch's workers
    fetch ahead, and through ``queue_loss``: where workers out-produce the
    loop on average yet the run measured slower cycles than the model plays,
    the difference is fetch times varying faster than the queue absorbs, and
    a queue d times deeper loses 1/d of it. ``pin_memory`` changes the
    host-to-GPU copy inside the step (``copy_saving_s``; nothing on a CPU).
    Constants the run cannot show are in collector/diagnosis/calibration.py
    (NOTE [ Calibration table ]).
    """

    cores: float
    background: float  # B: other processes' runnable threads
    step_work_s: float  # the step's CPU work, uncontended (intra-op threads together)
    step_threads: float  # q: the step's runnable threads while it runs
    step_blocked_s: float
    handoff_s: float
    load_cpu_s: float
    load_blocked_s: float
    epoch_batches: float
    start_per_worker_s: float  # each fresh worker's start an epoch, beyond steady batches (``ends_s``)
    end_per_worker_s: float  # each fresh worker's share of an epoch's final next(), which shuts them down
    recorded: Setting
    others_busy: float = 0.0  # the cores other processes kept busy (B counts their runnable threads)
    queue_loss_s: float = 0.0  # per batch at the recorded queue depth: cycles lost to uneven fetches
    copy_saving_s: float = 0.0  # per batch: what page-locked batches save on the copy to the GPU
    max_workers: int = int(C.MAX_WORKERS)  # memory's limit
    spread: float = 0.0  # the run's own variation: relative spread of its epochs' (or windows') time a batch
    measured_share: float | None = None  # the step's parallel share, where the run ran at two thread counts

    def _stretch(self, ours: float) -> float:
        """How much longer our ``ours`` runnable threads take than with a core each (NOTE [ Crowded cores ])."""
        return 1.0 / share(ours, self.background, self.cores)

    def step_alone_s(self, q: float) -> float:
        """The step's compute on q intra-op threads with a core each (NOTE [ Intra-op threads ])."""
        p = self.parallel_share
        return self.step_work_s / self.step_threads * amdahl(self.step_threads, p) / amdahl(q, p)

    @property
    def parallel_share(self) -> float:
        """The share of the step's compute its threads share out: measured where the run could, else the table's."""
        return C.PARALLEL_SHARE if self.measured_share is None else self.measured_share

    def speedup_span(self, setting: Setting) -> tuple[float, float]:
        """The least and the most speed-up of ``setting`` over the parallel shares the run leaves open.

        A step on as many threads as recorded takes its time as measured;
        on more or fewer, Amdahl's law plays it with a parallel share that
        one thread count cannot show (NOTE [ Intra-op threads ]). Unmeasured,
        it spans C.PARALLEL_SHARE_LOW to C.PARALLEL_SHARE_HIGH.
        """
        speedup = self.speedup(setting)
        if abs(self.q(setting) - self.step_threads) < 1e-9 or self.measured_share is not None:
            return speedup, speedup
        ends = [m.speedup(setting) for m in self.share_ends]
        return min(speedup, *ends), max(speedup, *ends)

    @functools.cached_property
    def share_ends(self) -> tuple[EpochModel, EpochModel]:
        """This model at the least and the most parallel share a step was measured with."""
        return (
            dataclasses.replace(self, measured_share=C.PARALLEL_SHARE_LOW),
            dataclasses.replace(self, measured_share=C.PARALLEL_SHARE_HIGH),
        )

    def blocked_s(self, setting: Setting) -> float:
        """The step's time on no core (a GPU's work, copies, sleeps): less the copy page-locked batches save."""
        pinning = setting.pin_memory and not self.recorded.pin_memory
        return max(0.0, self.step_blocked_s - (self.copy_saving_s if pinning else 0.0))

    def step_s(self, q: float, k: float, setting: Setting) -> float:
        return self.blocked_s(setting) + self.step_alone_s(q) * self._stretch(q + k) ** q

    def _floor(self, q: float) -> float:
        """Seconds per batch the cores allow: the step's q spinning threads' CPU and loading's, on every core."""
        return (q * self.step_alone_s(q) + self.load_cpu_s) / self.cores

    def q(self, setting: Setting) -> float:
        """The step's runnable threads at ``setting``: more than it used as recorded only where it used all it had.

        A step that left some of its threads idle (the pool larger than its
        parallel regions use) gains nothing from a larger pool; one that kept
        every thread busy may scale further, as Amdahl's law plays it
        (NOTE [ Intra-op threads ]).
        """
        more = max(0, setting.threads - self.recorded.threads) if self.threads_saturated else 0
        return max(1.0, min(self.step_threads + more, float(setting.threads)))

    @property
    def threads_saturated(self) -> bool:
        """The step kept every intra-op thread it had busy: a larger pool may speed it up."""
        return self.step_threads >= self.recorded.threads - C.SATURATED_THREADS_SLACK

    def cycle(self, setting: Setting) -> float:
        """Seconds per batch in steady state, what uneven fetches cost at its queue depth included."""
        return self._cycle(setting) + self.queue_loss(setting)

    def _cycle(self, setting: Setting) -> float:
        return self._steady(setting)[0]

    @functools.cached_property
    def _memo(self) -> dict[tuple[str, Setting], Any]:
        """What this model played for each setting: a model is frozen, and a ranking asks it the same again and again."""
        return {}

    def _remembered(self, play: Callable[[Setting], Any], setting: Setting) -> Any:
        key = (play.__name__, setting)
        if key not in self._memo:
            self._memo[key] = play(setting)
        return self._memo[key]

    def _steady(self, setting: Setting) -> tuple[float, float]:
        """(seconds per batch, the step's seconds) in steady state, before uneven fetches."""
        return self._remembered(self._solve, setting)

    def _solve(self, setting: Setting) -> tuple[float, float]:
        """``_steady``'s fixed point, played out."""
        q, n = self.q(setting), setting.num_workers
        if n <= 0:
            step = self.step_s(q, 0.0, setting)
            return step + self.load_blocked_s + self.load_cpu_s * self._stretch(1.0), step
        floor = self._floor(q)
        y = max(self.step_s(q, 0.0, setting) + self.handoff_s, (self.load_cpu_s + self.load_blocked_s) / n, floor)
        k = min(float(n), self.load_cpu_s / y)
        for _ in range(200):
            step = self.step_s(q, k, setting)
            stepping = min(1.0, step / y)
            fetch_cpu = self.load_cpu_s * self._stretch(k + stepping * q)  # its CPU, stretched
            new_y = max(step + self.handoff_s, (self.load_blocked_s + fetch_cpu) / n, floor)
            new_k = min(float(n), fetch_cpu / new_y)
            if abs(new_y - y) < 1e-8 and abs(new_k - k) < 1e-6:
                break
            y, k = 0.5 * (y + new_y), 0.5 * (k + new_k)
        return y, self.step_s(q, k, setting)

    def queue_loss(self, setting: Setting) -> float:
        """Seconds a batch lost to uneven fetches at ``setting``'s queue depth (NOTE [ Sharing the cores ])."""
        if setting.depth <= 0 or self.recorded.depth <= 0:
            return 0.0
        return self.queue_loss_s * self.recorded.depth / setting.depth

    def epoch_s(self, setting: Setting) -> float:
        """One epoch's time at ``setting``: what every prediction compares."""
        return self._remembered(self._epoch_s, setting)

    def _epoch_s(self, setting: Setting) -> float:
        """``epoch_s``, played out."""
        y = self._cycle(setting)
        n = setting.num_workers
        lost = self.queue_loss(setting) * self.epoch_batches
        if n <= 0:
            return self.epoch_batches * y + lost
        batches, played, epoch = self._played(setting)
        # persistent workers start and end once a run, but their queues start empty at each iter() too
        ends = 0.0 if setting.persistent_workers else self.ends_s(n)
        return ends + epoch.seconds(played) + (batches - played) * y + lost

    def step_mean_s(self, setting: Setting, head: int) -> float:
        """The mean step an epoch at ``setting`` plays on its batches from ``head`` on, as a run measures it.

        NOTE [ The step beside computing workers ]
        A short epoch's workers fetch its batches at its start, so its first
        steps share the cores with them and its last ones run alone: on the
        photo pipeline (8 batches, 4 persistent workers, 2 threads) the steps
        measured 0.24-0.26 s, 0.10-0.14 s, then 0.05 s each. The run's mean
        step is of the batches past the epoch's start (``start_batches``), so
        it comes out of the played epoch at the same batches (row i holds the
        step on batch i - 1; the last batch's step is in no row). Read as a
        steady cycle's instead, with every worker computing beside it, the
        step's own work came out at a third of what it ran alone, and the
        model put that epoch at 0.51 s where it measured 0.81-0.90 s.
        """
        step = self._steady(setting)[1]
        if setting.num_workers <= 0:
            return step
        batches, played, epoch = self._played(setting)
        steps = [s - self.handoff_s for s in epoch.play(played)[1][max(0, head - 1) : played - 1]]  # next()'s
        rest = batches - played
        return (sum(steps) + rest * step) / (len(steps) + rest) if steps or rest else step

    def _played(self, setting: Setting) -> tuple[int, int, Epoch]:
        """(an epoch's batches, how many of them are played out, the epoch that plays them)."""
        n = setting.num_workers
        batches = max(1, round(self.epoch_batches))
        played = batches - n * max(0, (batches - int(C.FILL_BATCHES)) // n)  # the rest goes at the steady cycle
        q = self.q(setting)
        epoch = Epoch(
            workers=n,
            prefetch=setting.prefetch_factor or 2,
            cores=self.cores,
            background=self.background,
            load_cpu_s=self.load_cpu_s,
            load_blocked_s=self.load_blocked_s,
            step_threads=q,
            step_compute_s=self.step_alone_s(q),
            step_blocked_s=self.blocked_s(setting) + self.handoff_s,
        )
        return batches, played, epoch

    def ends_s(self, workers: int) -> float:
        """What starting and shutting down ``workers`` fresh workers adds to an epoch.

        The loop's process forks its workers one after another at iter(),
        and at the epoch's end tells each to stop and joins it in turn, so
        both grow by a worker's share per worker beside a fixed part
        (C.START_FIXED_S, C.END_FIXED_S): the starved demo's fresh epochs
        ran 0.025, 0.067 and 0.13 s longer than persistent ones with 2, 6
        and 12 workers. A run measures its own at its worker count, and its
        share a worker comes out of that.
        """
        if workers <= 0:
            return 0.0
        return C.START_FIXED_S + C.END_FIXED_S + workers * (self.start_per_worker_s + self.end_per_worker_s)

    @functools.cached_property
    def recorded_epoch_s(self) -> float:
        """The model's epoch at the recorded setting: the numerator of every speed-up, played out once."""
        return self.epoch_s(self.recorded)

    def speedup(self, setting: Setting) -> float:
        """Epoch time at the recorded setting / at ``setting``, both from the model."""
        return self.recorded_epoch_s / max(self.epoch_s(setting), 1e-12)

    def first_fetch_s(self, n: int) -> float:
        """A fresh worker's first batch: n of them fetching at once, the loop waiting."""
        return self.load_blocked_s + self.load_cpu_s * self._stretch(n)

    def produce_s(self, n: int) -> float:
        """Seconds between batches n workers deliver, uncontended."""
        return (self.load_cpu_s + self.load_blocked_s) / max(n, 1)

    def consume_s(self, setting: Setting) -> float:
        """Seconds the loop takes a batch when one is always ready, uncontended."""
        return self.step_alone_s(self.q(setting)) + self.step_blocked_s + self.handoff_s

    def headroom(self, setting: Setting) -> float:
        """How much faster the workers produce than the loop consumes, uncontended (SURPLUS wants 1.15)."""
        return self.consume_s(setting) / max(self.produce_s(setting.num_workers), 1e-12)

    def busy(self) -> bool:
        """Every core busy: the job's CPU at its recorded speed and other processes' fill the machine."""
        y = self.cycle(self.recorded)
        used = self._floor(self.q(self.recorded)) * self.cores / max(y, 1e-9)
        return used + self.others_busy >= self.cores - 0.25

    def cpu_bound(self) -> bool:
        return self.load_cpu_s >= self.load_blocked_s

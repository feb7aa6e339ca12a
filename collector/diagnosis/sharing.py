"""The throughput model where every thread's CPU and wait for a core were measured: cores shared by who is runnable."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass

from collector.diagnosis.cores import background_for, background_using, share
from collector.diagnosis.fresh import Epoch
from collector.diagnosis.model import SPARE_CPU_WORKERS, SURPLUS
from collector.diagnosis.stats import Facts

START_S = 0.04  # fresh workers' start each epoch (fork, init) before their first fetch: 0-0.12 s measured on 2 cores
END_S = 0.025  # the final next() that shuts non-persistent workers down (measured 19-38 ms on 2 cores)
MAX_CANDIDATE_WORKERS = 16
PARALLEL_SHARE = 0.68  # of a step's compute, spread over its intra-op threads (NOTE [ Intra-op threads ])
FILL_BATCHES = 64  # batches of an epoch with fresh workers played out (NOTE [ Fresh workers each epoch ])
CLOSE = 0.97  # a setting within 3% of the best counts as the best: the fewest workers, the least change
ROBUST = 0.90  # workers with headroom are worth up to 10% of the model's best (SharedCores.headroom)
SATURATED_WAIT = 0.1  # loading that waits this share of its CPU time for a core ran on a full machine
IO_SURPLUS = 1.5  # I/O-bound loading gets 50% more workers than the model needs: storage latency varies


@dataclass(frozen=True)
class SharedCores:
    """Per batch, uncontended: the step's work and threads, loading's CPU and blocked time; the machine.

    NOTE [ Sharing the cores ]
    Our runnable threads, r of them, get a share S(r) of a core each beside
    B, other processes' runnable threads, on C cores: all of one while
    r + B <= C; beyond, what the cores other processes keep leave to ours,
    C / r where ours are alone (NOTE [ Crowded cores ]). Ours are the step's
    q threads while it runs, the k workers computing, the main thread
    loading (with no workers); B, as many busy threads of other processes
    as would get the cores they were seen to use beside ours, more where
    our lone loading thread's waits for a core say so. A step on q intra-op
    threads is worse off than one thread: its parallel regions end at a
    barrier, so it advances only while all its threads hold a core, and the
    waiting ones spin (measured on 2 cores: a 2-thread step beside busy
    processes took 2.6-3x as long as a 1-thread one, burning 2.7x its CPU).
    So the step's work slows by S ** -q, a single thread's by 1 / S::

        step(n)   = step_blocked + alone(q) * S(q + k) ** -q         alone: NOTE [ Intra-op threads ]
        fetch(n)  = load_blocked + load_cpu / S(k + s * q)           s: share of time stepping
        k         = X * load_cpu * (stretch)                              workers computing, on average
        cycle(n)  = max(step(n) + handoff, fetch(n) / n, (q * alone(q) + load_cpu) / C)
        cycle(0)  = step(0) + load_blocked + load_cpu / S(1)
        epoch(n)  = batches * cycle(n)                  persistent workers, or none
        epoch(n)  = start + played out + end            fresh workers each epoch (NOTE [ Fresh workers each epoch ])

    solved as a fixed point. The step's uncontended time comes out of its
    recorded wall time by the same formula at the recorded setting; loading's
    CPU and blocked time were measured directly (NOTE [ Where the time goes ]),
    and so were fresh workers' start (iter() to their first batch, less that
    batch's fetch) and the final next() that ends them, where they ran.
    So workers that compute slow a multi-threaded step, fewer intra-op threads
    (``torch.set_num_threads``) lower q, and with every core busy no setting
    helps. The predicted speed-up is epoch(recorded) / epoch(new), both from
    the model, so what the model gets wrong about the recorded setting
    largely cancels.
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
    start_s: float  # a fresh set of workers' start cost per epoch, beyond steady batches
    end_s: float  # the final next() of an epoch with fresh workers
    persistent: bool
    workers: int  # as recorded
    threads: int  # torch intra-op threads as recorded
    others_busy: float = 0.0  # the cores other processes kept busy (B counts their runnable threads)
    prefetch: int = 2  # batches in flight per worker

    def _stretch(self, ours: float) -> float:
        """How much longer our ``ours`` runnable threads take than with a core each (NOTE [ Crowded cores ])."""
        return 1.0 / share(ours, self.background, self.cores)

    def step_alone_s(self, q: float) -> float:
        """The step's compute on q intra-op threads with a core each (NOTE [ Intra-op threads ])."""
        return self.step_work_s / self.step_threads * _speedup(self.step_threads) / _speedup(q)

    def step_s(self, q: float, k: float) -> float:
        return self.step_blocked_s + self.step_alone_s(q) * self._stretch(q + k) ** q

    def _floor(self, q: float) -> float:
        """Seconds per batch the cores allow: the step's q spinning threads' CPU and loading's, on every core."""
        return (q * self.step_alone_s(q) + self.load_cpu_s) / self.cores

    def cycle(self, n: int, threads: int | None = None) -> float:
        """Seconds per batch in steady state with n workers and ``threads`` intra-op threads."""
        q = self._threads(threads)
        if n <= 0:
            return self.step_s(q, 0.0) + self.load_blocked_s + self.load_cpu_s * self._stretch(1.0)
        floor = self._floor(q)
        y = max(self.step_s(q, 0.0) + self.handoff_s, (self.load_cpu_s + self.load_blocked_s) / n, floor)
        k = min(float(n), self.load_cpu_s / y)
        for _ in range(200):
            step = self.step_s(q, k)
            stepping = min(1.0, step / y)
            fetch_cpu = self.load_cpu_s * self._stretch(k + stepping * q)  # its CPU, stretched
            new_y = max(step + self.handoff_s, (self.load_blocked_s + fetch_cpu) / n, floor)
            new_k = min(float(n), fetch_cpu / new_y)
            if abs(new_y - y) < 1e-8 and abs(new_k - k) < 1e-6:
                break
            y, k = 0.5 * (y + new_y), 0.5 * (k + new_k)
        return y

    def _threads(self, threads: int | None) -> float:
        return max(1.0, min(self.step_threads, float(threads)) if threads else self.step_threads)

    def epoch_s(self, n: int, threads: int | None = None) -> float:
        y = self.cycle(n, threads)
        if n <= 0 or self.persistent:
            return self.epoch_batches * y
        batches = max(1, round(self.epoch_batches))
        played = batches - n * max(0, (batches - FILL_BATCHES) // n)  # the rest goes at the steady cycle
        q = self._threads(threads)
        epoch = Epoch(
            workers=n,
            prefetch=self.prefetch,
            cores=self.cores,
            background=self.background,
            load_cpu_s=self.load_cpu_s,
            load_blocked_s=self.load_blocked_s,
            step_threads=q,
            step_compute_s=self.step_alone_s(q),
            step_blocked_s=self.step_blocked_s + self.handoff_s,
        )
        return self.start_s + epoch.seconds(played) + (batches - played) * y + self.end_s

    def first_fetch_s(self, n: int) -> float:
        """A fresh worker's first batch: n of them fetching at once, the loop waiting."""
        return self.load_blocked_s + self.load_cpu_s * self._stretch(n)

    def speedup(self, n: int, threads: int | None = None) -> float:
        return self.epoch_s(self.workers) / max(self.epoch_s(n, None if threads == self.threads else threads), 1e-12)

    def best(self, max_workers: int) -> tuple[int, int]:
        """(num_workers, intra-op threads): the fewest workers and least change within CLOSE of the best."""
        threads = [self.threads] + [t for t in range(self.threads - 1, 0, -1) if self.step_threads > 1.2]
        top_n = min(max_workers, MAX_CANDIDATE_WORKERS)
        if self.load_cpu_s >= self.load_blocked_s:
            # CPU-bound loading: one worker per core and a spare (NOTE [ Spare CPU worker ]); beyond that
            # more workers only take a larger share of the cores from other processes, which the model
            # would count as a gain and the machine's other users as a loss.
            top_n = min(top_n, math.ceil(self.cores - 1e-9) + SPARE_CPU_WORKERS)
            room = math.floor(self.cores + 1e-9)  # headroom beyond a worker a core only shares the same cores
        else:
            room = top_n
        ns = range(0, max(1, top_n) + 1)
        scores = {(n, t): self.speedup(n, t) for n in ns for t in threads}
        top = max(scores.values())
        recorded = scores.get((self.workers, self.threads), 0.0)
        if recorded >= CLOSE * top:
            return self.workers, self.threads
        n, t = _least_change(c for c, v in scores.items() if v >= CLOSE * top)
        if n > 0 and self.headroom(n, t) < SURPLUS:  # only just fed: one with headroom, if it gives up little
            fed = [c for c, v in scores.items() if v >= ROBUST * top and self.headroom(*c) >= SURPLUS and c[0] <= room]
            if fed:
                n, t = _least_change(fed)
        if self.load_blocked_s > self.load_cpu_s and n > 0:  # I/O-bound: headroom costs only memory
            n = min(max_workers, max(n, math.ceil(IO_SURPLUS * n - 1e-9)))
        return n, t

    def headroom(self, n: int, threads: int) -> float:
        """How much faster n workers produce than the loop consumes, uncontended.

        Fetch times vary and the model plays them as their mean, so a setting
        whose workers only just keep up loses more than it predicts: from
        bench/bench_predictions.py's light pipeline on 2 cores, 1 worker that
        only just kept up with a 1-thread step measured 1.07-1.46 s an epoch,
        and 2 workers 1.22-1.31 s, where the model put 1 worker ahead.
        So where the best setting's workers have less than SURPLUS headroom,
        the fewest workers that have it are suggested instead, if the model
        gives them at least ROBUST of the best. With CPU-bound loading, not
        beyond one worker a core: more only share the same cores (on the
        light pipeline, from 2 workers, 3 workers and 1 thread had been
        suggested at 1.12x over 2 workers and 1 thread at 1.19x, and
        measured 0.85x).
        """
        loop = self.step_alone_s(self._threads(threads)) + self.step_blocked_s + self.handoff_s
        return n * loop / max(self.load_cpu_s + self.load_blocked_s, 1e-12)

    def busy(self) -> bool:
        """Every core busy: the job's CPU at its recorded speed and other processes' fill the machine."""
        y = self.cycle(self.workers, self.threads)
        return self._floor(self.step_threads) * self.cores / max(y, 1e-9) + self.others_busy >= self.cores - 0.25


def shared_cores(facts: Facts, handoff_s: float) -> SharedCores | None:
    """The model for this run, or None where the waits for a core were not measured (older files, other OSes)."""
    if facts.load_wall_s is None or facts.load_cpu_s is None or facts.step_runq_s is None:
        return None
    if facts.load_runq_s is None and facts.load_blocked_s is None:
        return None
    cores = float(max(1, facts.usable_cores))
    load_runq = facts.load_runq_s or 0.0
    load_cpu = min(facts.load_cpu_s, facts.load_wall_s)
    load_blocked = max(0.0, facts.load_wall_s - load_cpu - load_runq)
    step_wall = max(facts.step_mean_s, 1e-6)
    runnable = facts.step_cpu_s + facts.step_runq_s
    q = max(1.0, runnable / step_wall)
    if facts.torch_threads:
        # the pool: CPU beyond its threads is not the step's work (0.09 of a core on bench/pipelines.py's
        # light pipeline, read as more threads it put the 1-thread step 7% below the measured)
        q = min(q, float(max(facts.torch_threads, 1)))
    step_blocked = max(0.0, step_wall - runnable / q)
    k = 0.0
    if facts.num_workers > 0 and facts.cycle_s > 0:
        k = min(float(facts.num_workers), (load_cpu + load_runq) / facts.cycle_s)
    ours = 1.0 if facts.num_workers == 0 else k + q * min(1.0, step_wall / max(facts.cycle_s, 1e-9))
    others = _others_runnable(facts, cores, load_cpu, load_runq, ours)
    stretch = share(q + k, others, cores) ** -q
    work = (step_wall - step_blocked) * q / stretch
    end = END_S
    if facts.num_workers > 0 and not facts.persistent_workers and facts.end_wait_s > 0:
        end = facts.end_wait_s / max(1, facts.epochs)
    model = SharedCores(
        cores=cores,
        background=others,
        step_work_s=work,
        step_threads=q,
        step_blocked_s=step_blocked,
        handoff_s=handoff_s,
        load_cpu_s=load_cpu,
        load_blocked_s=load_blocked,
        epoch_batches=max(1.0, facts.epoch_batches),
        start_s=START_S,
        end_s=end,
        persistent=facts.persistent_workers,
        workers=facts.num_workers,
        threads=max(1, facts.torch_threads or 1),
        others_busy=facts.background_cores,
        prefetch=facts.prefetch_factor or 2,
    )
    if facts.num_workers > 0 and not facts.persistent_workers and facts.epoch_first_s:
        # measured: iter() to batch 0 of later epochs, less the first fetch the epoch's simulation counts itself
        first = sorted(facts.epoch_first_s)[len(facts.epoch_first_s) // 2]
        model = dataclasses.replace(model, start_s=max(0.0, first - model.first_fetch_s(facts.num_workers)))
    return model


def _least_change(settings: Iterable[tuple[int, int]]) -> tuple[int, int]:
    """The fewest workers, then the most intra-op threads (the recorded count is the most tried)."""
    return min(settings, key=lambda setting: (setting[0], -setting[1]))


def _speedup(q: float) -> float:
    """How much faster a step runs on q intra-op threads than on one (Amdahl, PARALLEL_SHARE of it parallel).

    NOTE [ Intra-op threads ]
    A step's threads spin at the barriers of its parallel regions, so a run
    measures q threads busy for the whole step and cannot tell the useful
    share from the spinning. Its CPU is not the work one thread would do:
    bench/pipelines.py's CNN took 120-124 ms a batch on 1 thread and 79-81 ms
    on 2 (1.52x, for 2.05x the CPU), on an idle 2-core machine without
    workers, light and heavy alike. So a step on fewer threads is predicted
    from Amdahl's law with that measured parallel share, not from its CPU:
    reading 2 threads' CPU as one thread's work had a 1-thread step take 40%
    too long, and under-predicted every ``torch.set_num_threads(1)``.
    """
    return 1.0 / ((1.0 - PARALLEL_SHARE) + PARALLEL_SHARE / max(q, 1.0))


def _others_runnable(facts: Facts, cores: float, load_cpu: float, load_runq: float, ours: float) -> float:
    """Other processes' runnable threads: as many as get the cores they were seen to use beside our ``ours``.

    A busy thread of another process keeps a core to itself where it can
    (NOTE [ Crowded cores ]), so up to the cores ours leave free, the cores
    they used count their threads; beyond, theirs share cores too: beside
    2 workers and a step on 2 cores, two busy processes got 0.76-1.0 of a
    core between them, which an even split reads as one thread. A 2 Hz
    sample understates them further on a machine they fill: where the main
    thread, loading alone (no workers), waited a real share of its CPU time
    for a core (SATURATED_WAIT), others had as many threads runnable as leave
    it the share it got. A wait of a few per cent says nothing of the kind
    (the scheduler's own latency: read as a full machine it invented a busy
    thread on an idle one).
    """
    seen = background_using(ours, facts.background_cores, cores)
    if facts.num_workers > 0 or load_cpu <= 0 or load_runq < SATURATED_WAIT * load_cpu:
        return seen
    return max(seen, background_for(1.0, load_cpu / (load_cpu + load_runq), cores))

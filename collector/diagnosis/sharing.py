"""The throughput model where every thread's CPU and wait for a core were measured: cores shared by who is runnable."""

from __future__ import annotations

import math
from dataclasses import dataclass

from collector.diagnosis.model import SPARE_CPU_WORKERS
from collector.diagnosis.stats import Facts

START_S = 0.10  # a fresh worker's start (fork, init, its first batch not yet prefetched) beyond one batch's load
END_S = 0.025  # the final next() that shuts non-persistent workers down (measured 19-38 ms on 2 cores)
MAX_CANDIDATE_WORKERS = 16
CLOSE = 0.97  # a setting within 3% of the best counts as the best: the fewest workers, the least change
IO_SURPLUS = 1.5  # I/O-bound loading gets 50% more workers than the model needs: storage latency varies


@dataclass(frozen=True)
class SharedCores:
    """Per batch, uncontended: the step's work and threads, loading's CPU and blocked time; the machine.

    NOTE [ Sharing the cores ]
    A thread runnable beside R runnable threads on C cores gets C / R of a
    core (R > C): the step's q threads while it runs, the k workers computing,
    the main thread loading (with no workers), and B, other processes' runnable
    threads (at least the cores they keep busy; more where our own threads'
    waits for a core say so). A step on q intra-op threads is worse off than that: its
    parallel regions end at a barrier, so it advances only while all its
    threads hold a core, and the waiting ones spin (measured on 2 cores: a
    2-thread step beside busy processes took 2.6-3x as long as a 1-thread
    one, burning 2.7x its CPU). So the step's work slows by (R / C) ** q, a
    single thread's by R / C::

        step(n)   = step_blocked + step_work / q * max(1, (q + k + B) / C) ** q
        fetch(n)  = load_blocked + load_cpu * max(1, (k + s * q + B) / C)   s: share of time stepping
        k         = X * load_cpu * (stretch)                              workers computing, on average
        cycle(n)  = max(step(n) + handoff, fetch(n) / n, (step_work + load_cpu) / C)
        cycle(0)  = step(0) + load_blocked + load_cpu * max(1, (1 + B) / C)
        epoch(n)  = batches * cycle(n) + start(n)       start: fresh workers each epoch, and the final next()

    solved as a fixed point. The step's uncontended work comes out of its
    recorded wall time by the same formula at the recorded setting; loading's
    CPU and blocked time were measured directly (NOTE [ Where the time goes ]).
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

    def _stretch(self, runnable: float) -> float:
        return max(1.0, runnable / self.cores)

    def step_s(self, q: float, k: float) -> float:
        return self.step_blocked_s + self.step_work_s / q * self._stretch(q + k + self.background) ** q

    def cycle(self, n: int, threads: int | None = None) -> float:
        """Seconds per batch in steady state with n workers and ``threads`` intra-op threads."""
        q = max(1.0, min(self.step_threads, float(threads)) if threads else self.step_threads)
        b = self.background
        if n <= 0:
            return self.step_s(q, 0.0) + self.load_blocked_s + self.load_cpu_s * self._stretch(1.0 + b)
        floor = (self.step_work_s + self.load_cpu_s) / self.cores
        y = max(self.step_s(q, 0.0) + self.handoff_s, (self.load_cpu_s + self.load_blocked_s) / n, floor)
        k = min(float(n), self.load_cpu_s / y)
        for _ in range(200):
            step = self.step_s(q, k)
            stepping = min(1.0, step / y)
            fetch_cpu = self.load_cpu_s * self._stretch(k + stepping * q + b)  # its CPU, stretched
            new_y = max(step + self.handoff_s, (self.load_blocked_s + fetch_cpu) / n, floor)
            new_k = min(float(n), fetch_cpu / new_y)
            if abs(new_y - y) < 1e-8 and abs(new_k - k) < 1e-6:
                break
            y, k = 0.5 * (y + new_y), 0.5 * (k + new_k)
        return y

    def epoch_s(self, n: int, threads: int | None = None) -> float:
        start = 0.0
        if n > 0 and not self.persistent:
            start = self.start_s + self.end_s
        return self.epoch_batches * self.cycle(n, threads) + start

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
        ns = range(0, max(1, top_n) + 1)
        scores = {(n, t): self.speedup(n, t) for n in ns for t in threads}
        top = max(scores.values())
        recorded = scores.get((self.workers, self.threads), 0.0)
        if recorded >= CLOSE * top:
            return self.workers, self.threads
        good = [(n, -t) for (n, t), v in scores.items() if v >= CLOSE * top]
        n, t = min(good)
        t = -t
        if self.load_blocked_s > self.load_cpu_s and n > 0:  # I/O-bound: headroom costs only memory
            n = min(max_workers, max(n, math.ceil(IO_SURPLUS * n - 1e-9)))
        return n, t

    def busy(self) -> bool:
        """Every core busy: the job's CPU at its recorded speed and other processes' fill the machine."""
        y = self.cycle(self.workers, self.threads)
        return (self.step_work_s + self.load_cpu_s) / max(y, 1e-9) + self.others_busy >= self.cores - 0.25


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
        q = min(q, float(max(facts.torch_threads, 1)) + 0.5)  # the pool, plus the odd helper
    step_blocked = max(0.0, step_wall - runnable / q)
    k = 0.0
    if facts.num_workers > 0 and facts.cycle_s > 0:
        k = min(float(facts.num_workers), (load_cpu + load_runq) / facts.cycle_s)
    others = _others_runnable(facts, cores, load_cpu, load_runq, k, q * min(1.0, step_wall / max(facts.cycle_s, 1e-9)))
    stretch = max(1.0, (q + k + others) / cores) ** q
    work = (step_wall - step_blocked) * q / stretch
    start, end = START_S + facts.load_wall_s, END_S
    if facts.num_workers > 0 and not facts.persistent_workers:
        if facts.epoch_lost_s:  # measured: what later epoch starts cost beyond steady batches
            start = sorted(facts.epoch_lost_s)[len(facts.epoch_lost_s) // 2]
        if facts.end_wait_s > 0:
            end = facts.end_wait_s / max(1, facts.epochs)
    return SharedCores(
        cores=cores,
        background=others,
        step_work_s=work,
        step_threads=q,
        step_blocked_s=step_blocked,
        handoff_s=handoff_s,
        load_cpu_s=load_cpu,
        load_blocked_s=load_blocked,
        epoch_batches=max(1.0, facts.epoch_batches),
        start_s=start,
        end_s=end,
        persistent=facts.persistent_workers,
        workers=facts.num_workers,
        threads=max(1, facts.torch_threads or 1),
        others_busy=facts.background_cores,
    )


def _others_runnable(facts: Facts, cores: float, load_cpu: float, load_runq: float, k: float, stepping: float) -> float:
    """Other processes' runnable threads: at least their busy cores, and what the loading thread's wait implies.

    A thread that ran c and waited r for a core got c / (c + r) of one, so
    about C (c + r) / c threads were runnable beside it: others' demand, which
    a 2 Hz busy figure understates on a loaded machine (and which more threads
    of ours would share).
    """
    busy = facts.background_cores
    if load_cpu <= 0 or load_runq <= 0:
        return busy
    runnable = cores * (load_cpu + load_runq) / load_cpu
    ours = 1.0 if facts.num_workers == 0 else k + stepping
    return max(busy, runnable - ours)

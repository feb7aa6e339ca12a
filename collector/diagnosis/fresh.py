"""An epoch with fresh workers, simulated batch by batch on cores shared by whoever is runnable."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from collector.diagnosis.cores import share as cores_share

DONE = 1e-12  # seconds of work left that count as none


@dataclass
class _Fetch:
    """One worker's batch in progress: its CPU left to run, then its blocked time left."""

    batch: int
    cpu_s: float
    blocked_s: float


@dataclass(frozen=True)
class Epoch:
    """One epoch's shape: what each batch costs uncontended and the machine it shares.

    NOTE [ Fresh workers each epoch ]
    Non-persistent workers start every epoch empty, so an epoch is not
    batches * cycle plus a constant. Persistent workers start once a run,
    but their queues are empty at each iter() too (the sampler's indices
    for the new epoch are sent then), so their epoch is played out the
    same way, without the start and the end: on bench/bench_predictions.py's
    grid (55 quiet runs of four pipelines) that put 478 of 513 predictions
    within 25% against 468, and the light pipeline's median error at 13%
    against 17%. All n workers fetch their first batch at
    once while the loop waits (the cores are theirs then), deliver in turn,
    a worker's next index sent when the batch prefetch * n ahead of it is
    taken, and at the end the last workers finish alone while the others
    idle. The steady cycle's contention holds only in between. So the epoch
    is played out: each of our runnable threads gets the share S of a core
    that other processes' busy threads leave it (NOTE [ Crowded cores ]), the
    step's q intra-op threads advance at S ** q (their barriers; NOTE
    [ Sharing the cores ]), and the blocked parts of a fetch and of a step
    (and the hand-off) take no core.
    With 8 batches of 0.85 s of CPU on 2 cores, 3 workers and a 1-thread
    step of 0.12 s (bench/bench_predictions.py), that is about 3.9 s, where
    8 steady cycles plus a start read 4.5-5.2 s, and the measured epochs
    were 3.8-4.4 s.
    """

    workers: int
    prefetch: int
    cores: float
    background: float  # other processes' runnable threads
    load_cpu_s: float
    load_blocked_s: float
    step_threads: float
    step_compute_s: float  # the step's compute on its threads, each with a core
    step_blocked_s: float  # the step's own blocked time, and the hand-off of its batch

    def seconds(self, batches: int) -> float:
        """From the workers' first fetch to the end of the last batch's step."""
        return self.play(batches)[0]

    def play(self, batches: int) -> tuple[float, list[float]]:
        """(the epoch's seconds, each batch's step in seconds: from the loop taking it to its end)."""
        n = self.workers
        ahead = max(1, self.prefetch) * n
        queues: list[deque[int]] = [deque() for _ in range(n)]
        for i in range(min(ahead, batches)):
            queues[i % n].append(i)
        fetching: list[_Fetch | None] = [None] * n
        ready = [False] * batches
        nxt = 0  # the batch the loop waits for
        blocked_left, compute_left = 0.0, 0.0
        stepping = False  # the loop is on a batch (its blocked part, then its compute)
        t, taken = 0.0, 0.0
        steps: list[float] = []
        while True:
            for w in range(n):  # idle workers take their next index
                task = fetching[w]
                if task is not None and task.cpu_s <= DONE and task.blocked_s <= DONE:
                    ready[task.batch] = True
                    fetching[w] = task = None
                if task is None and queues[w]:
                    fetching[w] = _Fetch(queues[w].popleft(), self.load_cpu_s, self.load_blocked_s)
            if stepping and blocked_left <= DONE and compute_left <= DONE:
                stepping = False
                steps.append(t - taken)
                if nxt == batches:
                    return t, steps
            if not stepping and ready[nxt]:  # the loop takes its batch; its index slot goes to the next one
                sent = nxt + ahead
                if sent < batches:
                    queues[sent % n].append(sent)
                nxt += 1
                stepping, blocked_left, compute_left, taken = True, self.step_blocked_s, self.step_compute_s, t
                continue
            computing = sum(1 for task in fetching if task is not None and task.cpu_s > DONE)
            step_runs = stepping and blocked_left <= DONE
            share = cores_share(computing + (self.step_threads if step_runs else 0.0), self.background, self.cores)
            step_rate = share**self.step_threads
            dt = float("inf")
            for task in fetching:
                if task is not None:
                    dt = min(dt, task.cpu_s / share if task.cpu_s > DONE else task.blocked_s)
            if stepping:
                dt = min(dt, blocked_left if blocked_left > DONE else compute_left / step_rate)
            if dt == float("inf"):
                raise RuntimeError("the epoch cannot advance")  # not reached: a batch is always on its way
            t += dt
            for task in fetching:
                if task is not None:
                    if task.cpu_s > DONE:
                        task.cpu_s -= dt * share
                    else:
                        task.blocked_s -= dt
            if stepping:
                if blocked_left > DONE:
                    blocked_left -= dt
                else:
                    compute_left -= dt * step_rate

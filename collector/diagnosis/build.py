"""The model of one run: its measured costs, taken out of the recorded setting, in the one model's terms."""

from __future__ import annotations

import dataclasses

from collector.diagnosis.calibration import C
from collector.diagnosis.cores import background_for, background_using, share
from collector.diagnosis.model import EpochModel, Setting
from collector.diagnosis.stats import Facts

FIT_ROUNDS = 30  # bisections of the step's work: a billionth of its measured CPU


def recorded_setting(facts: Facts) -> Setting:
    return Setting(
        num_workers=facts.num_workers,
        threads=max(1, facts.torch_threads or 1),
        prefetch_factor=(facts.prefetch_factor or 2) if facts.num_workers else None,
        persistent_workers=facts.persistent_workers and facts.num_workers > 0,
        pin_memory=facts.pin_memory,
    )


def build_model(facts: Facts, *, worker_bytes: float | None = None) -> EpochModel | None:
    """The model for this run, or None where producing a batch was not timed at all.

    ``worker_bytes`` is one worker's private memory (None: not measured; only
    prefetched batches count against RAM then).
    """
    if facts.load_wall_s is None:
        return None
    cores = float(max(1, facts.usable_cores))
    load_cpu = min(facts.load_cpu_s if facts.load_cpu_s is not None else facts.load_wall_s, facts.load_wall_s)
    load_runq = facts.load_runq_s
    if load_runq is None:  # not measured: what the workers' concurrency beyond the free cores implies
        taken = (facts.main_cpu_cores or 0.0) + facts.background_cores
        stretch = max(1.0, (facts.fetch_concurrency or 0.0) / max(0.5, cores - taken))
        load_runq = min(load_cpu * (stretch - 1.0), facts.load_wall_s - load_cpu)
    load_blocked = facts.load_blocked_s
    if load_blocked is None:
        load_blocked = max(0.0, facts.load_wall_s - load_cpu - load_runq)
    step_wall = max(facts.step_mean_s, 1e-6)
    runnable = facts.step_cpu_s + (facts.step_runq_s or 0.0)
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
    handoff = facts.handoff_s if facts.num_workers > 0 and facts.handoff_s > 0 else C.HANDOFF_S
    fresh = facts.num_workers > 0 and not facts.persistent_workers
    end = C.END_PER_WORKER_S
    if fresh and facts.end_wait_s > 0:  # measured: an epoch's final next(), less the part no worker adds
        end = max(0.0, facts.end_wait_s / max(1, facts.epochs) - C.END_FIXED_S) / facts.num_workers
    model = EpochModel(
        cores=cores,
        background=others,
        step_work_s=(step_wall - step_blocked) * q / stretch,
        step_threads=q,
        step_blocked_s=step_blocked,
        handoff_s=handoff,
        load_cpu_s=load_cpu,
        load_blocked_s=load_blocked,
        epoch_batches=max(1.0, facts.epoch_batches),
        start_per_worker_s=C.START_PER_WORKER_S,
        end_per_worker_s=end,
        recorded=recorded_setting(facts),
        others_busy=facts.background_cores,
        copy_saving_s=_copy_saving_s(facts),
        max_workers=_max_workers(facts, worker_bytes),
        spread=facts.cycle_spread,
    )
    if facts.num_workers > 0:
        model = fit_step(model, step_wall, facts.steady_from)
    if fresh and facts.epoch_first_s:
        # measured: iter() to batch 0 of later epochs, less the first fetch the epoch's simulation counts itself
        # and the part no worker adds
        first = sorted(facts.epoch_first_s)[len(facts.epoch_first_s) // 2]
        start = max(0.0, first - model.first_fetch_s(facts.num_workers) - C.START_FIXED_S) / facts.num_workers
        model = dataclasses.replace(model, start_per_worker_s=start)
    if facts.num_workers > 0 and model.headroom(model.recorded) >= 1.0:
        # workers out-produce the loop on average: cycles slower than the model's are the queue's (see NOTE)
        model = dataclasses.replace(model, queue_loss_s=max(0.0, facts.cycle_s - model._cycle(model.recorded)))
    return model


def fit_step(model: EpochModel, step_s: float, head: int) -> EpochModel:
    """``model`` with the step's uncontended work that plays ``step_s``, the run's mean step from batch ``head``.

    Whether a worker computes beside a step changes within an epoch (NOTE
    [ The step beside computing workers ]), so the work comes out of the
    played epoch at the recorded setting, found by bisection: the played
    step grows with the work, and the work is at most the step's time less
    its blocked part, on every one of its threads.
    """
    low, high = 0.0, max(0.0, step_s - model.blocked_s(model.recorded)) * model.step_threads
    for _ in range(FIT_ROUNDS):
        mid = 0.5 * (low + high)
        if dataclasses.replace(model, step_work_s=mid).step_mean_s(model.recorded, head) < step_s:
            low = mid
        else:
            high = mid
    return dataclasses.replace(model, step_work_s=0.5 * (low + high))


def parallel_share_between(a: EpochModel, b: EpochModel) -> float | None:
    """The step's parallel share by Amdahl's law from two models of one job on other thread counts (NOTE [ Intra-op threads ]).

    Each model's step, alone on as many cores as its threads, is measured;
    the share is the one at which the law plays the one from the other.
    None where their steps ran on as many threads.
    """
    few, many = sorted((a, b), key=lambda m: m.step_threads)
    if many.step_threads - few.step_threads < C.MIN_THREADS_APART:
        return None
    faster = (few.step_work_s / few.step_threads) / max(many.step_work_s / many.step_threads, 1e-12)
    # r = 1 / faster = ((1 - p) + p / many) / ((1 - p) + p / few), solved for p
    r = 1.0 / max(faster, 1e-12)
    share = (1.0 - r) / (1.0 - 1.0 / many.step_threads - r * (1.0 - 1.0 / few.step_threads))
    return min(1.0, max(0.0, share))


def _max_workers(facts: Facts, worker_bytes: float | None) -> int:
    """The most workers memory allows: C.MEMORY_SHARE of the least RAM the run saw available."""
    if not facts.mem_available_min_bytes:
        return int(C.MAX_WORKERS)
    per_worker = (worker_bytes or 0.0) + max(2, facts.prefetch_factor) * (facts.batch_nbytes or 0.0)
    if per_worker <= 0:
        return int(C.MAX_WORKERS)
    return max(1, min(int(C.MAX_WORKERS), int(C.MEMORY_SHARE * facts.mem_available_min_bytes / per_worker)))


def _copy_saving_s(facts: Facts) -> float:
    """What page-locked memory saves a batch on its copy to the GPU: nothing without one (or already pinned)."""
    if not facts.cuda or facts.pin_memory or not facts.batch_nbytes:
        return 0.0
    return float(facts.batch_nbytes / C.PAGEABLE_COPY_BPS - facts.batch_nbytes / C.PINNED_COPY_BPS)


def _others_runnable(facts: Facts, cores: float, load_cpu: float, load_runq: float, ours: float) -> float:
    """Other processes' runnable threads: as many as get the cores they were seen to use beside our ``ours``.

    A busy thread of another process keeps a core to itself where it can
    (NOTE [ Crowded cores ]), so up to the cores ours leave free, the cores
    they used count their threads; beyond, theirs share cores too. A 2 Hz
    sample understates them on a machine they fill: where the main thread,
    loading alone (no workers), waited C.SATURATED_WAIT of its CPU time for a
    core, others had as many threads runnable as leave it the share it got.
    A wait of a few per cent says nothing of the kind (the scheduler's own
    latency: read as a full machine it invented a busy thread on an idle one).
    """
    seen = background_using(ours, facts.background_cores, cores)
    if facts.num_workers > 0 or load_cpu <= 0 or load_runq < C.SATURATED_WAIT * load_cpu:
        return seen
    return max(seen, background_for(1.0, load_cpu / (load_cpu + load_runq), cores))

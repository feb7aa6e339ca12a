"""Turn symptoms and the throughput model into concrete DataLoader settings, or say none would pay."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from collector.diagnosis.advice import shuffle_advice
from collector.diagnosis.model import LoaderModel
from collector.diagnosis.report_types import Suggestion, Symptom
from collector.diagnosis.sharing import SharedCores
from collector.diagnosis.stats import Facts
from collector.diagnosis.units import ms

MIN_SPEEDUP = 1.10  # a change must buy at least 10% to be suggested
REMEDIES = (
    "cheaper transforms (decode smaller images, fewer augmentations)",
    "caching decoded samples (in RAM, or pre-processed on disk)",
    "decoding or augmenting on the GPU (NVIDIA DALI, torchvision transforms on CUDA tensors)",
)


def rule_of_thumb(facts: Facts) -> int:
    """The sources' static rule: min(physical cores, 2 * batch_size)."""
    return min(facts.physical_cores, 2 * facts.batch_size) if facts.batch_size else facts.physical_cores


def suggest(
    facts: Facts,
    model: LoaderModel | None,
    symptoms: Mapping[str, Symptom],
    *,
    min_speedup: float = MIN_SPEEDUP,
    loader: Mapping[str, Any] | None = None,
    shared: SharedCores | None = None,
) -> tuple[list[Suggestion], list[str]]:
    """Suggestions that pay at least ``min_speedup`` (or fix a named risk), and notes.

    ``loader`` is the recorded configuration with the run's ``stage`` and
    ``framework``: what decides where a shuffle can go (NOTE [ Advice that constructs ]).
    Where the waits for a core were measured (``shared``, NOTE [ Sharing the
    cores ]), num_workers and torch's intra-op threads come from that model;
    otherwise from the throughput model (NOTE [ Throughput model ]).
    """
    out: list[Suggestion] = []
    notes: list[str] = []
    current = facts.steady_batches_per_s
    if shared is not None:
        changes, shared_notes = shared_advice(facts, shared, symptoms, min_speedup, model)
        out += changes
        notes += shared_notes
    else:
        workers = _num_workers(facts, model, symptoms, min_speedup)
        if workers is not None:
            out.append(workers)
    if "prefetch_too_shallow" in symptoms and model is not None:
        ceiling = min(model.loop_limit(), model.workers_limit(facts.num_workers), model.cpu_limit())
        gain = max(1.0, ceiling / current) if current > 0 else None
        if gain is None or gain >= min_speedup:  # the symptom stands; a deeper queue is suggested where it pays
            value = int(symptoms["prefetch_too_shallow"].metrics["suggested_prefetch_factor"])
            out.append(
                Suggestion(
                    parameter="prefetch_factor",
                    current=facts.prefetch_factor,
                    suggested=value,
                    reason=(
                        f"queue {value} batches per worker so a slow fetch starts early enough to be ready; "
                        f"{facts.num_workers * value} batches are held in memory"
                    ),
                    expected_speedup=None if gain is None else round(gain, 2),
                    rule_of_thumb=2,
                )
            )
    if "epoch_start_stall" in symptoms and facts.num_workers > 0 and not facts.persistent_workers:
        span = facts.wall_s - facts.warmup_s
        saved = sum(max(0.0, lost - (facts.load_wall_s or 0.0)) for lost in facts.epoch_lost_s)
        out.append(
            Suggestion(
                parameter="persistent_workers",
                current=False,
                suggested=True,
                reason=f"keep workers alive between epochs: saves about {saved / max(1, len(facts.epoch_lost_s)):.2f} s per epoch",
                expected_speedup=round(span / max(span - saved, 1e-9), 2),
                rule_of_thumb=True,
            )
        )
    uneven = {"worker_imbalance", "prefetch_too_shallow"} & set(symptoms)
    if uneven:
        shuffle, note = shuffle_advice(loader or {"shuffle": facts.shuffle})
        if shuffle is not None:
            out.append(shuffle)
        if note is not None:
            notes.append(note)
    if "pageable_memory" in symptoms and not facts.pin_memory:
        out.append(
            Suggestion(
                parameter="pin_memory",
                current=False,
                suggested=True,
                reason="page-locked batches copy to the GPU by DMA and overlap compute with .to(device, non_blocking=True)",
                expected_speedup=None,
                rule_of_thumb=True,
            )
        )
    helped = any((s.expected_speedup or 0.0) >= min_speedup for s in out)
    if not helped and model is not None and facts.input_fraction >= 0.05 and shared is None:
        best = model.best_workers()
        if model.limit(best) == "cpu":
            notes.append(
                f"No DataLoader setting can help: producing a batch takes {ms(model.load_cpu_s)} of CPU and, with "
                f"the loop's own {ms(model.step_cpu_s)}, the {model.free_cores:.1f} free cores cap the run at "
                f"{model.cpu_limit():.0f} batches/s. What would: " + "; ".join(REMEDIES) + "."
            )
    return constructible(out), notes


WORKER_ONLY = ("persistent_workers", "prefetch_factor")  # DataLoader raises ValueError for these without workers


def constructible(suggestions: list[Suggestion]) -> list[Suggestion]:
    """So the pasted line constructs: ``num_workers=0`` or the settings that need workers, whichever expects more."""
    zero = next((s for s in suggestions if s.parameter == "num_workers" and s.suggested == 0), None)
    if zero is None:
        return suggestions
    needing = [s.expected_speedup or 0.0 for s in suggestions if s.parameter in WORKER_ONLY]
    if max(needing, default=0.0) > (zero.expected_speedup or 0.0):
        return [s for s in suggestions if s is not zero]  # the better cure keeps the workers
    return [s for s in suggestions if s.parameter not in WORKER_ONLY]


def _num_workers(
    facts: Facts, model: LoaderModel | None, symptoms: Mapping[str, Symptom], min_speedup: float
) -> Suggestion | None:
    thumb = rule_of_thumb(facts)
    if model is None:
        if facts.input_fraction < 0.20 or thumb <= facts.num_workers:
            return None
        return Suggestion(
            parameter="num_workers",
            current=facts.num_workers,
            suggested=thumb,
            reason="fetch times were not recorded, so this is the sources' rule of thumb, not a measured value",
            expected_speedup=None,
            rule_of_thumb=thumb,
        )
    n = model.best_workers()
    current = facts.steady_batches_per_s
    if n == facts.num_workers or current <= 0:
        return None
    speedup = model.throughput(n) / current
    fewer = n < facts.num_workers and "workers_exceed_cores" in symptoms
    if speedup < min_speedup and not fewer:
        return None
    after = model.throughput(n)
    loop = f"{ms(model.step_s)} step + {ms(model.handoff_s)} hand-off"
    if model.measured_contention_s > 0:
        loop += f" - {ms(model.measured_contention_s)} of it spent waiting for a core now"
    loop += (
        f" + {ms(model.contention_at(after))} waiting for a core (loading keeps {model.busy_share(after):.0%} "
        f"of the {model.free_cores:.1f} cores busy; {ms(model.contention_s)} at 100%)"
    )
    limits = {
        "loop": f"the training loop ({loop}) becomes the limit",
        "workers": f"{n} workers are the limit",
        "cpu": f"the {model.free_cores:.1f} free cores are the limit for CPU-bound loading",
    }
    produce = ms(model.load_io_s + model.load_cpu_s)
    reason = (
        f"measured: a batch takes {produce} to produce ({ms(model.load_cpu_s)} CPU) and the loop steps in "
        f"{ms(model.step_s)}; {n} workers could produce {min(model.workers_limit(n), model.cpu_limit()):.0f} batches/s "
        "on these cores, and "
        f"{limits[model.limit(n)]}: {current:.1f} -> {after:.1f} batches/s"
    )
    cores = math.ceil(model.free_cores - 1e-9)
    if model.load_cpu_s >= model.load_io_s and n > cores:
        reason += (
            f"; CPU-bound loading gets one worker per core plus {n - cores} spare: batches are handed over in "
            "order, and a spare keeps the cores busy while a slowed worker holds the loop up"
        )
    if fewer and speedup < min_speedup:
        reason += "; same speed with fewer workers frees cores and memory"
    return Suggestion(
        parameter="num_workers",
        current=facts.num_workers,
        suggested=n,
        reason=reason,
        expected_speedup=round(speedup, 2),
        rule_of_thumb=thumb,
    )


def shared_advice(
    facts: Facts,
    shared: SharedCores,
    symptoms: Mapping[str, Symptom],
    min_speedup: float,
    model: LoaderModel | None,
) -> tuple[list[Suggestion], list[str]]:
    """num_workers and torch.set_num_threads from NOTE [ Sharing the cores ]; a note when nothing pays."""
    max_workers = model.max_workers if model is not None else 64
    n, threads = shared.best(max_workers)
    gain = shared.speedup(n, threads)
    thumb = rule_of_thumb(facts)
    out: list[Suggestion] = []
    fewer = n < facts.num_workers and "workers_exceed_cores" in symptoms
    if (n, threads) != (facts.num_workers, shared.threads) and (gain >= min_speedup or fewer):
        step_now, step_then = shared.cycle(shared.workers, shared.threads), shared.cycle(n, threads)
        why = (
            f"measured: a batch takes {ms(shared.load_cpu_s)} of CPU and {ms(shared.load_blocked_s)} blocked to "
            f"produce; the step {ms(shared.step_work_s)} of CPU on {shared.step_threads:.1f} threads; other "
            f"processes keep {shared.others_busy:.1f} of the {shared.cores:.0f} cores busy ({shared.background:.1f} "
            "threads runnable). Sharing the cores, "
            f"a batch takes {ms(step_now)} now and {ms(step_then)} with this change"
        )
        if shared.epoch_batches < 200 and not facts.persistent_workers and n > 0:
            why += f" (epochs of {shared.epoch_batches:.0f} batches: starting fresh workers each epoch is counted)"
        if n != facts.num_workers:
            out.append(Suggestion("num_workers", facts.num_workers, n, why, round(gain, 2), thumb))
        if threads != shared.threads:
            reason = (
                f"the step's {shared.threads} intra-op threads compete with {n} worker(s) for "
                f"{shared.cores:.0f} cores; {threads} leave them room: {why}"
            )
            out.append(Suggestion("torch.set_num_threads", shared.threads, threads, reason, round(gain, 2), None))
        return out, []
    notes: list[str] = []
    if facts.input_fraction >= 0.05:
        if shared.busy():
            notes.append(
                f"Nothing here will help: all {shared.cores:.0f} cores are busy (this job's step "
                f"{ms(shared.step_work_s)} and loading {ms(shared.load_cpu_s)} of CPU a batch, other processes "
                f"{shared.others_busy:.1f} cores); no num_workers or thread count buys {min_speedup - 1:.0%}. "
                "What would: " + "; ".join(REMEDIES) + "."
            )
        else:
            notes.append(
                f"No DataLoader setting can help: by the measured costs no num_workers or thread count buys "
                f"{min_speedup - 1:.0%} (best {gain:.2f}x). What would: " + "; ".join(REMEDIES) + "."
            )
    return out, notes

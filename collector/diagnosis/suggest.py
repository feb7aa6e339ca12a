"""Turn the model's choice into one recommendation, each change's own suggestion, and notes where none would pay."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from collector.diagnosis.advice import shuffle_advice
from collector.diagnosis.calibration import C
from collector.diagnosis.choose import Prediction, predict
from collector.diagnosis.decide import Search, decide
from collector.diagnosis.model import EpochModel
from collector.diagnosis.report_types import Alternative, Recommendation, Suggestion, Symptom
from collector.diagnosis.stats import Facts
from collector.diagnosis.units import ms

REMEDIES = (
    "cheaper transforms (decode smaller images, fewer augmentations)",
    "caching decoded samples (in RAM, or pre-processed on disk)",
    "decoding or augmenting on the GPU (NVIDIA DALI, torchvision transforms on CUDA tensors)",
)
TRY_IT = "uncertain on this machine: try it for an epoch"


@dataclass
class Advice:
    """What the report recommends (one combined setting, or none), each change on its own, and notes."""

    recommendation: Recommendation | None = None
    suggestions: list[Suggestion] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def rule_of_thumb(facts: Facts) -> int:
    """The sources' static rule: min(physical cores, 2 * batch_size)."""
    return min(facts.physical_cores, 2 * facts.batch_size) if facts.batch_size else facts.physical_cores


def suggest(
    facts: Facts,
    model: EpochModel | None,
    symptoms: Mapping[str, Symptom],
    *,
    min_speedup: float | None = None,
    loader: Mapping[str, Any] | None = None,
) -> Advice:
    """One recommendation that pays ``min_speedup`` (C.MIN_SPEEDUP) by the model, with its range, or notes.

    ``loader`` is the recorded configuration with the run's ``stage`` and ``framework``: what decides
    where a shuffle can go (NOTE [ Advice that constructs ]). Every speed-up is the model's epoch time
    now / then (NOTE [ Sharing the cores ]), for the whole combination where it is the recommendation's,
    for one change alone where it is a suggestion's.
    """
    pays = C.MIN_SPEEDUP if min_speedup is None else min_speedup
    advice = Advice()
    if model is None:
        thumb = _rule_of_thumb_workers(facts)
        if thumb is not None:
            advice.suggestions.append(thumb)
    else:
        _recommend(facts, model, symptoms, pays, advice)
    chosen = advice.recommendation.changes if advice.recommendation else {}
    if "pageable_memory" in symptoms and not facts.pin_memory and "pin_memory" not in chosen:
        advice.suggestions.append(_pinning(model))  # the symptom's cure, priced alone where the model can
    if {"worker_imbalance", "prefetch_too_shallow"} & set(symptoms):
        shuffle, note = shuffle_advice(loader or {"shuffle": facts.shuffle})
        if shuffle is not None:
            advice.suggestions.append(shuffle)
        if note is not None:
            advice.notes.append(note)
    unpriced = {s.parameter: s.suggested for s in advice.suggestions if s.expected_speedup is None}
    if advice.recommendation is not None and unpriced:
        # the line holds every change, and the speed-up counts these as none: the model cannot price them
        changes = {**advice.recommendation.changes, **unpriced}
        advice.recommendation = dataclasses.replace(advice.recommendation, changes=changes, unpriced=tuple(unpriced))
    return advice


def _recommend(facts: Facts, model: EpochModel, symptoms: Mapping[str, Symptom], pays: float, advice: Advice) -> None:
    prefetch = symptoms.get("prefetch_too_shallow")
    deeper = int(prefetch.metrics["suggested_prefetch_factor"]) if prefetch is not None else None
    decision = decide(model, Search(prefetch=deeper))  # the report's search: capped, the model's own ranking
    assert decision is not None  # the report's candidates always hold the recorded setting
    chosen, alternatives = decision.chosen, decision.alternatives
    fewer = chosen.setting.num_workers < facts.num_workers and "workers_exceed_cores" in symptoms
    if chosen.changes and (chosen.speedup >= pays or fewer):
        advice.recommendation = Recommendation(
            changes=chosen.changes,
            expected_speedup=round(chosen.speedup, 2),
            expected_speedup_range=(round(chosen.low, 2), round(chosen.high, 2)),
            uncertain=chosen.uncertain,
            alternatives=tuple(_alternative(p) for p in alternatives),
        )
        advice.suggestions += [_suggestion(facts, model, chosen, parameter) for parameter in chosen.changes]
        return
    if facts.input_fraction < 0.05:
        return
    hopeful = [p for p in [chosen, *alternatives] if p.changes and p.high >= pays]
    if hopeful:
        best = max(hopeful, key=lambda p: p.speedup)
        advice.notes.append(
            f"No change is predicted to buy {pays - 1:.0%}: the best, {_describe(best.changes)}, is predicted at "
            f"{best.speedup:.2f}x ({best.low:.2f}-{best.high:.2f}x); {TRY_IT}. Beyond the loader's settings: "
            + "; ".join(REMEDIES)
            + "."
        )
    elif model.busy():
        advice.notes.append(
            f"Nothing here will help: all {model.cores:.0f} cores are busy (this job's step "
            f"{ms(model.step_work_s)} and loading {ms(model.load_cpu_s)} of CPU a batch, other processes "
            f"{model.others_busy:.1f} cores); no setting's range reaches {pays:.2f}x. What would: "
            + "; ".join(REMEDIES)
            + "."
        )
    else:
        advice.notes.append(
            f"No DataLoader setting can help: by the measured costs no setting's range reaches {pays:.2f}x "
            f"(best {chosen.speedup:.2f}x). What would: " + "; ".join(REMEDIES) + "."
        )


def _suggestion(facts: Facts, model: EpochModel, chosen: Prediction, parameter: str) -> Suggestion:
    """One change of the recommendation, with the speed-up of that change alone."""
    value = chosen.changes[parameter]
    field_name = "threads" if parameter == "torch.set_num_threads" else parameter
    alone = predict(model, model.recorded.but(**{field_name: value}))
    current = getattr(model.recorded, field_name)
    return Suggestion(
        parameter=parameter,
        current=current,
        suggested=value,
        reason=_reason(facts, model, chosen, parameter),
        expected_speedup=round(alone.speedup, 2),
        rule_of_thumb=_thumb(facts, parameter),
        expected_speedup_range=(round(alone.low, 2), round(alone.high, 2)),
    )


def _reason(facts: Facts, model: EpochModel, chosen: Prediction, parameter: str) -> str:
    setting = chosen.setting
    now, then = model.epoch_s(model.recorded), model.epoch_s(setting)
    epoch = (
        f"an epoch of {model.epoch_batches:.0f} batches takes {now:.2f} s now and {then:.2f} s with the whole change"
    )
    if parameter == "persistent_workers":
        cost = model.ends_s(model.recorded.num_workers)
        return f"keep workers alive between epochs: starting and ending them costs about {cost:.2f} s an epoch; {epoch}"
    if parameter == "prefetch_factor":
        return (
            f"queue {setting.prefetch_factor} batches per worker so a slow fetch starts early enough to be ready "
            f"({setting.depth} batches held in memory); {epoch}"
        )
    if parameter == "pin_memory":
        return (
            "page-locked batches copy to the GPU by DMA and overlap compute with .to(device, non_blocking=True) "
            f"(about {ms(model.copy_saving_s)} a batch of {facts.batch_nbytes or 0:.0f} bytes); {epoch}"
        )
    why = (
        f"measured: a batch takes {ms(model.load_cpu_s)} of CPU and {ms(model.load_blocked_s)} blocked to "
        f"produce; the step {ms(model.step_work_s)} of CPU on {model.step_threads:.1f} threads; other "
        f"processes keep {model.others_busy:.1f} of the {model.cores:.0f} cores busy ({model.background:.1f} "
        f"threads runnable). Sharing the cores, {epoch}"
    )
    if parameter == "torch.set_num_threads":
        return (
            f"the step's {model.recorded.threads} intra-op threads compete with {setting.num_workers} worker(s) for "
            f"{model.cores:.0f} cores; {setting.threads} leave them room: {why}"
        )
    return why


def _thumb(facts: Facts, parameter: str) -> Any:
    return {"num_workers": rule_of_thumb(facts), "prefetch_factor": 2, "persistent_workers": True}.get(
        parameter, True if parameter == "pin_memory" else None
    )


def _alternative(p: Prediction) -> Alternative:
    return Alternative(
        changes=p.changes,
        expected_speedup=round(p.speedup, 2),
        expected_speedup_range=(round(p.low, 2), round(p.high, 2)),
    )


def _describe(changes: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in changes.items())


def _pinning(model: EpochModel | None) -> Suggestion:
    """pin_memory=True on its own: priced by the model where it knows the batches' bytes, else not."""
    alone = None if model is None or model.copy_saving_s <= 0 else predict(model, model.recorded.but(pin_memory=True))
    return Suggestion(
        parameter="pin_memory",
        current=False,
        suggested=True,
        reason="page-locked batches copy to the GPU by DMA and overlap compute with .to(device, non_blocking=True)",
        expected_speedup=None if alone is None else round(alone.speedup, 2),
        rule_of_thumb=True,
        expected_speedup_range=None if alone is None else (round(alone.low, 2), round(alone.high, 2)),
    )


def _rule_of_thumb_workers(facts: Facts) -> Suggestion | None:
    thumb = rule_of_thumb(facts)
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

"""``diagnose_data``: measure a run's tables, apply every rule, and assemble the Report."""

from __future__ import annotations

import dataclasses
from typing import Any

from collector.diagnosis import rules_cpu, rules_loop, rules_memory, rules_workers
from collector.diagnosis.build import build_model
from collector.diagnosis.data import RunData
from collector.diagnosis.replay import replay_draft
from collector.diagnosis.report_types import Report, Symptom
from collector.diagnosis.rules_stages import stage_advice
from collector.diagnosis.stages import stages
from collector.diagnosis.stats import Facts, measure
from collector.diagnosis.suggest import suggest
from collector.diagnosis.summary import summary
from collector.diagnosis.tuned import tuned_line, tuning
from collector.diagnosis.verdict import verdict

RUN_KEYS = ("id", "name", "started_at", "ended_at", "error", "rank", "world_size", "job_id", "stage")
CONTENDED_CORES = 0.5  # other processes' busy cores worth a note
MIN_STAKE_S = 1.0  # a loader's active seconds after warm-up below which no symptom ranks above low
SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}


def diagnose_data(data: RunData, *, replay_decode: bool = True) -> Report:
    """The pure part: tables in, Report out (``replay_decode``: NOTE [ Replayed decode ], the one outside call)."""
    facts = measure(data)
    run = {key: data.run.get(key) for key in RUN_KEYS}
    run["status"] = data.run.get("state") or data.run.get("status")
    run["framework"] = (data.run.get("tags") or {}).get("framework")
    run["config"] = data.config
    run["host"] = data.host_facts
    word = verdict(facts)
    table = stages(data.stages)
    notes = _state_notes(data.run)
    trials = tuning(data.trials) if len(data.trials) else ()
    line = tuned_line(data.all_epochs) if trials else None
    if data.run.get("tuned"):
        notes.append("tuned live: this covers the epochs at the setting the tuner kept; its trials are listed")
    if word == "insufficient-data":
        lo, hi = facts.input_range
        spread = "" if facts.steady_batches < 6 else f" (waiting for data {lo:.0%}-{hi:.0%} of the time)"
        notes.append(
            f"only {facts.batches} batches recorded{spread}: too few to tell the verdict or name symptoms; "
            "record a longer run"
        )
        return Report(
            run=run,
            summary=summary(facts, data),
            verdict=word,
            notes=tuple(notes),
            tuning=trials,
            tuned=line,
            stages=table.table() if table is not None else (),
        )
    worker_bytes = rules_memory.worker_private_bytes(data.procs)
    if worker_bytes is None and facts.num_workers == 0:
        worker_bytes = rules_memory.main_rss_bytes(data.procs)  # a forked worker copies at most this
    model = build_model(facts, worker_bytes=worker_bytes)
    found: list[Symptom | None] = [
        rules_loop.input_bound(data, facts),
        rules_loop.gpu_util_sawtooth(data, facts),
        rules_loop.single_core_saturated(data, facts),
        rules_workers.workers_exceed_cores(facts, model),
        rules_memory.memory_pressure(data, facts),
        rules_loop.epoch_start_stall(data, facts),
        rules_memory.pageable_memory(facts),
        rules_workers.worker_imbalance(data, facts),
        rules_workers.prefetch_too_shallow(data, facts, model),
        rules_workers.io_bound_fetch(facts, model),
        rules_cpu.cpu_contention(facts, model if facts.load_runq_s is not None else None),
    ]
    symptoms = sorted(at_stake(found, facts, notes), key=lambda s: SEVERITY_ORDER.get(s.severity, 3))
    loader = {**data.config, "stage": run["stage"], "framework": run["framework"]}
    advice = suggest(facts, model, {s.id: s for s in symptoms}, loader=loader)
    replay = replay_draft if replay_decode else None
    suggestions = advice.suggestions + stage_advice(
        table, model, data.config, cuda=facts.cuda, batch_nbytes=facts.batch_nbytes, replay=replay
    )
    notes += advice.notes
    trend = rules_memory.trend_note(data, facts)
    if trend and "memory_pressure" not in {s.id for s in symptoms}:
        notes.append(trend)
    if facts.background_cores >= CONTENDED_CORES:
        notes.append(
            f"Other processes kept about {facts.background_cores:.1f} of the {facts.usable_cores} usable cores busy: "
            "timings include waiting for a core, which blurs CPU-bound and I/O-bound loading"
        )
    idle = rules_workers.idle_workers_note(facts, model, rules_memory.worker_private_bytes(data.procs))
    if idle and not any(s.parameter == "num_workers" for s in suggestions):
        notes.append(idle)
    if word == "not-input-bound" and not suggestions:
        notes.insert(
            0,
            f"Not starved: after warm-up the loop waited for data {facts.input_fraction:.1%} of the time; "
            "no DataLoader change would pay.",
        )
    return Report(
        run=run,
        summary=summary(facts, data),
        verdict=word,
        symptoms=tuple(symptoms),
        suggestions=tuple(suggestions),
        recommendation=advice.recommendation,
        notes=tuple(notes),
        tuning=trials,
        tuned=line,
        stages=table.table() if table is not None else (),
    )


def at_stake(
    found: list[Symptom | None], facts: Facts, notes: list[str], *, min_s: float = MIN_STAKE_S
) -> list[Symptom]:
    """The symptoms found, each at most ``low`` where the loader ran under ``min_s`` (1 s) after warm-up.

    NOTE [ Severity at stake ]
    A share of a tenth of a second is a true share and no alarm: Lightning's
    BoringModel loaders run 0.1 s in all, their 0.1-ms batches "waiting for a
    core 58%". A symptom's severity says how much it costs, so where the
    loader's whole time after warm-up is under a second, none ranks above
    low, and a note says why.
    """
    symptoms = [s for s in found if s is not None]
    stake = facts.active_s - facts.warmup_s
    if stake >= min_s or all(s.severity == "low" for s in symptoms):
        return symptoms
    notes.append(f"the loader ran {stake:.2f} s after warm-up: too little at stake for any symptom to rank above low")
    return [s if s.severity == "low" else dataclasses.replace(s, severity="low") for s in symptoms]


def _state_notes(run: dict[str, Any]) -> list[str]:
    state = run.get("state")
    if state == "running":
        return ["live: the run is still being recorded; this covers what was recorded so far"]
    if state == "stopped":
        return ["the run stopped without closing (killed?): this covers what was recorded"]
    if state in ("crashed", "interrupted"):
        return [f"the run {state}" + (f": {run['error']}" if run.get("error") else "")]
    return []

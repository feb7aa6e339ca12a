"""In the tuner's helper: the setting to try next, chosen by the one prediction model from the run so far."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pandas as pd

from collector.diagnosis import rules_memory, rules_workers
from collector.diagnosis.build import build_model, parallel_share_between
from collector.diagnosis.choose import Ranking, predict
from collector.diagnosis.data import RunData, load_run
from collector.diagnosis.decide import Search, decide
from collector.diagnosis.model import EpochModel, Setting
from collector.diagnosis.setting import stored
from collector.diagnosis.stats import measure
from collector.diagnosis.tuned import stored_settings
from collector.errors import InsufficientData
from collector.store.reader import Reader

SETTLE_TIMEOUT_S = 10.0  # how long the epoch just measured may take to reach the file
POLL_S = 0.05

# NOTE [ Seen from every measured setting ]
# The model is built from the epochs at the current setting, and one
# setting cannot show everything: beside 4 to 8 workers, the photo
# pipeline's step kept about 1.1-1.3 of its 2 threads busy (2.0 without
# workers), its threads sleeping at barriers while workers held the cores,
# so a model built there plays fewer workers' contention too lightly. It
# predicted 2 persistent workers 1.06-1.14x faster than the 4-8 kept; they
# measured 0.87-1.02x, and in half the tuned runs the trial and its revert
# cost two slow epochs. The run's other settings (the start, every trial) are
# measurements of the same job, each with its own model (and the step's
# parallel share where measured, NOTE [ Intra-op threads ]): from the start
# (no workers) those 2 workers played 0.91x of the 4 kept. So the tuner
# ranks each candidate by the least speed-up over the current setting that
# the models of all its measured settings give (``Steered``): a change is
# tried only where each setting seen predicts it pays. A first trial has
# one setting seen, and is ranked as before. In six tuned photo runs the
# first trial was kept and none tried a second.


# NOTE [ The first question ]
# The first question, at the warm-up's end, is answered while the next
# epoch runs; a proposal there starts the first trial on time
# (BASELINE_EPOCHS). The model needs the training process's CPU, which the
# writer samples every half-second from its start. Beside a CPU hog in the
# job's session the writer, at nice +10, took its first sample 0.9 s into
# epoch-stall's first epoch (0.95 s), so the answer was "later", the next
# question came as the trial was due, and its answer one epoch after:
# within 10% of the best static setting at the fifth epoch. So the tuner
# reads the training process's CPU and run-queue time itself, as the
# sampler does (every thread's schedstat, about 26 us), at each epoch's
# start and end, and the question carries them (``edges``). Where the
# file's samples cannot give the step's CPU, these two readings are the
# training process's samples; where they can, the file's are used, as
# the report does.


def propose(
    db: str,
    run_id: int,
    current: Setting,
    tried: list[Setting],
    *,
    fixed_workers: bool,
    fixed_threads: bool = False,
    missed: Setting | None = None,
    epoch: int | None = None,
    correction: float = 1.0,
    edges: list[list[float]] | None = None,
    noise: float = 0.0,
    banked: float | None = None,
) -> dict[str, Any]:
    """{"baseline", "setting", "predicted", "low", "high"} (the model's own), or {"none": why} (with
    "later": true where asked before the training process's CPU was sampled twice).

    The model is built from the run's epochs at ``current`` (the setting the
    tuner has settled on: collector/diagnosis/data.py), once ``epoch`` has
    reached the file. The candidates are the diagnosis's own and the job's
    own worker count past their cap, less those tried and, for an
    IterableDataset, those with another worker count; ``decide``, the
    report's decision with the tuner's ``Search``, picks among them and
    ``current``, so no change wins where nothing is clearly better: each
    ranked by its predicted gain times ``correction``, the policy's from the
    trials so far (NOTE [ Measurement steers the model ]). ``edges``: the training
    process's readings at the epoch's start and end (NOTE [ The first question ]). ``noise``: the
    current setting's own variation; ``banked``: its measured speed-up over the start, where a trial
    was kept (NOTE [ Measured neighbours ] in collector/diagnosis/decide.py).
    """
    reader = Reader(db)
    if epoch is not None:
        _wait_for_epoch(reader, run_id, epoch)
    data = load_run(reader, run_id, live=True)
    facts = measure(data)
    if facts.main_cpu_cores is None and edges:
        data = with_edges(data, edges)
        facts = measure(data)
    if facts.main_cpu_cores is None:
        # one sample of the training process or none (a short first epoch): the model would take the
        # step's unmeasured CPU for none and see every setting's gain as if the step ran on a GPU
        return {"none": "the training process's CPU is not sampled yet, so the step's cost is not known", "later": True}
    worker_bytes = rules_memory.worker_private_bytes(data.procs)
    if worker_bytes is None and facts.num_workers == 0:
        worker_bytes = rules_memory.main_rss_bytes(data.procs)  # a forked worker copies at most this
    model = build_model(facts, worker_bytes=worker_bytes)
    if model is None:
        return {"none": "loading was not timed, so no setting can be predicted"}
    others = other_settings(reader, run_id, model, data.all_epochs)
    model = with_measured_share(model, others)
    search = Search(
        current=current,
        wide=True,
        threads=max(t.threads for t in [current, *tried]),  # the job's own: the tuner never adds threads
        physical_cores=facts.physical_cores,
        prefetch=deeper_queue(data, facts, model),
        tried=frozenset(tried),
        fixed_workers=fixed_workers,
        fixed_threads=fixed_threads,
        missed=missed,
        correction=correction,
        vantages=tuple(other for _, other in others),
        noise=noise,
        banked=banked,
    )
    decision = decide(model, search)
    if decision is None:
        return {"none": "every setting worth trying was tried"}
    ranked = decision.chosen
    chosen = predict(model, ranked.setting, Ranking.seen_from(model, 1.0, search.vantages))  # the policy corrects it
    no_gain = chosen.speedup <= 1.0 and not decision.neighbour
    if chosen.setting == current or not chosen.changes or no_gain:
        return {"none": f"no untried setting is predicted to beat the current one (best {ranked.speedup:.2f}x)"}
    return {
        "baseline": stored(current),
        "setting": stored(chosen.setting),
        "predicted": chosen.speedup,
        "low": chosen.low,
        "high": chosen.high,
        "between": decision.between,
        "neighbour": decision.neighbour,
    }


def with_edges(data: RunData, edges: list[list[float]]) -> RunData:
    """``data`` with the training process's own readings, (wall time, CPU s, run-queue s), as its only samples."""
    pid = data.run.get("pid")
    rows = pd.DataFrame([{"ts": ts, "pid": pid, "role": "main", "cpu_s": c, "runq_s": q} for ts, c, q in edges])
    rows = rows.reindex(columns=data.procs.columns)  # proc_samples' every column, as the file gives them
    others = data.procs[data.procs["role"] != "main"]
    procs = rows if others.empty else pd.concat([others, rows], ignore_index=True)
    return dataclasses.replace(data, procs=procs.sort_values("ts", ignore_index=True))


def other_settings(
    reader: Reader, run_id: int, model: EpochModel, epochs: pd.DataFrame
) -> list[tuple[int, EpochModel]]:
    """The run's other settings, each modelled from its own epochs: (its epochs, its model).

    The start setting, trials kept or reverted: every setting the run has
    measured besides ``model``'s (NOTE [ Seen from every measured setting ]).
    """
    plain = stored_settings(epochs)
    out = []
    for at in [s for i, s in enumerate(plain) if s not in plain[:i] and s != stored(model.recorded)]:
        try:
            other = build_model(measure(load_run(reader, run_id, live=True, at=at)))
        except InsufficientData:
            continue
        if other is not None:
            out.append((plain.count(at), other))
    return out


def with_measured_share(model: EpochModel, others: list[tuple[int, EpochModel]]) -> EpochModel:
    """``model`` with the step's parallel share measured against the run's epochs on another thread count.

    A trial of fewer threads (or the user's own setting beside such a
    trial) is that job's step on two thread counts: of ``others``
    (``other_settings``), the one at another count with the most epochs
    and ``model`` give the share (NOTE [ Intra-op threads ]).
    bench/bench_tune.py's photo pipeline ran 1.85x faster on 2 threads than
    on 1, where the table's share plays 1.7x; a kept trial of 1 thread
    found its way back to 2 only where the model knew it.
    """
    threads = [(n, other) for n, other in others if other.recorded.threads != model.recorded.threads]
    if not threads:
        return model
    share = parallel_share_between(model, max(threads, key=lambda t: t[0])[1])
    return model if share is None else dataclasses.replace(model, measured_share=share)


def deeper_queue(data: RunData, facts: Any, model: EpochModel) -> int | None:
    """The prefetch_factor the report would try (its prefetch_too_shallow rule's), where the rule finds bursts."""
    symptom = rules_workers.prefetch_too_shallow(data, facts, model)
    return None if symptom is None else int(symptom.metrics["suggested_prefetch_factor"])


def _wait_for_epoch(reader: Reader, run_id: int, epoch: int) -> None:
    """Until the epoch's end row is in the file (the writer flushes every 0.2 s), or SETTLE_TIMEOUT_S."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        ended = reader.scalar("SELECT ended_at FROM epochs WHERE run_id = ? AND epoch = ?", (run_id, epoch))
        if ended is not None:
            return
        time.sleep(POLL_S)

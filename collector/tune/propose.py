"""In the tuner's helper: the setting to try next, chosen by the one prediction model from the run so far."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

import pandas as pd

from collector.diagnosis import rules_memory
from collector.diagnosis.build import build_model, parallel_share_between
from collector.diagnosis.choose import MAX_CANDIDATE_WORKERS, candidates, choose, predict
from collector.diagnosis.data import load_run
from collector.diagnosis.model import EpochModel, Setting
from collector.diagnosis.stats import measure
from collector.errors import InsufficientData
from collector.store.reader import Reader

SETTLE_TIMEOUT_S = 10.0  # how long the epoch just measured may take to reach the file
POLL_S = 0.05
QUIET_CORES = 0.25  # other processes' busy cores below which no one loses cores to more workers


def propose(
    db: str,
    run_id: int,
    current: Setting,
    tried: list[Setting],
    *,
    fixed_workers: bool,
    epoch: int | None = None,
    correction: float = 1.0,
) -> dict[str, Any]:
    """{"baseline", "setting", "predicted", "low", "high"} (the model's own), or {"none": why} (with
    "later": true where asked before the training process's CPU was sampled twice).

    The model is built from the run's epochs at ``current`` (the setting the
    tuner has settled on: collector/diagnosis/data.py), once ``epoch`` has
    reached the file. The candidates are the diagnosis's own and the job's
    own worker count past their cap (``tuner_candidates``), less those tried
    and, for an IterableDataset, those with another worker count; ``choose``
    picks among them and ``current``, as for the report's recommendation, so
    no change wins where nothing is clearly better: each ranked by its
    predicted gain times ``correction``, the policy's from the trials so far
    (NOTE [ Measurement steers the model ]).
    """
    reader = Reader(db)
    if epoch is not None:
        _wait_for_epoch(reader, run_id, epoch)
    data = load_run(reader, run_id, live=True)
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
    model = with_measured_share(reader, run_id, model, data.all_epochs)
    done = set(tried)
    most_threads = max(t.threads for t in [current, *tried])  # the job's own: the tuner never adds threads
    allowed = [
        s
        for s in tuner_candidates(model, threads=most_threads)
        if s not in done and not (fixed_workers and s.num_workers != current.num_workers)
    ]
    if not allowed:
        return {"none": "every setting worth trying was tried"}
    ranked, _ = choose(steered(model, correction), [current, *allowed])
    chosen = predict(model, ranked.setting)  # the model's own prediction: the policy corrects it
    if chosen.setting == current or not chosen.changes or chosen.speedup <= 1.0:
        return {"none": f"no untried setting is predicted to beat the current one (best {ranked.speedup:.2f}x)"}
    return {
        "baseline": asdict(current),
        "setting": asdict(chosen.setting),
        "predicted": chosen.speedup,
        "low": chosen.low,
        "high": chosen.high,
    }


def with_measured_share(reader: Reader, run_id: int, model: EpochModel, epochs: pd.DataFrame) -> EpochModel:
    """``model`` with the step's parallel share measured against the run's epochs on another thread count.

    A trial of fewer threads (or the user's own setting beside such a
    trial) is that job's step on two thread counts: the setting at another
    count with the most epochs is modelled too, and the two steps give the
    share (NOTE [ Intra-op threads ]). bench/bench_tune.py's photo pipeline
    ran 1.85x faster on 2 threads than on 1, where the table's share plays
    1.7x; a kept trial of 1 thread found its way back to 2 only where the
    model knew it.
    """
    stored = [json.loads(s) for s in epochs.get("setting", pd.Series(dtype=object)) if isinstance(s, str)]
    others = [
        {k: v for k, v in s.items() if k != "trial"} for s in stored if s.get("threads") != model.recorded.threads
    ]
    if not others:
        return model
    at = max(others, key=others.count)
    try:
        other = build_model(measure(load_run(reader, run_id, live=True, at=at)))
    except InsufficientData:
        return model
    share = None if other is None else parallel_share_between(model, other)
    return model if share is None else dataclasses.replace(model, measured_share=share)


def tuner_candidates(model: EpochModel, threads: int | None = None) -> list[Setting]:
    """The diagnosis's candidates, more workers where no other process would lose cores to them, the job's threads back.

    ``candidates`` stops CPU-bound loading at a worker a core and one more:
    more take cores from the machine's other users, a loss the model cannot
    see. The tuner measures before it keeps, so it may go past that cap
    where the cap protects no one, and keeps only what measures faster:
    - on a quiet machine (other processes kept under QUIET_CORES busy), up
      to the count memory allows. bench/bench_tune.py's photo pipeline, its
      persistent epochs of 8 batches, ran 0.93 s with 8 workers and 1.09 s
      with 2 at 2 threads (4 interleaved rounds); the model played them at
      0.91 s and 1.06 s, and the report, capped, never names the faster one;
    - a job that already runs more workers holds that share of the cores:
      any count up to its own takes no more, and fewer than the cap give
      it up. Beside a CPU hog, ``oversubscribed``'s best static setting is
      its own 8 workers made persistent, or 4 (bench/bench_tune.py --hog).
    The report still caps them and cures an oversubscription
    (``workers_exceed_cores``).

    ``threads``, the most intra-op threads the job ran at (its own, before a
    trial took some away): where the step kept every thread it had busy, up
    to that many come back as candidates (the model plays them by Amdahl's
    law, NOTE [ Intra-op threads ]). The photo pipeline's best settings hold
    2 threads; a kept trial of 1 thread otherwise never found its way back.
    The report never suggests more threads than the job set.
    """
    listed = candidates(model)
    own, top = model.recorded.num_workers, max(s.num_workers for s in listed)
    ceiling = MAX_CANDIDATE_WORKERS if model.others_busy < QUIET_CORES else own  # taking no one's cores
    wider = set(range(top + 1, min(ceiling, model.max_workers) + 1))
    if top < own <= model.max_workers:
        wider.add(own)
    listed += [s.but(num_workers=n) for n in sorted(wider) for s in listed if s.num_workers == top]
    rec = model.recorded.threads
    more = range(rec + 1, (threads or rec) + 1) if model.threads_saturated else range(0)
    return listed + [s.but(threads=t) for t in more for s in listed if s.threads == rec]


@dataclass(frozen=True)
class Steered(EpochModel):
    """The model with each predicted gain scaled by the tuner's correction (NOTE [ Measurement steers the model ])."""

    correction: float = 1.0

    def speedup(self, setting: Setting) -> float:
        return 1.0 + (EpochModel.speedup(self, setting) - 1.0) * self.correction


def steered(model: EpochModel, correction: float) -> EpochModel:
    """``model`` ranking by its gains times ``correction``: the diagnosis's ``choose`` then picks as the tuner would."""
    if correction == 1.0:
        return model
    return Steered(**{f.name: getattr(model, f.name) for f in fields(model)}, correction=correction)


def _wait_for_epoch(reader: Reader, run_id: int, epoch: int) -> None:
    """Until the epoch's end row is in the file (the writer flushes every 0.2 s), or SETTLE_TIMEOUT_S."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        ended = reader.scalar("SELECT ended_at FROM epochs WHERE run_id = ? AND epoch = ?", (run_id, epoch))
        if ended is not None:
            return
        time.sleep(POLL_S)

"""Which setting next: the one decision of all three callers, each with its own options.

The report and the live tuner rank the model's candidates (``decide``, each with its own ``Search``);
``collector sweep`` measures settings and ranks what it measured (``next_setting`` and ``cheapest``, with
its ``MeasuredSearch``: their rules are in collector/diagnosis/decide_measured.py, imported from here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from collector.diagnosis.calibration import C
from collector.diagnosis.choose import Prediction, Ranking, candidates, choose, predict
from collector.diagnosis.decide_measured import MeasuredSearch as MeasuredSearch
from collector.diagnosis.decide_measured import Plan as Plan
from collector.diagnosis.decide_measured import cheapest as cheapest
from collector.diagnosis.decide_measured import cost as cost
from collector.diagnosis.decide_measured import next_setting as next_setting
from collector.diagnosis.model import EpochModel, Setting

# NOTE [ After a miss ]
# A trial that measured no gain says where the model is wrong, not that
# nothing pays: on the course pipeline's light class (2 cores, from no
# workers) the first trial, 8 persistent workers predicted 1.33x, measured
# 0.80x; the correction then scaled every gain by a third, nothing cleared
# the noise, and the 2 persistent workers on 1 thread that measure 1.25x
# were never tried. So after a miss the next candidates come from what was
# measured: the settings between the current one and the missed one (fewer
# workers than the trial's, on either thread count, persistent or not),
# ranked by the models of every measured setting (NOTE [ Seen from every
# measured setting ]) with no correction (``between``), since both ends of
# that span are measurements of this job; a trial there still has to
# measure faster than the current setting's noise to be kept. Where none
# lies between, the corrected model ranks everything, as before.
# And no first trial goes far beyond the cores without evidence: CPU-bound
# loading on a quiet machine may try SHARED_WORKERS_PER_CORE a physical
# core, or twice the workers the job already runs ("raise while watching
# until it plateaus", ../shared/SOURCES.md), so more workers come a step at
# a time, each step measured.

#
# NOTE [ Measured neighbours ]
# Near a kept trial the model cannot rank the settings one change away: its
# measured error is MODEL_LOW-MODEL_HIGH of a prediction, and on the course
# pipeline the grid's faster settings (1 thread where the tuner kept 2; 4
# persistent workers where it kept 2 plain ones) lay 5-15% from the kept
# one, where the ranking put nothing above that setting's noise and tuning
# ended. So where no ranked gain clears the current setting's noise and the
# run has banked a measured gain over its start (a trial was kept), the
# neighbours of the current setting are measured: another thread count,
# persistent workers or not, another queue depth, the nearest worker count
# on each side, the one the model ranks highest first (uncorrected, seen
# from every measured setting). A neighbour is tried only where the model's
# range for it reaches past the noise (a gain it cannot rule out: 16
# workers made non-persistent, their start played at a fifth of the kept
# speed, are not) and where the model plays it no slower than the start
# (its speed-up times the banked gain at least 1), so a lost trial costs an
# epoch slower than the kept setting, not slower than the untuned job. It
# is kept, as any trial, only where it measures faster than the current
# setting's noise, and it claims no gain, so it leaves the correction (NOTE
# [ Measurement steers the model ]) as it was. A count past a measured one
# is no neighbour: more workers come a step at a time, each step kept. A
# job that kept nothing (started at its best) tries no neighbour.


@dataclass(frozen=True)
class Search:
    """What a caller may try, and how it ranks. The defaults are the report's: the model's candidates,
    capped, ranked by the model alone. The live tuner's is wider and steered by what the run measured."""

    current: Setting | None = None  # the setting to beat (None: the model's recorded one)
    wide: bool = False  # past the report's cap, a step at a time (``tuner_candidates``)
    threads: int | None = None  # the most intra-op threads the job ran at: up to that many come back
    physical_cores: int | None = None
    prefetch: int | None = None  # a deeper queue to try: the prefetch_too_shallow rule's
    tried: frozenset[Setting] = frozenset()
    fixed_workers: bool = False  # an IterableDataset: its sharding depends on num_workers
    fixed_threads: bool = False  # another loader of the job owns torch's threads
    missed: Setting | None = None  # the last trial's, where it measured no gain (NOTE [ After a miss ])
    correction: float = 1.0  # NOTE [ Measurement steers the model ]
    vantages: tuple[EpochModel, ...] = ()  # NOTE [ Seen from every measured setting ]
    noise: float = 0.0  # the current setting's own variation: a ranked gain must clear it
    banked: float | None = None  # the current setting's measured speed-up over the start (NOTE [ Measured neighbours ])


@dataclass(frozen=True)
class Decision:
    """The setting to go to (ranked as the search ranks), the alternatives, and whether it lies between
    measured settings (NOTE [ After a miss ])."""

    chosen: Prediction
    alternatives: list[Prediction]
    between: bool = False
    neighbour: bool = False  # no ranked gain clears the noise: a neighbour measured (NOTE [ Measured neighbours ])


def decide(model: EpochModel, search: Search = Search()) -> Decision | None:
    """The one decision: every candidate the search allows, ranked, the least change near the best
    (``choose``); None where the search allows none but the current setting."""
    current = search.current or model.recorded
    if not search.wide:
        chosen, alternatives = choose(model, candidates(model, prefetch=search.prefetch))
        return Decision(chosen, alternatives)

    def permitted(s: Setting) -> bool:
        return (
            s not in search.tried
            and not (search.fixed_workers and s.num_workers != current.num_workers)
            and not (search.fixed_threads and s.threads != current.threads)
        )

    listed = tuner_candidates(model, search.threads, search.physical_cores, search.prefetch)
    allowed = [s for s in listed if permitted(s)]
    if not allowed:
        return None
    inside = [s for s in allowed if search.missed is not None and between(s, current, search.missed)]
    ranking = Ranking.seen_from(model, 1.0 if inside else search.correction, search.vantages)
    chosen, alternatives = choose(model, [current, *(inside or allowed)], ranking)
    if chosen.speedup > 1.0 + search.noise or search.banked is None:
        return Decision(chosen, alternatives, bool(inside))
    own = Ranking.seen_from(model, 1.0, search.vantages)
    near = [predict(model, s, own) for s in neighbours(current, listed, search.threads) if permitted(s)]
    # within the model's error of a gain, and no slower than the start as the model plays it
    safe = [p for p in near if p.high > 1.0 + search.noise and p.speedup * search.banked >= 1.0]
    if not safe:
        return Decision(chosen, alternatives, bool(inside))
    return Decision(max(safe, key=lambda p: p.speedup), alternatives, neighbour=True)


def neighbours(current: Setting, listed: list[Setting], threads: int | None = None) -> list[Setting]:
    """The settings one change from ``current`` (NOTE [ Measured neighbours ]).

    The nearest worker count on each side, C.NEIGHBOUR_STEP of the workers away at least, among the
    candidates ``listed`` (tried ones too: a step past a measured count is no neighbour); every other
    thread count up to ``threads``; persistent workers or not; another queue depth in ``listed``.
    """
    step = max(1, math.ceil(C.NEIGHBOUR_STEP * current.num_workers - 1e-9))
    counts = {s.num_workers for s in listed}
    nearest = [
        max((n for n in counts if n <= current.num_workers - step), default=None),
        min((n for n in counts if n >= current.num_workers + step), default=None),
    ]
    out = [current.but(num_workers=n) for n in nearest if n is not None]
    out += [current.but(threads=t) for t in range(1, max(threads or 0, current.threads) + 1) if t != current.threads]
    if current.num_workers:
        out.append(current.but(persistent_workers=not current.persistent_workers))
        out += [
            s
            for s in listed
            if s.prefetch_factor != current.prefetch_factor and s == current.but(prefetch_factor=s.prefetch_factor)
        ]
    return list(dict.fromkeys(s for s in out if s != current))


def between(setting: Setting, current: Setting, missed: Setting) -> bool:
    """A setting whose worker count lies from the current one's up to, not at, the missed trial's."""
    low, high = sorted((current.num_workers, missed.num_workers))
    return setting != current and low <= setting.num_workers <= high and setting.num_workers != missed.num_workers


def tuner_candidates(
    model: EpochModel, threads: int | None = None, physical_cores: int | None = None, prefetch: int | None = None
) -> list[Setting]:
    """The diagnosis's candidates, more workers than its cap (the trial measures them), the job's threads back.

    ``candidates`` stops CPU-bound loading at a worker a core and one more:
    more take cores from the machine's other users, a loss the model cannot
    see. The tuner measures before it keeps, so it may go past that cap,
    and keeps only what measures faster:
    - on a quiet machine (other processes kept under QUIET_CORES busy), up
      to SHARED_WORKERS_PER_CORE a physical core or twice the workers the
      job runs now, whichever is more, within what memory allows: a step at
      a time (NOTE [ After a miss ]). bench/bench_tune.py's photo pipeline,
      its persistent epochs of 8 batches, ran 0.93 s with 8 workers and
      1.09 s with 2 at 2 threads (4 interleaved rounds): 4 are tried first,
      8 once 4 measured faster; the report, capped, never names either;
    - beside other processes' load, up to SHARED_WORKERS_PER_CORE workers
      a physical core the job may use, the most of the articles' range
      (1-2x physical cores, "raise while watching until it plateaus"): each
      takes a little more of the cores from the others, and the trial
      measures what the job gains. Capped at 3 on 2 cores beside a hog,
      ``cpu``'s 3 persistent workers ran 1.19-1.33 s where 4 ran 1.14-1.15 s
      (bench/bench_tune.py --hog);
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
    The report never suggests more threads than the job set. ``prefetch``: a
    deeper queue to try, where the report's prefetch_too_shallow rule finds
    the loop's waits come in bursts (``deeper_queue``), as the report does.
    """
    listed = candidates(model, prefetch=prefetch)
    own, top = model.recorded.num_workers, max(s.num_workers for s in listed)
    shared = int(C.SHARED_WORKERS_PER_CORE) * int(
        min(physical_cores or model.cores, model.cores)
    )  # of those it may use
    ceiling = max(shared, 2 * own) if model.others_busy < C.QUIET_CORES else max(own, shared)  # NOTE [ After a miss ]
    wider = set(range(top + 1, min(ceiling, model.max_workers) + 1))
    if top < own <= model.max_workers:
        wider.add(own)
    listed += [s.but(num_workers=n) for n in sorted(wider) for s in listed if s.num_workers == top]
    rec = model.recorded.threads
    more = range(rec + 1, (threads or rec) + 1) if model.threads_saturated else range(0)
    return listed + [s.but(threads=t) for t in more for s in listed if s.threads == rec]

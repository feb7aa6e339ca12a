"""Which setting to recommend: every candidate predicted by the one model, with its range; the least change near the best."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from collector.diagnosis.calibration import C
from collector.diagnosis.model import EpochModel, Setting

ALTERNATIVES = 4  # considered settings listed beside the recommendation


@dataclass(frozen=True)
class Prediction:
    """One setting's predicted speed-up (epoch time now / then) and its range (NOTE [ Honest ranges ])."""

    setting: Setting
    changes: dict[str, Any]  # parameter -> value, against the recorded setting
    speedup: float
    low: float
    high: float

    @property
    def uncertain(self) -> bool:
        """The range includes no change at all: only a try on the machine itself can tell."""
        return self.low <= 1.0


@dataclass(frozen=True)
class Ranking:
    """How a caller weighs the model's speed-ups: as the model gives them (the report's), or, for the live
    tuner, the least that ``vantages`` (the models of the run's other measured settings, NOTE [ Seen from
    every measured setting ]) give too, the gain scaled by ``correction`` (NOTE [ Measurement steers the
    model ])."""

    correction: float = 1.0
    vantages: tuple[EpochModel, ...] = ()

    @staticmethod
    def seen_from(model: EpochModel, correction: float, vantages: Iterable[EpochModel]) -> Ranking:
        """The tuner's: the step's parallel share, where ``model`` measured it, is the job's for every vantage."""
        share = model.measured_share
        seen = tuple(v if share is None else dataclasses.replace(v, measured_share=share) for v in vantages)
        return Ranking(correction, seen)

    def speedup(self, model: EpochModel, setting: Setting) -> float:
        """``setting``'s speed-up over ``model``'s recorded setting, as this ranking weighs it."""
        seen = [v.epoch_s(model.recorded) / max(v.epoch_s(setting), 1e-12) for v in self.vantages]
        return 1.0 + (min([model.speedup(setting), *seen]) - 1.0) * self.correction

    def span(self, model: EpochModel, setting: Setting) -> tuple[float, float]:
        """The least and the most speed-up over the parallel shares the run leaves open (``speedup_span``)."""
        if not self.vantages and self.correction == 1.0:
            return model.speedup_span(setting)
        speedup = self.speedup(model, setting)
        if abs(model.q(setting) - model.step_threads) < 1e-9 or model.measured_share is not None:
            return speedup, speedup
        ends = [self.speedup(m, setting) for m in model.share_ends]
        return min(speedup, *ends), max(speedup, *ends)


OWN = Ranking()


def predict(model: EpochModel, setting: Setting, ranking: Ranking = OWN) -> Prediction:
    """The model's speed-up for ``setting``, widened by the run's own spread, the model's measured error and,
    on another thread count, the parallel shares the run leaves open (NOTE [ Intra-op threads ])."""
    least, most = ranking.span(model, setting)
    spread = min(model.spread, C.MAX_SPREAD)
    return Prediction(
        setting=setting,
        changes=model.recorded.changed(setting),
        speedup=ranking.speedup(model, setting),
        low=least / C.MODEL_HIGH * (1.0 - spread),
        high=most / C.MODEL_LOW * (1.0 + spread),
    )


def candidates(model: EpochModel, *, prefetch: int | None = None) -> list[Setting]:
    """Every setting worth predicting: workers, fewer intra-op threads, persistent workers, a deeper queue, pinning.

    CPU-bound loading stops at one worker a core and C.SPARE_CPU_WORKERS more: beyond, more workers
    only take a larger share of the cores from other processes, which the model would count as a gain
    and the machine's other users as a loss. ``prefetch`` is a deeper queue worth trying (from the
    prefetch_too_shallow rule); page-locked memory is tried only where it can change the copy to a GPU.
    """
    rec = model.recorded
    threads = [rec.threads] + [t for t in range(rec.threads - 1, 0, -1) if model.step_threads > 1.2]
    top = min(model.max_workers, int(C.MAX_CANDIDATE_WORKERS))
    if model.cpu_bound():
        top = min(top, math.ceil(model.cores - 1e-9) + int(C.SPARE_CPU_WORKERS))
    pins = {rec.pin_memory, bool(rec.pin_memory or model.copy_saving_s > 0)}
    out = []
    for n in range(0, max(1, top) + 1):
        for t in threads:
            for pin in pins:
                if n == 0:
                    out.append(rec.but(num_workers=0, threads=t, pin_memory=pin))
                    continue
                for persistent in {rec.persistent_workers, True}:
                    for depth in {rec.prefetch_factor, prefetch or rec.prefetch_factor}:
                        out.append(
                            rec.but(
                                num_workers=n,
                                threads=t,
                                pin_memory=pin,
                                persistent_workers=persistent,
                                prefetch_factor=depth,
                            )
                        )
    return out


def choose(
    model: EpochModel, settings: Iterable[Setting], ranking: Ranking = OWN
) -> tuple[Prediction, list[Prediction]]:
    """(the setting to recommend, the alternatives considered), each with its prediction.

    Each setting is ranked by the least speed-up the model gives it: on
    another thread count, at the parallel share that suits it least (NOTE
    [ Intra-op threads ]). Ranked by one share, bench/bench_tune.py's photo
    pipeline put 1 worker at 1 thread level with 8 at 2 (1.40x and 1.43x at
    the table's); its step ran 1.85x slower on 1 thread, and the tuner's
    trials of 1 thread measured 1.10-1.15x.
    The least change within C.CLOSE of the best wins (the recorded setting, if it is a candidate that
    close: more CPU-bound workers than ``candidates`` allows never are).
    Workers that only just keep up lose more than the model's mean predicts, so where the pick's
    workers have less than C.SURPLUS headroom, the least change whose workers have it is taken if
    the model gives it C.ROBUST of the best (not beyond a worker a core for CPU-bound loading: more
    only share the same cores), the pick's other settings kept where one such count does. (Taking the
    least change among all of them dropped persistent workers the model gave 8% on the starved demo,
    where they measured 8.5%.) I/O-bound loading then gets C.IO_SURPLUS times its workers: storage
    latency varies and a sleeping worker costs only memory.
    """
    scores = {s: ranking.span(model, s)[0] for s in dict.fromkeys(settings)}
    best = max(scores.values(), default=1.0)
    near = [s for s, v in scores.items() if v >= C.CLOSE * best] or [model.recorded]
    pick = model.recorded if model.recorded in near else _least_change(model, near)
    if pick.num_workers > 0 and model.headroom(pick) < C.SURPLUS:
        room = math.floor(model.cores + 1e-9) if model.cpu_bound() else int(C.MAX_CANDIDATE_WORKERS)
        fed = [
            s
            for s, v in scores.items()
            if v >= C.ROBUST * best and s.num_workers <= room and s.num_workers > 0 and model.headroom(s) >= C.SURPLUS
        ]
        kept = [s for s in fed if s == pick.but(num_workers=s.num_workers)]  # the pick's other settings
        if kept or fed:
            pick = _least_change(model, kept or fed)
    if not model.cpu_bound() and pick.num_workers > 0:
        wanted = min(model.max_workers, max(pick.num_workers, math.ceil(C.IO_SURPLUS * pick.num_workers - 1e-9)))
        pick = pick.but(num_workers=wanted)
    chosen = predict(model, pick, ranking)
    others = sorted(scores, key=lambda s: -scores[s])
    seen = {tuple(chosen.changes.items())}
    alternatives: list[Prediction] = []
    for s in others:
        p = predict(model, s, ranking)
        if p.changes and tuple(p.changes.items()) not in seen and len(alternatives) < ALTERNATIVES:
            seen.add(tuple(p.changes.items()))
            alternatives.append(p)
    return chosen, alternatives


def _least_change(model: EpochModel, settings: Iterable[Setting]) -> Setting:
    """The fewest workers, then the most intra-op threads, then the fewest other changes."""
    return min(settings, key=lambda s: (s.num_workers, -s.threads, len(model.recorded.changed(s))))

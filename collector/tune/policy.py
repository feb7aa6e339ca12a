"""Which setting the next epoch runs at, and whether a trial is kept: measured speed against measured noise."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field

from collector.diagnosis.calibration import C
from collector.diagnosis.setting import Setting, stored
from collector.diagnosis.tuned_line import line
from collector.tune.answers import NothingPays, Proposal, describe
from collector.tune.every import DEFAULT_EVERY
from collector.tune.trial import Segment, Trial

# NOTE [ Live tuning ]
# A prediction carries the machine's noise (about 12% run to run on a shared
# machine, against predicted gains of 1.2x); a trial on the job itself, in its
# own conditions, settles it. The tuner runs the loader at its own setting
# for BASELINE_EPOCHS epochs, asks the prediction model (in a helper process
# beside the job, collector/tune/advisor.py) for the best setting it ranks
# above 1.0 that was not tried yet, and runs the next epoch at that setting:
# a trial. The trial's seconds a batch are compared with the setting it
# replaced (the median of that setting's recent epochs); it is kept only where
# it measured faster by more than that setting's own epoch-to-epoch variation
# ((slowest - fastest) / fastest of its epochs, at least NOISE_FLOOR), else the
# loader goes back. A kept trial becomes the setting the next is measured
# against. Trials stop when no untried setting is predicted to beat the
# current one by more than its noise (the prediction corrected by the trials
# so far: NOTE [ Measurement steers the model ]), after MAX_TRIALS, or at the
# first failure. After the first, at most one epoch in ``every`` is a trial, kept or
# not: the rest of the run trains at the best setting found. Persistent
# workers start once a run, and on a short epoch their start fills it: a
# trial that starts them runs two segments and is judged on the second, as
# every later epoch at that setting runs. A trial of fewer intra-op threads
# beside persistent workers already running starts none, and is judged on
# its first (one slow epoch where it loses, not two).
# Each trial's measure is an epoch (or, for long epochs, a window of one:
# ``Segment``), in seconds a batch, so a shorter last epoch compares fairly.
#
# NOTE [ The warm-up segment ]
# A run's first epoch carries its one-time costs: imports and caches filled
# on first use, the workers' and our helper's start. On the demos it ran
# 4-20% slower than the epochs after it, while those varied 1-9% among
# themselves, so taken as a sample of its setting it read as noise that hid
# every gain below 1.2x, and the model built from it alone ranked nothing
# above 1.0 where the next epoch's data found 1.16-1.38x (the oversubscribed
# demo). So the run's first segment is the warm-up: it is no sample of its
# setting's speed nor of its noise (NOISE_FLOOR stands in until a setting
# has two steady segments), as a trial's first segment that starts
# persistent workers is not. And an answer from a question asked after the
# warm-up alone (``seen``) is provisional both ways: it never ends tuning,
# whether it finds nothing above 1.0 or nothing above the noise, and it
# starts a trial only where its gain clears the spread of the warm-up and
# the steady epochs together (the rule before): the next answer, from
# steady data, decides. Without that, beside a CPU hog the healthy demo's
# first answer (12 persistent workers, 1.08x) cost it a trial, a revert and
# four epochs 10% slower than untuned.
#
# NOTE [ Measurement steers the model ]
# The model can miss a whole class of job the same way each time (a
# JPEG-decoding pipeline's gain from more workers, say), and a miss of its
# own kind repeats from the kept setting on. So each trial measured corrects
# the predictions after it: every predicted gain (speed-up - 1), and its
# range, is scaled by the job's measured gains over the model's predicted
# gains, summed over its trials so far, bounded to [MIN_CORRECTION,
# MAX_CORRECTION]:
#
#     correction = sum(measured - 1) / sum(predicted - 1)      over the trials
#     corrected  = 1 + (predicted - 1) * correction            (low, high alike)
#
# A trial that measured well above its prediction lets the next-ranked
# candidates still pay (within MAX_TRIALS and ``every``); one that measured
# well below, or slower, makes the model more cautious. The helper ranks its
# candidates by the corrected gain, and the rule "go on while a candidate is
# predicted to beat the current setting by more than its noise" compares the
# corrected one. The trials table holds the corrected prediction; its
# ``why`` names the model's own and the correction.
# the calibration table's (NOTE [ Decision constants ] in collector/diagnosis/calibration_decisions.py)
BASELINE_EPOCHS = int(C.BASELINE_EPOCHS)
WARMUP_SEGMENTS = int(C.WARMUP_SEGMENTS)
NOISE_FLOOR = C.NOISE_FLOOR
MAX_TRIALS = int(C.MAX_TRIALS)
MIN_CORRECTION = C.MIN_CORRECTION
MAX_CORRECTION = C.MAX_CORRECTION


def settled_by(seen: int | None) -> bool:
    """An answer from a question asked after a steady segment: it may end tuning (NOTE [ The warm-up segment ])."""
    return seen is None or seen > WARMUP_SEGMENTS


@dataclass
class Policy:
    """The tuner's decisions, with no clock and no loader: segments in, the next setting and trials out."""

    start: Setting
    every: int = DEFAULT_EVERY
    fixed_workers: bool = False  # an IterableDataset: its sharding depends on num_workers
    current: Setting = field(init=False)
    done: str | None = field(default=None, init=False)  # why tuning ended
    trials: list[Trial] = field(default_factory=list, init=False)
    tried: set[Setting] = field(default_factory=set, init=False)
    _times: dict[Setting, list[float]] = field(default_factory=dict, init=False)
    _trial: Proposal | None = field(default=None, init=False)  # the one running now
    _measured: int = field(default=0, init=False)  # segments measured
    _trial_at: list[int] = field(default_factory=list, init=False)  # the segments trials ran in
    _warm: bool = field(default=False, init=False)  # the running trial's persistent workers have started
    _warmup: float | None = field(default=None, init=False)  # the warm-up segment's seconds a batch

    def __post_init__(self) -> None:
        self.current = self.start
        self.tried.add(self.start)

    # -- what the helper is asked -------------------------------------------

    def wants_proposal(self) -> bool:
        """A proposal could be tried at the next segment or the one after: worth asking the model now."""
        return self.done is None and self._trial is None and self._next_trial_at() <= self._measured + 1

    @property
    def segments(self) -> int:
        """Segments measured so far, the warm-up included: what a question to the helper has seen."""
        return self._measured

    def noise(self, setting: Setting, warm_up: bool = False) -> float:
        """A setting's own variation between its steady segments (NOISE_FLOOR where fewer than two).

        ``warm_up``: the start setting's warm-up segment counted too (NOTE [ The warm-up segment ]).
        """
        times = self._times.get(setting, [])
        if warm_up and setting == self.start and self._warmup is not None:
            times = [self._warmup, *times]
        if len(times) < 2:
            return NOISE_FLOOR
        return max(NOISE_FLOOR, (max(times) - min(times)) / min(times))

    # -- decisions ----------------------------------------------------------

    def next_setting(self, proposal: Proposal | None) -> tuple[Setting, Proposal | None]:
        """The setting the next segment runs at, and the proposal it tries (None: no trial)."""
        if self._trial is not None:
            return self._trial.setting, self._trial  # its second segment: persistent workers, warm
        if self.done is not None or self._next_trial_at() > self._measured:
            return self.current, None
        if proposal is None or proposal.baseline != self.current or proposal.setting in self.tried:
            return self.current, None
        measured_only = proposal.between or proposal.neighbour
        proposal = dataclasses.replace(proposal, correction=1.0 if measured_only else self.correction())
        beats = proposal.corrected(proposal.predicted) > 1.0 + self.noise(self.current, not settled_by(proposal.seen))
        if not beats and not (proposal.neighbour and settled_by(proposal.seen)):
            if settled_by(proposal.seen):
                self.done = (
                    f"no setting is predicted to beat {describe(self.current)} by more than its noise "
                    f"(best: {proposal.described()})"
                )
            return self.current, None
        if self.fixed_workers and proposal.setting.num_workers != self.current.num_workers:
            return self.current, None  # the helper was told; a stale proposal
        self._trial = proposal
        self._trial_at.append(self._measured)
        self.tried.add(proposal.setting)
        return proposal.setting, proposal

    def correction(self) -> float:
        """The trials' measured gains over the model's predicted ones, bounded. See NOTE [ Measurement steers the model ]."""
        judged = [t for t in self.trials if t.measured is not None and not t.proposal.neighbour]  # no claim of gain
        predicted = sum(t.proposal.predicted - 1.0 for t in judged)
        if predicted <= 0.0:
            return 1.0
        measured = sum(t.measured - 1.0 for t in judged if t.measured is not None)
        return min(MAX_CORRECTION, max(MIN_CORRECTION, measured / predicted))

    @property
    def missed(self) -> Setting | None:
        """The last trial's setting where it measured no gain and none was kept after it (NOTE [ After a miss ])."""
        last = self.trials[-1] if self.trials else None
        return None if last is None or last.kept or last.measured is None else last.setting

    def nothing_pays(self, answer: NothingPays) -> None:
        """The model found no untried setting above 1.0: tuning ends with the current setting, once settled."""
        if self.done is None and self._trial is None and settled_by(answer.seen) and not answer.later:
            self.done = answer.why

    def measured(self, segment: Segment, setting: Setting) -> Trial | None:
        """A segment ended at ``setting``: its time is kept, and a trial decided."""
        self._measured += 1
        if self._measured <= WARMUP_SEGMENTS:
            self._warmup = segment.per_batch_s  # NOTE [ The warm-up segment ]
            return None
        if self._trial is not None and _starts_workers(self._trial.baseline, setting) and not self._warm:
            self._warm = True  # its workers started in this one: judged on the next
            return None
        proposal, self._trial, self._warm = self._trial, None, False
        if proposal is None or setting != proposal.setting:
            self._times.setdefault(setting, []).append(segment.per_batch_s)
            return None
        base = self._times.get(self.current, [])[-3:]
        before = statistics.median(base) if base else segment.per_batch_s
        speedup = before / max(segment.per_batch_s, 1e-12)
        noise = self.noise(self.current)
        kept = speedup > 1.0 + noise
        if kept:
            why = f"measured {speedup:.2f}x, more than the {noise:.0%} variation of {describe(self.current)}"
        elif speedup >= 1.0:
            why = f"measured {speedup:.2f}x, within the {noise:.0%} variation of {describe(self.current)}"
        else:
            why = f"measured {speedup:.2f}x: slower than {describe(self.current)}"
        why += f"; {proposal.described()}"
        trial = Trial(
            epoch=segment.epoch,
            start_idx=segment.start_idx,
            batches=segment.batches,
            started_at=segment.started_at,
            ended_at=segment.ended_at,
            setting=setting,
            baseline=self.current,
            proposal=proposal,
            measured=speedup,
            noise=noise,
            kept=kept,
            why=why,
        )
        self.trials.append(trial)
        if kept:
            self.current = setting
            self._times.setdefault(setting, []).append(segment.per_batch_s)
        if len(self.trials) >= MAX_TRIALS and self.done is None:
            self.done = f"{MAX_TRIALS} trials made"
        return trial

    @property
    def trying(self) -> Proposal | None:
        """The trial in force now, from its first segment to its judgement."""
        return self._trial

    def abandon(self, epoch: int, start_idx: int, why: str, wall_now: float) -> Trial | None:
        """The trial in force ends unjudged: the current setting stands, the trial is never tried again.

        Its workers failed, or its epoch ended early (NOTE [ Trials never hurt ]); its row says why.
        """
        proposal, self._trial, self._warm = self._trial, None, False
        if proposal is None:
            return None
        trial = Trial(
            epoch=epoch,
            start_idx=start_idx,
            batches=0,
            started_at=wall_now,
            ended_at=wall_now,
            setting=proposal.setting,
            baseline=self.current,
            proposal=proposal,
            measured=None,
            noise=self.noise(self.current),
            kept=False,
            why=f"not judged: {why}; {proposal.described()}",
        )
        self.trials.append(trial)
        if len(self.trials) >= MAX_TRIALS and self.done is None:
            self.done = f"{MAX_TRIALS} trials made"
        return trial

    def _next_trial_at(self) -> int:
        """The first segment (a count of measured ones) a trial may run in."""
        return self._trial_at[-1] + max(1, self.every) if self._trial_at else BASELINE_EPOCHS

    def rethread(self, threads: int) -> None:
        """Another loader of the job changed torch's threads (NOTE [ One tuner for the job ]): this one's
        settings run at ``threads`` now, and what it measured at the old count is no sample of them."""
        self.start, self.current = self.start.but(threads=threads), self.current.but(threads=threads)
        self.tried = {s.but(threads=threads) for s in self.tried}
        self._times = {}

    # -- the result -----------------------------------------------------------

    def median_s(self, setting: Setting) -> float | None:
        """A setting's median seconds a batch over its steady segments; None where it has none."""
        times = self._times.get(setting)
        return statistics.median(times) if times else None

    def banked(self) -> float | None:
        """The kept setting's measured speed-up over the start; None where no trial was kept (NOTE [ Measured
        neighbours ] in collector/diagnosis/decide.py)."""
        return None if self.current == self.start else self.measured_speedup()

    def measured_speedup(self) -> float | None:
        """The start setting's median seconds a batch over the current one's: None where either is unmeasured."""
        start, now = self.median_s(self.start), self.median_s(self.current)
        if start is None or now is None:
            return None
        return start / max(now, 1e-12)

    def summary(self) -> str | None:
        """The line printed at the end of a tuned run (the report's ``tuned``), or None where nothing was kept."""
        speedup = self.measured_speedup()
        if self.current == self.start or speedup is None:
            return None
        return line(stored(self.start), stored(self.current), speedup)


def _starts_workers(baseline: Setting, setting: Setting) -> bool:
    """A trial whose persistent workers start in its first segment: any loader field changed (threads alone do not)."""
    return setting.persistent_workers and baseline.but(threads=setting.threads) != setting

"""Live tuning on the training thread: each epoch at the setting the policy chose, measured, never raising."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections import deque
from collections.abc import Callable
from typing import Any

from collector.errors import CollectorWarning
from collector.record import windows
from collector.record.handover import EpochEnded, Shared
from collector.record.loader_setting import apply, setting_of, target_of, watched_by_sigchld
from collector.record.seed_stream import SeedStream
from collector.record.tuning_job import JOB, say
from collector.record.tuning_windows import Restarts
from collector.record.windows import restartable
from collector.sample.schedstat import process_ns
from collector.tune.advisor import Advisor, AdvisorError
from collector.tune.answers import NothingPays, Proposal, setting_json
from collector.tune.policy import Policy, Segment, Setting


class LiveTuner(Restarts):
    """One recorded loader's tuner. See NOTE [ Live tuning ] in collector/tune/policy.py.

    The session calls ``before_epoch`` at each iter() and the loops' end
    event calls ``ended``, both on the training thread and both cheap: the
    model runs in the helper process (NOTE [ The tuner's helper ]). Any
    failure ends tuning with one warning, at the last good setting. The
    process's tuners are one job (NOTE [ One tuner for the job ]).
    """

    def __init__(
        self,
        loader: Any,
        shared: Shared,
        db: str,
        every: int,
        run_id: Any,
        label: str = "the loader",
        warn: Callable[[str, str], None] | None = None,
        note: Callable[[str, str], None] | None = None,
    ) -> None:
        self.loader = loader
        self.shared = shared
        self.db = db
        self._run_id = run_id  # () -> the run's id once the monitor has created it, else None
        self.label = label  # the run's name and where watch() was called
        self._warn = warn or (lambda key, message: None)  # the monitor's: warned once, stored with the run
        self._note = note or (lambda key, message: None)  # the monitor's: stored with the run's warnings
        self.failed: str | None = None
        self.advisor: Advisor | None = None
        target = target_of(loader)
        self.iterable = getattr(target, "_dataset_kind", 0) == 1  # torch's _DatasetKind.Iterable
        self.policy = Policy(start=setting_of(target), every=every, fixed_workers=self.iterable)
        if self.iterable:
            self._note(
                "tuning-iterable",
                "an IterableDataset shards its data by worker, so the tuner never changes num_workers here",
            )
        self.kind = None if self.iterable else windows.route(target)  # NOTE [ Windows of a long epoch ]
        self.long = False  # an epoch ran past LONG_EPOCH_S: the next are tuned in windows from their start
        self.running = self.policy.start  # the setting the loader runs at now
        self.seeds = SeedStream(loader, self.policy.start)  # NOTE [ The same samples ]
        self.job = JOB.join(self, label)  # NOTE [ One tuner for the job ]
        self._failure: tuple[str, str] | None = None  # NOTE [ Trials never hurt ]
        self.ending = False  # the run is closing: an epoch ended now may be cut short
        self._held: Proposal | None = None  # a proposal a window (or another loader's trial) held back
        # epoch -> (segment start ns, wall start, this process's CPU then: NOTE [ The first question ] in propose.py)
        self._running: dict[int, tuple[int, float, tuple[int, int] | None]] = {}
        self._length: dict[int, int | None] = {}  # epoch -> len(loader) at its start
        self._last_batches: int | None = None  # the batches the loader's epoch before ended at
        self._crossed: dict[int, tuple[int, int]] = {}  # epoch -> (batch, ns) of its last window boundary

    # -- the training thread ------------------------------------------------

    def before_epoch(self, epoch: int, t_start_ns: int, wall_now: float) -> str | None:
        """Put the loader at this epoch's setting; its stored form (epochs.setting), or None once tuning failed."""
        trial = None
        try:
            if self.failed is None:
                self._sync_threads()
                self._length[epoch] = length = _length(target_of(self.loader))
                self.job.batches = self.job.batches or length  # len() until an epoch is measured
                left = JOB.worth_tuning(self) if self.policy.done is None and self.policy.trying is None else None
                if left is not None:
                    self.leave(left)  # before its helper starts: NOTE [ One tuner for the job ]
                if self.advisor is None and self.policy.done is None:
                    self.advisor = Advisor()
                    if self.advisor.pid is not None:
                        self.shared.helpers.append((self.advisor.pid, self.advisor.started))
                setting, trial = self._choose(mid_epoch=False)
                self._apply(setting)
                self._running[epoch] = (t_start_ns, wall_now, process_ns(os.getpid()))
            self.seeds.before_iter(epoch)  # tuned or failed, the user's samples (NOTE [ The same samples ])
        except Exception as exc:  # noqa: BLE001 - the tuner's boundary: never an exception in the loop
            if self.failed is None:
                self.fail(exc)
                with contextlib.suppress(Exception):
                    self.seeds.before_iter(epoch)  # at the last good setting
        return self._stored(trial is not None)

    def _stored(self, trial: bool) -> str | None:
        """The setting in force as epochs.setting stores it (torch's threads as they are), or None once failed."""
        if self.failed is not None:
            return None
        return setting_json(self.running.but(threads=setting_of(target_of(self.loader)).threads), trial=trial)

    def _choose(self, mid_epoch: bool) -> tuple[Setting, Proposal | None]:
        """The next segment's setting from the helper's newest answer; a proposal that cannot start now is held."""
        answer = self.advisor.poll() if self.advisor is not None else None
        if isinstance(answer, NothingPays):
            self.policy.nothing_pays(answer)
        proposal = answer if isinstance(answer, Proposal) else self._held
        self._held = None
        if proposal is not None and self.policy.trying is None and self.policy.done is None and not JOB.may_try(self):
            self._held, proposal = proposal, None  # another loader's trial is in force: NOTE [ One tuner for the job ]
        if mid_epoch and proposal is not None and not restartable(self.kind, self.running, proposal.setting):
            self._held, proposal = proposal, None
        chosen = self.policy.next_setting(proposal)
        if self.policy.trying is None:
            JOB.tried(self)
        return chosen

    def _apply(self, setting: Setting) -> None:
        """The loader at ``setting``; torch's threads only where this loader owns them (NOTE [ One tuner for the job ])."""
        apply(self.loader, setting, threads=JOB.owns_threads(self))
        self.running = setting

    def _sync_threads(self) -> None:
        """Another loader of the job changed torch's threads: this one's settings run at the count in force."""
        if JOB.owns_threads(self):
            return
        threads = setting_of(target_of(self.loader)).threads
        if threads != self.running.threads and self.policy.trying is None:
            self.policy.rethread(threads)
            self.running = self.running.but(threads=threads)

    def _fixed(self) -> bool:
        """Whether the helper must keep torch's threads: another loader owns them (NOTE [ One tuner for the job ])."""
        return not JOB.owns_threads(self)

    def leave(self, why: str) -> None:
        """This loader stays at its setting for the rest of the run (NOTE [ One tuner for the job ])."""
        self.policy.done = f"left at its setting: {why}"
        self.job.left = why
        self._note("tuning-left", f"live tuning left this loader at its setting: {why}")
        self.close_advisor()

    def ended(self, event: EpochEnded, wall_now: float) -> None:
        """An epoch's end (its last next()): measure it (or its last window), record a trial, ask about the next."""
        running = self._running.pop(event.epoch, None)
        length = self._length.pop(event.epoch, None)
        if self.failed is not None or running is None:
            return
        if self._cut_short(event, length):
            if self.policy.trying is not None:
                self.back(event.epoch, 0, f"its epoch ended after {event.batches} batches", warn=False)
            return
        t_start_ns, wall_start, cpu_start = running
        start_idx, t0_ns = self._crossed.pop(event.epoch, (0, t_start_ns))
        if event.batches <= start_idx:
            return
        seconds = max(0.0, (event.t_ns - t0_ns) / 1e9)
        wall_start += (t0_ns - t_start_ns) / 1e9
        self.long = self.long or (start_idx == 0 and seconds > windows.LONG_EPOCH_S)
        if start_idx and seconds < windows.WINDOW_S / 3:
            return  # a window's short tail: too few batches to judge by; a trial running goes on next epoch
        if start_idx == 0:
            JOB.measured(self, seconds, event.batches)
        segment = Segment(event.epoch, start_idx, event.batches - start_idx, seconds, wall_start, wall_now)
        cpu_end = process_ns(os.getpid()) if start_idx == 0 and cpu_start is not None else None
        edges = None if cpu_end is None else [_reading(wall_start, cpu_start), _reading(wall_now, cpu_end)]
        if self._measured(segment, event.epoch, edges):
            try:
                self._apply(self.policy.current)  # back now: persistent workers would keep the trial's
            except Exception as exc:  # noqa: BLE001 - the tuner's boundary
                self.fail(exc)

    def _measured(
        self, segment: Segment, epoch: int | None, edges: list[tuple[float, float, float]] | None = None
    ) -> bool:
        """A segment ended at the running setting: record its trial, ask about the next; whether it was reverted."""
        try:
            trial = self.policy.measured(segment, self.running)
            if trial is not None:
                self.shared.trials.append(trial.row())
                if trial.kept:  # its workers are the loader's own now: torch's SIGCHLD watch again
                    watched_by_sigchld(target_of(self.loader).__dict__.get("_iterator"))
            run_id, policy = self._run_id(), self.policy
            if self.advisor is not None and run_id is not None and policy.wants_proposal():
                tried, correction, seen = sorted(policy.tried, key=repr), policy.correction(), policy.segments
                question = (self.db, run_id, epoch, policy.current, tried, self.iterable, correction, seen, edges)
                self.advisor.ask(
                    *question,
                    fixed_threads=self._fixed(),
                    missed=policy.missed,
                    noise=policy.noise(policy.current),
                    banked=policy.banked(),
                )
            return trial is not None and not trial.kept
        except Exception as exc:  # noqa: BLE001 - the tuner's boundary
            self.fail(exc)
            return False

    def after_iter(self) -> None:
        """The iterator is built: the generator back where the user's loader would have left it."""
        self.seeds.after_iter()

    def quietly(self, iterate: Any, loader: Any) -> Any:
        """``iterate(loader)`` without torch's warning about more workers than cores where the tuner chose them.

        The worker count is the model's, which already counts the cores
        (collector/diagnosis/choose.py), not the user's to reconsider.
        """
        if self.policy.start.num_workers == getattr(loader, "num_workers", 0):
            return iterate(loader)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
            warnings.filterwarnings("ignore", message="Got pickle error", category=UserWarning)  # the trial's, reverted
            return iterate(loader)

    def fail(self, exc: BaseException) -> None:
        """End tuning: one warning, the loader back at the last good setting."""
        self.failed = f"{type(exc).__name__}: {exc}" if not isinstance(exc, AdvisorError) else str(exc)
        warnings.warn(
            f"stallwatch: live tuning stopped ({self.failed}); training goes on at {self.policy.current}",
            CollectorWarning,
            stacklevel=2,
        )
        JOB.tried(self)
        try:
            apply(self.loader, self.policy.current, threads=JOB.owns_threads(self))
            self.running = self.policy.current
        except Exception:  # noqa: BLE001 - the loader refuses even its last good setting: leave it as it is
            pass
        self.close_advisor()

    def close_advisor(self) -> None:
        if self.advisor is not None:
            self.advisor.close()
            self.advisor = None

    def finish(self) -> str | None:
        """At the run's end: a trial in force ended, the helper ended; this loader's line, and the job's once all ended.

        See NOTE [ One tuner for the job ]. Returns this loader's line (None where it has none).
        """
        if self.failed is None and self.policy.trying is not None:
            self.back(max(self._running, default=-1), 0, "the run ended during it", warn=False)
        self.close_advisor()
        policy = self.policy
        batches = self.job.batches or 0
        self.job.start_s, self.job.now_s = (
            None if s is None else s * batches for s in (policy.median_s(policy.start), policy.median_s(policy.current))
        )
        text = policy.summary()
        if self.job.left:
            text = f"left {self.label} at its setting: {self.job.left}"
        elif text is not None:
            text = text.replace("tuned:", f"tuned {self.label}:", 1)
        elif policy.trials or policy.done:
            judged = [t for t in policy.trials if t.measured is not None]
            why = policy.done or (
                f"{len(judged)} trial{'s' * (len(judged) != 1)}, none measured faster than its setting's noise"
                if judged
                else "no trial judged"
            )
            text = f"tuned {self.label}: kept its own setting ({why})"
        if text is not None:
            say(text)
        job = JOB.finish(self)
        if job is not None:
            say(job)
        return policy.summary()


class TunedEvents(deque[Any]):
    """The session's epoch events: an end also reaches the tuner, on the thread that ends the epoch."""

    def __init__(self, maxlen: int, tuner: LiveTuner, wall_of: Any) -> None:
        super().__init__(maxlen=maxlen)
        self.tuner = tuner
        self.wall_of = wall_of

    def append(self, event: Any) -> None:
        super().append(event)
        if type(event) is EpochEnded:
            self.tuner.ended(event, self.wall_of(event.t_ns))


def _reading(wall: float, ns: Any) -> tuple[float, float, float]:
    """A reading of this process's (cpu_ns, runq_ns) at ``wall``, in seconds: as a question's ``edges`` carry it."""
    return wall, ns[0] / 1e9, ns[1] / 1e9


def _length(loader: Any) -> int | None:
    """len(loader) where it has one (batches an epoch), else None."""
    try:
        return len(loader)
    except Exception:  # noqa: BLE001 - no len(), or one that raises: an IterableDataset's
        return None

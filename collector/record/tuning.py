"""Live tuning on the training thread: each epoch at the setting the policy chose, measured, never raising."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from collector.errors import CollectorWarning
from collector.record import windows
from collector.record.handover import EpochEnded, Shared
from collector.record.loader_setting import apply, setting_of, target_of
from collector.record.windows import Lent, SeedKept, Windowed, restartable
from collector.sample.schedstat import process_ns
from collector.tune.advisor import Advisor, AdvisorError
from collector.tune.answers import NothingPays, Proposal, setting_json
from collector.tune.policy import Policy, Segment, Setting


class LiveTuner:
    """One recorded loader's tuner. See NOTE [ Live tuning ] in collector/tune/policy.py.

    The session calls ``before_epoch`` at each iter() and the loops' end
    event calls ``ended``, both on the training thread and both cheap: the
    model runs in the helper process (NOTE [ The tuner's helper ]). Any
    failure ends tuning with one warning, at the last good setting.
    """

    def __init__(
        self, loader: Any, shared: Shared, db: str, every: int, run_id: Any, origin: str | None = None
    ) -> None:
        self.loader = loader
        self.shared = shared
        self.db = db
        self._run_id = run_id  # () -> the run's id once the monitor has created it, else None
        self.failed: str | None = None
        self.advisor: Advisor | None = None
        target = target_of(loader)
        self.iterable = getattr(target, "_dataset_kind", 0) == 1  # torch's _DatasetKind.Iterable
        self.policy = Policy(start=setting_of(target), every=every, fixed_workers=self.iterable)
        self.notes: list[str] = []
        if self.iterable:
            self.notes.append(
                "an IterableDataset shards its data by worker, so the tuner never changes num_workers here"
            )
        self.kind = None if self.iterable else windows.route(target)  # NOTE [ Windows of a long epoch ]
        self.long = False  # an epoch ran past LONG_EPOCH_S: the next are tuned in windows from their start
        self.running = self.policy.start  # the setting the loader runs at now
        self._held: Proposal | None = None  # a proposal a window could not start: for the next epoch
        # epoch -> (segment start ns, wall start, this process's CPU then: NOTE [ The first question ] in propose.py)
        self._running: dict[int, tuple[int, float, tuple[int, int] | None]] = {}
        self._crossed: dict[int, tuple[int, int]] = {}  # epoch -> (batch, ns) of its last window boundary
        self._restore: tuple[Any, Any] | None = None  # NOTE [ The same samples ]

    # -- the training thread ------------------------------------------------

    def before_epoch(self, epoch: int, t_start_ns: int, wall_now: float) -> str | None:
        """Put the loader at this epoch's setting; its stored form (epochs.setting), or None once tuning failed."""
        setting, trial = self.running, None
        try:
            if self.failed is None:
                if self.advisor is None:
                    self.advisor = Advisor()
                    if self.advisor.pid is not None:
                        self.shared.helpers.append((self.advisor.pid, self.advisor.started))
                setting, trial = self._choose(mid_epoch=False)
                apply(self.loader, setting)
                self.running = setting
                self._running[epoch] = (t_start_ns, wall_now, process_ns(os.getpid()))
            self._keep_the_seed_stream(epoch)  # tuned or failed, the user's samples (NOTE [ The same samples ])
        except Exception as exc:  # noqa: BLE001 - the tuner's boundary: never an exception in the loop
            if self.failed is None:
                self.fail(exc)
                with contextlib.suppress(Exception):
                    self._keep_the_seed_stream(epoch)  # at the last good setting
        return None if self.failed is not None else setting_json(setting, trial=trial is not None)

    def _choose(self, mid_epoch: bool) -> tuple[Setting, Proposal | None]:
        """The next segment's setting from the helper's newest answer; a proposal a window cannot start is held."""
        assert self.advisor is not None
        answer = self.advisor.poll()
        if isinstance(answer, NothingPays):
            self.policy.nothing_pays(answer)
        proposal = answer if isinstance(answer, Proposal) else self._held
        self._held = None
        if mid_epoch and proposal is not None and not restartable(self.kind, self.running, proposal.setting):
            self._held, proposal = proposal, None
        return self.policy.next_setting(proposal)

    def ended(self, event: EpochEnded, wall_now: float) -> None:
        """An epoch's end (its last next()): measure it (or its last window), record a trial, ask about the next."""
        running = self._running.pop(event.epoch, None)
        if self.failed is not None or running is None:
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
        segment = Segment(event.epoch, start_idx, event.batches - start_idx, seconds, wall_start, wall_now)
        cpu_end = process_ns(os.getpid()) if start_idx == 0 and cpu_start is not None else None
        edges = None if cpu_end is None else [_reading(wall_start, cpu_start), _reading(wall_now, cpu_end)]
        if self._measured(segment, event.epoch, edges):
            try:
                apply(self.loader, self.policy.current)  # back now: persistent workers would keep the trial's
                self.running = self.policy.current
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
            run_id, policy = self._run_id(), self.policy
            if self.advisor is not None and run_id is not None and policy.wants_proposal():
                tried, correction, seen = sorted(policy.tried, key=repr), policy.correction(), policy.segments
                self.advisor.ask(self.db, run_id, epoch, policy.current, tried, self.iterable, correction, seen, edges)
            return trial is not None and not trial.kept
        except Exception as exc:  # noqa: BLE001 - the tuner's boundary
            self.fail(exc)
            return False

    # -- windows of a long epoch (NOTE [ Windows of a long epoch ]) -----------

    def lend(self) -> Any:
        """What this epoch's iter() runs inside: the loader's sampler recorded where windows may restart it."""
        if self.failed is None and self.kind == "sampler" and not self.settled():
            try:
                return windows.lend(target_of(self.loader))
            except Exception as exc:  # noqa: BLE001 - the tuner's boundary
                self.fail(exc)
        return contextlib.nullcontext()

    def settled(self) -> bool:
        """Tuning is over and the loader runs at its setting: no window would change anything."""
        return self.policy.done is not None and self.running == self.policy.current and self._held is None

    def windowed(self, it: Iterator[Any], lent: Any, epoch: int, open_iterator: Callable[[], Any]) -> Windowed | None:
        """The epoch's iterator with window boundaries, or None where it runs whole (short, settled, not restartable)."""
        running = self._running.get(epoch)
        if self.failed is not None or self.kind is None or running is None or self.settled():
            return None
        recorded = lent.recorded if isinstance(lent, Lent) else None
        first_s = windows.WINDOW_S if self.long else windows.LONG_EPOCH_S
        boundary = functools.partial(self.boundary, epoch)
        return Windowed(it, recorded, running[0], first_s, boundary, self.restart, open_iterator)

    def boundary(self, epoch: int, start_idx: int, idx: int, t0_ns: int, t1_ns: int) -> Setting | None:
        """A window ended: measure it, choose the next; the setting to restart the loader at, or None."""
        running = self._running.get(epoch)
        if self.failed is not None or running is None:
            return None
        self.long = True
        self._crossed[epoch] = (idx, t1_ns)
        wall = running[1] + (t0_ns - running[0]) / 1e9
        segment = Segment(epoch, start_idx, idx - start_idx, (t1_ns - t0_ns) / 1e9, wall, wall + (t1_ns - t0_ns) / 1e9)
        self._measured(segment, None)
        if self.failed is not None:
            return None
        try:
            setting, _ = self._choose(mid_epoch=True)
            if not restartable(self.kind, self.running, setting):
                return None  # a revert across worker counts of a StatefulDataLoader: at the next epoch
            if self.running.but(threads=setting.threads) == setting:
                apply(self.loader, setting)  # threads alone: nothing to restart
                self.running = setting
                return None
            return setting
        except Exception as exc:  # noqa: BLE001 - the tuner's boundary
            self.fail(exc)
            return None

    def restart(self, windowed: Windowed, setting: Setting) -> Iterator[Any] | None:
        """The loader at ``setting``, its iterator at the same sampler position; None (the old one goes on) on failure."""
        target = target_of(self.loader)
        old, was = windowed.inner, target.__dict__.get("_iterator")
        previous = self.running
        remaining = None
        try:
            with SeedKept(target):
                state = target.state_dict() if self.kind == "state" else None
                target.__dict__["_iterator"] = None  # detached: apply() must not end it before the new one runs
                apply(self.loader, setting)
                if state is not None:
                    target.load_state_dict(state)
                    new = windowed.open_iterator()
                else:
                    remaining = windowed.remaining()
                    with Lent(target, remaining):
                        new = windowed.open_iterator()
        except Exception as exc:  # noqa: BLE001 - the tuner's boundary: back to the iterator that runs
            target.__dict__["_iterator"] = None
            with contextlib.suppress(Exception):
                apply(self.loader, previous)
            target.__dict__["_iterator"] = was
            if self.kind == "state":
                target.next_iter_state = None  # the state loaded for the failed iterator: not for the next epoch
            if remaining is not None:
                windowed.put_back(remaining)
            self.fail(exc)
            return None
        self.running = setting
        windowed.recorded = remaining
        shutdown = getattr(old, "_shutdown_workers", None)
        if shutdown is not None and old is not target.__dict__.get("_iterator"):
            with contextlib.suppress(Exception):
                shutdown()
        return new

    # NOTE [ The same samples ]
    # A map-style loader's order comes from its sampler, whatever the worker
    # count; but every iterator the DataLoader builds first draws a base seed
    # for its workers from the loader's generator (or torch's global one),
    # the generator a shuffling sampler draws its permutation from. Persistent
    # workers build one iterator a run, so they draw once, not each epoch: a
    # tuner that turned them on or off would change the next epoch's shuffle,
    # and the global RNG the model trains with. So each epoch the tuner draws
    # what the user's own setting would have drawn: one seed where the user's
    # loader builds an iterator and the tuned one reuses its own, and where
    # the tuned loader builds one the user's would not, the generator's state
    # is put back after it (``after_iter``).

    def _keep_the_seed_stream(self, epoch: int) -> None:
        target = target_of(self.loader)
        torch = sys.modules["torch"]
        generator = getattr(target, "generator", None) or torch.default_generator
        start = self.policy.start
        user_builds = not (start.persistent_workers and start.num_workers > 0 and epoch > 0)
        we_build = not (target.persistent_workers and target.num_workers > 0 and target.__dict__.get("_iterator"))
        if user_builds and not we_build:
            torch.empty((), dtype=torch.int64).random_(generator=generator)
        elif we_build and not user_builds:
            self._restore = (generator, generator.get_state())

    def after_iter(self) -> None:
        """The iterator is built: the generator back where the user's loader would have left it."""
        restore, self._restore = self._restore, None
        if restore is not None:
            restore[0].set_state(restore[1])

    def quietly(self, iterate: Any, loader: Any) -> Any:
        """``iterate(loader)`` without torch's warning about more workers than cores where the tuner chose them.

        The worker count is the model's, which already counts the cores
        (collector/diagnosis/choose.py), not the user's to reconsider.
        """
        if self.policy.start.num_workers == getattr(loader, "num_workers", 0):
            return iterate(loader)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
            return iterate(loader)

    def fail(self, exc: BaseException) -> None:
        """End tuning: one warning, the loader back at the last good setting."""
        self.failed = f"{type(exc).__name__}: {exc}" if not isinstance(exc, AdvisorError) else str(exc)
        warnings.warn(
            f"stallwatch: live tuning stopped ({self.failed}); training goes on at {self.policy.current}",
            CollectorWarning,
            stacklevel=2,
        )
        try:
            apply(self.loader, self.policy.current)
        except Exception:  # noqa: BLE001 - the loader refuses even its last good setting: leave it as it is
            pass
        self.close_advisor()

    def close_advisor(self) -> None:
        if self.advisor is not None:
            self.advisor.close()
            self.advisor = None

    def finish(self) -> str | None:
        """At the run's end: the helper ended; the one line for the user, where a trial was kept."""
        self.close_advisor()
        line = self.policy.summary()
        if line is not None:
            print(f"stallwatch {line}", file=sys.stderr)
        return line


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

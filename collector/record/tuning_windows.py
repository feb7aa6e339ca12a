"""A tuned loader restarted mid-epoch at the same sampler position: windows of a long epoch, a trial's faults."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

from collector.record import windows
from collector.record.exits import error_text
from collector.record.handover import EpochEnded
from collector.record.loader_setting import apply, target_of, unwatched_by_sigchld
from collector.record.tuning_job import JOB
from collector.record.windows import Lent, SeedKept, Windowed, restartable
from collector.tune.answers import describe
from collector.tune.policy import Policy, Segment, Setting

# NOTE [ Trials never hurt ]
# A trial runs the user's loader at a setting the user never chose, so its
# faults are the tuner's, never the loop's: workers that cannot start (the
# spawn or forkserver start method and a dataset that does not pickle, a
# container's small /dev/shm, CUDA touched in a forked worker), a
# worker_init_fn that fails at more workers, a worker killed by a signal.
# - iter() raises at a trial's setting: the loader goes back to the last good
#   setting and opens again, the generator rewound first (NOTE [ The same
#   samples ]), so the epoch starts as it would have;
# - next() raises in a trial epoch of a map-style DataLoader: the loader is
#   restarted at the last good setting at the same sampler position, the
#   failed batch's indices first (NOTE [ Windows of a long epoch ]), and that
#   batch is fetched again there. Where it raises again, the error is the
#   dataset's, and reaches the loop from the good setting as it would have
#   untuned; else the loop gets the batch, the same batches in the same order;
# - the trial's workers are taken off torch's SIGCHLD watch, which would
#   raise a dead worker's error at whatever line the loop is on, and are found
#   dead by the iterator's own check inside next() (within 5 s) instead;
# - an epoch that ends early in a trial (Ctrl-C, an exception out of the loop,
#   ``close()``) is no measure of it: the trial ends unjudged, and the loader
#   goes back to the last good setting (its workers ended, the thread count
#   back) at once, or at the run's end.
# A trial ended so is stored with ``measured_speedup`` NULL and why, is never
# tried again, and, where its workers failed, leaves one warning.


class Restarts:
    """The part of a LiveTuner (collector/record/tuning.py) that restarts its loader inside an epoch."""

    failed: str | None
    kind: str | None
    long: bool
    running: Setting
    policy: Policy
    loader: Any
    _running: dict[int, tuple[int, float, tuple[int, int] | None]]
    _crossed: dict[int, tuple[int, int]]
    _held: Any

    shared: Any
    seeds: Any
    _warn: Callable[[str, str], None]
    _failure: tuple[str, str] | None  # the warning for a trial's failure, given once it is the trial's
    _last_batches: int | None
    ending: bool

    # the tuner's own, in collector/record/tuning.py
    def fail(self, exc: BaseException) -> None:
        raise NotImplementedError

    def _stored(self, trial: bool) -> str | None:
        raise NotImplementedError

    def _measured(self, segment: Segment, epoch: int | None, edges: Any = None) -> bool:
        raise NotImplementedError

    def _choose(self, mid_epoch: bool) -> tuple[Setting, Any]:
        raise NotImplementedError

    def _apply(self, setting: Setting) -> None:
        raise NotImplementedError

    def _cut_short(self, event: EpochEnded, length: int | None) -> bool:
        """An epoch the loop left early (NOTE [ Trials never hurt ]): no measure of its setting.

        One that ends without its final next(), short of len(loader), at the run's end or an error's,
        or at another count than the loader's epoch before (a loop that always stops at N batches,
        as Lightning's limit_train_batches, is measured)."""
        before, self._last_batches = self._last_batches, event.batches
        if self.shared.status.get("status") in ("crashed", "interrupted"):
            return True
        if event.t_request_ns is not None or length is None or event.batches >= length:
            return False
        return self.ending or (before is not None and event.batches != before)

    def back(self, epoch: int, start_idx: int, why: str, warn: bool, restart: bool = True) -> None:
        """The trial in force ends unjudged and the loader goes back to the last good setting at once
        (``restart`` False: the caller restarts it mid-epoch)."""
        trial = self.policy.abandon(epoch, start_idx, why, time.time())
        JOB.tried(self)
        if trial is None:
            return
        self.shared.trials.append(trial.row())
        self._failure = (
            f"trial-{epoch}-{start_idx}",
            f"a trial of {describe(trial.setting)} failed ({why}); the loader went back to "
            f"{describe(self.policy.current)} with the same samples, and that setting is not tried again",
        )
        if warn:
            self.trial_failed()
        if not restart:
            return
        try:
            self._apply(self.policy.current)
        except Exception as exc:  # noqa: BLE001 - the tuner's boundary
            self.fail(exc)

    def trial_failed(self) -> None:
        """The trial just ended was at fault (its workers): one warning, stored with the run."""
        failure, self._failure = self._failure, None
        if failure is not None:
            self._warn(*failure)

    def open_failed(self, exc: BaseException, epoch: int) -> str | None:
        """The loader's iter() raised: at a trial's setting, back to the last good one; its stored form (else None).

        See NOTE [ Trials never hurt ]: the session opens the loader again, the generator rewound.
        """
        if self.failed is not None or self.running == self.policy.current or not isinstance(exc, Exception):
            return None
        self.back(epoch, 0, f"its workers did not start: {short_error(exc)}", warn=True)
        if self.failed is not None:
            return None
        self.seeds.rewind()
        self.seeds.before_iter(epoch)
        return self._stored(False)

    def opened(self, iterator: Any) -> None:
        """A trial's iterator: its workers off torch's SIGCHLD watch (NOTE [ Trials never hurt ])."""
        if self.failed is None and self.running != self.policy.current:
            unwatched_by_sigchld(iterator)

    def recover(self, windowed: Windowed, exc: BaseException) -> Iterator[Any] | None:
        """next() raised in a trial: the loader at the last good setting, the failed batch next; None: the loop's."""
        if self.failed is not None or self.running == self.policy.current or not isinstance(exc, Exception):
            return None
        if windowed.recorded is None and self.kind != "state":
            return None
        if not restartable(self.kind, self.running, self.policy.current):
            return None
        good = self.policy.current
        epoch = max(self._running) if self._running else -1
        self.back(epoch, windowed.idx, short_error(exc), warn=False, restart=False)  # warned once the batch comes
        return None if self.failed is not None else self.restart(windowed, good)

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
        windowed = Windowed(it, recorded, running[0], first_s, boundary, self.restart, open_iterator, self.recover)
        windowed.recovered = self.trial_failed
        return windowed

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
                self._apply(setting)  # threads alone: nothing to restart
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
                apply(self.loader, setting, threads=JOB.owns_threads(self))
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
                apply(self.loader, previous, threads=JOB.owns_threads(self))
            target.__dict__["_iterator"] = was
            if self.kind == "state":
                target.next_iter_state = None  # the state loaded for the failed iterator: not for the next epoch
            if remaining is not None:
                windowed.put_back(remaining)
            self.fail(exc)
            return None
        self.running = setting
        self.opened(new)
        windowed.recorded = remaining
        shutdown = getattr(old, "_shutdown_workers", None)
        if shutdown is not None and old is not target.__dict__.get("_iterator"):
            with contextlib.suppress(Exception):
                shutdown()
        return new


def short_error(exc: BaseException) -> str:
    """An error in one line: a worker's re-raised error as its first line and the original's last."""
    lines = [line for line in error_text(exc).splitlines() if line.strip()]
    return lines[0] if len(lines) < 2 else f"{lines[0]} .. {lines[-1].strip()}"

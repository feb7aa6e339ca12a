"""Live tuning on the training thread: each epoch at the setting the policy chose, measured, never raising."""

from __future__ import annotations

import sys
import warnings
from collections import deque
from typing import Any

from collector.errors import CollectorWarning
from collector.record.handover import EpochEnded, Shared
from collector.tune.advisor import Advisor, AdvisorError
from collector.tune.policy import DEFAULT_EVERY, Policy, Proposal, Segment, Setting, setting_json

LOADER_FIELDS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory")


def tune_every(tune: bool | int) -> int | None:
    """``tune=`` as given to watch() and the callbacks: None (off), or at most one epoch in N on a trial."""
    if tune is False or tune is None:
        return None
    if tune is True:
        return DEFAULT_EVERY
    if isinstance(tune, int) and tune >= 2:
        return tune
    raise ValueError(f"tune must be True, False or an integer N >= 2 (at most one epoch in N on a trial), got {tune!r}")


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
        target = _target(loader)
        self.iterable = getattr(target, "_dataset_kind", 0) == 1  # torch's _DatasetKind.Iterable
        self.policy = Policy(start=setting_of(target), every=every, fixed_workers=self.iterable)
        self.notes: list[str] = []
        if self.iterable:
            self.notes.append(
                "an IterableDataset shards its data by worker, so the tuner never changes num_workers here"
            )
        self._running: dict[int, tuple[int, Setting, float]] = {}  # epoch -> (iter() ns, setting, wall start)
        self._restore: tuple[Any, Any] | None = None  # NOTE [ The same samples ]

    # -- the training thread ------------------------------------------------

    def before_epoch(self, epoch: int, t_start_ns: int, wall_now: float) -> str | None:
        """Put the loader at this epoch's setting; its stored form (epochs.setting), or None once tuning failed."""
        if self.failed is not None:
            return None
        try:
            if self.advisor is None:
                self.advisor = Advisor()
            answer = self.advisor.poll()
            proposal = answer if isinstance(answer, Proposal) else None
            if isinstance(answer, str):
                self.policy.nothing_pays(answer)
            setting, trial = self.policy.next_setting(proposal)
            apply(self.loader, setting)
            self._keep_the_seed_stream(epoch)
            self._running[epoch] = (t_start_ns, setting, wall_now)
            return setting_json(setting, trial=trial is not None)
        except Exception as exc:  # noqa: BLE001 - the tuner's boundary: never an exception in the loop
            self.fail(exc)
            return None

    def ended(self, event: EpochEnded, wall_now: float) -> None:
        """An epoch's end (its last next()): measure it, record a trial, ask about the next."""
        running = self._running.pop(event.epoch, None)
        if self.failed is not None or running is None or event.batches <= 0:
            return
        try:
            t_start_ns, setting, wall_start = running
            segment = Segment(
                epoch=event.epoch,
                start_idx=0,
                batches=event.batches,
                seconds=max(0.0, (event.t_ns - t_start_ns) / 1e9),
                started_at=wall_start,
                ended_at=wall_now,
            )
            trial = self.policy.measured(segment, setting)
            if trial is not None:
                self.shared.trials.append(trial.row())
                if not trial.kept:
                    apply(self.loader, self.policy.current)  # back now: persistent workers would keep the trial's
            run_id = self._run_id()
            if self.advisor is not None and run_id is not None and self.policy.wants_proposal():
                tried = sorted(self.policy.tried, key=repr)
                self.advisor.ask(self.db, run_id, event.epoch, self.policy.current, tried, self.iterable)
        except Exception as exc:  # noqa: BLE001 - the tuner's boundary
            self.fail(exc)

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
        target = _target(self.loader)
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


def setting_of(loader: Any) -> Setting:
    """The loader's setting now, and torch's intra-op threads."""
    torch = sys.modules.get("torch")
    threads = int(torch.get_num_threads()) if torch is not None else 1
    workers = int(getattr(loader, "num_workers", 0) or 0)
    return Setting(
        num_workers=workers,
        threads=threads,
        prefetch_factor=getattr(loader, "prefetch_factor", None) if workers else None,
        persistent_workers=bool(getattr(loader, "persistent_workers", False)),
        pin_memory=bool(getattr(loader, "pin_memory", False)),
    ).but()


def apply(loader: Any, setting: Setting) -> None:
    """Put a DataLoader at ``setting`` between epochs: its workers ended where they would keep the old one.

    Only the four loader fields and torch's threads change; the user's
    sampler, generator, worker_init_fn, collate_fn and multiprocessing
    context stay as they are. Persistent workers of another setting are
    shut down first (DataLoader itself keeps them across iter()).
    """
    target = _target(loader)
    now = setting_of(target)
    if now.threads != setting.threads:
        sys.modules["torch"].set_num_threads(setting.threads)
    if now.but(threads=setting.threads) == setting:
        return
    iterator = target.__dict__.get("_iterator")
    if iterator is not None:
        target.__dict__["_iterator"] = None
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
    values = {
        "num_workers": setting.num_workers,
        "prefetch_factor": setting.prefetch_factor if setting.num_workers else None,
        "persistent_workers": setting.persistent_workers and setting.num_workers > 0,
        "pin_memory": setting.pin_memory,
    }
    target.__dict__.update(values)  # past DataLoader.__setattr__, which refuses persistent_workers after __init__


def _target(loader: Any) -> Any:
    """The DataLoader itself behind a session's weak stand-in (NOTE [ Weak loader ])."""
    unwrap = getattr(type(loader), "_target", None)
    return unwrap(loader) if unwrap is not None else loader

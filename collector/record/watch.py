"""The public face of the collector: ``watch`` and the loader it returns."""

from __future__ import annotations

import os
import sys
import time
import weakref
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any, NoReturn

from collector.errors import unknown_keywords
from collector.record.live import LogFn, check_log, prepare_reading
from collector.record.origin import user_frame
from collector.record.runinfo import generated_name
from collector.record.session import READY_TIMEOUT_S, Session
from collector.record.worker_timing import TimingRings
from collector.sample.sampler import DEFAULT_GPU_HZ, DEFAULT_HOST_HZ, Rates
from collector.store.fold import DEFAULT_KEEP_BATCHES
from collector.store.schema import DEFAULT_DB, default_db_path
from collector.tune.every import tune_every


class WatchedLoader:
    """What ``watch`` returns: iterating it records one epoch. Adds ``run_id``, ``loader``, ``close`` and ``with``.

    For a torch DataLoader it is a DataLoader itself: see NOTE [ Watched DataLoader ].
    """

    _stallwatch_session: Session | None
    _stallwatch_loader: Any

    def __iter__(self) -> Iterator[Any]:
        called_ns = time.perf_counter_ns()  # a first iter() starts the session: NOTE [ The collector's own time ]
        return self._stallwatch_start().epoch(called_ns, owner=self)

    def _stallwatch_start(self) -> Session:
        session = self._stallwatch_session
        assert session is not None
        return session

    @property
    def run_id(self) -> int | None:
        """The run's id in the file, once the monitor has created it (None before a rebuilt loader iterates)."""
        session = getattr(self, "_stallwatch_session", None)
        if session is None:
            return None
        return session.run_id(READY_TIMEOUT_S)

    @property
    def loader(self) -> Any:
        return self._stallwatch_loader

    def close(self) -> None:
        """Flush the last records and mark the run completed (or crashed). Idempotent."""
        session = getattr(self, "_stallwatch_session", None)
        if session is not None:
            session.close()

    def __enter__(self) -> WatchedLoader:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        session = getattr(self, "_stallwatch_session", None)
        if session is None:
            return
        if value is not None:
            session.fail(value)
        session.close()

    def __repr__(self) -> str:
        session = getattr(self, "_stallwatch_session", None)
        db = None if session is None else session.monitor.db_path
        return f"watch({self._stallwatch_loader!r}, db={db!r})"


class _WatchedIterable(WatchedLoader):
    """Any other iterable, recorded: iterates, measures and forwards everything else."""

    def __init__(self, loader: Any, session: Session) -> None:
        self._stallwatch_loader = loader
        self._stallwatch_session = session
        weakref.finalize(self, session.close_soon)  # let go of, and no epoch left iterating: the run ends

    def __len__(self) -> int:
        return len(self._stallwatch_loader)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name.startswith("_stallwatch"):
            raise AttributeError(name)
        return getattr(self._stallwatch_loader, name)


# NOTE [ Watched DataLoader ]
# Frameworks test isinstance(x, DataLoader): Lightning calls iter() once on
# anything else (a phantom epoch that draws from the RNG) and injects no
# DistributedSampler into it, so every rank would train on the whole data.
# So a watched DataLoader is a DataLoader: an instance of a subclass of the
# loader's own class, made per watch() call, that shares the original's
# __dict__ (every attribute, Lightning's saved init arguments included, is
# the original's, and a change through either shows in both) and keeps
# stallwatch's two fields in slots. It adds no __init__, so inspect reads
# the original signature; a framework that rebuilds it (type(x)(*args,
# **kwargs), Lightning's sampler injection) gets a fresh instance of the
# same subclass, which records its own run, under the same name, when it is
# first iterated. Its class name is the original's, for the stored config.


class _WatchedDataLoader(WatchedLoader):
    __slots__ = ("_stallwatch_loader", "_stallwatch_session")
    _stallwatch_spec: _Spec

    def _stallwatch_start(self) -> Session:
        session = getattr(self, "_stallwatch_session", None)
        if session is None:  # the first iter(); or a loader a framework built from the watched one
            session = type(self)._stallwatch_spec.session(self)
            _set(self, session, getattr(self, "_stallwatch_loader", self))
            weakref.finalize(self, session.close_soon)  # the session holds this loader weakly: NOTE [ Weak loader ]
        return session

    @property
    def run_id(self) -> int | None:
        """The run's id in the file (the run starts with the first iteration, or now)."""
        session = self._stallwatch_start()
        return session.run_id(READY_TIMEOUT_S)


class _Spec:
    """What a watch() call records with, kept on its subclass so rebuilt loaders record alike."""

    def __init__(self, db: str, name: str, rates: Rates, tags: dict[str, Any], monitor_kwargs: dict[str, Any]) -> None:
        self.db, self.name, self.rates, self.tags = db, name, rates, tags
        self.monitor_kwargs = {"origin": user_frame(), **monitor_kwargs}  # warnings point at the watch() line
        self.base: Any = object  # the watched loader's own class
        self.rings: TimingRings | None = None  # for the first session: see prepare

    def prepare(self, loader: Any) -> None:
        """At watch(), outside the loop: the work a first iter() would do on the training thread.

        See NOTE [ The collector's own time ] in collector/record/session.py:
        the weak stand-in's module is imported and the workers' timing rings
        (shared memory, 2 ms the first time) are made now, not in the first iter().
        """
        import collector.record.autowatch  # noqa: F401 - imported once, here

        try:
            self.rings = TimingRings.for_loader(loader, self.monitor_kwargs.get("stages", True))
        except OSError:  # no shared memory now: the first iter() tries again
            self.rings = None

    def session(self, twin: Any) -> Session:
        """A session that holds the watched DataLoader weakly, so no cycle keeps its workers for the collector."""
        from collector.record.autowatch import weak_loader  # See NOTE [ Weak loader ]

        kwargs = dict(self.monitor_kwargs)
        rings, self.rings = self.rings, None  # a loader rebuilt from this one makes its own
        custom = kwargs.pop("iterate", None)  # a sweep's, to keep each epoch's iterator
        base_iter: Any = self.base.__iter__
        ref = weakref.ref(twin)

        def iterate(_: Any) -> Iterator[Any]:
            loader = ref()
            original = getattr(loader, "_stallwatch_loader", loader)
            if custom is not None and original is not loader:
                return custom(original)  # the same iterator: the original shares the watched loader's __dict__
            return base_iter(loader)

        stand_in = weak_loader(twin)
        return Session(
            stand_in, self.db, self.name, self.rates, dict(self.tags), iterate=iterate, timing_rings=rings, **kwargs
        )


def _watched_dataloader(loader: Any, spec: _Spec) -> WatchedLoader:
    cls = type(loader)
    spec.base = cls
    namespace = {
        "__slots__": (),
        "_stallwatch_spec": spec,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
    }
    twin_cls = type(cls.__name__, (_WatchedDataLoader, cls), namespace)
    twin: Any = object.__new__(twin_cls)
    object.__setattr__(twin, "__dict__", loader.__dict__)  # See NOTE [ Watched DataLoader ], and _set
    _set(twin, None, loader)  # the run starts at the first iter(), with the configuration then
    return twin


def _set(twin: Any, session: Session | None, loader: Any) -> None:
    # Past DataLoader.__setattr__: Lightning wraps it inside *_dataloader() hooks and replays every
    # assignment on the loaders it rebuilds, which would hand them this loader's session.
    object.__setattr__(twin, "_stallwatch_session", session)
    object.__setattr__(twin, "_stallwatch_loader", loader)


def _is_dataloader_class(cls: type) -> bool:
    data = sys.modules.get("torch.utils.data")
    return data is not None and issubclass(cls, data.DataLoader)


NODES_NOTE = (
    "{name} (torchdata.nodes) runs its workers as threads inside its node graph, where no queue is exposed: queue "
    "depth (ready, in_flight) and worker fields (worker_id, worker_pid, the workers' fetch timings) are not recorded"
    "; batches, waits and steps are"
)
WATCH_KEYWORDS = ("db", "run", "gpu_hz", "host_hz", "tags", "keep_batches", "tune", "log", "stages")


def watch(
    loader: Any,
    db: str | os.PathLike[str] | None = None,
    run: str | None = None,
    *,
    gpu_hz: float = DEFAULT_GPU_HZ,
    host_hz: float = DEFAULT_HOST_HZ,
    tags: Mapping[str, Any] | None = None,
    keep_batches: int | None = DEFAULT_KEEP_BATCHES,
    tune: bool | int = False,
    log: LogFn | None = None,
    stages: bool = True,
    **unknown: NoReturn,
) -> WatchedLoader:
    """Wrap ``loader`` so every batch's wait is recorded into a SQLite file.

    ``db`` defaults to ``$STALLWATCH_DB`` or ``stallwatch.sqlite`` in the working
    directory; ``run`` to a generated readable name. ``gpu_hz`` and ``host_hz``
    set the background sampling rates (0 turns one off); ``tags`` are stored
    with the run. ``keep_batches``: rows kept, the newest and the first epoch's;
    older ones fold into rollups (None: all; docs/long-runs.md). ``tune=True``
    tries the model's advice live and keeps what measures faster; N >= 2: at
    most one epoch in N on a trial (docs/tuning.md). Bad arguments raise here;
    nothing the collector does later ever raises into the loop.

    ``stages=False`` stops timing where each worker's fetch time goes (docs/recording.md).
    ``log(metrics, step)`` gets the run's figures every 5 s and at its end, from
    stallwatch's thread (``stallwatch/waiting_for_data``, ``wait_ms``, ...; step:
    batches so far); one that raises is warned about once and dropped. E.g.
    ``log=lambda m, step: wandb.log(m, step=step)``: docs/trackers.md.
    """
    if unknown:
        raise TypeError(unknown_keywords("watch", unknown, WATCH_KEYWORDS))
    every = tune_every(tune)
    if not isinstance(stages, bool):
        raise TypeError(f"stages must be True or False, got {stages!r}")
    extra: dict[str, Any] = {k: v for k, v in (("tune", every), ("log", log)) if v}
    if stages is False:
        extra["stages"] = False
    return watch_with(loader, db, run, gpu_hz=gpu_hz, host_hz=host_hz, tags=tags, keep_batches=keep_batches, **extra)


def watch_with(
    loader: Any,
    db: str | os.PathLike[str] | None = None,
    run: str | None = None,
    *,
    gpu_hz: float = DEFAULT_GPU_HZ,
    host_hz: float = DEFAULT_HOST_HZ,
    tags: Mapping[str, Any] | None = None,
    keep_batches: int | None = DEFAULT_KEEP_BATCHES,
    **session_kwargs: Any,
) -> WatchedLoader:
    """``watch``, also taking the Session's and the Monitor's parameters: a sweep's ``iterate``, tests' fakes."""
    try:
        iter_method = type(loader).__iter__
    except AttributeError:
        iter_method = None
    if iter_method is None or isinstance(loader, (str, bytes)):
        raise TypeError(
            f"watch() needs an iterable such as a torch DataLoader, got {type(loader).__name__}: "
            "pass the DataLoader itself, e.g. watch(train_loader)"
        )
    if isinstance(loader, WatchedLoader):
        raise TypeError("this loader is already watched: pass the original DataLoader once")
    path = os.fspath(db) if db is not None else default_db_path()
    if not isinstance(path, str) or not path:
        raise TypeError(f"db must be a file path, got {db!r}")
    if os.path.isdir(path):
        raise ValueError(f"db={path!r} is a directory: pass a file path such as {os.path.join(path, DEFAULT_DB)!r}")
    if run is not None and (not isinstance(run, str) or not run.strip()):
        raise ValueError(f"run must be a non-empty string naming the run, got {run!r}")
    rates = Rates(gpu_hz=gpu_hz, host_hz=host_hz, keep_batches=keep_batches)
    if tags is not None and not isinstance(tags, Mapping):
        raise TypeError(
            f"tags must be a mapping of names to values, e.g. tags={{'lr': 0.1}}, got {type(tags).__name__}"
        )
    if session_kwargs.get("log") is not None:
        check_log(session_kwargs["log"])
        prepare_reading()  # NOTE [ Log on the monitor thread ] in collector/record/live.py
    name = run if run is not None else generated_name(int(time.time() * 1000) ^ os.getpid())
    spec = _Spec(path, name, rates, dict(tags or {}), session_kwargs)
    if _is_dataloader_class(type(loader)):
        spec.prepare(loader)
        return _watched_dataloader(loader, spec)
    session = Session(loader, path, name, rates, dict(tags or {}), **session_kwargs)
    if getattr(loader, "base_dataloader", None) is not None:  # accelerate's DataLoaderShard and its kin
        session.monitor.warn(
            "wrapped-loader",
            f"{type(loader).__name__} iterates its own generator around a DataLoader, so worker and queue fields "
            "are not recorded: record it with `python -m collector run` or the Hugging Face callback "
            "(collector.hf.StallwatchCallback), which record the DataLoader inside it",
        )
    if type(loader).__module__.startswith("torchdata.nodes"):
        session.monitor.note("nodes-fields", NODES_NOTE.format(name=type(loader).__name__))
    return _WatchedIterable(loader, session)

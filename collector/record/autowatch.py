"""Record every DataLoader of an unmodified script: ``DataLoader`` patched for ``collector run``."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from collector.errors import CollectorWarning
from collector.record import frameworks
from collector.record.family_patch import FamilyPatch
from collector.record.live import LogFn
from collector.record.origin import PACKAGE_DIR
from collector.record.session import Session
from collector.sample.sampler import Rates

active: AutoWatch | None = None  # the one installed, if any: see AutoWatch.install


class _WeakLoader:
    """Stands in for the loader inside its Session, holding it weakly. See NOTE [ Weak loader ].

    Built per loader class by ``weak_loader`` so ``type(x).__name__`` still
    reads ``DataLoader`` in the run's stored configuration.
    """

    def __init__(self, loader: Any) -> None:
        object.__setattr__(self, "_stallwatch_ref", weakref.ref(loader))

    def _target(self) -> Any:
        loader = object.__getattribute__(self, "_stallwatch_ref")()
        if loader is None:
            raise ReferenceError("the DataLoader is gone")
        return loader

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target(), name, value)

    def __len__(self) -> int:
        return len(self._target())


# NOTE [ Weak loader ]
# A Session keeps its loader, and a script may build a new DataLoader every
# epoch. Holding each loader (and so its dataset) until the script ends could
# run the machine out of memory, so the Session gets a weak stand-in, and the
# run is closed (flushed, marked completed) when the script lets go of the loader.


def weak_loader(loader: Any) -> Any:
    cls = type(type(loader).__name__, (_WeakLoader,), {})
    return cls(loader)


def _ids(sessions: list[tuple[str, Session]]) -> list[tuple[str, int | None]]:
    out = []
    for name, session in sessions:
        out.append((name, session.run_id(10.0)))
    return out


class AutoWatch:
    """Patches ``__init__`` (to learn where each loader is created) and ``__iter__`` (to record it) of
    DataLoader and of every subclass that defines its own: see NOTE [ Overrides ] in family_patch.py."""

    def __init__(
        self,
        db: str,
        rates: Rates | None = None,
        tags: dict[str, Any] | None = None,
        loader_class: type | None = None,
        cwd: str | None = None,
        tune: int | None = None,  # live tuning of every loader it records: see collector/record/tuning.py
        log: LogFn | None = None,  # each run's figures, every window: NOTE [ Log on the monitor thread ]
    ) -> None:
        if loader_class is None:
            from torch.utils.data import DataLoader

            loader_class = DataLoader
        self.db = db
        self.rates = rates or Rates()
        self.tags = dict(tags or {})
        self.cls: Any = loader_class
        self.cwd = cwd or os.getcwd()
        self.tune = tune
        self.log = log
        self.sessions: list[tuple[str, Session]] = []  # (run name, session), in order of first iteration
        self._origins: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._by_loader: weakref.WeakKeyDictionary[Any, Session] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._patch: FamilyPatch | None = None
        self._warned = False

    def install(self) -> None:
        """Patch the classes; a no-op while another AutoWatch has them (``collector run`` with a callback inside)."""
        global active
        if self._patch is not None or active is not None:
            return
        active = self
        self._patch = FamilyPatch(self.cls, {"__init__": self._wrap_init, "__iter__": self._wrap_iter})
        self._patch.install()

    def uninstall(self) -> None:
        global active
        if self._patch is None:
            return
        self._patch.uninstall()
        self._patch = None
        if active is self:
            active = None

    # NOTE [ Invisible patch ]
    # Lightning reads inspect.signature(type(loader).__init__) to rebuild a
    # loader (sampler injection, predict), and wraps __init__ itself to save
    # its arguments: functools.wraps keeps the name, the docstring and,
    # through __wrapped__, the signature that inspect reports. The wrapper's
    # first argument is named self, as the method's, so origin() steps over
    # it with the other __init__ frames of the loader being built.

    def _wrap_init(self, original_init: Callable[..., None]) -> Callable[..., None]:
        auto = self

        @functools.wraps(original_init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original_init(self, *args, **kwargs)
            auto._origins[self] = auto.origin(sys._getframe(1), self)  # a subclass's outer __init__ sets it last

        return __init__

    # NOTE [ Outermost override ]
    # A subclass's __iter__ that calls super().__iter__() (at once, or later
    # from a generator) reaches DataLoader's wrapper inside its own: each
    # iteration is recorded once, by the wrapper type(loader).__iter__
    # resolves to, and the ones it reaches pass straight through. Where what
    # type(loader).__iter__ resolves to is not ours (a mixin's __iter__,
    # outside the family), the first wrapper of ours it calls records.

    def _wrap_iter(self, original_iter: Callable[[Any], Iterator[Any]]) -> Callable[[Any], Iterator[Any]]:
        auto = self

        @functools.wraps(original_iter)
        def __iter__(loader: Any) -> Iterator[Any]:
            called_ns = time.perf_counter_ns()  # NOTE [ The collector's own time ] in collector/record/session.py
            patch = auto._patch
            outer = type(loader).__iter__
            if patch is None or (outer is not __iter__ and patch.is_ours(outer)):
                return original_iter(loader)  # See NOTE [ Outermost override ]
            session = auto._session_for(loader, original_iter, sys._getframe(1))
            return original_iter(loader) if session is None else session.epoch(called_ns, owner=loader)

        return __iter__

    def close(self) -> None:
        """Flush every run this script made and mark it ended. Idempotent."""
        for _, session in self.sessions:
            session.close()

    def run_ids(self) -> list[tuple[str, int | None]]:
        """(run name, run id) per recorded DataLoader; None where the file could not be written."""
        return _ids(self.sessions)

    def finish(self) -> list[tuple[str, int | None]]:
        """Close the runs so far and forget them, so a loader iterated later starts a new run; their (name, id)."""
        with self._lock:
            sessions, self.sessions = self.sessions, []
            self._by_loader = weakref.WeakKeyDictionary()
        for _, session in sessions:
            session.close()
        return _ids(sessions)

    def origin(self, frame: FrameType | None, loader: Any) -> str:
        """``file:line`` in the user's code that built the loader. See NOTE [ Library frames ].

        A loader a framework rebuilds from another (Lightning's sampler
        injection, accelerate's prepare) takes the origin of the one it came from.
        """
        while frame is not None and frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is loader:
            frame = frame.f_back
        if frame is None:
            return "unknown"
        probe: FrameType | None = frame
        while probe is not None and frameworks.is_library(probe.f_code.co_filename):
            if not probe.f_code.co_filename.startswith(PACKAGE_DIR):
                for value in list(probe.f_locals.values()):
                    if value is not loader and isinstance(value, self.cls) and value in self._origins:
                        return self._origins[value]
            probe = probe.f_back
        return frameworks.user_line(frame, self.cwd) or f"{frame.f_code.co_filename}:{frame.f_lineno}"

    def _session_for(
        self, loader: Any, original_iter: Callable[[Any], Iterator[Any]], caller: FrameType | None
    ) -> Session | None:
        if self._watched_by_user(loader):
            return None  # the script calls watch() itself: that run records it
        with self._lock:
            session = self._by_loader.get(loader)
            if session is not None:
                return session
            origin = self._origins.get(loader) or frameworks.user_line(caller, self.cwd) or "unknown"
            where = frameworks.context(caller)
            name = origin if where.stage is None else f"{origin} {where.stage}"
            ref = weakref.ref(loader)

            def iterate(_: Any) -> Iterator[Any]:
                return original_iter(ref())

            tags = {**self.tags, "origin": origin}
            if where.framework is not None:
                tags["framework"] = where.framework
            try:
                logs: dict[str, Any] = {} if self.log is None else {"log": self.log}
                session = Session(
                    weak_loader(loader),
                    self.db,
                    name,
                    self.rates,
                    tags,
                    iterate=iterate,
                    stage=where.stage,
                    tune=self.tune,
                    **logs,
                )
            except Exception as exc:  # noqa: BLE001 - recording must never break the script
                if not self._warned:
                    self._warned = True
                    with contextlib.suppress(Exception):  # -W error: a warning must not break the script either
                        warnings.warn(f"stallwatch: not recording {name}: {exc}", CollectorWarning, stacklevel=3)
                return None
            self._by_loader[loader] = session
            self.sessions.append((name, session))
            weakref.finalize(loader, session.close_soon)
            return session

    def _watched_by_user(self, loader: Any) -> bool:
        from collector.record.exits import is_watched

        return hasattr(type(loader), "_stallwatch_spec") or is_watched(loader)

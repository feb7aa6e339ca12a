"""Record every DataLoader of an unmodified script: ``DataLoader`` patched for ``collector run``."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from itertools import chain, islice
from types import FrameType
from typing import Any

from collector.errors import CollectorWarning
from collector.record.session import Session
from collector.sample.sampler import Rates


class _WeakLoader:
    """Stands in for the loader inside its Session, holding it weakly. See NOTE [ Weak loader ].

    Built per loader class by ``_weak_loader`` so ``type(x).__name__`` still
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


def _weak_loader(loader: Any) -> Any:
    cls = type(type(loader).__name__, (_WeakLoader,), {})
    return cls(loader)


def _holding(loader: Any, epoch: Iterator[Any]) -> Iterator[Any]:
    """The epoch's batches, keeping the loader alive while they flow (``for b in DataLoader(...)``).

    Built of C iterators only, so no frame is added (NOTE [ Transparent iteration ]).
    """
    return chain(epoch, islice((loader,), 0))


class AutoWatch:
    """Patches ``DataLoader.__init__`` (to learn where each is created) and ``__iter__`` (to record it)."""

    def __init__(
        self,
        db: str,
        rates: Rates | None = None,
        tags: dict[str, Any] | None = None,
        loader_class: type | None = None,
        cwd: str | None = None,
    ) -> None:
        if loader_class is None:
            from torch.utils.data import DataLoader

            loader_class = DataLoader
        self.db = db
        self.rates = rates or Rates()
        self.tags = dict(tags or {})
        self.cls: Any = loader_class
        self.cwd = cwd or os.getcwd()
        self.sessions: list[tuple[str, Session]] = []  # (origin, session), in order of first iteration
        self._origins: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._by_loader: weakref.WeakKeyDictionary[Any, Session] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._originals: tuple[Callable[..., Any], Callable[..., Any]] | None = None
        self._warned = False

    def install(self) -> None:
        if self._originals is not None:
            return
        original_init = self.cls.__init__
        original_iter: Callable[[Any], Iterator[Any]] = self.cls.__iter__
        self._originals = (original_init, original_iter)
        auto = self

        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            original_init(loader, *args, **kwargs)
            auto._origins[loader] = auto.origin(sys._getframe(1), loader)

        def __iter__(loader: Any) -> Iterator[Any]:
            session = auto._session_for(loader, original_iter)
            return original_iter(loader) if session is None else _holding(loader, session.epoch())

        self.cls.__init__ = __init__
        self.cls.__iter__ = __iter__

    def uninstall(self) -> None:
        if self._originals is None:
            return
        self.cls.__init__, self.cls.__iter__ = self._originals
        self._originals = None

    def close(self) -> None:
        """Flush every run this script made and mark it ended. Idempotent."""
        for _, session in self.sessions:
            session.close()

    def run_ids(self) -> list[tuple[str, int | None]]:
        """(origin, run id) per recorded DataLoader; None where the file could not be written."""
        out = []
        for origin, session in self.sessions:
            session.monitor.ready.wait(10.0)
            out.append((origin, session.monitor.run_id))
        return out

    def origin(self, frame: FrameType | None, loader: Any) -> str:
        """``file:line`` of the ``DataLoader(...)`` call, skipping subclasses' ``__init__`` chain."""
        while frame is not None and frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is loader:
            frame = frame.f_back
        if frame is None:
            return "unknown"
        path = frame.f_code.co_filename
        try:
            rel = os.path.relpath(path, self.cwd)
            path = path if rel.startswith("..") else rel
        except ValueError:  # another drive on Windows
            pass
        return f"{path}:{frame.f_lineno}"

    def _session_for(self, loader: Any, original_iter: Callable[[Any], Iterator[Any]]) -> Session | None:
        if self._watched_by_user(loader):
            return None  # the script calls watch() itself: that run records it
        with self._lock:
            session = self._by_loader.get(loader)
            if session is not None:
                return session
            origin = self._origins.get(loader, "unknown")
            ref = weakref.ref(loader)

            def iterate(_: Any) -> Iterator[Any]:
                return original_iter(ref())

            tags = {**self.tags, "origin": origin}
            try:
                session = Session(_weak_loader(loader), self.db, origin, self.rates, tags, iterate=iterate)
            except Exception as exc:  # noqa: BLE001 - recording must never break the script
                if not self._warned:
                    self._warned = True
                    with contextlib.suppress(Exception):  # -W error: a warning must not break the script either
                        warnings.warn(f"stallwatch: not recording {origin}: {exc}", CollectorWarning, stacklevel=3)
                return None
            self._by_loader[loader] = session
            self.sessions.append((origin, session))
            weakref.finalize(loader, session.close_soon)
            return session

    def _watched_by_user(self, loader: Any) -> bool:
        from collector.record.session import is_watched

        return is_watched(loader)

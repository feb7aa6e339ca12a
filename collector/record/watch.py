"""The public face of the collector: ``watch`` and the loader it returns."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any

from collector.record.runinfo import generated_name
from collector.record.session import READY_TIMEOUT_S, Session
from collector.sample.sampler import Rates
from collector.store.schema import DEFAULT_DB, default_db_path


class WatchedLoader:
    """The user's loader, recorded. Iterates, measures and forwards everything else."""

    def __init__(self, loader: Any, session: Session) -> None:
        self._loader = loader
        self._session = session

    def __iter__(self) -> Iterator[Any]:
        return self._session.epoch()

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._loader, name)

    @property
    def run_id(self) -> int | None:
        """The run's id in the file, once the monitor has created it."""
        self._session.monitor.ready.wait(READY_TIMEOUT_S)
        return self._session.monitor.run_id

    @property
    def loader(self) -> Any:
        return self._loader

    def close(self) -> None:
        """Flush the last records and mark the run completed (or crashed). Idempotent."""
        self._session.close()

    def __enter__(self) -> WatchedLoader:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        if value is not None:
            self._session.fail(value)
        self._session.close()

    def __repr__(self) -> str:
        return f"watch({self._loader!r}, db={self._session.monitor.db_path!r})"


def watch(
    loader: Any,
    db: str | os.PathLike[str] | None = None,
    run: str | None = None,
    *,
    gpu_hz: float = 10.0,
    host_hz: float = 2.0,
    tags: Mapping[str, Any] | None = None,
    **monitor_kwargs: Any,
) -> WatchedLoader:
    """Record every batch ``loader`` hands to the training loop into a SQLite file.

    ``db`` defaults to ``$STALLWATCH_DB`` or ``stallwatch.sqlite`` in the working
    directory; ``run`` to a generated readable name. ``gpu_hz`` and ``host_hz``
    set the background sampling rates (0 turns one off). Bad arguments raise
    here; nothing the collector does later ever raises into the loop.
    """
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
    rates = Rates(gpu_hz=gpu_hz, host_hz=host_hz)
    if tags is not None and not isinstance(tags, Mapping):
        raise TypeError(
            f"tags must be a mapping of names to values, e.g. tags={{'lr': 0.1}}, got {type(tags).__name__}"
        )
    name = run if run is not None else generated_name(int(time.time() * 1000) ^ os.getpid())
    session = Session(loader, path, name, rates, dict(tags or {}), **monitor_kwargs)
    return WatchedLoader(loader, session)

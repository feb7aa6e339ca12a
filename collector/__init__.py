"""stallwatch's collector: ``watch`` a DataLoader, record its stalls, ``diagnose`` them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from collector.watcher import WatchedLoader


def watch(loader: Any, db: Any = None, run: str | None = None, **kwargs: Any) -> WatchedLoader:
    """Wrap ``loader`` so every batch's wait is recorded. See ``collector.watcher.watch``."""
    from collector.watcher import watch as _watch

    return _watch(loader, db, run, **kwargs)

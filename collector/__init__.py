"""stallwatch's collector: ``watch`` a DataLoader, record its stalls, ``diagnose`` them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from collector.diagnosis.findings import Report
    from collector.record.watch import WatchedLoader


def watch(loader: Any, db: Any = None, run: str | None = None, **kwargs: Any) -> WatchedLoader:
    """Wrap ``loader`` so every batch's wait is recorded. See ``collector.record.watch.watch``."""
    from collector.record.watch import watch as _watch

    return _watch(loader, db, run, **kwargs)


def diagnose(db: Any, run: Any = "latest", **kwargs: Any) -> Report:
    """Diagnose a recorded run: verdict, symptoms, suggestions. See ``collector.diagnosis.diagnose``."""
    from collector.diagnosis import diagnose as _diagnose

    return _diagnose(db, run, **kwargs)

"""stallwatch's collector: ``watch`` a DataLoader, record its stalls, ``diagnose`` them.

Importing the package starts nothing and imports neither torch nor pandas:
each entry point imports its stage when called.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from collector.errors import CollectorWarning
from collector.version import __version__

if TYPE_CHECKING:
    from collector.diagnosis.findings import Report
    from collector.record.watch import WatchedLoader
    from collector.store.reader import Reader

WATCH_KEYWORDS = ("db", "run", "gpu_hz", "host_hz", "tags")
__all__ = ["CollectorWarning", "__version__", "diagnose", "watch"]


def watch(
    loader: Any,
    db: str | os.PathLike[str] | None = None,
    run: str | None = None,
    *,
    gpu_hz: float = 10.0,
    host_hz: float = 2.0,
    tags: Mapping[str, Any] | None = None,
    **unknown: NoReturn,
) -> WatchedLoader:
    """Wrap ``loader`` so every batch's wait is recorded into a SQLite file.

    ``db`` defaults to ``$STALLWATCH_DB`` or ``stallwatch.sqlite`` in the working
    directory; ``run`` to a generated readable name. ``gpu_hz`` and ``host_hz``
    set the background sampling rates (0 turns one off); ``tags`` are stored
    with the run. Bad arguments raise here; nothing the collector does later
    ever raises into the loop. See ``collector.record.watch.watch``.
    """
    if unknown:
        raise TypeError(unknown_keywords("watch", unknown, WATCH_KEYWORDS))
    from collector.record.watch import watch as _watch

    return _watch(loader, db, run, gpu_hz=gpu_hz, host_hz=host_hz, tags=tags)


def unknown_keywords(function: str, given: Mapping[str, Any], valid: tuple[str, ...]) -> str:
    """The TypeError text for misspelled keywords: the function, the closest valid name, all valid names."""
    import difflib

    name = sorted(given)[0]
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{function}() got an unexpected keyword argument {name!r}{hint}; its keywords are {', '.join(valid)}"


def diagnose(
    db: str | os.PathLike[str] | Reader,
    run: str | int | None = "latest",
    *,
    window_s: float | None = None,
    last_batches: int | None = None,
    live: bool = False,
) -> Report:
    """Diagnose a recorded run: verdict, symptoms, suggestions. See ``collector.diagnosis.diagnose``."""
    from collector.diagnosis import diagnose as _diagnose

    return _diagnose(db, run, window_s=window_s, last_batches=last_batches, live=live)

"""Every public error and warning: raised to callers of the API and the CLI, never inside a training loop."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class StallwatchError(Exception):
    """Base class: a problem the user can fix, with a one-line message saying how."""


class NotAStallwatchFile(StallwatchError):
    """The path is missing, empty, not SQLite, corrupt, or another program's database."""


class CannotRead(NotAStallwatchFile):
    """The file may be fine, but this user or this storage cannot open it: no read permission, read-only media."""


class CannotWrite(StallwatchError):
    """The file cannot be written: its directory is missing, no permission, a full disk, read-only storage."""


class SchemaTooNew(StallwatchError):
    """The file was written by a newer stallwatch than this one."""


class UnknownRun(StallwatchError):
    """No run in the file matches the name or id asked for."""


class DamagedRun(StallwatchError):
    """A run of the file holds a value no stallwatch writes (a wrong type, NaN, infinity, an impossible count)."""


class QueryTooSlow(StallwatchError):
    """A query ran past the reader's time limit: a damaged or hand-edited file (NOTE [ Values from a file ])."""


class InsufficientData(StallwatchError):
    """The run has too few batches to say anything yet."""


class RunInProgress(StallwatchError):
    """The run is still being recorded; diagnose it live (``live=True``) or wait for it to end."""


class FactoryNotFound(StallwatchError):
    """The factory spec names no importable module or no function in it."""


class CollectorWarning(RuntimeWarning):
    """Something the collector could not record; training goes on unaffected."""


def unknown_keywords(function: str, given: Mapping[str, Any], valid: tuple[str, ...]) -> str:
    """The TypeError text for misspelled keywords: the function, the closest valid name, all valid names."""
    import difflib

    name = sorted(given)[0]
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{function}() got an unexpected keyword argument {name!r}{hint}; its keywords are {', '.join(valid)}"

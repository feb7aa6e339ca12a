"""How the process's end reaches its open runs: the open sessions, ``sys.excepthook`` and ``atexit``.

See NOTE [ How a run ends ] in collector/record/session.py.
"""

from __future__ import annotations

import atexit
import sys
import threading
import traceback
import weakref
from types import TracebackType
from typing import Any, Protocol

SIGINT_EXIT = 130  # what a shell reports for a process ended by Ctrl-C


class Open(Protocol):
    """A recording session, as the process's end sees it."""

    loader: Any

    def fail(self, exc: BaseException, process_ends: bool = False) -> None: ...

    def close(self) -> None: ...


# Weak: a session nothing holds any more (its loader and every epoch let go
# of) has closed itself already (watch.py, autowatch.py).
_open_sessions: weakref.WeakSet[Open] = weakref.WeakSet()
_hooks_lock = threading.Lock()
_hooks_installed = False


def register(session: Open) -> None:
    _open_sessions.add(session)
    _install_process_hooks()


def unregister(session: Open) -> None:
    _open_sessions.discard(session)


def is_watched(loader: Any) -> bool:
    """True while an open ``watch`` session records ``loader``."""
    return any(session.loader is loader for session in list(_open_sessions))


def _install_process_hooks() -> None:
    """Once per process: mark runs crashed on an uncaught exception, close them at exit."""
    global _hooks_installed
    with _hooks_lock:
        if _hooks_installed:
            return
        _hooks_installed = True
        previous = sys.excepthook

        def excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
            process_ends(value)
            previous(kind, value, tb)

        sys.excepthook = excepthook
        atexit.register(close_all)


def process_ends(exc: BaseException) -> None:
    """``exc`` is about to end the process: every open run records how (NOTE [ How a run ends ])."""
    for session in list(_open_sessions):
        session.fail(exc, process_ends=True)


def error_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def exit_code(exc: SystemExit) -> int:
    """The status ``sys.exit(code)`` gives the process, as Python computes it."""
    if exc.code is None:
        return 0
    return exc.code if isinstance(exc.code, int) else 1


def close_all() -> None:
    for session in list(_open_sessions):
        session.close()

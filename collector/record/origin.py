"""Where the collector's warnings point: the user's line that started the recording."""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

from collector.errors import CollectorWarning

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # collector/
_WARNING_REGISTRIES: dict[str, dict[Any, Any]] = {}  # file -> its __warningregistry__ for our warnings


def user_frame() -> tuple[str, int]:
    """(file, line) of the innermost caller outside this package: most often the line calling watch().

    Where only the interpreter's own frames are outside (``python -m collector``),
    the outermost frame of the package.
    """
    frame = last = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(PACKAGE_DIR):
            if not filename.startswith("<"):
                return filename, frame.f_lineno
        else:
            last = frame
        frame = frame.f_back  # type: ignore[assignment]
    return last.f_code.co_filename, last.f_lineno


def warn_at(origin: tuple[str, int], message: str) -> None:
    """A CollectorWarning shown as raised at ``origin`` (file, line).

    Most warnings come from the monitor thread, where no line of the user's is
    on the stack; as for any warning, the default filter shows each once per
    process and line (a sweep's trials warn once). Under ``-W error`` the
    warning is not shown, and nothing is raised: it is still stored with the run.
    """
    filename, lineno = origin
    try:
        warnings.warn_explicit(
            f"stallwatch: {message}",
            CollectorWarning,
            filename,
            lineno,
            registry=_WARNING_REGISTRIES.setdefault(filename, {}),
        )
    except Exception:  # noqa: BLE001 - warnings turned into errors (-W error) must not stop the recording
        pass

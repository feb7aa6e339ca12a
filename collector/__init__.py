"""stallwatch's collector: ``watch`` a DataLoader, record its stalls, ``diagnose`` them.

Importing the package starts nothing and imports neither torch nor pandas:
``watch`` (collector/record/watch.py) and ``diagnose`` (collector/diagnosis/diagnose.py)
are imported from their stages on first use, and ``diagnose`` imports pandas only when called.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from collector.errors import CollectorWarning
from collector.version import __version__

if TYPE_CHECKING:
    from collector.diagnosis.diagnose import diagnose
    from collector.record.watch import watch

__all__ = ["CollectorWarning", "__version__", "diagnose", "watch"]
_HOMES = {"watch": "collector.record.watch", "diagnose": "collector.diagnosis.diagnose"}


def __getattr__(name: str) -> Any:
    """``watch`` or ``diagnose`` from its stage, imported now (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)

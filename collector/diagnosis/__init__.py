"""Diagnosis: pure rules over a run's recorded tables that name its stalls and suggest DataLoader settings.

Importing the package imports no pandas (``collector.diagnose`` is its ``diagnose``, which imports the
rules when called); its other names are imported from their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from collector.diagnosis.diagnose import diagnose

if TYPE_CHECKING:
    from collector.diagnosis.assemble import diagnose_data
    from collector.diagnosis.data import RunData, RunInProgress, load_run
    from collector.diagnosis.job import diagnose_job
    from collector.diagnosis.loaders import diagnose_loaders

__all__ = ["RunData", "RunInProgress", "diagnose", "diagnose_data", "diagnose_job", "diagnose_loaders", "load_run"]
_HOMES = {
    "RunData": "data",
    "RunInProgress": "data",
    "load_run": "data",
    "diagnose_data": "assemble",
    "diagnose_job": "job",
    "diagnose_loaders": "loaders",
}


def __getattr__(name: str) -> Any:
    """A name of ``__all__`` from its module, imported now (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)

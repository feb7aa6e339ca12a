"""``diagnose``, the public entry: read a run and diagnose it, importing pandas and the rules only when called."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collector.diagnosis.report_types import Report
    from collector.store.reader import Reader


def diagnose(
    db: str | os.PathLike[str] | Reader,
    run: str | int | None = "latest",
    *,
    window_s: float | None = None,
    last_batches: int | None = None,
    live: bool = False,
) -> Report:
    """Diagnose one run of a stallwatch file: verdict, symptoms with evidence, suggestions.

    ``run`` is an id, a name or ``"latest"``. ``window_s`` or ``last_batches``
    limit it to the most recent batches (for a live dashboard). A run still
    being recorded raises ``RunInProgress`` unless ``live=True``. Raises
    ``NotAStallwatchFile``, ``SchemaTooNew``, ``UnknownRun`` or
    ``InsufficientData`` (zero or one batch) for input it cannot diagnose.
    """
    from collector.diagnosis.assemble import diagnose_data  # pandas and every rule: never on `import collector`
    from collector.diagnosis.data import load_run

    return diagnose_data(load_run(db, run, window_s=window_s, last_batches=last_batches, live=live))

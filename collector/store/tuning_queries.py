"""What live tuning left in a file: the loader's setting now."""

from __future__ import annotations

import sqlite3
from typing import Any

from collector.store.checked import json_object
from collector.store.export_queries import columns_of


def loader_setting(conn: sqlite3.Connection, run_id: int) -> dict[str, Any] | None:
    """A tuned run's setting now: its newest epoch's (NOTE [ Live tuning ]); None untuned or before schema 6."""
    if "setting" not in columns_of(conn, "epochs"):
        return None
    row = conn.execute(
        "SELECT setting FROM epochs WHERE run_id = ? AND setting IS NOT NULL ORDER BY epoch DESC LIMIT 1", (run_id,)
    ).fetchone()
    if row is None:
        return None
    return json_object(row[0], "epochs.setting")  # DamagedRun: that run's problem

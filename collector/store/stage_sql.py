"""The worker_stages table: where each worker's fetch time goes, its DDL, its upsert and its query."""

from __future__ import annotations

import sqlite3

# NOTE [ Worker stages ]
# One row a (run, worker id, stage), the stage's totals over the run: the
# writer adds each flush's growth (NOTE [ Stage boards ]) to it, so the table
# stays bounded on a long run (64 stages a worker at most) with nothing to fold.
# Row "fetch" is the timed fetches themselves, whose wall_s every share
# divides by and whose samples every "ms a sample" divides by (NOTE
# [ Stage timing ]). worker_id -1 is the training process (num_workers=0).
STAGES_DDL = (
    "CREATE TABLE IF NOT EXISTS worker_stages ("
    " run_id INTEGER NOT NULL REFERENCES runs(id),"
    " worker_id INTEGER NOT NULL,"  # the DataLoader worker id; -1: the training process
    " stage TEXT NOT NULL,"  # fetch | __getitem__ | transform <position> <class> | PIL decode <format> | ...
    " calls INTEGER NOT NULL,"  # timed calls
    " samples INTEGER NOT NULL,"  # samples in the timed fetches (row fetch); 0 elsewhere
    " wall_s REAL NOT NULL,"  # own wall time, nested stages' taken out
    " cpu_s REAL,"  # own CPU time of the thread that ran it; NULL where not measured (sampled stages)
    " pixels_in REAL,"  # images' pixels going in, summed (transforms); NULL where unknown
    " pixels_out REAL,"  # images' pixels coming out, summed (transforms, decode)
    " updated_at REAL,"
    " PRIMARY KEY (run_id, worker_id, stage)) WITHOUT ROWID"
)
STAGE_COLUMNS = ("worker_id", "stage", "calls", "samples", "wall_s", "cpu_s", "pixels_in", "pixels_out")


def _add(column: str) -> str:
    return (
        f"{column} = CASE WHEN excluded.{column} IS NULL THEN {column} ELSE IFNULL({column}, 0) + excluded.{column} END"
    )


def stage_upsert_sql(run_id: int) -> str:
    """Adds (worker_id, stage, calls, samples, wall_s, cpu_s, pixels_in, pixels_out, updated_at) to the run's rows."""
    added = ", ".join(_add(column) for column in STAGE_COLUMNS[2:])
    return (
        f"INSERT INTO worker_stages VALUES ({int(run_id)}, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        f" ON CONFLICT (run_id, worker_id, stage) DO UPDATE SET {added}, updated_at = excluded.updated_at"
    )


STAGES_SELECT = f"SELECT {', '.join(STAGE_COLUMNS)} FROM worker_stages WHERE run_id = ? ORDER BY worker_id, stage"


def stage_seconds(conn: sqlite3.Connection, run_id: int) -> dict[str, tuple[float, float | None]]:
    """Each stage's (wall_s, cpu_s) over the run's workers, the timed fetches' row "fetch" among them; {} before schema 7."""
    known = conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'worker_stages'")
    if not known.fetchone()[0]:
        return {}
    rows = conn.execute(
        "SELECT stage, SUM(wall_s), SUM(cpu_s) FROM worker_stages WHERE run_id = ? AND stage NOT LIKE 'file %'"
        " GROUP BY stage ORDER BY stage LIMIT 256",
        (int(run_id),),
    ).fetchall()
    return {str(stage): (float(wall or 0.0), None if cpu is None else float(cpu)) for stage, wall, cpu in rows}

"""Rows past a run's window folded into rollups and deleted, inside the writer's transaction: a bounded file."""

from __future__ import annotations

import dataclasses
import itertools
import math
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from collector.store.rollup_sql import (
    BATCH_DELETE,
    BATCH_FOLD,
    FETCH_DELETE,
    FETCH_FOLD,
    PERCENTILES,
    SAMPLE_FOLDS,
    SAMPLE_MINUTE_S,
    SAMPLES,
    TAKEN_WAITS,
)

DEFAULT_KEEP_BATCHES = 100_000  # about 8 minutes at 200 batches/s: NOTE [ Rollups ]
MIN_KEEP_BATCHES = 1_000  # a described record or a GPU idle time still finds its row (NOTE [ Rollups ])
SAMPLE_KEEP_S = 600.0  # samples of the last 10 minutes stay rows, however fast the loop
FETCH_SLACK_S = 60.0  # a fetch is folded this long after the batches around it: its batch's fold still joins it
SIDE_FOLD_EVERY_S = 10.0  # fetches and samples are folded when their cutoff has moved this far
MIN_HANDOFF_BATCHES = 10  # as the diagnosis: ready batches needed for a hand-off estimate

# NOTE [ Rollups ]
# A week at 200 batches/s is 121M batches: 6.9 GB of rows. So the writer keeps
# rows for the most recent ``keep_batches`` batch positions of each run, for
# its first epoch (its first ``keep_batches`` batches at most: a run that is one
# long epoch stays bounded) and for each epoch's first ``head`` batches (its
# start: the diagnosis costs every epoch start from them). Every other batch is
# folded, in the flush's own transaction (all or nothing: a writer killed or a
# disk full mid-fold leaves the rows as they were), into one rollup per epoch
# and Unix second (counts, sums, wait p50/p95/min/max, the stall beyond the
# hand-off, queue depth, the exporter's histogram, its worker fetches), and
# deleted. Only whole seconds are folded: a second is folded once all its
# batches are out of the window. Worker fetches and samples follow
# (per worker and second, per minute) once SAMPLE_KEEP_S and FETCH_SLACK_S have
# passed. Rows stored + rows folded + dropped = handed out (NOTE [ Accounting ]).
# A described record or a GPU idle time for a batch already folded would find
# no row; MIN_KEEP_BATCHES keeps the window well beyond the flushes they come in.


@dataclass
class Folder:
    """One run's window: what its writer keeps as rows, and the fold of the rest (NOTE [ Rollups ]).

    ``keep_batches`` None keeps every row. ``head`` is the batches of each epoch's start, kept.
    """

    run_id: int
    keep_batches: int | None
    head: int = 1
    sizes: dict[int, int] = field(default_factory=dict)  # epoch -> batch positions seen (its last idx + 1)
    first_epoch: int | None = None
    folded_to: tuple[int, int] = (-(2**62), 0)  # every batch below this key is kept or folded
    handoff_s: float = 0.0
    side_cut: float = -math.inf  # where fetches and samples were last folded up to
    floor: float | None = None  # the first epoch's kept rows end here: fetches and samples before stay

    def __call__(self, conn: sqlite3.Connection, now: float) -> int:
        """Fold what is past the window (inside the caller's transaction); the batches folded."""
        if self.keep_batches is None:
            return 0
        self._learn(conn)
        edge = self._edge()
        if edge is None or self.first_epoch is None:
            return 0
        row = conn.execute(
            "SELECT ts FROM batches WHERE run_id = ? AND (epoch, idx) >= (?, ?) ORDER BY epoch, idx LIMIT 1",
            (self.run_id, *edge),
        ).fetchone()
        if row is None:
            return 0
        cut = float(math.floor(row[0]))
        if self.floor is None:
            last = conn.execute(
                "SELECT MAX(ts) FROM batches WHERE run_id = ? AND epoch = ? AND idx < ?",
                (self.run_id, self.first_epoch, self.keep_batches),
            ).fetchone()[0]
            self.floor = math.inf if last is None else float(last)
        params = {
            "run": self.run_id,
            "lo_epoch": self.folded_to[0],
            "lo_idx": self.folded_to[1],
            "hi_epoch": edge[0],
            "hi_idx": edge[1],
            "cut": cut,
            "head": self.head,
            "first": self.first_epoch,
            "first_keep": self.keep_batches,
        }
        taken = conn.execute(TAKEN_WAITS, params).fetchall()
        if not taken:
            return 0
        ready = sorted(wait for _, _, wait, depth in taken if depth is not None and depth > 0)
        if len(ready) >= MIN_HANDOFF_BATCHES:  # else the last fold's (0 without workers: every wait a stall)
            self.handoff_s = float(ready[len(ready) // 2])
        params["handoff"] = self.handoff_s
        conn.execute(BATCH_FOLD, params)
        conn.executemany(PERCENTILES, _percentiles(self.run_id, taken))
        conn.execute(BATCH_DELETE, params)
        last = conn.execute(
            "SELECT epoch, idx FROM batches WHERE run_id = ? AND (epoch, idx) >= (?, ?) AND (epoch, idx) < (?, ?)"
            " AND ts >= ? ORDER BY epoch, idx LIMIT 1",
            (self.run_id, *self.folded_to, *edge, cut),
        ).fetchone()
        self.folded_to = (int(last[0]), int(last[1])) if last is not None else edge
        self._fold_sides(conn, min(cut - FETCH_SLACK_S, now - SAMPLE_KEEP_S))
        return len(taken)

    def copy(self) -> Folder:
        """Its state now, to go back to when the transaction it folds in is rolled back."""
        return dataclasses.replace(self, sizes=dict(self.sizes))

    def _fold_sides(self, conn: sqlite3.Connection, cut: float) -> None:
        """Worker fetches (per worker and second) and samples (per minute) older than ``cut``, every 10 s of it."""
        cut = float(math.floor(cut / SAMPLE_MINUTE_S) * SAMPLE_MINUTE_S)  # whole minutes: each folded once
        if self.floor is None or cut < self.side_cut + SIDE_FOLD_EVERY_S or cut <= self.floor:
            return
        params = {"run": self.run_id, "floor": self.floor, "cut": cut}
        conn.execute(FETCH_FOLD, params)
        conn.execute(FETCH_DELETE, params)
        for table, sql in SAMPLE_FOLDS.items():
            conn.execute(sql, params)
            conn.execute(f"DELETE FROM {table} WHERE {SAMPLES}", params)
        self.side_cut = cut

    def _learn(self, conn: sqlite3.Connection) -> None:
        """Each epoch's batch positions so far, from the file: its largest idx (a fast walk of the key)."""
        if self.first_epoch is None:
            rows = conn.execute(
                "SELECT epoch, MAX(idx) FROM batches WHERE run_id = ? GROUP BY epoch"
                " UNION ALL SELECT epoch, MAX(last_idx) FROM batch_rollups WHERE run_id = ? GROUP BY epoch",
                (self.run_id, self.run_id),
            ).fetchall()
            for epoch, last in rows:
                self.sizes[int(epoch)] = max(self.sizes.get(int(epoch), 0), int(last) + 1)
            if self.sizes:
                self.first_epoch = min(self.sizes)
            return
        newest = conn.execute("SELECT MAX(epoch) FROM batches WHERE run_id = ?", (self.run_id,)).fetchone()[0]
        if newest is None:
            return
        for epoch in range(max(self.sizes), int(newest) + 1):
            last = conn.execute(
                "SELECT MAX(idx) FROM batches WHERE run_id = ? AND epoch = ?", (self.run_id, epoch)
            ).fetchone()[0]
            if last is not None:
                self.sizes[epoch] = max(self.sizes.get(epoch, 0), int(last) + 1)

    def _edge(self) -> tuple[int, int] | None:
        """The key of the oldest batch position in the window; None while the run is shorter than the window."""
        assert self.keep_batches is not None
        remaining = self.keep_batches
        for epoch in sorted(self.sizes, reverse=True):
            size = self.sizes[epoch]
            if size >= remaining:
                return epoch, size - remaining
            remaining -= size
        return None


def _percentiles(run_id: int, taken: list[tuple[int, int, float, int | None]]) -> list[tuple[Any, ...]]:
    """(run_id, epoch, second, p50, p95, n) of each second among the rows taken, in key (so time) order."""
    out: list[tuple[Any, ...]] = []
    for (epoch, second), group in itertools.groupby(taken, key=lambda row: (row[0], row[1])):
        waits = sorted(row[2] for row in group)
        n = len(waits)
        out.append((run_id, epoch, second, waits[(n - 1) // 2], waits[max(0, math.ceil(0.95 * n) - 1)], n))
    return out

"""Each worker's stage totals in shared memory, and the monitor's deltas of them."""

from __future__ import annotations

import marshal
from typing import Any

from collector.writer.frames import STAGE_FIELDS

# NOTE [ Stage boards ]
# A worker's stage table (NOTE [ Stage timing ] in collector/record/stage_clock.py)
# is a few dozen cumulative totals, not a record a fetch, so it travels as a
# board, not through a ring: one shared-memory buffer per worker id holding
# the marshal of {stage: (calls, samples, wall_s, cpu_s, pixels_in, pixels_out)},
# rewritten whole after the first timed fetch, then at most every PUBLISH_S,
# and as the worker exits (persistent workers exit after the run's last
# drain: their last PUBLISH_S is not recorded). A version
# counter guards each rewrite (odd while writing, a seqlock): the monitor
# copies the buffer, reads the version again, and keeps the copy only when it
# did not move, else it reads again at its next drain. The totals are the
# board's, not the process's: a later epoch's fresh worker starts from what
# its worker id's board holds, so nothing is lost when it takes the board
# over (the old worker wrote its last totals as it exited, before the new one
# started). The monitor sends the difference from what it read last, and the
# writer adds it to the run's rows: a board replaced by a larger set (a
# tuner's more workers) starts from zero without undoing what was counted.
# The table is bounded by construction: MAX_STAGES names a worker at most.

BOARD_BYTES = 1 << 15
MAX_STAGES = 64
Totals = dict[str, tuple[float, ...]]


class StageBoards:
    """One shared-memory board of stage totals per worker id."""

    def __init__(self, context: Any, workers: int) -> None:
        self.workers = workers
        self.data = [context.RawArray("B", BOARD_BYTES) for _ in range(workers)]
        self.versions = context.RawArray("q", workers)
        self._seen: list[Totals] = [{} for _ in range(workers)]  # main process only

    def read(self, worker_id: int) -> Totals | None:
        """The board's totals now; None while it is being written or when it holds nothing readable."""
        version = self.versions[worker_id]
        if version % 2 or version == 0:
            return None
        raw = bytes(self.data[worker_id])
        if self.versions[worker_id] != version:
            return None
        try:
            size = int.from_bytes(raw[:4], "little")
            totals = marshal.loads(raw[4 : 4 + size])
        except (ValueError, EOFError, TypeError):
            return None
        return totals if isinstance(totals, dict) else None

    def write(self, worker_id: int, totals: Totals) -> bool:
        """In a worker: replace its board's totals (False when they do not fit)."""
        if not 0 <= worker_id < self.workers:
            return False
        payload = marshal.dumps(totals)
        if len(payload) + 4 > BOARD_BYTES:
            return False
        version = self.versions[worker_id] & ~1  # one writer a board: even between writes
        self.versions[worker_id] = version + 1
        buffer = memoryview(self.data[worker_id]).cast("B")
        buffer[:4] = len(payload).to_bytes(4, "little")
        buffer[4 : 4 + len(payload)] = payload
        self.versions[worker_id] = version + 2
        return True

    def drain(self) -> list[tuple[Any, ...]]:
        """In the main process: (worker_id, stage, *STAGE_FIELDS deltas) since the last drain."""
        rows: list[tuple[Any, ...]] = []
        for worker_id in range(self.workers):
            totals = self.read(worker_id)
            if totals is None:
                continue
            rows += deltas(worker_id, self._seen[worker_id], totals)
            self._seen[worker_id] = totals
        return rows

    def __getstate__(self) -> dict[str, Any]:
        return {"workers": self.workers, "data": self.data, "versions": self.versions, "_seen": []}


def deltas(worker_id: int, before: Totals, now: Totals) -> list[tuple[Any, ...]]:
    """The rows that turn ``before`` into ``now``: each stage whose totals moved, as differences."""
    rows: list[tuple[Any, ...]] = []
    width = len(STAGE_FIELDS)
    for stage, values in now.items():
        if not isinstance(stage, str) or not isinstance(values, tuple) or len(values) != width:
            continue
        old = before.get(stage, (0.0,) * width)
        diff = tuple(_minus(a, b) for a, b in zip(values, old, strict=True))
        if diff[0] or diff[1] or diff[2]:
            rows.append((worker_id, stage, *diff))
    return rows


def _minus(a: object, b: object) -> float | None:
    """a - b for numbers; None (not measured) where a is not a number."""
    if not isinstance(a, (int, float)) or a != a:
        return None
    return float(a) - (float(b) if isinstance(b, (int, float)) and b == b else 0.0)

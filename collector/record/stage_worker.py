"""A worker's stage timing started from its init_fn: the clock, its hooks, its sampler, its last publish."""

from __future__ import annotations

from typing import Any

from collector.record import stage_hooks
from collector.record.stage_board import StageBoards
from collector.record.stage_clock import StageClock, board_publisher
from collector.record.stage_sampler import StackSampler


def start_stages(boards: StageBoards | None, worker_id: int) -> StageClock | None:
    """In a worker: a clock publishing to its board, the hooks and the sampler installed; None when off.

    See NOTE [ Stage timing ], NOTE [ Stage hooks ], NOTE [ Stack sampling ], NOTE [ Stage boards ].
    """
    if boards is None or not 0 <= worker_id < boards.workers:
        return None
    clock = StageClock(board_publisher(boards, worker_id), base=boards.read(worker_id))
    clock.calibrate()
    stage_hooks.install(clock)
    sampler = StackSampler(clock)
    sampler.start()
    _publish_at_exit(clock, sampler)
    return clock


def _publish_at_exit(clock: StageClock, sampler: StackSampler) -> None:
    from multiprocessing import util

    def publish() -> None:
        sampler.stop.set()
        try:
            clock.publish()
        except Exception:  # noqa: BLE001 - the last totals are optional; the worker's exit is not
            pass

    util.Finalize(None, publish, exitpriority=101)  # before the worker's totals (NOTE [ Worker totals ])


def wrap_collate(clock: StageClock | None, fetcher: Any) -> None:
    """Time the fetcher's collate_fn as stage "collate" (a fetcher without one is left alone)."""
    collate = getattr(fetcher, "collate_fn", None)
    if clock is None or collate is None or hasattr(collate, "_stallwatch_inner"):
        return
    try:
        fetcher.collate_fn = stage_hooks.timed(clock, "collate", collate)
    except AttributeError:
        return

"""What the training thread hands the monitor thread: record buffers and epoch events, appended there, drained there."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from collector.record.cuda_idle import IdleResolver
from collector.record.hotloop import Timer
from collector.record.worker_timing import TimingRings

T = TypeVar("T")

# NOTE [ Bounded buffer ]
# The training thread appends to deques, and the plain loop's Timer writes a
# ring, that lose their oldest records when full; the monitor counts the gap
# and stores it as runs.dropped_records. 2^17 records is about 1 s of the
# fastest loop we measured (135k batches/s), far more than one 0.2 s flush:
# at most 13 MB in a deque (about 100 bytes a record), 2 MB in a ring.
BUFFER_RECORDS = 1 << 17


# What the training thread tells the monitor about each epoch (perf_counter_ns clocks).
class EpochStarted(NamedTuple):
    epoch: int
    t_ns: int  # iter() was called
    worker_pids: list[int]
    threads: tuple[int, int] | None = None  # torch.get_num_threads(), get_num_interop_threads(); None: no torch
    collector_ns: int = 0  # the collector's own work in it (NOTE [ The collector's own time ] in session.py)
    setting_json: str | None = None  # the loader's setting, where a tuner changed it (NOTE [ Live tuning ])


class FirstBatch(NamedTuple):
    epoch: int
    t_ns: int  # iter() was called
    t_return_ns: int  # the first batch arrived


class EpochEnded(NamedTuple):
    epoch: int
    t_ns: int
    batches: int
    t_request_ns: int | None = None  # the final next() was asked for (None: dropped before its end)


EpochEvent = EpochStarted | FirstBatch | EpochEnded

# NOTE [ An epoch's end ]
# A plain ``for batch in loader`` ends its epoch with a final next() that
# raises StopIteration: the end, and its wait (epochs.end_wait_s). A loop
# that knows len() stops asking after the last batch instead. Lightning's
# fetcher does, then holds the iterator until the next epoch's iter()
# replaces it, or longer, until a garbage collection frees it: an end read
# when the iterator is let go comes after the next epoch has started, and the
# live tuner would measure each epoch at the setting of the one after it. So an
# epoch also ends when its loader's next epoch starts, or its run ends,
# whichever comes first (``Shared.open_epochs``); and an epoch that ends
# without its final next() ends when its last batch was handed out, the
# last moment the loop was seen in it (the loop's own wait, its steps and
# whatever it did between epochs are the loop's, not the loader's).


def epoch_ended(epoch: int, batches: int, t_request_ns: int | None, last_return_ns: int | None) -> EpochEnded:
    """The end event of an epoch: see NOTE [ An epoch's end ]."""
    t_ns = last_return_ns if t_request_ns is None and last_return_ns is not None else time.perf_counter_ns()
    return EpochEnded(epoch, t_ns, batches, t_request_ns)


@dataclass
class Shared:
    """What the training thread hands over: appended there, drained here."""

    # layout name -> records: NOTE [ Record layouts ] in collector/writer/batch_records.py
    records: dict[str, deque[tuple[Any, ...]]]
    epoch_events: deque[EpochEvent]
    resolver: IdleResolver
    stride: list[int]  # describe every stride-th batch; see NOTE [ Batch size sampling ]
    timing_rings: TimingRings | None = None  # made at watch() (a DataLoader) or when the first workers start
    retired_rings: list[TimingRings] = field(default_factory=list)  # replaced by larger ones (a tuner's more workers)
    stage_sources: list[Any] = field(default_factory=list)  # the training process's stage sampler (stage_main.py)
    status: dict[str, Any] = field(default_factory=dict)  # set by the training thread on crash
    timers: dict[int, Timer] = field(default_factory=dict)  # epoch -> plain loop's; NOTE [ Compiled hot loop ]
    trials: deque[tuple[Any, ...]] = field(default_factory=deque)  # the tuner's trial rows (TRIAL_COLUMNS)
    helpers: deque[tuple[int, float]] = field(default_factory=deque)  # the tuner's helpers started: (pid, monotonic)
    # epoch -> a call that ends it now, until it has ended: NOTE [ An epoch's end ]
    open_epochs: dict[int, Callable[[], None]] = field(default_factory=dict)


def drain(items: deque[T]) -> list[T]:
    """What the training thread appended so far, taken off the deque (its appends meanwhile stay)."""
    return [items.popleft() for _ in range(len(items))]

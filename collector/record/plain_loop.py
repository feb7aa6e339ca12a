"""The per-batch loop for loaders without workers or CUDA: the Timer's clock pairs, and the callbacks that describe a batch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from collector.record.batchinfo import describe_batch
from collector.record.handover import BUFFER_RECORDS, FirstBatch, Shared, epoch_ended
from collector.record.hotloop import Epoch, Timer
from collector.record.load_clock import LoadClock
from collector.writer.batch_records import sampled_record

NO_QUEUE = (None, None, None, None, None, None)  # ready, in_flight and the worker: none in a plain loop


def plain_loop(
    it: Iterator[Any],
    epoch: int,
    t_start: int,
    shared: Shared,
    on_error: Callable[[BaseException], None],
    clock: LoadClock,
    owner: Any,
) -> Iterator[Any]:
    """One plain epoch over ``it``; ``owner`` (the watched loader) lives as long as it does."""
    # See NOTE [ Compiled hot loop ] in collector/record/hotloop.py: the Timer
    # times every next() in C, the Epoch around it calls back here for
    # every stride-th batch (NOTE [ Batch size sampling ]) and at the end.
    timer = Timer(it, BUFFER_RECORDS)
    shared.timers[epoch] = timer
    append_described = shared.records["described"].append
    events = shared.epoch_events
    stride = shared.stride
    delta = clock.delta

    def on_batch(idx: int, t0: int, t1: int, prev: int | None, before: Any, batch: Any) -> int:
        cpu_ns, runq_ns = delta(before)
        append_described(sampled_record(epoch, idx, t0, t1, prev, *NO_QUEUE, *describe_batch(batch), cpu_ns, runq_ns))
        if idx == 0:
            events.append(FirstBatch(epoch, t_start, t1))
        return stride[0]

    def report(count: int) -> None:  # once: NOTE [ An epoch's end ] in collector/record/handover.py
        if shared.open_epochs.pop(epoch, None) is not None:
            last = timer.last
            events.append(epoch_ended(epoch, count, timer.end_request_ns, None if last is None else last[1]))

    def on_end(count: int, _owner: Any = owner) -> None:  # the Epoch holds on_end, and so the owner
        report(count)
        clock.close()

    shared.open_epochs[epoch] = lambda: report(timer.count)

    return Epoch(timer, on_batch, on_end, on_error, clock.read)

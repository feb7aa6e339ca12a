"""The per-batch loop for loaders with workers or CUDA: queue depth, worker ids and GPU idle events, one record a batch."""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from collector.record import cuda_idle, loader_probe
from collector.record.batchinfo import describe_batch
from collector.record.handover import FirstBatch, Shared, epoch_ended
from collector.record.load_clock import LoadClock
from collector.record.transparent import END, raising, transparent
from collector.writer.batch_records import queue_record, sampled_record


class FullLoop:
    """One epoch's state; ``step`` is its iterator's next(). See NOTE [ Transparent iteration ]."""

    def __init__(
        self,
        it: Iterator[Any],
        epoch: int,
        t_start: int,
        shared: Shared,
        probe: loader_probe.Probe | None,
        cuda: bool,
        on_error: Callable[[BaseException], None],
        clock: LoadClock | None = None,
        pids: list[int] | None = None,  # the probe's, when the caller read them already
    ) -> None:
        self._next = it.__next__
        self.clock = clock
        self.epoch = epoch
        self.t_start = t_start
        self.shared = shared
        self.probe = probe
        self.pids = pids if pids is not None else [] if probe is None else probe.worker_pids()
        self.incarnation = None if probe is None else probe.incarnation
        self.new_event = cuda_idle.torch_event if cuda else None
        self.on_error = on_error
        self.prev: int | None = None
        self.idx = 0
        self.ended = False
        self.owner: Any = None  # kept alive with this epoch's iterator (Session.epoch)
        shared.open_epochs[epoch] = functools.partial(_report, weakref.ref(self))  # not keeping it alive

    def iterator(self) -> Iterator[Any]:
        return transparent(self.step)

    def step(self) -> Any:
        if self.ended:
            return END
        probe, shared, idx, epoch = self.probe, self.shared, self.idx, self.epoch
        ready, in_flight = (None, None) if probe is None else probe.depth()
        before = None
        if self.new_event is not None:
            before = self.new_event()
            before.record()
        sampled = idx % shared.stride[0] == 0
        clock = self.clock
        c0: Any = (clock.read() if clock is not None else time.thread_time_ns()) if sampled else None
        t0 = time.perf_counter_ns()
        try:
            batch = self._next()
        except StopIteration:
            self.end(t0)
            return END
        except BaseException as exc:  # noqa: BLE001 - handed to the loop as it was raised
            try:
                self.on_error(exc)
            except Exception:  # noqa: BLE001 - the collector's fault: never the loop's
                pass
            return raising(exc)
        t1 = time.perf_counter_ns()
        cpu_ns: int | None = None
        runq_ns: int | None = None
        if sampled:
            cpu_ns, runq_ns = clock.delta(c0) if clock is not None else (time.thread_time_ns() - c0, None)
        if before is not None and self.new_event is not None:
            after = self.new_event()
            after.record()
            shared.resolver.add((epoch, idx), before, after, t1)
        last = None if probe is None else probe.last
        w: int | None = None
        pid: int | None = None
        incarnation: int | None = None
        seq: int | None = None
        if last is not None:
            w, seq = last
            pid, incarnation = self.pids[w] if w < len(self.pids) else None, self.incarnation
        if sampled:
            info = describe_batch(batch)
            shared.records["sampled"].append(
                sampled_record(
                    epoch, idx, t0, t1, self.prev, ready, in_flight, w, pid, incarnation, seq, *info, cpu_ns, runq_ns
                )
            )
            if idx == 0:
                shared.epoch_events.append(FirstBatch(epoch, self.t_start, t1))
        else:
            shared.records["queue"].append(
                queue_record(epoch, idx, t0, t1, self.prev, ready, in_flight, w, pid, incarnation, seq)
            )
        self.prev = t1
        self.idx = idx + 1
        return (batch,)

    def end(self, t_request_ns: int | None = None) -> None:
        """The iterator is done: exhausted (its final next() asked at ``t_request_ns``) or let go."""
        if not self.ended:
            self.ended = True
            self.report(t_request_ns)
            if self.clock is not None:
                self.clock.close()

    def report(self, t_request_ns: int | None = None) -> None:
        """The epoch's end event, once: at its end, or when the loader's next epoch starts first (NOTE [ An epoch's end ])."""
        if self.shared.open_epochs.pop(self.epoch, None) is not None:
            self.shared.epoch_events.append(epoch_ended(self.epoch, self.idx, t_request_ns, self.prev))

    def __del__(self) -> None:  # the loop broke out early, or an exception ended it
        self.end()


def _report(ref: weakref.ref[FullLoop]) -> None:
    loop = ref()
    if loop is not None:
        loop.report()

"""The one background thread: drains the training thread's buffers and feeds the writer."""

from __future__ import annotations

import dataclasses
import json
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from collector.record.handover import EpochStarted, FirstBatch, Shared
from collector.record.origin import user_frame, warn_at
from collector.sample.sampler import HostFactory, NvmlFactory, Rates
from collector.writer.frames import (
    EPOCH,
    IDX,
    PAIR_BYTES,
    T_RETURN,
    EpochRow,
    Flush,
    Open,
    Reply,
    RunCreated,
    RunStart,
    Warned,
)
from collector.writer.link import Link, ProcessLink, connect, launch

FLUSH_INTERVAL_S = 0.2  # the issue asks for at least every 250 ms
HEARTBEAT_INTERVAL_S = 1.0
LINK_CLOSE_TIMEOUT_S = 8.0  # within the session's 10 s close
PAIR_T_RETURN = struct.Struct("=q")  # one int64 of a Timer's (t_request_ns, t_return_ns) pairs


class Monitor(threading.Thread):
    """Drains the buffers and feeds the writer. The one broad ``except`` sits in ``run``.

    The writer samples GPU and host (NOTE [ Sampling beside the writer ]);
    the sampler factories are for tests and need ``writer_in_process=True``.
    """

    def __init__(
        self,
        db_path: str,
        start: RunStart,
        shared: Shared,
        rates: Rates,
        *,
        nvml_factory: NvmlFactory | None = None,
        host_factory: HostFactory | None = None,
        wall_clock: Callable[[], float] = time.time,
        mono_ns: Callable[[], int] = time.perf_counter_ns,
        writer_in_process: bool = False,
        origin: tuple[str, int] | None = None,
    ) -> None:
        super().__init__(name="stallwatch-monitor", daemon=True)
        if (nvml_factory or host_factory) and not writer_in_process:
            raise TypeError("sampler factories only reach a writer in this process: add writer_in_process=True")
        self.db_path = db_path
        self.shared = shared
        self._nvml_factory = nvml_factory
        self._host_factory = host_factory
        self._wall = wall_clock
        self._mono_ns = mono_ns
        self.wall0 = wall_clock()
        self.perf0 = mono_ns()
        self._opening = Open(db_path, start, self.wall0, self.perf0, rates)  # the writer's first frame
        self.stop_event = threading.Event()
        self.ready = threading.Event()  # set once the run row exists (or cannot)
        self.run_id: int | None = None
        self.warned: dict[str, str] = {}
        self._origin = origin or user_frame()  # where warnings point: the line that called watch()
        self._warnings_dirty = False
        self._writer_in_process = writer_in_process
        self._produced: dict[int, int] = {}  # epoch -> batches handed out, as far as we know
        self._ended: set[int] = set()  # epochs whose end event arrived
        self._drained = 0  # records taken off the buffers
        self._unwritten = 0  # drained, then lost to a failed write or a missing file
        self._link: Link | None = None
        self._launched: ProcessLink | None = None
        self._run_update: dict[str, Any] = {}  # sent with the next flush
        self._epochs: dict[int, EpochRow] = {}
        self._dirty_epochs: set[int] = set()
        self._due = {"flush": 0.0, "beat": 0.0}
        self.final_status: tuple[str, str | None] | None = None

    # -- warnings -----------------------------------------------------------

    def warn(self, key: str, message: str) -> None:
        """Warn once per key, pointing at the line that started the recording; the message is also stored."""
        if key in self.warned:
            return
        self.warned[key] = message
        self._warnings_dirty = True
        warn_at(self._origin, message)

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> None:
        """Launch the writer process here, on the caller's thread (NOTE [ Forked children ]), then run."""
        if not self._writer_in_process:
            self._launched = launch(self._opening)
        super().start()

    def run(self) -> None:
        try:
            self._open()
        finally:
            self.ready.set()
        while True:
            next_due = min(self._due["flush"], float("inf") if self._link is None else self._link.due())
            wait_s = max(0.0, next_due - time.monotonic())
            stopping = self.stop_event.wait(min(wait_s, FLUSH_INTERVAL_S))
            try:
                self._tick(final=stopping)
            except Exception as exc:  # noqa: BLE001 - see NOTE [ Never hurt training ]
                # NOTE [ Never hurt training ]
                # Whatever goes wrong in here (disk full, locked file, NVML or
                # psutil failing, a torch internal that moved) becomes one
                # warning per kind of failure and a gap in the record; the
                # training thread never sees an exception from us.
                self.warn(f"tick-{type(exc).__name__}", f"recording problem ({type(exc).__name__}: {exc}); continuing")
            if stopping:
                break
        self._close()

    def _open(self) -> None:
        self._link, replies = connect(self._opening, self._launched, self._nvml_factory, self._host_factory)
        self._launched = None
        self._handle(replies)

    def _handle(self, replies: list[Reply]) -> None:
        for reply in replies:
            if isinstance(reply, RunCreated):
                self.run_id = reply.run_id
            elif isinstance(reply, Warned):
                self.warn(reply.key, reply.text)
            else:
                self._unwritten += reply.records

    def _close(self) -> None:
        if self._link is not None:
            link, self._link = self._link, None
            self._handle(link.close(LINK_CLOSE_TIMEOUT_S))

    # -- the tick -----------------------------------------------------------

    def _tick(self, final: bool) -> None:
        now = time.monotonic()
        wall = self._wall()
        due = self._due
        if self._link is not None and now >= self._link.due():
            self._link.sample()  # only where the writer runs in this thread
        if final or now >= due["flush"]:
            self._flush(wall, beat=final or now >= due["beat"], final=final)
            due["flush"] = now + FLUSH_INTERVAL_S
            if now >= due["beat"]:
                due["beat"] = now + HEARTBEAT_INTERVAL_S

    @property
    def dropped(self) -> int:
        """Records lost so far: overwritten in a full buffer, or never written."""
        # See NOTE [ Bounded buffer ]: a full deque drops its oldest records, so
        # the newest index seen per epoch (or the count its end event gives) says
        # how many were handed out, and whatever was not drained was dropped.
        return max(0, sum(self._produced.values()) - self._drained) + self._unwritten

    def _drain_records(self) -> dict[str, list[tuple[Any, ...]]]:
        chunks = {}
        for shape, records in self.shared.records.items():
            chunk = [records.popleft() for _ in range(len(records))]
            if chunk:
                # described batches are counted with their Timer's pairs
                last = chunk[-1]
                self._count(last[EPOCH], last[IDX], 0 if shape == "described" else len(chunk))
                chunks[shape] = chunk
        return chunks

    def _drain_timers(self) -> list[tuple[int, int, bytes]]:
        """(epoch, first index, int64 clock pairs) from each plain loop's timer; ended ones are let go."""
        out = []
        timers = self.shared.timers
        for epoch, timer in list(timers.items()):
            first, pairs = timer.drain()
            if pairs:
                n = len(pairs) // PAIR_BYTES
                self._count(epoch, first + n - 1, n)
                out.append((epoch, first, pairs))
            if epoch in self._ended:  # its end was queued after its last batch, so nothing follows
                del timers[epoch]
        return out

    def _count(self, epoch: int, last_idx: int, drained: int) -> None:
        self._drained += drained
        if last_idx >= self._produced.get(epoch, 0):
            self._produced[epoch] = last_idx + 1

    def _drain_epochs(self, wall_of: Callable[[int], float]) -> None:
        events = self.shared.epoch_events
        while events:
            event = events.popleft()
            epoch = event.epoch
            row = self._epochs.get(epoch)
            if row is None:
                row = self._epochs[epoch] = EpochRow(epoch, wall_of(event.t_ns))
            if isinstance(event, EpochStarted):
                row.worker_pids_json = json.dumps(event.worker_pids)  # the writer samples them too
            elif isinstance(event, FirstBatch):
                row.first_batch_s = max(0.0, (event.t_return_ns - event.t_ns) / 1e9)
            else:
                row.ended_at = wall_of(event.t_ns)
                row.batches = event.batches
                self._produced[epoch] = max(self._produced.get(epoch, 0), event.batches)
                self._ended.add(epoch)
            self._dirty_epochs.add(epoch)

    def _drain_fetches(self) -> list[bytes]:
        rings = self.shared.timing_rings
        if rings is None:
            return []
        segments = rings.drain()
        if rings.lost:
            self.warn("timing-lost", f"{rings.lost} worker fetch timings were overwritten before they were read")
        return segments

    def _flush(self, wall: float, beat: bool, final: bool) -> None:
        def wall_of(t_ns: int) -> float:
            return self.wall0 + (t_ns - self.perf0) / 1e9

        # Epoch events first: an epoch's end is queued after its last record,
        # so every record an end event counts is drained below. Records before
        # timers: a described batch's record is appended after its timer entry,
        # so its row never arrives before the timer's plain row it replaces.
        self._drain_epochs(wall_of)
        chunks = self._drain_records()
        timed = self._drain_timers()
        fetches = self._drain_fetches()
        idle = self.shared.resolver.resolve(self._mono_ns())
        self._adapt_stride(chunks, timed)
        if self._link is None:
            self._unwritten += Flush(records=chunks, timed=timed).record_count()
            return
        update, self._run_update = self._run_update, {}
        if beat:
            update["heartbeat_at"] = wall
            update["dropped_records"] = self.dropped
        if self._warnings_dirty:
            update["warnings"] = json.dumps(list(self.warned.values()))
            self._warnings_dirty = False
        update.update(self.shared.status)
        if final:
            update["ended_at"] = wall
            update["dropped_records"] = self.dropped
            if self.final_status is not None:
                update["status"], error = self.final_status
                if error is not None:
                    update["error"] = error
        epochs = [dataclasses.replace(self._epochs[e]) for e in sorted(self._dirty_epochs)]
        self._dirty_epochs.clear()
        flush = Flush(records=chunks, timed=timed, epochs=epochs, fetches=fetches, idle=idle, update=update)
        try:
            self._link.send(flush)
        except OSError as exc:  # the writer process is gone
            self._unwritten += flush.record_count()
            self.warn("writer-gone", f"the writer process stopped ({exc}); training continues unrecorded")
            self._link = None
            return
        self._handle(self._link.messages())

    def _adapt_stride(self, chunks: dict[str, list[tuple[Any, ...]]], timed: list[tuple[int, int, bytes]]) -> None:
        # NOTE [ Batch size sampling ]
        # Walking a batch for its size and pinning costs about a microsecond;
        # at tens of thousands of batches per second that is measurable. So
        # each batch is described while the loop runs under ~200 batches/s,
        # and every k-th batch above that (always the first of each epoch).
        # The rate comes from the records' own clocks, so a pause in training
        # between two flushes does not read as a slow loop.
        spans = [(len(c), c[0][T_RETURN], c[-1][T_RETURN]) for c in chunks.values() if len(c) >= 2]
        for _, _, pairs in timed:
            if len(pairs) >= 2 * PAIR_BYTES:
                spans.append(
                    (
                        len(pairs) // PAIR_BYTES,
                        *PAIR_T_RETURN.unpack_from(pairs, 8),
                        *PAIR_T_RETURN.unpack_from(pairs, len(pairs) - 8),
                    )
                )
        if not spans:
            return
        n, first, last = max(spans)
        rate = (n - 1) / ((last - first) / 1e9) if last > first else float("inf")
        self.shared.stride[0] = max(1, min(1024, int(rate / 200.0) or 1))

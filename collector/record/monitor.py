"""The one background thread: drains the training thread's buffers and feeds the writer."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from collector.record.cuda_idle import cuda_active
from collector.record.handover import EpochStarted, FirstBatch, Shared, drain
from collector.record.live import LiveLog, LogFn
from collector.record.origin import user_frame, warn_at
from collector.record.stride import adapt_stride
from collector.sample.sampler import HostFactory, NvmlFactory, Rates
from collector.writer.batch_records import EPOCH, IDX, PAIR_BYTES
from collector.writer.frames import EpochRow, Flush, Open, Reply, RunCreated, RunStart, Unwritten, Warned
from collector.writer.link import launch
from collector.writer.names import name_this_thread
from collector.writer.supervisor import RESTART_MIN_S, Supervisor

FLUSH_INTERVAL_S = 0.2  # the issue asks for at least every 250 ms
HEARTBEAT_INTERVAL_S = 1.0
LINK_CLOSE_TIMEOUT_S = 1.5  # within the session's close: a stuck writer is killed then
_warned_in_process: set[str] = set()  # keys warned once per process, not per run (NOTE [ No GPU ])


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
        cuda_in_use: Callable[[], bool] = cuda_active,
        origin: tuple[str, int] | None = None,
        log: LogFn | None = None,  # watch(log=...): NOTE [ Log on the monitor thread ] in collector/record/live.py
        log_window_s: float | None = None,  # None: LOG_WINDOW_S
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
        self.origin = origin or user_frame()  # where warnings point: the line that called watch()
        self._warnings_dirty = False
        self._writer_in_process = writer_in_process
        self._produced: dict[int, int] = {}  # epoch -> batches handed out, as far as we know
        self._ended: set[int] = set()  # epochs whose end event arrived
        self._drained = 0  # records taken off the buffers
        self._stages: list[tuple[Any, ...]] = []  # stage growth drained from the boards (NOTE [ Stage boards ])
        self._unwritten = 0  # drained, then lost to a failed write or a missing file
        self._writer = Supervisor(self._opening, None)
        self._cuda_in_use = cuda_in_use
        self._no_gpu: str | None = None  # why NVML gives nothing, warned only if CUDA is in use
        self._run_update: dict[str, Any] = {}  # sent with the next flush
        self._epochs: dict[int, EpochRow] = {}
        self._dirty_epochs: set[int] = set()
        self._due = {"flush": 0.0, "beat": 0.0}
        self.final_status: tuple[str, str | None] | None = None
        self._final: Flush | None = None
        self.live = None if log is None else LiveLog(log, log_window_s)

    # -- warnings -----------------------------------------------------------

    def warn(self, key: str, message: str) -> None:
        """Warn once per key, pointing at the line that started the recording; the message is also stored."""
        if key in self.warned:
            return
        self.warned[key] = message
        self._warnings_dirty = True
        warn_at(self.origin, message)

    def note(self, key: str, message: str) -> None:
        """Store a note with the run's warnings, once per key, without raising a warning: nothing is wrong."""
        if key not in self.warned:
            self.warned[key] = message
            self._warnings_dirty = True

    def _warn_no_gpu(self) -> None:
        """NVML failing is worth a warning only where a GPU is in use: once per process. See NOTE [ No GPU ]."""
        if self._no_gpu is None or "nvml" in _warned_in_process or not self._cuda_in_use():
            return
        _warned_in_process.add("nvml")
        self.warn("nvml", self._no_gpu)

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> None:
        """Launch the writer process here, on the caller's thread (NOTE [ Forked children ] in collector/writer/spawn.py), then run."""
        if not self._writer_in_process:
            self._writer = Supervisor(self._opening, launch(self._opening))
        super().start()

    def run(self) -> None:
        # Thread.start() on the training thread returns once this thread has
        # started, and then waits for the GIL: hand it back at once rather than
        # after the writer's handshake (NOTE [ The collector's own time ]).
        time.sleep(0)
        name_this_thread("monitor")  # NOTE [ Named threads ]
        try:
            self._open()
        finally:
            self.ready.set()
        while True:
            next_due = min(self._due["flush"], self._writer.due())
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
        if self.live is not None:  # the run's last figures, once the writer has written its end
            self.live.tick(self.db_path, self.run_id, self.warn, final=True)

    def _open(self) -> None:
        self._handle(self._writer.connect(self._nvml_factory, self._host_factory))

    def _handle(self, replies: list[Reply]) -> None:
        for reply in replies:
            if isinstance(reply, RunCreated):
                self.run_id = reply.run_id
            elif isinstance(reply, Warned):
                if reply.key == "nvml":
                    self._no_gpu = reply.text
                elif reply.key.startswith("note-"):
                    self.note(reply.key, reply.text)
                else:
                    self.warn(reply.key, reply.text)
            elif isinstance(reply, Unwritten):
                self._unwritten += reply.records
        self._warn_no_gpu()

    def _close(self) -> None:
        final = self._final
        if final is None:
            return
        deadline = time.monotonic() + LINK_CLOSE_TIMEOUT_S
        for _ in range(2):  # once more with a new writer if the end was lost with the last
            replies, lost = self._writer.finish(final, deadline - time.monotonic())
            self._handle(replies)
            if not lost or deadline - time.monotonic() < RESTART_MIN_S:
                return
            final.update["warnings"] = json.dumps(list(self.warned.values()))

    # -- the tick -----------------------------------------------------------

    def _tick(self, final: bool) -> None:
        now = time.monotonic()
        wall = self._wall()
        due = self._due
        if now >= self._writer.due():
            self._writer.sample()  # only where the writer runs in this thread
        if final or now >= due["flush"]:
            self._flush(wall, beat=final or now >= due["beat"], final=final)
            due["flush"] = now + FLUSH_INTERVAL_S
            if now >= due["beat"]:
                due["beat"] = now + HEARTBEAT_INTERVAL_S
            if self.live is not None and not final:
                self.live.tick(self.db_path, self.run_id, self.warn)

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
                row.collector_s = max(0, event.collector_ns) / 1e9
                row.setting_json = event.setting_json
                if event.threads is not None:
                    self._run_update["torch_threads"], self._run_update["interop_threads"] = event.threads
            elif isinstance(event, FirstBatch):
                row.first_batch_s = max(0.0, (event.t_return_ns - event.t_ns) / 1e9)
            else:
                row.ended_at = wall_of(event.t_ns)
                row.batches = event.batches
                if event.t_request_ns is not None:
                    row.end_wait_s = max(0.0, (event.t_ns - event.t_request_ns) / 1e9)
                self._produced[epoch] = max(self._produced.get(epoch, 0), event.batches)
                self._ended.add(epoch)
            self._dirty_epochs.add(epoch)

    def _drain_fetches(self) -> list[bytes]:
        retired, rings = self.shared.retired_rings, self.shared.timing_rings  # retired: a tuner's more workers'
        every = [retired.pop(0) for _ in range(len(retired))] + ([rings] if rings is not None else [])
        segments = [part for each in every for part in each.drain()]
        sources = [each.boards for each in every if each.boards is not None] + self.shared.stage_sources
        self._stages += [row for source in sources for row in source.drain()]
        if rings is not None and rings.lost:
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
        adapt_stride(self.shared.stride, chunks, timed)
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
        flush.trials, flush.helpers = drain(self.shared.trials), drain(self.shared.helpers)
        flush.stages, self._stages = self._stages, []
        if final:
            flush.iterated = sum(self._produced.values())
            self._final = flush  # sent by _close, retried there: NOTE [ Final state ] in collector/writer/child.py
            return
        if not self._writer.send(flush):
            self._unwritten += flush.record_count()
            if self._warnings_dirty is False and "warnings" in update:
                self._warnings_dirty = True  # not sent: send them again with the next
        self._handle(self._writer.messages())

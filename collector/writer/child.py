"""The writer: a run's records arrive as frames and go into SQLite, in its own process.

The collector starts it (collector/writer/link.py): frames on stdin, replies on stdout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import marshal
import os
import select
import signal
import sqlite3
import struct
import sys
import time
from array import array
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import Any, BinaryIO

from collector.record.worker_timing import FIELDS as FETCH_FIELDS  # see NOTE [ Timing rings ]
from collector.sample.sampler import HostFactory, NvmlFactory, Rates, Sampler
from collector.store.connection import GPU_IDLE_UPDATE, SHAPE_COLUMNS, Store, batch_insert_sql, fetch_insert_sql

# NOTE [ Writer process ]
# Writing a row costs about 1.5 us of CPU, and Python's sqlite3 takes and
# drops the GIL for every row: each hand-off with a busy training thread
# costs that thread more than the row itself (measured in bench/: an
# in-process writer kept 0.70-0.87 of a 30-50k batches/s loader's throughput
# and, on a pure-Python loader that never drops the GIL, fell behind and lost
# most records). So the monitor thread only drains the buffers and encodes
# them, once per flush, and this process, with its own interpreter and GIL,
# turns them into rows. Frames (NOTE [ Frames ]) arrive on its stdin, its
# replies leave on its stdout. It ignores Ctrl-C (the training process
# decides how the run ends) and exits on the close frame or at the end of its
# input, so it never outlives a killed training process for long. Where it
# cannot start, the same Sink runs inside the monitor thread
# (collector/writer/link.py). The Sink also owns the run's Sampler: see NOTE
# [ Sampling beside the writer ] in collector/sample/sampler.py.

FRAME_HEADER = struct.Struct("<I")
READ_BYTES = 1 << 20  # the pipe's size (collector/writer/link.py)

Message = tuple[Any, ...]  # ("run_id", id) | ("warn", key, text) | ("unwritten", records)


@dataclass
class RunStart:
    """Everything the run row needs; gathered on the training thread."""

    name: str
    config: dict[str, Any]
    host: dict[str, Any]
    versions: dict[str, Any]
    hostname: str
    pid: int
    command: str
    rank: int | None
    world_size: int | None
    tags: dict[str, Any] = field(default_factory=dict)


@dataclass
class Open:
    """The first frame: where to write, the run to create, the clocks' origin and the sampling rates."""

    db_path: str
    start: RunStart
    wall0_s: float
    perf0_ns: int
    rates: Rates

    def __post_init__(self) -> None:
        # Only plain built-ins cross the pipe (NOTE [ Frames ]): a
        # torch.__version__ is a TorchVersion, a config may hold user objects.
        fields = ("config", "host", "versions", "tags")
        plain = {name: json.loads(json.dumps(getattr(self.start, name), default=str)) for name in fields}
        self.start = dataclasses.replace(self.start, **plain)


@dataclass
class Flush:
    """One flush interval's worth of records; written as one transaction.

    Rows carry no run id: the sink adds it. ``records`` maps a shape (NOTE
    [ Record shapes ] in collector/store/connection.py) to hot-path tuples,
    ``timed`` holds (epoch, first idx, int64 clock pairs) from the plain
    loop's Timer (NOTE [ Compiled hot loop ]), ``fetches`` raw float64 ring segments, ``idle`` ((epoch, idx),
    gpu_idle_s) pairs. Samples are not in it: the Sink's own Sampler takes them.
    """

    records: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)
    timed: list[tuple[int, int, bytes]] = field(default_factory=list)
    epochs: list[tuple[Any, ...]] = field(default_factory=list)
    fetches: list[bytes] = field(default_factory=list)
    idle: list[tuple[tuple[int, int], float | None]] = field(default_factory=list)
    update: dict[str, Any] = field(default_factory=dict)

    def record_count(self) -> int:
        """Batches in this frame (a described batch is also among the timed pairs: counted once)."""
        described = len(self.records.get("described", ()))
        return (
            sum(len(chunk) for chunk in self.records.values()) - described + sum(len(p) // 16 for *_, p in self.timed)
        )


class Sink:
    """Owns the Store and the Sampler for one run; writes each Flush, with the samples taken since, in one transaction.

    The factories are for tests (fake NVML, fake psutil); see collector/sample/sampler.py.
    """

    def __init__(
        self, opening: Open, *, nvml_factory: NvmlFactory | None = None, host_factory: HostFactory | None = None
    ) -> None:
        start = opening.start
        self.store = Store(opening.db_path)
        try:
            self.run_id = self.store.create_run(
                start.name,
                config=start.config,
                host=start.host,
                versions=start.versions,
                hostname=start.hostname,
                pid=start.pid,
                command=start.command,
                rank=start.rank,
                world_size=start.world_size,
                tags=start.tags,
                started_at=opening.wall0_s,
            )
        except BaseException:
            self.store.close()
            raise
        self._batch_sql = {
            shape: batch_insert_sql(self.run_id, opening.wall0_s, opening.perf0_ns, shape) for shape in SHAPE_COLUMNS
        }
        self._fetch_sql = fetch_insert_sql(self.run_id)
        self._epochs: dict[int, tuple[Any, ...]] = {}  # epoch rows not yet written
        self._tails: dict[int, tuple[int, int]] = {}  # epoch -> (idx, t_return_ns) of its last timed batch
        self._messages: list[Message] = []  # the sampler's warnings, sent with the next reply
        self.sampler = Sampler(
            opening.rates,
            start.pid,
            start.host,
            lambda key, text: self._messages.append(("warn", key, text)),
            nvml_factory=nvml_factory,
            host_factory=host_factory,
        )

    def take_messages(self) -> list[Message]:
        out, self._messages = self._messages, []
        return out

    def write(self, flush: Flush) -> list[Message]:
        """Write one frame and the samples taken since the last; never raises.

        A failure costs the frame's records (counted in the reply). Returns the
        replies: the failure, and any warning from the sampler.
        """
        self.sampler.see_epochs(flush.epochs)
        self.sampler.sample()  # whatever is due: frames may come faster than the sampler's timeouts
        samples, update = self.sampler.take()
        return self._write(dataclasses.replace(flush, update={**update, **flush.update}), samples)

    def _write(self, flush: Flush, samples: dict[str, list[tuple[Any, ...]]]) -> list[Message]:
        run_id = self.run_id
        # Timed rows first: a described batch's record replaces its plain row.
        statements: list[tuple[str, Any]] = [
            (self._batch_sql["fast"], self._timed_rows(epoch, first, pairs)) for epoch, first, pairs in flush.timed
        ]
        statements += [(self._batch_sql[shape], chunk) for shape, chunk in flush.records.items() if chunk]
        if flush.fetches:
            statements.append((self._fetch_sql, _fetch_rows(flush.fetches)))
        if flush.idle:
            statements.append((GPU_IDLE_UPDATE, [(s, run_id, key[0], key[1]) for key, s in flush.idle]))
        sample_rows = {table: [(run_id, *row) for row in rows] for table, rows in samples.items()}
        for row in flush.epochs:
            self._epochs[row[0]] = row
        epochs = [(run_id, *row) for _, row in sorted(self._epochs.items())]
        try:
            self.store.write(sample_rows, epochs=epochs, run_update=flush.update, run_id=run_id, statements=statements)
        except sqlite3.Error as exc:
            name = type(exc).__name__
            self._messages += [
                ("unwritten", flush.record_count()),
                ("warn", f"write-{name}", f"recording problem ({name}: {exc}); continuing"),
            ]
        else:
            self._epochs.clear()
        return self.take_messages()

    def _timed_rows(self, epoch: int, first: int, pairs: bytes) -> Iterator[tuple[Any, ...]]:
        """Fast-shape rows (epoch, idx, t_request, t_return, t_prev_return) from a Timer's clock pairs."""
        clocks = array("q")
        clocks.frombytes(pairs)
        t_request, t_return = clocks[0::2], clocks[1::2]
        tail = self._tails.get(epoch)
        before = tail[1] if tail is not None and tail[0] == first - 1 else None  # lapped: unknown
        self._tails[epoch] = (first + len(t_return) - 1, t_return[-1])
        prev = chain((before,), t_return[:-1])
        return zip(repeat(epoch), range(first, first + len(t_return)), t_request, t_return, prev)

    def close(self) -> list[Message]:
        """Take a last sample, write what is left, close the file; the last replies."""
        try:
            self.sampler.sample(final=True)
            messages = self.write(Flush())
        finally:
            self.sampler.close()
            self.store.close()
        return messages


def _fetch_rows(segments: list[bytes]) -> list[tuple[float, ...]]:
    values = array("d")
    for segment in segments:
        values.frombytes(segment)
    return list(zip(*[iter(values)] * FETCH_FIELDS, strict=True))


def open_failure(db_path: str, exc: BaseException) -> Message:
    return ("warn", "store", f"cannot record to {db_path} ({exc}); training continues unrecorded")


# -- the process ------------------------------------------------------------


# NOTE [ Frames ]
# A frame is a 4-byte length and a marshal payload: marshal encodes the
# built-in types records are made of about twice as fast as pickle, and
# decoding it can never run code or import a module. Payloads:
#   ("open", db_path, run_start_fields, wall0_s, perf0_ns, (gpu_hz, host_hz))
#   ("flush", records, timed, epochs, fetches, idle, update)
#   ("close",)
# and the sink's replies are lists of Message tuples. Epoch rows are
# (epoch, started_at, ended_at, first_batch_s, batches, worker_pids_json):
# the sampler follows the newest epoch's workers through them.
CLOSE = ("close",)


def frame_bytes(payload: Any) -> bytes:
    data = marshal.dumps(payload)
    return FRAME_HEADER.pack(len(data)) + data


def open_payload(opening: Open) -> tuple[Any, ...]:
    rates = (opening.rates.gpu_hz, opening.rates.host_hz)
    return ("open", opening.db_path, vars(opening.start), opening.wall0_s, opening.perf0_ns, rates)


def flush_payload(flush: Flush) -> tuple[Any, ...]:
    return ("flush", flush.records, flush.timed, flush.epochs, flush.fetches, flush.idle, flush.update)


class FrameBuffer:
    """Bytes in, whole payloads out: both ends of the pipe cut frames with it."""

    def __init__(self) -> None:
        self._data = bytearray()

    def feed(self, chunk: bytes) -> list[Any]:
        data = self._data
        data += chunk
        payloads = []
        pos = 0
        with memoryview(data) as view:
            while len(data) - pos >= FRAME_HEADER.size:
                (size,) = FRAME_HEADER.unpack_from(data, pos)
                end = pos + FRAME_HEADER.size + size
                if end > len(data):
                    break
                payloads.append(marshal.loads(view[pos + FRAME_HEADER.size : end]))
                pos = end
        del data[:pos]
        return payloads


WAITED = ("waited",)  # FrameReader.next: the time ran out first


class FrameReader:
    """Whole payloads from a pipe, waiting at most a given time for the next."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = FrameBuffer()
        self._ready: deque[Any] = deque()
        self._ended = False

    def next(self, timeout_s: float | None) -> Any:
        """The next payload; WAITED when ``timeout_s`` passed first; None at the end of input."""
        deadline = None if timeout_s is None or timeout_s == float("inf") else time.monotonic() + timeout_s
        while not self._ready:
            if self._ended:
                return None
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._fd], [], [], left)[0]:
                return WAITED
            chunk = os.read(self._fd, READ_BYTES)
            if chunk:
                self._ready.extend(self._buffer.feed(chunk))
            else:
                self._ended = True  # a cut-off frame counts as the end
        return self._ready.popleft()


def write_frame(stream: BinaryIO, payload: Any) -> None:
    stream.write(frame_bytes(payload))
    stream.flush()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    incoming, replies = FrameReader(sys.stdin.fileno()), sys.stdout.buffer
    payload = incoming.next(None)
    if not payload or payload[0] != "open":
        return
    _, db_path, start, wall0_s, perf0_ns, rates = payload
    try:
        sink = Sink(Open(db_path, RunStart(**start), wall0_s, perf0_ns, Rates(*rates)))
    except Exception as exc:  # noqa: BLE001 - unwritable path, full disk, foreign file: told to the parent
        write_frame(replies, [open_failure(db_path, exc)])
        return
    write_frame(replies, [("run_id", sink.run_id), *sink.take_messages()])
    messages: list[Message] = []
    try:
        while True:
            payload = incoming.next(sink.sampler.due() - time.monotonic())
            if payload is WAITED:
                sink.sampler.sample()
                messages = sink.take_messages()
            elif payload and payload[0] == "flush":
                messages = sink.write(Flush(*payload[1:]))
            else:  # the close frame, or the end of input: the training process is gone
                break
            if messages:
                write_frame(replies, messages)
    finally:
        messages = sink.close()
        if messages:
            with contextlib.suppress(OSError):
                write_frame(replies, messages)


if __name__ == "__main__":
    main()

"""The code that runs inside the writer child: every run's frames come in on stdin, go into SQLite, replies go out on stdout.

The training process spawns and watches it through collector/writer/process.py; the writing itself is the Sink
(collector/writer/sink.py), one a run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import BinaryIO

from collector.sample.host import end_orphans
from collector.writer.frames import (
    PROCESS_CHANNEL,
    Alive,
    Close,
    Closed,
    Flush,
    Open,
    Reply,
    RunCreated,
    decode_message,
    encode_channel_replies,
    open_failure,
)
from collector.writer.names import name_this_thread
from collector.writer.pipe import WAITED, FrameReader, write_frame
from collector.writer.sink import PING_INTERVAL_S, Sink

__all__ = ["main"]

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
# decides how the run ends) and exits on the last run's close frame or at the end of its
# input, so it never outlives a killed training process for long. Where it
# cannot start, the same Sink runs inside the monitor thread
# (collector/writer/link.py). The Sink also owns the run's Sampler: see NOTE
# [ Sampling beside the writer ] in collector/sample/sampler.py.


class Replies:
    """The writer's stdout: whole reply frames, from the main loop and the ping thread."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._sent_at = time.monotonic()

    def send(self, replies: list[Reply], channel: int = PROCESS_CHANNEL) -> None:
        with self._lock:
            write_frame(self._stream, encode_channel_replies(channel, replies))
            self._sent_at = time.monotonic()

    def ping_forever(self) -> None:
        """Say "alive" whenever nothing else was said for PING_INTERVAL_S (NOTE [ Writer health ] in process.py)."""
        name_this_thread("ping")
        with contextlib.suppress(OSError, ValueError):
            while True:
                time.sleep(max(0.0, self._sent_at + PING_INTERVAL_S - time.monotonic()))
                if time.monotonic() - self._sent_at >= PING_INTERVAL_S:
                    self.send([Alive()])


class Runs:
    """The runs this writer serves, one Sink a channel (NOTE [ One writer a process ] in channel.py)."""

    def __init__(self, replies: Replies) -> None:
        self.replies = replies
        self.sinks: dict[int, Sink] = {}
        self.parent = os.getppid()
        self.orphans: list[tuple[list[int], int, float]] = []  # (worker pids, training pid, wall0) of closed runs

    def due(self) -> float:
        return min((sink.sampler.due() for sink in self.sinks.values()), default=float("inf"))

    def sample(self) -> None:
        now = time.monotonic()
        for channel, sink in self.sinks.items():
            if sink.sampler.due() <= now:
                sink.sampler.sample()
                sink.tell_taken()
                self.send(channel, sink.take_messages())

    def open(self, channel: int, opening: Open) -> None:
        try:
            sink = Sink(opening, tell=lambda replies: self.replies.send(replies, channel))
        except Exception as exc:  # noqa: BLE001 - unwritable path, full disk, foreign file: told to the parent
            self.replies.send([open_failure(opening.db_path, exc)], channel)
            return
        self.sinks[channel] = sink
        self.replies.send([RunCreated(sink.run_id), *sink.take_messages()], channel)

    def write(self, channel: int, flush: Flush) -> None:
        sink = self.sinks.get(channel)
        if sink is not None:
            self.send(channel, sink.write(flush))

    def close(self, channel: int) -> None:
        """Finish one run; its last reply is Closed."""
        sink = self.sinks.pop(channel, None)
        messages: list[Reply] = []
        if sink is not None:
            self.orphans.append((sink.sampler.workers(), sink.opening.start.pid, sink.opening.wall0_s))
            messages = sink.close(keep_trying=lambda: os.getppid() == self.parent)
        with contextlib.suppress(OSError):
            self.replies.send([*messages, Closed()], channel)

    def send(self, channel: int, messages: list[Reply]) -> None:
        if messages:
            self.replies.send(messages, channel)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    name_this_thread("writer")  # NOTE [ Named threads ]
    incoming, replies = FrameReader(sys.stdin.fileno()), Replies(sys.stdout.buffer)
    threading.Thread(target=replies.ping_forever, name="stallwatch-ping", daemon=True).start()
    runs = Runs(replies)
    closed_all = False
    try:
        while True:
            payload = incoming.next(runs.due() - time.monotonic())
            if payload is WAITED:
                runs.sample()
                continue
            if payload is None:
                break  # the end of input: the training process is gone
            channel, frame = decode_message(payload)
            if isinstance(frame, Open):
                runs.open(channel, frame)
            elif isinstance(frame, Flush):
                runs.write(channel, frame)
            elif isinstance(frame, Close):
                runs.close(channel)
                if not runs.sinks:  # the parent sends no frame after the last run's Close
                    closed_all = True
                    break
    finally:
        for channel in list(runs.sinks):
            runs.close(channel)
    # NOTE [ Orphaned workers ]
    # The end of input without a close frame: the training process died
    # (SIGKILL, OOM). Its DataLoader workers notice within 5 s, but one whose
    # result queue holds more than the pipe takes waits forever to flush it
    # to the dead parent; the writer knows their pids and ends them.
    if not closed_all:
        for workers, pid, wall0_s in runs.orphans:
            end_orphans(workers, pid, wall0_s)


if __name__ == "__main__":
    main()

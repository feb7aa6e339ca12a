"""The writer process: a run's frames arrive on stdin and go into SQLite; replies leave on stdout.

The monitor starts it (collector/writer/process.py); the writing itself is the Sink (collector/writer/sink.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any, BinaryIO

from collector.sample.host import end_orphans
from collector.writer.frames import (
    WAITED,
    Alive,
    Close,
    Flush,
    FrameReader,
    Open,
    Reply,
    RunCreated,
    decode_frame,
    encode_replies,
    open_failure,
    write_frame,
)
from collector.writer.sink import PING_INTERVAL_S, Sink

__all__ = ["Sink", "main"]

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


class Replies:
    """The writer's stdout: whole reply frames, from the main loop and the ping thread."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def send(self, replies: list[Reply]) -> None:
        with self._lock:
            write_frame(self._stream, encode_replies(replies))

    def ping_forever(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while True:
                time.sleep(PING_INTERVAL_S)
                self.send([Alive()])


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    incoming, replies = FrameReader(sys.stdin.fileno()), Replies(sys.stdout.buffer)
    threading.Thread(target=replies.ping_forever, name="stallwatch-ping", daemon=True).start()
    opening = decode_frame(incoming.next(None))
    if not isinstance(opening, Open):
        return
    try:
        sink = Sink(opening, tell=replies.send)
    except Exception as exc:  # noqa: BLE001 - unwritable path, full disk, foreign file: told to the parent
        replies.send([open_failure(opening.db_path, exc)])
        return
    replies.send([RunCreated(sink.run_id), *sink.take_messages()])
    parent = os.getppid()
    messages: list[Reply] = []
    frame: Any = None
    try:
        while True:
            payload = incoming.next(sink.sampler.due() - time.monotonic())
            if payload is WAITED:
                sink.sampler.sample()
                sink.tell_taken()
                messages = sink.take_messages()
            else:
                frame = decode_frame(payload)
                if not isinstance(frame, Flush):  # the close frame, or the end of input: the training process is gone
                    break
                messages = sink.write(frame)
            if messages:
                replies.send(messages)
    finally:
        workers = sink.sampler.workers()
        messages = sink.close(keep_trying=lambda: os.getppid() == parent)
        if messages:
            with contextlib.suppress(OSError):
                replies.send(messages)
    # NOTE [ Orphaned workers ]
    # The end of input without a close frame: the training process died
    # (SIGKILL, OOM). Its DataLoader workers notice within 5 s, but one whose
    # result queue holds more than the pipe takes waits forever to flush it
    # to the dead parent; the writer knows their pids and ends them.
    if not isinstance(frame, Close):
        end_orphans(workers, opening.start.pid, opening.wall0_s)


if __name__ == "__main__":
    main()

"""Frames on a pipe: a byte stream cut into whole payloads, read with a time limit (NOTE [ Frames ] in frames.py)."""

from __future__ import annotations

import marshal
import os
import select
import time
from collections import deque
from typing import Any, BinaryIO

from collector.writer.frames import FRAME_HEADER

READ_BYTES = 1 << 20  # the pipe's size (collector/writer/process.py)


class FrameBuffer:
    """Bytes in, whole payloads out: both ends of the pipe cut frames with it."""

    def __init__(self) -> None:
        self._data = bytearray()

    def feed(self, chunk: bytes | memoryview) -> list[Any]:
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
        # Read into one buffer kept for the reader's life: os.read would allocate
        # (and fault in) a new megabyte for each flush of a few kilobytes.
        self._into = bytearray(READ_BYTES)
        self._view = memoryview(self._into)
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
            size = os.readv(self._fd, [self._into])
            if size:
                self._ready.extend(self._buffer.feed(self._view[:size]))
            else:
                self._ended = True  # a cut-off frame counts as the end
        return self._ready.popleft()


def write_frame(stream: BinaryIO, data: bytes) -> None:
    stream.write(data)
    stream.flush()

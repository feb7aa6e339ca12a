"""The monitor's end of the writer: a child process, or the same Sink in this thread."""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import Protocol

from collector.sample.sampler import HostFactory, NvmlFactory
from collector.writer.child import Sink
from collector.writer.frames import (
    READ_BYTES,
    Close,
    Flush,
    FrameBuffer,
    Open,
    Reply,
    RunCreated,
    Warned,
    decode_replies,
    encode_frame,
    open_failure,
)

START_TIMEOUT_S = 15.0
PIPE_BYTES = READ_BYTES  # one flush of a 100k batches/s loop, so the monitor rarely waits
F_SETPIPE_SZ = 1031  # Linux; elsewhere the default pipe size only means more round trips
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding collector/
# Isolated (-I: no working directory, no PYTHON* variables on the path), the
# standard library imported first, then this very copy of collector: the
# writer runs the same code as its parent whatever the user's sys.path.
# The parent's other absolute path entries come last, so psutil and pynvml
# (NOTE [ Sampling beside the writer ]) are found even from a user site.
BOOT = (
    "import sys, array, dataclasses, json, marshal, select, signal, sqlite3, struct; "
    "sys.path.insert(0, {root!r}); "
    "sys.path += [p for p in {path!r} if p not in sys.path]; "
    "from collector.writer.child import main; main()"
)


class Link(Protocol):
    """Where the monitor sends frames and hears back from."""

    def send(self, flush: Flush) -> None: ...

    def due(self) -> float: ...

    def sample(self) -> None: ...

    def messages(self) -> list[Reply]: ...

    def close(self, timeout_s: float) -> list[Reply]: ...


class ProcessLink:
    """The writer child (collector.writer.child), fed through a pipe. See NOTE [ Writer process ]."""

    def __init__(self, opening: Open) -> None:
        frames_r, self._frames = os.pipe()
        self._replies, replies_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-c", BOOT.format(root=PACKAGE_ROOT, path=_parent_path())],
                stdin=frames_r,
                stdout=replies_w,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches the training process only
            )
        except BaseException:
            for fd in (self._frames, self._replies):
                os.close(fd)
            raise
        finally:
            os.close(frames_r)
            os.close(replies_w)
        with contextlib.suppress(OSError):
            fcntl.fcntl(self._frames, F_SETPIPE_SZ, PIPE_BYTES)
        os.set_blocking(self._replies, False)
        self._incoming = FrameBuffer()
        self._eof = False
        _links.add(self)
        self._write(encode_frame(opening))

    def _write(self, frame: bytes) -> None:
        view = memoryview(frame)
        while view:
            view = view[os.write(self._frames, view) :]

    def first_reply(self, timeout_s: float) -> list[Reply] | None:
        """The child's answer to Open, or None if it died or never answered."""
        deadline = time.monotonic() + timeout_s
        while not (replies := self.messages()) and not self._eof:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                break
        if not replies:
            self.close(0.0)
            return None
        return replies

    def send(self, flush: Flush) -> None:
        self._write(encode_frame(flush))

    def due(self) -> float:
        return float("inf")  # the child samples on its own clock

    def sample(self) -> None:
        pass

    def messages(self) -> list[Reply]:
        """Replies that have arrived, without waiting."""
        out: list[Reply] = []
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self._replies, 1 << 16):
                for payload in self._incoming.feed(chunk):
                    out.extend(decode_replies(payload))
            self._eof = True
        return out

    def close(self, timeout_s: float) -> list[Reply]:
        """Tell the child to finish, wait for it to write what it has, then read its last replies."""
        with contextlib.suppress(OSError):
            self._write(encode_frame(Close()))
        with contextlib.suppress(OSError):
            os.close(self._frames)
        _links.discard(self)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return [Warned("writer-slow", f"the writer process was still writing after {timeout_s:.0f} s")]
        out = self.messages()
        os.close(self._replies)
        return out


# NOTE [ Forked children ]
# A DataLoader worker started with fork inherits every descriptor. Two
# consequences. subprocess waits for the child's exec on a pipe that a worker
# forked meanwhile by another thread would hold open, stalling until that
# worker exits: so the writer is launched on the thread that calls watch(),
# which cannot be forking workers at that moment. And a worker holding the
# writer's input open would keep it from ever seeing the end of its input
# should the training process die: so forked children close their copies.
_links: weakref.WeakSet[ProcessLink] = weakref.WeakSet()


def _close_in_child() -> None:
    for link in list(_links):
        for fd in (link._frames, link._replies):
            with contextlib.suppress(OSError):
                os.close(fd)
    _links.clear()


os.register_at_fork(after_in_child=_close_in_child)


def _parent_path() -> list[str]:
    return [p for p in sys.path if p and os.path.isabs(p)]


class LocalLink:
    """The Sink (and its Sampler) run inside the monitor thread, for where no child process can start."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self._messages: list[Reply] = []

    def send(self, flush: Flush) -> None:
        self._messages.extend(self.sink.write(flush))

    def due(self) -> float:
        """When the sampler wants the monitor thread next (time.monotonic)."""
        return self.sink.sampler.due()

    def sample(self) -> None:
        self.sink.sampler.sample()
        self._messages.extend(self.sink.take_messages())

    def messages(self) -> list[Reply]:
        out, self._messages = self._messages, []
        return out

    def close(self, timeout_s: float) -> list[Reply]:
        self._messages.extend(self.sink.close())
        return self.messages()


def launch(opening: Open) -> ProcessLink | None:
    """Start the writer process, on the thread that calls watch(): see NOTE [ Forked children ]."""
    try:
        return ProcessLink(opening)
    except OSError:
        return None


def connect(
    opening: Open,
    launched: ProcessLink | None,
    nvml_factory: NvmlFactory | None = None,
    host_factory: HostFactory | None = None,
) -> tuple[Link | None, list[Reply]]:
    """Wait for the launched writer to create the run: (link, replies), link None when nothing can be recorded.

    Without a writer process (none launched, or it died) the Sink runs in this
    thread, with the sampler factories given (tests hand in fakes).
    """
    if launched is not None:
        replies = launched.first_reply(START_TIMEOUT_S)
        if replies is not None:
            if any(isinstance(reply, RunCreated) for reply in replies):
                return launched, replies
            launched.close(START_TIMEOUT_S)  # it could not open the file and is exiting
            return None, replies
    try:
        sink = Sink(opening, nvml_factory=nvml_factory, host_factory=host_factory)
    except Exception as exc:  # noqa: BLE001 - unwritable path, full disk, foreign file
        return None, [open_failure(opening.db_path, exc)]
    return LocalLink(sink), [RunCreated(sink.run_id), *sink.take_messages()]

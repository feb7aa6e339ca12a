"""The training process's handle on its writer child (``WriterProcess``): spawns it, feeds it frames without blocking, watches it for silence."""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import threading
import time

from collector.writer.frames import (
    Alive,
    Close,
    Flush,
    Open,
    Reply,
    decode_channel_replies,
    encode_message,
)
from collector.writer.pipe import READ_BYTES, FrameBuffer
from collector.writer.spawn import end_child, forget_in_forks, start_child, waiting_for_cpu

PIPE_BYTES = READ_BYTES  # one flush of a 100k batches/s loop, so the monitor rarely waits
F_SETPIPE_SZ = 1031  # Linux; elsewhere the default pipe size only means more round trips
BOOT_IMPORTS = "import os, sys, array, dataclasses, json, marshal, select, signal, sqlite3, struct; "
BOOT_CODE = "from collector.writer.child import main; main()"


# NOTE [ Writer health ]
# The writer answers the frames it writes and, from a thread of its own, says
# it is alive whenever it said nothing else for PING_INTERVAL_S, also while
# SQLite waits on a lock.
# So silence means it is stopped (SIGSTOP), hung, gone or starved: ``health``
# reads "dead" once the process has exited and "stuck" after STUCK_AFTER_S
# without a word (STARTUP_GRACE_S for the first), and the monitor then
# replaces it (collector/writer/supervisor.py). Starved is not stuck: at nice
# +10 beside a job and other busy processes that fill every core, the writer
# can wait over a second for a core (12 spinning processes on 2 cores: 1.3 s
# silent while it wrote a run's end, and it was killed with that end). So a
# silent writer with a runnable thread (``waiting_for_cpu``: Linux's /proc)
# is waited for, up to STARVED_LIMIT_S; what is still in the pipe is read
# before silence is judged. Frames are written without blocking: a
# writer that reads nothing fills the pipe, and what does not fit waits in
# ``_out`` (at most MAX_BACKLOG_BYTES; beyond that ``send`` refuses the
# frame, whose records the monitor counts), so the monitor thread never
# waits on it either.
STUCK_AFTER_S = 1.0
STARTUP_GRACE_S = 10.0
STARVED_LIMIT_S = 30.0
MAX_BACKLOG_BYTES = 16 << 20


class WriterProcess:
    """The writer child (collector.writer.child) and its two pipes; shared by the runs on it (NOTE [ One writer a process ] in channel.py).

    Every method takes the lock: the runs' monitor threads call in concurrently.
    """

    def __init__(self) -> None:
        self.pid, self._frames, self._replies = start_child(BOOT_CODE, BOOT_IMPORTS)  # NOTE [ A polite writer ]
        with contextlib.suppress(OSError):
            fcntl.fcntl(self._frames, F_SETPIPE_SZ, PIPE_BYTES)
        os.set_blocking(self._frames, False)
        os.set_blocking(self._replies, False)
        self.lock = threading.RLock()
        self._incoming = FrameBuffer()
        self._out = bytearray()
        self._inboxes: dict[int, list[Reply]] = {}  # channel -> replies not yet taken
        self._next_channel = 0
        self.open_channels = 0
        self.retired = False  # the last run's Close went out: no run joins it any more
        self.eof = False
        self.exit_status: int | None = None
        self.heard_at = time.monotonic()
        self.answered = False  # anything heard yet
        forget_in_forks(self)  # NOTE [ Forked children ] in spawn.py

    @property
    def replies_fd(self) -> int:
        return self._replies

    def open_channel(self, opening: Open) -> int:
        with self.lock:
            channel = self._next_channel
            self._next_channel += 1
            self._inboxes[channel] = []
            self.open_channels += 1
            self._out += encode_message(channel, opening)
            self.pump()
            return channel

    def end_channel(self, channel: int) -> bool:
        """Send the channel's Close; True when it was the last open one (the child then exits, and no run joins it)."""
        with self.lock:
            self.open_channels -= 1
            last = self.open_channels <= 0
            if last:
                self.retired = True
            with contextlib.suppress(OSError):
                self.send(channel, Close())
            return last

    def send(self, channel: int, frame: Flush | Close) -> bool:
        """Queue a frame; False (the frame refused) when the writer has not read the last MAX_BACKLOG_BYTES."""
        with self.lock:
            if len(self._out) > MAX_BACKLOG_BYTES and isinstance(frame, Flush):
                self.pump()
                if len(self._out) > MAX_BACKLOG_BYTES:
                    return False
            self._out += encode_message(channel, frame)
            self.pump()
            return True

    def backlog(self) -> int:
        return len(self._out)

    def pump(self) -> None:
        """Write what the pipe takes now; raises OSError when the writer is gone."""
        with self.lock:
            out = self._out
            while out:
                try:
                    written = os.write(self._frames, out)
                except BlockingIOError:
                    return
                del out[:written]

    def take(self, channel: int) -> list[Reply]:
        """The channel's replies that have arrived, without waiting (the writer's pings are not among them)."""
        with self.lock:
            self.read()
            inbox = self._inboxes.get(channel)
            if not inbox:
                return []
            out = list(inbox)
            inbox.clear()
            return out

    def read(self) -> None:
        """Move whatever arrived into the channels' inboxes."""
        with self.lock, contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(self._replies, 1 << 16):
                self.heard_at = time.monotonic()
                self.answered = True
                for payload in self._incoming.feed(chunk):
                    to, replies = decode_channel_replies(payload)
                    inbox = self._inboxes.get(to)
                    if inbox is not None:
                        inbox.extend(r for r in replies if not isinstance(r, Alive))
            self.eof = True

    def release(self, channel: int) -> None:
        with self.lock:
            self._inboxes.pop(channel, None)

    def health(self) -> str:
        """ "ok", "dead" (the process exited) or "stuck" (silent too long). See NOTE [ Writer health ]."""
        if self.poll() is not None:
            return "dead"
        self.read()
        silent_s = time.monotonic() - self.heard_at
        if silent_s <= (STUCK_AFTER_S if self.answered else STARTUP_GRACE_S):
            return "ok"
        if silent_s <= STARVED_LIMIT_S and waiting_for_cpu(self.pid):
            return "ok"
        return "stuck"

    def poll(self) -> int | None:
        """The exit status once the child has ended (negative: the signal that ended it)."""
        with self.lock:
            if self.exit_status is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): gone all the same
                    self.exit_status = -1
                else:
                    if pid:
                        self.exit_status = os.waitstatus_to_exitcode(status)
            return self.exit_status

    def wait(self, timeout_s: float) -> int | None:
        """Wait for the child's exit (the replies read meanwhile, while its pipe is open, kept for their channels)."""
        deadline = time.monotonic() + timeout_s
        while self.poll() is None and time.monotonic() < deadline:
            if self._replies >= 0:
                with contextlib.suppress(OSError, ValueError):
                    select.select([self._replies], [], [], min(0.02, max(0.0, deadline - time.monotonic())))
                    self.read()
                    continue
            time.sleep(0.05)
        return self.poll()

    def kill(self) -> None:
        """SIGKILL, reap, close the pipes: for every run on it."""
        self.retired = True
        if self.poll() is None:
            status = end_child(self.pid)
            with self.lock:
                if status is not None and self.exit_status is None:
                    self.exit_status = status
        self.read()
        self.close_fds()

    def close_input(self) -> None:
        with self.lock:
            with contextlib.suppress(OSError):
                os.close(self._frames)
            self._frames = -1

    def forget_in_fork(self) -> None:
        """Close the pipes; in a forked process without the lock (another thread may hold it in the parent)."""
        for fd in (self._frames, self._replies):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._frames = self._replies = -1

    def close_fds(self) -> None:
        with self.lock:
            self.forget_in_fork()

"""The writer child process: started with posix_spawn, fed frames without blocking, watched for silence."""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import sys
import threading
import time
import weakref
from pathlib import Path

from collector.writer.frames import (
    READ_BYTES,
    Alive,
    Close,
    Flush,
    FrameBuffer,
    Open,
    Reply,
    Warned,
    decode_replies,
    encode_frame,
)

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


# NOTE [ Writer health ]
# The writer answers every frame it writes and, from a thread of its own,
# says it is alive every PING_INTERVAL_S, also while SQLite waits on a lock.
# So silence means it is stopped (SIGSTOP), hung or gone: ``health`` reads
# "dead" once the process has exited and "stuck" after STUCK_AFTER_S without
# a word (STARTUP_GRACE_S for the first), and the monitor then replaces it
# (collector/writer/supervisor.py). Frames are written without blocking: a
# writer that reads nothing fills the pipe, and what does not fit waits in
# ``_out`` (at most MAX_BACKLOG_BYTES; beyond that ``send`` refuses the
# frame, whose records the monitor counts), so the monitor thread never
# waits on it either.
STUCK_AFTER_S = 1.0
STARTUP_GRACE_S = 10.0
MAX_BACKLOG_BYTES = 16 << 20


class ProcessLink:
    """The writer child (collector.writer.child), fed through a pipe. See NOTE [ Writer process ]."""

    def __init__(self, opening: Open) -> None:
        frames_r, self._frames = _pipe()
        self._replies, replies_w = _pipe()
        try:
            # posix_spawn, not subprocess: it waits for the exec on no pipe, so
            # it is safe from any thread while workers fork (NOTE [ Forked children ]).
            self.pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-c", BOOT.format(root=PACKAGE_ROOT, path=_parent_path())],
                dict(os.environ),
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, frames_r, 0),
                    (os.POSIX_SPAWN_DUP2, replies_w, 1),
                    (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
                ],
                setsid=True,  # Ctrl-C reaches the training process only
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
        os.set_blocking(self._frames, False)
        os.set_blocking(self._replies, False)
        self._incoming = FrameBuffer()
        self._out = bytearray(encode_frame(opening))
        self._eof = False
        self.exit_status: int | None = None
        self.started_at = self.heard_at = time.monotonic()
        self.answered = False  # anything heard yet
        _links.add(self)
        self.pump()

    def first_reply(self, timeout_s: float) -> list[Reply] | None:
        """The child's answer to Open, or None if it died or never answered."""
        deadline = time.monotonic() + timeout_s
        while not (replies := self.messages()) and not self._eof:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                break
        if not replies:
            replies = self.kill()
            return replies or None
        return replies

    def send(self, flush: Flush) -> bool:
        """Queue a frame; False (the frame refused) when the writer has not read the last MAX_BACKLOG_BYTES."""
        if len(self._out) > MAX_BACKLOG_BYTES:
            self.pump()
            if len(self._out) > MAX_BACKLOG_BYTES:
                return False
        self._out += encode_frame(flush)
        self.pump()
        return True

    def pump(self) -> None:
        """Write what the pipe takes now; raises OSError when the writer is gone."""
        out = self._out
        while out:
            try:
                written = os.write(self._frames, out)
            except BlockingIOError:
                return
            del out[:written]

    def due(self) -> float:
        return float("inf")  # the child samples on its own clock

    def sample(self) -> None:
        pass

    def messages(self) -> list[Reply]:
        """Replies that have arrived, without waiting (the writer's pings are not among them)."""
        out: list[Reply] = []
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self._replies, 1 << 16):
                self.heard_at = time.monotonic()
                self.answered = True
                for payload in self._incoming.feed(chunk):
                    out.extend(r for r in decode_replies(payload) if not isinstance(r, Alive))
            self._eof = True
        return out

    def health(self) -> str:
        """ "ok", "dead" (the process exited) or "stuck" (silent too long). See NOTE [ Writer health ]."""
        if self.poll() is not None:
            return "dead"
        silent_s = time.monotonic() - self.heard_at
        if silent_s > (STUCK_AFTER_S if self.answered else STARTUP_GRACE_S):
            return "stuck"
        return "ok"

    def poll(self) -> int | None:
        """The exit status once the child has ended (negative: the signal that ended it)."""
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
        """Wait for the child's exit (its replies read meanwhile while its pipe is open)."""
        deadline = time.monotonic() + timeout_s
        while self.poll() is None and time.monotonic() < deadline:
            if self._replies >= 0:
                with contextlib.suppress(OSError, ValueError):
                    select.select([self._replies], [], [], min(0.02, max(0.0, deadline - time.monotonic())))
                    self.messages()
                    continue
            time.sleep(0.05)
        return self.poll()

    def kill(self) -> list[Reply]:
        """SIGKILL (a stopped process dies of it too), reap, close the pipes; the replies it left in the pipe."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.wait(5.0)
        left = []
        with contextlib.suppress(OSError):
            left = self.messages()
        self._close_fds()
        return left

    def _close_fds(self) -> None:
        _links.discard(self)
        for fd in (self._frames, self._replies):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._frames = self._replies = -1

    def close(self, timeout_s: float) -> list[Reply]:
        """Tell the child to finish and wait up to ``timeout_s`` for it; a stuck child is killed.

        A child that is alive but cannot write yet (a full disk: NOTE [ Final
        state ]) is left to retry; it exits once the training process is gone.
        """
        deadline = time.monotonic() + timeout_s
        out: list[Reply] = []
        with contextlib.suppress(OSError):
            self._out += encode_frame(Close())
            while self._out and time.monotonic() < deadline and self.health() == "ok":
                self.pump()
                if self._out:
                    select.select([], [self._frames], [], min(0.05, max(0.0, deadline - time.monotonic())))
                out += self.messages()
        with contextlib.suppress(OSError):
            os.close(self._frames)
        self._frames = -1
        while self.poll() is None and time.monotonic() < deadline and self.health() == "ok":
            select.select([self._replies], [], [], min(0.05, max(0.0, deadline - time.monotonic())))
            out += self.messages()
        out += self.messages()
        if self.poll() is None:
            if self.health() == "stuck" or self._out:
                out += self.kill()
                out.append(Warned("writer-stuck", "the writer process stopped responding; it was ended"))
                return out
            out.append(Warned("writer-slow", f"the writer could not finish within {timeout_s:.1f} s; it retries alone"))
            threading.Thread(target=self.wait, args=(float("inf"),), name="stallwatch-reap", daemon=True).start()
        self._close_fds()
        return out


def _pipe() -> tuple[int, int]:
    """A pipe whose ends are not 0, 1 or 2 (where stdin is closed), so dup2 onto them never no-ops."""
    ends = []
    for fd in os.pipe():
        if fd <= 2:
            moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
            os.close(fd)
            fd = moved
        ends.append(fd)
    return ends[0], ends[1]


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
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
    _links.clear()


os.register_at_fork(after_in_child=_close_in_child)


def _parent_path() -> list[str]:
    return [p for p in sys.path if p and os.path.isabs(p)]

"""One run's end of the shared writer process: the Link a run's Supervisor holds (NOTE [ One writer a process ])."""

from __future__ import annotations

import contextlib
import select
import threading
import time

from collector.writer.frames import Closed, Flush, Open, Reply, Warned
from collector.writer.process import WriterProcess
from collector.writer.spawn import at_fork_in_child, raise_to_ours

# NOTE [ One writer a process ]
# A training process often iterates several loaders (train and val, a
# framework's sanity check): one writer child serves them all, each run on a
# channel of its own (NOTE [ Frames ]). A writer costs about 0.1 s of CPU to
# start (an interpreter, psutil, NVML) and its pings and sampling run all
# the time, on the very cores the job fills (issue 15's real-loop bench). So
# the first run of a process starts it, later runs open a channel on it, and
# the last run's Close ends it; a run that starts after that starts the next
# one. Its health is every channel's: a writer one run finds dead or stuck
# (and kills) is replaced, on a new child, by each run that was on it.
# ``collector run`` starts the writer before the script (``prestart``): its
# boot then runs beside the script's own imports, on a core they leave idle,
# not beside the first epoch. A writer no run joins ends with the process
# (the end of its input).

_lock = threading.Lock()  # guards _current: which writer a starting run joins
_current: WriterProcess | None = None


def _writer() -> WriterProcess:
    """The process's writer, started here when there is none, or it ended or is ending; call it under _lock."""
    global _current
    if _current is None or _current.retired or _current.poll() is not None:
        _current = WriterProcess()
    return _current


def _join(opening: Open) -> tuple[WriterProcess, int]:
    """The process's writer and a new channel on it."""
    with _lock:
        process = _writer()
        return process, process.open_channel(opening)


def prestart() -> None:
    """Start the process's writer now, for the first run to join; nothing where one runs or none can start."""
    with _lock, contextlib.suppress(OSError):
        _writer()


def _forget() -> None:
    """In a forked child: the parent's writer is not this process's (NOTE [ Forked children ] in spawn.py)."""
    global _current
    _current = None


at_fork_in_child(_forget)


class ProcessLink:
    """One run on the shared writer child: frames out on its channel, its replies in. See NOTE [ Writer health ]."""

    def __init__(self, opening: Open) -> None:
        self.process, self.channel = _join(opening)
        self.pid = self.process.pid
        self._closed = False

    def _until_closed(self, deadline: float) -> list[Reply]:
        """This run's replies until its Closed, the deadline, or the writer's failure."""
        out: list[Reply] = []
        while time.monotonic() < deadline and self.process.health() == "ok":
            try:
                self.process.pump()
            except OSError:
                break
            out += self.messages()
            if any(isinstance(r, Closed) for r in out):
                return out
            self._select(min(0.05, max(0.0, deadline - time.monotonic())))
        return out + self.messages()

    def first_reply(self, timeout_s: float) -> list[Reply] | None:
        """The child's answer to Open, or None if it died or never answered."""
        process = self.process
        deadline = time.monotonic() + timeout_s
        while not (replies := self.messages()) and not process.eof:
            left = deadline - time.monotonic()
            if left <= 0 or process.poll() is not None:
                break
            self._select(min(left, 0.05))
        if not replies:
            return self.kill() or None
        return replies

    def _select(self, timeout_s: float) -> None:
        fd = self.process.replies_fd
        if fd < 0:
            time.sleep(timeout_s)
            return
        try:
            select.select([fd], [], [], timeout_s)
        except (OSError, ValueError):  # another run closed it meanwhile
            time.sleep(timeout_s)

    def send(self, flush: Flush) -> bool:
        return self.process.send(self.channel, flush)

    def pump(self) -> None:
        self.process.pump()

    def due(self) -> float:
        return float("inf")  # the child samples on its own clock

    def sample(self) -> None:
        pass

    def messages(self) -> list[Reply]:
        return self.process.take(self.channel)

    def health(self) -> str:
        return self.process.health()

    def poll(self) -> int | None:
        return self.process.poll()

    def kill(self) -> list[Reply]:
        """End the writer (for every run on it: each replaces it); the replies it left for this run."""
        self.process.kill()
        left = self.process.take(self.channel)
        self.process.release(self.channel)
        return left

    def close(self, timeout_s: float) -> list[Reply]:
        """Finish this run on the writer within ``timeout_s``; a stuck writer is killed.

        The last run's Close ends the child: then this also waits for its
        exit. A child that is alive but cannot write yet (a full disk: NOTE
        [ Final state ]) is left to retry; it exits once the training process is gone.
        """
        process = self.process
        deadline = time.monotonic() + timeout_s
        last = process.end_channel(self.channel)
        if last:  # the end is urgent now, the loop waits on it: NOTE [ A polite writer ] in spawn.py
            raise_to_ours(process.pid)
        out = self._until_closed(deadline)
        done = any(isinstance(r, Closed) for r in out)
        out = [r for r in out if not isinstance(r, Closed)]
        if last and process.health() == "ok":  # a stuck child is not waited for: it is killed below
            process.close_input()
            process.wait(max(0.0, deadline - time.monotonic()))
            out += self.messages()
        if not done or (last and process.poll() is None):
            if process.health() == "stuck" or process.backlog():
                out += self.kill()
                out.append(Warned("writer-stuck", "the writer process stopped responding; it was ended"))
                return out
            if process.poll() is None:
                out.append(
                    Warned("writer-slow", f"the writer could not finish within {timeout_s:.1f} s; it retries alone")
                )
                if last:
                    threading.Thread(
                        target=process.wait, args=(float("inf"),), name="stallwatch-reap", daemon=True
                    ).start()
                return out
        process.release(self.channel)
        if last:
            process.close_fds()
        return out

"""The monitor's writer, kept alive: a dead or stuck writer process is noticed and replaced, a bounded number of times."""

from __future__ import annotations

import dataclasses

from collector.sample.sampler import HostFactory, NvmlFactory
from collector.writer.channel import ProcessLink
from collector.writer.frames import Flush, Open, Reply, RunCreated, Taken, Warned
from collector.writer.link import Link, connect

MAX_RESTARTS = 3  # per run; then recording stops and only the end is tried once more
RESTART_MIN_S = 0.3  # time a new writer needs to start and write a run's end


class Supervisor:
    """Holds the run's Link and replaces it when it dies or hangs. See NOTE [ Writer health ] in link.py.

    ``send`` never blocks and says whether the frame went out: a refused
    frame's records are the caller's to count. The samples each writer took
    are followed here (``Taken`` replies), so a replacement starts from its
    predecessors' total (NOTE [ Accounting ] in collector/store/connection.py).
    """

    def __init__(self, opening: Open, launched: ProcessLink | None) -> None:
        self.opening = opening
        self._launched = launched
        self.link: Link | None = None
        self.run_id: int | None = None
        self.restarts = 0
        self._taken_before = 0  # samples the replaced writers took
        self._taken_now = 0  # samples the current writer took

    def connect(self, nvml_factory: NvmlFactory | None, host_factory: HostFactory | None) -> list[Reply]:
        """Wait for the first writer to create the run (or for the in-thread Sink where none started)."""
        self.link, replies = connect(self.opening, self._launched, nvml_factory, host_factory)
        self._launched = None
        return self._read(replies)

    def send(self, flush: Flush) -> bool:
        if self.link is None and flush.iterated is not None and self.run_id is not None:
            self._start("was gone at the end")  # the run's end is worth one more writer: NOTE [ Final state ]
        if self.link is None:
            return False
        try:
            return self.link.send(flush)
        except OSError:  # the pipe broke: the writer is gone; messages() replaces it
            return False

    def messages(self) -> list[Reply]:
        """The writer's replies, and a warning when it had to be replaced."""
        link = self.link
        if link is None:
            return []
        try:
            link.pump()
            replies = link.messages()
        except OSError:
            replies = []
        health = link.health()
        if health == "ok":
            return self._read(replies)
        replies = self._read(replies)
        why = "died" if health == "dead" else "stopped responding"
        if isinstance(link, ProcessLink):
            status = link.poll()
            if health == "dead" and status is not None and status < 0:
                why = f"was killed (signal {-status})"
        return replies + self._replace(why)

    def _read(self, replies: list[Reply]) -> list[Reply]:
        out: list[Reply] = []
        for reply in replies:
            if isinstance(reply, Taken):
                self._taken_now = reply.samples
                continue
            if isinstance(reply, RunCreated):
                self.run_id = reply.run_id
            out.append(reply)
        return out

    def _replace(self, why: str) -> list[Reply]:
        old, self.link = self.link, None
        left = self._read(old.kill()) if isinstance(old, ProcessLink) else []
        if self.restarts >= MAX_RESTARTS:
            text = (
                f"the writer process {why}, after {MAX_RESTARTS} replacements: recording stops here "
                "(the batches from now on are counted in dropped_records)"
            )
            return [*left, Warned("writer-failed", text)]
        self.restarts += 1
        return left + self._start(why)

    def _start(self, why: str) -> list[Reply]:
        self._taken_before += self._taken_now
        self._taken_now = 0
        opening = dataclasses.replace(self.opening, run_id=self.run_id, samples_before=self._taken_before)
        try:
            self.link = ProcessLink(opening)
        except OSError as exc:
            return [Warned("writer-failed", f"the writer process {why} and no new one could start ({exc})")]
        return [
            Warned(
                "writer-restarted",
                f"the writer process {why}; a new one took over (what the old one had not written "
                "is counted in dropped_records)",
            )
        ]

    def due(self) -> float:
        return float("inf") if self.link is None else self.link.due()

    def sample(self) -> None:
        if self.link is not None:
            self.link.sample()

    def finish(self, final: Flush, timeout_s: float) -> tuple[list[Reply], bool]:
        """Send the run's last frame and close the writer within ``timeout_s``: (replies, whether it was lost).

        Lost: it could not go out, or the writer hung and was killed with it.
        The caller may try again, with a new writer (NOTE [ Final state ]).
        """
        out = self.messages()
        sent = self.send(final)
        replies = self.close(timeout_s)
        lost = not sent or any(isinstance(r, Warned) and r.key == "writer-stuck" for r in replies)
        return out + replies, lost and self.run_id is not None

    def close(self, timeout_s: float) -> list[Reply]:
        if self.link is None:
            return []
        link, self.link = self.link, None
        try:
            return self._read(link.close(timeout_s))
        except OSError:
            return []

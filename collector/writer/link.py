"""The monitor's end of the writer: a child process (collector/writer/process.py), or the same Sink in this thread."""

from __future__ import annotations

from typing import Protocol

from collector.sample.sampler import HostFactory, NvmlFactory
from collector.writer.channel import ProcessLink
from collector.writer.frames import Flush, Open, Reply, RunCreated, open_failure
from collector.writer.sink import Sink

START_TIMEOUT_S = 15.0


class Link(Protocol):
    """Where the monitor sends frames and hears back from."""

    def send(self, flush: Flush) -> bool: ...

    def pump(self) -> None: ...

    def health(self) -> str: ...

    def due(self) -> float: ...

    def sample(self) -> None: ...

    def messages(self) -> list[Reply]: ...

    def close(self, timeout_s: float) -> list[Reply]: ...


class LocalLink:
    """The Sink (and its Sampler) run inside the monitor thread, for where no child process can start."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self._messages: list[Reply] = []

    def send(self, flush: Flush) -> bool:
        self._messages.extend(self.sink.write(flush))
        return True

    def pump(self) -> None:
        pass

    def health(self) -> str:
        return "ok"

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
    """Start the writer process, on the thread that calls watch(): see NOTE [ Forked children ] in spawn.py."""
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
            launched.close(START_TIMEOUT_S)  # it could not open the file: this run's channel ends
            return None, replies
    try:
        sink = Sink(opening, nvml_factory=nvml_factory, host_factory=host_factory)
    except Exception as exc:  # noqa: BLE001 - unwritable path, full disk, foreign file
        return None, [open_failure(opening.db_path, exc)]
    return LocalLink(sink), [RunCreated(sink.run_id), *sink.take_messages()]

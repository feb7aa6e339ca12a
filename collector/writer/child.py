"""The writer process: a run's frames arrive on stdin and go into SQLite; replies leave on stdout.

The monitor starts it (collector/writer/link.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import sqlite3
import sys
import time
from array import array
from collections.abc import Iterator
from itertools import chain, repeat
from typing import Any

from collector.sample.sampler import HostFactory, NvmlFactory, Sampler
from collector.store.connection import GPU_IDLE_UPDATE, Store, batch_insert_sql, fetch_insert_sql
from collector.writer.frames import (
    CLOCKS,
    FETCH,
    LAYOUTS,
    WAITED,
    EpochRow,
    Flush,
    FrameReader,
    Open,
    Reply,
    RunCreated,
    Unwritten,
    Warned,
    decode_frame,
    encode_replies,
    open_failure,
    write_frame,
)

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
                job_id=start.job_id,
                stage=start.stage,
            )
        except BaseException:
            self.store.close()
            raise
        self._batch_sql = {
            name: batch_insert_sql(self.run_id, opening.wall0_s, opening.perf0_ns, layout[CLOCKS:])
            for name, layout in LAYOUTS.items()
        }
        self._fetch_sql = fetch_insert_sql(self.run_id)
        self._epochs: dict[int, EpochRow] = {}  # epoch rows not yet written
        self._tails: dict[int, tuple[int, int]] = {}  # epoch -> (idx, t_return_ns) of its last timed batch
        self._messages: list[Reply] = []  # the sampler's warnings, sent with the next reply
        self.sampler = Sampler(
            opening.rates,
            start.pid,
            start.host,
            lambda key, text: self._messages.append(Warned(key, text)),
            nvml_factory=nvml_factory,
            host_factory=host_factory,
        )

    def take_messages(self) -> list[Reply]:
        out, self._messages = self._messages, []
        return out

    def write(self, flush: Flush) -> list[Reply]:
        """Write one frame and the samples taken since the last; never raises.

        A failure costs the frame's records (counted in the reply). Returns the
        replies: the failure, and any warning from the sampler.
        """
        for row in flush.epochs:
            self.sampler.see_workers(row.epoch, json.loads(row.worker_pids_json))
        self.sampler.sample()  # whatever is due: frames may come faster than the sampler's timeouts
        samples, update = self.sampler.take()
        return self._write(dataclasses.replace(flush, update={**update, **flush.update}), samples)

    def _write(self, flush: Flush, samples: dict[str, list[tuple[Any, ...]]]) -> list[Reply]:
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
            self._epochs[row.epoch] = row
        epochs = [(run_id, *dataclasses.astuple(row)) for _, row in sorted(self._epochs.items())]
        try:
            self.store.write(sample_rows, epochs=epochs, run_update=flush.update, run_id=run_id, statements=statements)
        except sqlite3.Error as exc:
            name = type(exc).__name__
            self._messages += [
                Unwritten(flush.record_count()),
                Warned(f"write-{name}", f"recording problem ({name}: {exc}); continuing"),
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

    def close(self) -> list[Reply]:
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
    return list(zip(*[iter(values)] * len(FETCH), strict=True))


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    incoming, replies = FrameReader(sys.stdin.fileno()), sys.stdout.buffer
    opening = decode_frame(incoming.next(None))
    if not isinstance(opening, Open):
        return
    try:
        sink = Sink(opening)
    except Exception as exc:  # noqa: BLE001 - unwritable path, full disk, foreign file: told to the parent
        write_frame(replies, encode_replies([open_failure(opening.db_path, exc)]))
        return
    write_frame(replies, encode_replies([RunCreated(sink.run_id), *sink.take_messages()]))
    messages: list[Reply] = []
    try:
        while True:
            payload = incoming.next(sink.sampler.due() - time.monotonic())
            if payload is WAITED:
                sink.sampler.sample()
                messages = sink.take_messages()
            else:
                frame = decode_frame(payload)
                if not isinstance(frame, Flush):  # the close frame, or the end of input: the training process is gone
                    break
                messages = sink.write(frame)
            if messages:
                write_frame(replies, encode_replies(messages))
    finally:
        messages = sink.close()
        if messages:
            with contextlib.suppress(OSError):
                write_frame(replies, encode_replies(messages))


if __name__ == "__main__":
    main()

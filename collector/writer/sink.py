"""The Sink: one run's Store and Sampler; each Flush, with the samples taken since, in one transaction."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sqlite3
import time
from array import array
from collections.abc import Callable, Iterator
from typing import Any

from collector.errors import StallwatchError
from collector.sample.sampler import HostFactory, NvmlFactory, Sampler
from collector.store.connection import (
    GPU_IDLE_UPDATE,
    Store,
    batch_insert_sql,
    cannot_write,
    exit_insert_sql,
    fetch_insert_sql,
)
from collector.store.file_checks import network_warning
from collector.store.fold import Folder
from collector.store.schema import TRIAL_COLUMNS
from collector.store.stage_sql import stage_upsert_sql
from collector.writer.batch_records import CLOCKS, LAYOUTS, Record, fast_records, ring_clocks
from collector.writer.frames import (
    FETCH,
    EpochRow,
    Flush,
    Open,
    Reply,
    RunCreated,
    Taken,
    Unwritten,
    Warned,
)


class Sink:
    """Owns the Store and the Sampler for one run; writes each Flush, with the samples taken since, in one transaction.

    The factories are for tests (fake NVML, fake psutil); see collector/sample/sampler.py.
    """

    def __init__(
        self,
        opening: Open,
        *,
        nvml_factory: NvmlFactory | None = None,
        host_factory: HostFactory | None = None,
        tell: Callable[[list[Reply]], None] | None = None,
    ) -> None:
        self.opening = opening
        self._tell = tell  # sends a reply at once: the samples taken, before they are written
        self._messages: list[Reply] = []  # the sampler's warnings, sent with the next reply
        self.store, self.run_id = self._open_run(opening.run_id)
        self._file = _identity(opening.db_path)
        self._epochs: dict[int, EpochRow] = {}  # epoch rows not yet written
        self._trials: dict[tuple[int, int], tuple[Any, ...]] = {}  # trial rows not yet written
        self._tails: dict[int, tuple[int, int]] = {}  # epoch -> (idx, t_return_ns) of its last timed batch
        self._pending: dict[str, Any] = {}  # run update not yet written: NOTE [ Final state ]
        self._iterated: int | None = None  # from the final flush: NOTE [ Accounting ]
        self._told_taken = 0
        self.failed = False  # the last write failed
        self.sampler = Sampler(
            opening.rates,
            opening.start.pid,
            opening.start.host,
            lambda key, text: self._messages.append(Warned(key, text)),
            nvml_factory=nvml_factory,
            host_factory=host_factory,
        )

    def _open_run(self, run_id: int | None) -> tuple[Store, int]:
        """The Store and the run: ``run_id`` where the file still holds it (a replacement writer), else a new one."""
        opening, start = self.opening, self.opening.start
        store = Store(opening.db_path)
        network = network_warning(opening.db_path)  # told once a run, as every collector warning
        if network is not None:
            self._messages.append(Warned("network-filesystem", network))
        try:
            if run_id is None or not store.has_run(run_id):
                run_id = store.create_run(
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
            store.close()
            raise
        self._batch_sql = {
            name: batch_insert_sql(run_id, opening.wall0_s, opening.perf0_ns, layout[CLOCKS:])
            for name, layout in LAYOUTS.items()
        }
        self._fetch_sql = fetch_insert_sql(run_id)
        self._exit_sql = exit_insert_sql(run_id)
        self._stage_sql = stage_upsert_sql(run_id)
        # each epoch's start stays rows: its first num_workers batches (1 without), as the diagnosis costs it
        head = max(1, int(start.config.get("num_workers") or 0)) if isinstance(start.config, dict) else 1
        self.folder = Folder(run_id, opening.rates.keep_batches, head=head)  # NOTE [ Rollups ]
        self._trial_sql = (
            f"INSERT OR REPLACE INTO trials (run_id, {', '.join(TRIAL_COLUMNS)})"
            f" VALUES ({int(run_id)}, {', '.join('?' * len(TRIAL_COLUMNS))})"
        )
        return store, run_id

    def tell_taken(self) -> None:
        """Say how many samples were taken before writing them, so a writer killed mid-write has them counted."""
        if self._tell is not None and self.sampler.taken != self._told_taken:
            self._told_taken = self.sampler.taken
            with contextlib.suppress(OSError):
                self._tell([Taken(self._told_taken)])

    def take_messages(self) -> list[Reply]:
        if self.sampler.taken != self._told_taken:
            self._told_taken = self.sampler.taken
            self._messages.append(Taken(self._told_taken))
        out, self._messages = self._messages, []
        return out

    def write(self, flush: Flush, sample: bool = True) -> list[Reply]:
        """Write one frame and the samples taken since the last; never raises.

        A failure costs the frame's records and samples (counted); its run
        update is kept and written with the next frame. Returns the replies:
        the failure, and any warning from the sampler.
        """
        for row in flush.epochs:
            self.sampler.see_workers(row.epoch, json.loads(row.worker_pids_json))
        for pid, started in flush.helpers:
            self.sampler.see_ours(pid, "helper", started)
        if sample:
            self.sampler.sample()  # whatever is due: frames may come faster than the sampler's timeouts
        self.tell_taken()
        samples, update = self.sampler.take()
        self._pending.update(update)
        self._pending.update(flush.update)
        if flush.iterated is not None:
            self._iterated = flush.iterated
        return self._write(flush, samples)

    def _write(self, flush: Flush, samples: dict[str, list[tuple[Any, ...]]]) -> list[Reply]:
        folder = self.folder.copy()
        try:
            self._follow_the_file()
            self._commit(flush, samples)
        except (sqlite3.Error, StallwatchError, OSError) as exc:
            if self.folder.run_id == folder.run_id:
                self.folder = folder  # the fold was rolled back with the rest
            self.failed = True
            name = type(exc).__name__
            text = cannot_write(self.opening.db_path, exc) if "full" in str(exc) else f"{name}: {exc}"
            self._messages += [
                Unwritten(flush.record_count()),
                Warned(f"write-{name}", f"recording problem ({text}); continuing, and the losses are counted"),
            ]
        else:
            self.failed = False
            self._epochs.clear()
            self._trials.clear()
            self._pending.clear()
        return self.take_messages()

    def _commit(self, flush: Flush, samples: dict[str, list[tuple[Any, ...]]]) -> None:
        run_id = self.run_id
        # Timed rows first: a described batch's record replaces its plain row.
        statements: list[tuple[str, Any]] = [
            (self._batch_sql["fast"], self._timed_rows(epoch, first, pairs)) for epoch, first, pairs in flush.timed
        ]
        statements += [(self._batch_sql[shape], chunk) for shape, chunk in flush.records.items() if chunk]
        if flush.fetches:
            fetches, exits = _fetch_rows(flush.fetches)
            if fetches:
                statements.append((self._fetch_sql, fetches))
            if exits:
                statements.append((self._exit_sql, exits))
        if flush.stages:
            now = time.time()
            statements.append((self._stage_sql, [(*row, now) for row in flush.stages if len(row) == 8]))
        self._trials.update({(row[0], row[1]): row for row in flush.trials})  # kept until written, as epochs are
        if self._trials:
            statements.append((self._trial_sql, list(self._trials.values())))
        if flush.idle:
            statements.append((GPU_IDLE_UPDATE, [(s, run_id, key[0], key[1]) for key, s in flush.idle]))
        sample_rows = {table: [(run_id, *row) for row in rows] for table, rows in samples.items()}
        for row in flush.epochs:
            self._epochs[row.epoch] = row
        epochs = [(run_id, *dataclasses.astuple(row)) for _, row in sorted(self._epochs.items())]
        totals = None
        if self._iterated is not None:
            totals = (self._iterated, self.opening.samples_before + self.sampler.taken)
        self.store.write(
            sample_rows,
            epochs=epochs,
            run_update=self._pending,
            run_id=run_id,
            statements=statements,
            totals=totals,
            fold=lambda conn: self.folder(conn, time.time()),
        )

    def _follow_the_file(self) -> None:
        """A file deleted or replaced under the writer: go on in a new one at the path, and say so."""
        now = _identity(self.opening.db_path)
        if now == self._file:
            return
        self.store.close()  # the last connection: SQLite removes its -wal and -shm files
        if now is None:
            for side in ("-wal", "-shm"):  # left over all the same: they would be read as the new file's
                with contextlib.suppress(OSError):
                    os.remove(self.opening.db_path + side)
        self.store, self.run_id = self._open_run(None)
        self._file = _identity(self.opening.db_path)
        self._tails.clear()
        self._messages += [
            RunCreated(self.run_id),
            Warned(
                "file-replaced",
                f"{self.opening.db_path} was deleted or replaced while recording: recording goes on in a new "
                "file there; the rows written before are lost and counted in dropped_records",
            ),
        ]

    def _timed_rows(self, epoch: int, first: int, pairs: bytes) -> Iterator[Record]:
        """Fast records from a Timer's clock pairs, each with the return before it where this writer saw it."""
        t_request, t_return = ring_clocks(pairs)
        tail = self._tails.get(epoch)
        before = tail[1] if tail is not None and tail[0] == first - 1 else None  # lapped: unknown
        self._tails[epoch] = (first + len(t_return) - 1, t_return[-1])
        return fast_records(epoch, first, t_request, t_return, before)

    # NOTE [ Final state ]
    # The run's end (status, ended_at, the exact dropped counts) must reach the
    # file even when the disk is full at that moment: a write that fails keeps
    # its run update, merged into the next, and ``close`` tries again every
    # RETRY_INTERVAL_S for as long as ``keep_trying()`` says (in the writer
    # process: while the training process lives), so the end is written as soon
    # as space returns.
    def close(self, keep_trying: Callable[[], bool] = lambda: False) -> list[Reply]:
        """Take a last sample, write what is left (retrying a failed end), close the file; the last replies."""
        try:
            self.sampler.sample(final=True)
            self.tell_taken()
            messages = self.write(Flush())
            while self.failed and keep_trying():
                time.sleep(RETRY_INTERVAL_S)
                messages += self.write(Flush(), sample=False)  # the run has ended: no more samples
        finally:
            self.sampler.close()
            self.store.close()
        return messages


RETRY_INTERVAL_S = 0.5
PING_INTERVAL_S = 0.2  # see NOTE [ Writer health ] in collector/writer/link.py


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _fetch_rows(segments: list[bytes]) -> tuple[list[tuple[float | None, ...]], list[tuple[float | None, ...]]]:
    """(fetch rows, worker exit rows) from ring segments; NaN (not measured) becomes NULL."""
    values = array("d")
    for segment in segments:
        values.frombytes(segment)
    fetches: list[tuple[float | None, ...]] = []
    exits: list[tuple[float | None, ...]] = []
    seq = FETCH.index("seq")
    for row in zip(*[iter(values)] * len(FETCH), strict=True):
        clean = tuple(None if v != v else v for v in row)
        if row[seq] < 0:
            pid, worker_id, _, _, started_at, life_s, cpu_s, runq_s = clean
            exits.append((pid, worker_id, started_at, (started_at or 0.0) + (life_s or 0.0), cpu_s, runq_s))
        else:
            fetches.append(clean)
    return fetches, exits

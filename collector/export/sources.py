"""The files an exporter follows: paths, directories and patterns re-read on every refresh, bad files reported once."""

from __future__ import annotations

import glob
import os
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from collector.errors import DamagedRun, StallwatchError
from collector.export.tail import RunSnapshot, RunTail
from collector.store import export_queries as q
from collector.store.reader import Reader, run_state

GRACE_S = 300.0  # an ended run is exported this long after it ended, then dropped
WINDOW_S = 60.0  # the stall fraction, queue depths and GPU utilisation are over this many recent seconds


def expand(source: str) -> list[str]:
    """A source argument as the files it names now: a file (existing or not yet), a directory's ``*.sqlite``, a glob."""
    if os.path.isdir(source):
        return sorted(glob.glob(os.path.join(source, "*.sqlite")))
    if glob.has_magic(source):
        return sorted(glob.glob(source))
    return [source]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class FileTail:
    """One stallwatch file, opened read-only, and the runs in it being followed."""

    reader: Reader
    runs: dict[int, RunTail] = field(default_factory=dict)


@dataclass(frozen=True)
class Refresh:
    """One refresh: a snapshot per exported run, and per file whether it could be read."""

    runs: list[RunSnapshot]
    files: dict[str, bool]
    seconds: float
    reasons: dict[str, str] = field(default_factory=dict)  # why each file that could not be read was skipped


class Exporter:
    """Follows the stallwatch files named by ``sources`` and refreshes every exported run on each call.

    A source degrades to fewer series, never to a failed scrape: a file that
    is missing, corrupt or another program's database is reported once
    (through ``report``) and tried again when it changes; a run is exported
    while it runs and for ``grace_s`` after it ended (or its heartbeat
    stopped).
    """

    def __init__(
        self,
        sources: Sequence[str],
        *,
        grace_s: float = GRACE_S,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.time,
        report: Callable[[str], None] = _stderr,
    ) -> None:
        if not grace_s >= 0:
            raise ValueError(f"grace_s must be >= 0 seconds, got {grace_s!r}")
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0 seconds, got {window_s!r}")
        self.sources = list(sources)
        self.grace_s = grace_s
        self.window_s = window_s
        self.clock = clock
        self.report = report
        self.files: dict[str, FileTail] = {}
        self._bad: dict[str, tuple[str, tuple[int, int] | None]] = {}  # path -> (message, (size, mtime) then)
        self._missing_told: set[str] = set()
        self._bad_runs: dict[tuple[str, int], str] = {}  # (path, run id) -> why it is skipped, told once

    def paths(self) -> list[str]:
        """The files the sources name now, each once."""
        seen: dict[str, str] = {}
        for source in self.sources:
            for path in expand(source):
                seen.setdefault(os.path.realpath(path), path)
        return list(seen.values())

    def refresh(self) -> Refresh:
        started = time.perf_counter()
        now = self.clock()
        snapshots: list[RunSnapshot] = []
        files: dict[str, bool] = {}
        paths = self.paths()
        for path in paths:
            tail = self._open(path)
            if tail is None:
                if path in self._bad:
                    files[path] = False
                continue
            try:
                snapshots += self._refresh_file(path, tail, now)
                files[path] = True
            except (StallwatchError, sqlite3.Error) as exc:
                self.files.pop(path, None)
                self._skip(path, f"{exc}")
                files[path] = False
        for gone in set(self.files) - set(paths):
            del self.files[gone]
        reasons = {path: self._bad[path][0] for path, up in files.items() if not up and path in self._bad}
        return Refresh(snapshots, files, time.perf_counter() - started, reasons)

    def _open(self, path: str) -> FileTail | None:
        if path in self.files:
            return self.files[path]
        if not os.path.exists(path):
            if path not in self._missing_told:
                self._missing_told.add(path)
                self.report(f"stallwatch exporter: {path} does not exist yet; exported once it appears")
            return None
        stamp = _stamp(path)
        bad = self._bad.get(path)
        if bad is not None and bad[1] == stamp:
            return None  # unchanged since it was reported
        try:
            tail = FileTail(Reader(path))
        except StallwatchError as exc:
            self._skip(path, str(exc), stamp)
            return None
        self._bad.pop(path, None)
        self.files[path] = tail
        self.report(f"stallwatch exporter: following {path}")
        return tail

    def _skip(self, path: str, message: str, stamp: tuple[int, int] | None = None) -> None:
        previous = self._bad.get(path)
        self._bad[path] = (message, stamp if stamp is not None else _stamp(path))
        if previous is None or previous[0] != message:
            self.report(f"stallwatch exporter: skipping {path}: {message}")

    def _refresh_file(self, path: str, tail: FileTail, now: float) -> list[RunSnapshot]:
        out = []
        with tail.reader.connect() as conn:
            conn.execute("BEGIN")  # one snapshot: rows and rollups agree (NOTE [ Exporting rollups ])
            rows = q.exported_runs(conn, now - self.grace_s)
            followed = set()
            for row in rows:
                run_id = int(row["id"])
                if row["damage"] is not None:
                    self._skip_run(path, run_id, row["damage"])
                    continue
                state = run_state(row["status"], row["heartbeat_at"], hostname=row["hostname"], pid=row["pid"], now=now)
                if state != "running":
                    ended = row["ended_at"] or row["heartbeat_at"] or row["started_at"] or 0.0
                    if now - float(ended) > self.grace_s:
                        continue
                run = tail.runs.setdefault(run_id, RunTail(run_id, self.window_s))
                try:
                    run.advance(conn)
                    out.append(run.snapshot(conn, row, state, now))
                except DamagedRun as exc:  # that run's problem: the file's other runs keep their series
                    self._skip_run(path, run_id, f"run {row['name']!r} (id {run_id}): {exc}")
                    tail.runs.pop(run_id, None)
                    continue
                followed.add(run_id)
                self._bad_runs.pop((path, run_id), None)
            for run_id in set(tail.runs) - followed:
                del tail.runs[run_id]
            conn.execute("COMMIT")
        return out

    def _skip_run(self, path: str, run_id: int, message: str) -> None:
        if self._bad_runs.get((path, run_id)) != message:
            self._bad_runs[(path, run_id)] = message
            self.report(f"stallwatch exporter: skipping a run of {path}: {message}")


def _stamp(path: str) -> tuple[int, int] | None:
    """Size and modification time of the file and its WAL (a writer's first tables land in the WAL)."""
    total = None
    for name in (path, path + "-wal"):
        try:
            st = os.stat(name)
        except OSError:
            continue
        size, mtime = total or (0, 0)
        total = (size + st.st_size, max(mtime, st.st_mtime_ns))
    return total

"""Several nodes' stallwatch files into one, all or nothing: runs kept with host, job and rank, nothing twice."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable

from collector.errors import CannotWrite, DamagedRun, NotAStallwatchFile, QueryTooSlow
from collector.store.checked import deadline
from collector.store.connection import Store
from collector.store.merge_copy import Merged, merge_one, uri
from collector.store.reader import Reader

__all__ = ["MERGE_LIMIT_S", "Merged", "merge_files"]

# NOTE [ Merging all or nothing ]
# The merge is built in a new file beside OUT (a copy of OUT, when it
# exists) and renamed over OUT only once every input merged, so OUT is
# either as it was or holds every input: a bad input, a damaged run, a full
# disk or Ctrl-C leave OUT untouched and remove the new file. The copy
# holds no lock on OUT while inputs are read, and each input is read under
# MERGE_LIMIT_S. The rename replaces the file a process that has OUT open
# (its -wal beside it) is writing, so that case is refused instead.
MERGE_LIMIT_S = 600.0  # one input's copy at most; a run of millions of rows copies in well under a minute


def merge_files(out: str, inputs: list[str], progress: Callable[[Merged], None] | None = None) -> list[Merged]:
    """Merge every input into ``out`` (created when missing), all or nothing (NOTE [ Merging all or nothing ]).

    Every input is checked first (missing, foreign, corrupt, newer schema, the
    output itself, a damaged run), and the merge is renamed over ``out`` only
    when each merged, so a bad input leaves ``out`` as it was.
    """
    for path in inputs:
        if os.path.exists(out) and os.path.exists(path) and os.path.samefile(out, path):
            raise NotAStallwatchFile(f"{path} is the output file itself; name a new OUT")
        _check_runs(Reader(path))  # a stallwatch file this version reads, or a one-line error saying what it is
    if os.path.exists(out) and os.path.getsize(out) > 0:
        Reader(out)  # OUT is a stallwatch file this version reads, or the same one-line error
    new = f"{out}.merging-{os.getpid()}"
    _remove(new)
    try:
        if os.path.exists(out) and os.path.getsize(out) > 0:
            _backup(out, new)
        Store(new).close()  # creates, or migrates the copy
        results = _merge_into(new, inputs, progress)
        if os.path.exists(out + "-wal"):
            raise CannotWrite(f"{out} is open in another process (its -wal is there): close it and merge again")
        os.replace(new, out)
        return results
    finally:
        _remove(new)


def _check_runs(reader: Reader) -> None:
    damaged = [d for d in reader.runs()["damage"] if d]
    if damaged:
        raise DamagedRun(f"{reader.path}: {damaged[0]}: nothing merged (leave the file out, or fix that value)")


def _backup(source: str, target: str) -> None:
    """A consistent copy of ``source`` (live or not) at ``target``."""
    src = sqlite3.connect(uri(source) + "?mode=ro", uri=True, timeout=5.0)
    dst = sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def _remove(path: str) -> None:
    for name in (path, path + "-wal", path + "-shm", path + "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)


def _merge_into(new: str, inputs: list[str], progress: Callable[[Merged], None] | None) -> list[Merged]:
    conn = sqlite3.connect(uri(new), uri=True, isolation_level=None, timeout=5.0)  # uri: ATTACH ...?mode=ro
    try:
        conn.execute("PRAGMA synchronous = NORMAL")  # as the writer: NOTE [ WAL ] in connection.py
        results = []
        for path in inputs:
            deadline(conn, MERGE_LIMIT_S)
            try:
                result = merge_one(conn, path)
            except NotAStallwatchFile as exc:
                if "interrupted" in str(exc):
                    raise QueryTooSlow(f"{path}: copying it ran past {MERGE_LIMIT_S:g} s; nothing merged") from None
                raise
            results.append(result)
            if progress is not None:
                progress(result)
        conn.set_progress_handler(None, 0)
        conn.execute("PRAGMA journal_mode = DELETE")  # the new file alone holds everything: no -wal to leave behind
        return results
    finally:
        conn.close()

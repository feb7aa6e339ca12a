"""Helpers the tests import: SQL on a recorded file, polling, collector warnings, bad files, a page's text."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sqlite3
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from collector.errors import CollectorWarning

if TYPE_CHECKING:
    from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parents[1]


def collector_messages(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, CollectorWarning)]


def query(path: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def wait_until(predicate: Any, timeout_s: float = 10.0, interval_s: float = 0.02) -> bool:
    """Poll ``predicate`` until true or the deadline passes (no fixed sleeps)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())


def file_digest(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def make_bad_file(kind: str, directory: Path, recorded: str) -> str:
    """A file the dashboard must refuse politely: missing, empty, text, foreign, newer, corrupt."""
    path = str(directory / f"{kind}.sqlite")
    if kind == "missing":
        return path
    if kind == "empty":
        Path(path).touch()
    elif kind == "not-sqlite":
        Path(path).write_text("epoch,loss\n0,2.3\n")
    elif kind == "foreign":
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, caption TEXT)")
        conn.commit()
        conn.close()
    elif kind == "newer-schema":
        _copy(recorded, path)
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
        conn.commit()
        conn.close()
    elif kind == "corrupt":
        _copy(recorded, path)
        with open(path, "r+b") as handle:  # keep the header, scribble over the b-tree pages
            handle.seek(4096)
            handle.write(os.urandom(os.path.getsize(path) - 4096))
    else:
        raise ValueError(kind)
    return path


def _copy(source: str, target: str) -> None:
    conn = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    out = sqlite3.connect(target)
    conn.backup(out)
    out.execute("PRAGMA journal_mode = DELETE")
    out.close()
    conn.close()


def texts(at: AppTest) -> str:
    """Every piece of text on the page, for assertions: as read, Markdown's escapes of file text taken off."""
    parts: list[str] = []
    for kind in ("title", "header", "subheader", "markdown", "caption", "error", "warning", "info", "success", "code"):
        parts += [shown(str(e.value)) for e in getattr(at, kind)]
    parts += [f"{m.label} {m.value}" for m in at.metric]
    return "\n".join(parts)


def shown(markdown: str) -> str:
    """Markdown's backslash escapes (app/plain.py's ``md``) taken off: the text as a reader sees it."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)


def writers_alive() -> list[psutil.Process]:
    """Writer processes of this test process that have not exited (an exited one not yet reaped is not alive)."""
    alive = []
    for p in psutil.Process().children():
        with contextlib.suppress(psutil.ZombieProcess, psutil.NoSuchProcess):
            if "collector.writer.child" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
    return alive


def writers_done(timeout_s: float = 60.0) -> None:
    """Wait for our writers to exit: on a full machine one may finish a run's end after close() returned."""
    assert wait_until(lambda: writers_alive() == [], timeout_s=timeout_s), "a writer process did not finish"

"""What a reader checks of a whole file as it opens it: our tables are tables, its version, its filesystem."""

from __future__ import annotations

import os
import sqlite3
import warnings

from collector.errors import CollectorWarning, NotAStallwatchFile

TABLES = (
    "meta",
    "runs",
    "epochs",
    "batches",
    "worker_fetches",
    "worker_exits",
    "gpu_samples",
    "host_samples",
    "proc_samples",
    "trials",
    "batch_rollups",
    "fetch_rollups",
    "gpu_rollups",
    "host_rollups",
    "proc_rollups",
)

NETWORK_FILESYSTEMS = frozenset(
    ("nfs", "nfs4", "lustre", "cifs", "smb3", "smbfs", "ceph", "fuse.sshfs", "gpfs", "beegfs", "fuse.glusterfs")
)
MOUNTS = "/proc/mounts"  # where the mounted filesystems and their types are listed (tests hand a fixture)


def check_tables(conn: sqlite3.Connection, path: str) -> None:
    """Raise unless each of our tables the file has is a table (a view or virtual table could run forever)."""
    for name, kind, sql in conn.execute(
        f"SELECT name, type, sql FROM sqlite_master WHERE name IN ({_marks(TABLES)})", TABLES
    ):
        if kind != "table" or (isinstance(sql, str) and "VIRTUAL" in sql.upper()[:40]):
            raise NotAStallwatchFile(
                f"{path}: its {name} is a {kind}, not a table: the file was edited, not written by stallwatch"
            )


def _marks(names: tuple[str, ...]) -> str:
    return ", ".join("?" * len(names))


def version_of(raw: object, path: str) -> int:
    """meta's schema_version as a positive integer, or NotAStallwatchFile saying what it holds."""
    text = raw if isinstance(raw, (str, int)) and not isinstance(raw, bool) else None
    if isinstance(text, str) and text.strip().isdigit():
        text = int(text.strip())
    if type(text) is not int or text < 1:
        raise NotAStallwatchFile(
            f"{path} has a schema version stallwatch never writes ({str(raw)[:40]!r}, not a positive integer): "
            "the file is damaged"
        )
    return text


def filesystem_of(path: str, mounts: str | None = None) -> str | None:
    """The type of the filesystem holding ``path`` (the longest mount point above it), None where unknown."""
    try:
        with open(mounts or MOUNTS, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    target = os.path.realpath(path)
    best, kind = "", None
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, parts[2]
    return kind


def network_warning(path: str, mounts: str | None = None) -> str | None:
    """One line when ``path`` is on a network filesystem, where SQLite's locking is not safe; else None."""
    kind = filesystem_of(path, mounts)
    if kind is None or (kind not in NETWORK_FILESYSTEMS and not kind.startswith("nfs")):
        return None
    return (
        f"{path} is on a network filesystem ({kind}), where SQLite's locking is not safe: two writers or a "
        "reader beside a writer can see a damaged file. Record to local disk (STALLWATCH_DB=/tmp/... or a "
        "node-local scratch folder) and `stallwatch merge` the nodes' files afterwards"
    )


def warn_network(path: str) -> None:
    """Warn once per file and process where ``path`` is on a network filesystem (NOTE [ Values from a file ])."""
    real = os.path.realpath(path)
    if real in _WARNED:
        return
    _WARNED.add(real)
    message = network_warning(real)
    if message is not None:
        warnings.warn(message, CollectorWarning, stacklevel=3)


_WARNED: set[str] = set()


def closed_folder(path: str) -> str | None:
    """The innermost existing folder above ``path`` that this user may not look into, if any."""
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(folder) and folder != os.path.dirname(folder):
        folder = os.path.dirname(folder)
    while folder != os.path.dirname(folder):
        if not os.access(folder, os.X_OK):
            return folder
        folder = os.path.dirname(folder)
    return None

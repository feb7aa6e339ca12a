"""Fault injection, as a table: per fault, whether training went on, the run's end, rows lost and counted.

python bench/bench_faults.py  (as root for the full-disk rows: it mounts an 8 MiB tmpfs)
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import collector


def ticking() -> Iterator[int]:
    for i in itertools.count():
        time.sleep(0.0005)
        yield i


class Rec:
    def __init__(self, db: str) -> None:
        self.w = collector.watch(ticking(), db=db, run="f", gpu_hz=0, host_hz=5)
        assert self.w.run_id is not None
        self.mon = self.w._stallwatch_start().monitor
        self.it = iter(self.w)
        self.n = 0
        self.db = db

    def take(self, k: int) -> None:
        for _ in range(k):
            next(self.it)
            self.n += 1

    def pid(self) -> int | None:
        return getattr(self.mon._writer.link, "pid", None)

    def until(self, pred: Callable[[], bool], limit_s: float = 20.0) -> float:
        t = time.monotonic()
        while not pred() and time.monotonic() - t < limit_s:
            self.take(20)
        return time.monotonic() - t


def fill(d: Path) -> Path:
    f = d / "filler"
    with open(f, "wb", buffering=0) as out:
        for size in (65536, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    try:
                        out.write(b"\0" * size)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
    return f


def scenario(name: str, db: str, inject: Callable[[Rec], tuple[float | None, Callable[[], None] | None]]) -> None:
    rec = Rec(db)
    rec.take(1000)
    healed, after_close = inject(rec)
    rec.take(1000)
    t = time.monotonic()
    rec.w.close()
    close_s = time.monotonic() - t
    if after_close is not None:
        after_close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        row = (
            sqlite3.connect(db)
            .execute(
                "SELECT status, dropped_records, (SELECT COUNT(*) FROM batches b WHERE b.run_id = r.id)"
                " FROM runs r ORDER BY id DESC LIMIT 1"
            )
            .fetchone()
        )
        if row[0] != "running":
            break
        time.sleep(0.1)
    status, dropped, stored = row
    lost = rec.n - stored
    heal = "-" if healed is None else f"{healed:.2f} s"
    print(
        f"| {name} | yes | {status} | {rec.n} | {lost} | {dropped} | {lost - dropped} | {heal} | {close_s:.2f} s |",
        flush=True,
    )


def main() -> None:
    warnings.simplefilter("ignore")
    tmp = Path(tempfile.mkdtemp())
    print("| fault | training went on | run's end | batches | rows lost | counted | uncounted | healed in | close |")
    print("|---|---|---|---|---|---|---|---|---|")

    def kill(rec: Rec) -> tuple[float | None, None]:
        old = rec.pid()
        os.kill(old, signal.SIGKILL)  # type: ignore[arg-type]
        return rec.until(lambda: rec.pid() not in (None, old)), None

    def stop(rec: Rec) -> tuple[float | None, None]:
        old = rec.pid()
        os.kill(old, signal.SIGSTOP)  # type: ignore[arg-type]
        return rec.until(lambda: rec.pid() not in (None, old)), None

    def stop_late(rec: Rec) -> tuple[float | None, None]:
        rec.take(1000)
        os.kill(rec.pid(), signal.SIGSTOP)  # type: ignore[arg-type]
        return None, None

    def kill_4(rec: Rec) -> tuple[float | None, None]:
        for _ in range(4):
            old = rec.pid()
            os.kill(old, signal.SIGKILL)  # type: ignore[arg-type]
            rec.until(lambda old=old: rec.pid() != old)
            rec.take(200)
        return None, None

    def delete(rec: Rec) -> tuple[float | None, None]:
        os.remove(rec.db)
        return rec.until(lambda: os.path.exists(rec.db)), None

    def lock(rec: Rec) -> tuple[float | None, None]:
        blocker = sqlite3.connect(rec.db, isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
        t = time.monotonic()
        rec.until(lambda: time.monotonic() - t > 7.0)
        blocker.execute("ROLLBACK")
        blocker.close()
        return None, None

    for name, inject in [
        ("writer SIGKILL", kill),
        ("writer SIGSTOP", stop),
        ("writer SIGSTOP about 1 s before close", stop_late),
        ("writer SIGKILL x4 (3 replacements, then counting)", kill_4),
        ("file deleted mid-run", delete),
        ("file locked 7 s (busy timeout 5 s)", lock),
    ]:
        scenario(name, str(tmp / f"{name.split()[0]}-{inject.__name__}.sqlite"), inject)
    mount = tmp / "small"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)]).returncode:
        print("(full-disk rows need root to mount a tmpfs)")
        return
    try:

        def full(rec: Rec) -> tuple[float | None, None]:
            time.sleep(0.5)
            filler = fill(mount)
            rec.until(lambda: any(k.startswith("write-") for k in rec.mon.warned))
            rec.take(1000)
            filler.unlink()
            return None, None

        scenario("disk full mid-run (8 MiB tmpfs), then space back", str(mount / "a.sqlite"), full)
        for f in mount.iterdir():
            f.unlink()
        holder: list[Path] = []

        def full_at_close(rec: Rec) -> tuple[float | None, Callable[[], None]]:
            time.sleep(0.5)
            holder.append(fill(mount))
            return None, lambda: holder[0].unlink()

        scenario("disk full at close, space back after it", str(mount / "b.sqlite"), full_at_close)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


if __name__ == "__main__":
    main()

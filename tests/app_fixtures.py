"""Fixtures of the dashboard tests, registered by conftest.py: files the collector recorded, an AppTest factory."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import REPO, writers_done
from streamlit.testing.v1 import AppTest

from collector.cli.demo import run_demo
from collector.record.monitor import HEARTBEAT_INTERVAL_S
from collector.store.connection import Store

APP = str(REPO / "app" / "streamlit_app.py")
RECORD_BATCHES = 60
APP_TIMEOUT_S = 60.0


@pytest.fixture(scope="session")
def recorded_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Two short real runs recorded by the collector: a starved loop, then a healthy one."""
    path = str(tmp_path_factory.mktemp("recorded") / "stallwatch.sqlite")
    # A batch budget, not only a time one: a busy machine must not leave a run too short to diagnose.
    run_demo(path, 30.0, "starved", max_batches=RECORD_BATCHES)
    run_demo(path, 30.0, "healthy", max_batches=RECORD_BATCHES)
    writers_done()  # the copies and digests below must see the finished file
    return path


def _foreign_run(store: Store, name: str, workers: int, started_at: float) -> int:
    """A run row as another machine's training process would have left it."""
    return store.create_run(
        name,
        config={"num_workers": workers},
        host={},
        versions={},
        hostname="elsewhere",
        pid=1,
        command="train.py",
        rank=None,
        world_size=None,
        started_at=started_at,
    )


@pytest.fixture(scope="session")
def odd_runs_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A crashed run (recorded through watch), a run whose process vanished, and a run with zero batches."""
    import collector

    path = str(tmp_path_factory.mktemp("odd") / "stallwatch.sqlite")
    with pytest.raises(RuntimeError), collector.watch(list(range(50)), db=path, run="crashes") as watched:
        for i, _ in enumerate(watched):
            time.sleep(0.002)
            if i == 20:
                raise RuntimeError("CUDA out of memory (test)")
    writers_done()
    store = Store(path)
    try:
        long_ago = time.time() - 3600
        vanished = _foreign_run(store, "vanished", workers=2, started_at=long_ago)
        store.write({}, run_update={"heartbeat_at": long_ago + 5}, run_id=vanished)
        _foreign_run(store, "no-batches", workers=0, started_at=long_ago)
        store.conn.execute(
            "UPDATE runs SET status = 'completed', ended_at = ? WHERE name = 'no-batches'", (long_ago + 1,)
        )
    finally:
        store.close()
    return path


@pytest.fixture(scope="session")
def gpu_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A synthetic run with a GPU-utilisation sawtooth (this machine has no GPU to record one)."""
    sys.path.insert(0, str(REPO / "bench"))
    from bench_dashboard import build_synthetic

    path = str(tmp_path_factory.mktemp("gpu") / "stallwatch.sqlite")
    build_synthetic(path, batches=20_000, gpu_seconds=120.0)
    return path


@pytest.fixture
def live_db(tmp_path: Path) -> Iterator[str]:
    """A run that is being recorded right now: heartbeat fresh, our own pid, rows arriving."""
    path = str(tmp_path / "live.sqlite")
    store = Store(path)
    now = time.time()
    run_id = store.create_run(
        "live-run",
        config={"num_workers": 0, "batch_size": 8},
        host={},
        versions={},
        hostname="elsewhere",
        pid=os.getpid(),
        command="train.py",
        rank=None,
        world_size=None,
        started_at=now - 5,
    )
    from collector.store.connection import batch_insert_sql
    from collector.writer.batch_records import CLOCKS, RICH, rich_record

    rows = [rich_record(0, i, int(i * 5e7), int(i * 5e7 + 3e7), int(i * 5e7 - 2e7), *(None,) * 8, 0) for i in range(60)]
    store.write(
        {},
        statements=[(batch_insert_sql(run_id, now - 5, 0, RICH[CLOCKS:]), rows)],
        run_update={"heartbeat_at": now},
        run_id=run_id,
    )
    # Beats like a live writer, so a slow first render on a busy machine never reads it as stale.
    stop = threading.Event()
    beat = threading.Thread(target=_beat, args=(path, run_id, stop), daemon=True)
    beat.start()
    yield path
    stop.set()
    beat.join()
    store.close()


def _beat(path: str, run_id: int, stop: threading.Event) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db:
        while not stop.wait(HEARTBEAT_INTERVAL_S):
            with db:
                db.execute("UPDATE runs SET heartbeat_at = ? WHERE id = ?", (time.time(), run_id))


JOB_ID = "ddp-job-7"


@pytest.fixture(scope="session")
def two_rank_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 2-rank job (runs.job_id written directly): rank 1 waits 30 ms for each batch, rank 0 barely, then a plain run.

    Both ranks step 10 ms and start together, 200 batches each, as two DDP processes would record.
    """
    from collector.store.connection import batch_insert_sql
    from collector.writer.batch_records import CLOCKS, RICH, rich_record

    path = str(tmp_path_factory.mktemp("ranks") / "stallwatch.sqlite")
    store = Store(path)
    start = time.time() - 600
    try:
        for rank, wait_ns in ((0, 1_000_000), (1, 30_000_000)):
            run_id = store.create_run(
                "train.py:41",
                config={"num_workers": 2, "batch_size": 8},
                host={},
                versions={},
                hostname="node",
                pid=1000 + rank,
                command="torchrun train.py",
                rank=rank,
                world_size=2,
                started_at=start,
                job_id=JOB_ID,
            )
            rows, t = [], 0
            for i in range(200):
                prev, request = t, t + 10_000_000
                t = request + wait_ns
                rows.append(rich_record(0, i, request, t, prev, *([None] * 8), 0))
            store.write(
                {},
                statements=[(batch_insert_sql(run_id, start, 0, RICH[CLOCKS:]), rows)],
                run_update={"heartbeat_at": start + t / 1e9},
                run_id=run_id,
            )
            store.conn.execute("UPDATE runs SET status = 'completed', ended_at = ? WHERE id = ?", (start + 9, run_id))
        _foreign_run(store, "single", workers=0, started_at=start + 60)
    finally:
        store.close()
    return path


@pytest.fixture
def app_for(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., AppTest]]:
    """``app_for(db, page=None, run_id=None)``: the dashboard run headless against ``db``.

    AppTest installs the app script as ``sys.modules["__main__"]``; it is put back
    afterwards, or a later test's spawned DataLoader workers would re-run the app.
    """
    main = sys.modules["__main__"]

    def run(db: str, page: str | None = None, run_id: int | None = None) -> AppTest:
        monkeypatch.setenv("STALLWATCH_DB", db)
        at = AppTest.from_file(APP, default_timeout=APP_TIMEOUT_S)
        if run_id is not None:
            at.session_state["sw_run"] = run_id  # app.state.RUN_KEY: the run the sidebar picked
        at.run()
        if page is not None:
            at.switch_page(page).run()
        return at

    yield run
    sys.modules["__main__"] = main

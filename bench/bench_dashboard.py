"""How fast the dashboard opens a large run: builds a synthetic file and times each query the run view makes.

    python bench/bench_dashboard.py [--batches 1000000] [--gpu-seconds 3600] [--db PATH] [--keep]

The file is written through ``collector.store.connection.Store`` (not the live
collector), so building a million batches takes seconds, not an hour.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collector.store.connection import Store, batch_insert_sql, fetch_insert_sql
from collector.writer.batch_records import CLOCKS, RICH

SAWTOOTH_PERIOD_S = 6.0  # compute for 4 s, starve for 2 s
STARVED_SHARE = 1 / 3
CORES = 16
WORKERS = 4
CHUNK = 100_000


def build_synthetic(path: str, batches: int = 1_000_000, gpu_seconds: float = 3600.0, gpu_hz: float = 10.0) -> int:
    """Write one completed run with a GPU-utilisation sawtooth; returns its run id."""
    store = Store(path)
    t0 = 1_700_000_000.0
    try:
        config = {
            "batch_size": 32,
            "num_workers": WORKERS,
            "pin_memory": False,
            "prefetch_factor": 2,
            "persistent_workers": False,
            "shuffle": True,
        }
        run_id = store.create_run(
            "synthetic-1M",
            config=config,
            host={"physical_cores": CORES, "logical_cores": CORES},
            versions={"stallwatch": "bench"},
            hostname="bench",
            pid=0,
            command="bench_dashboard.py",
            rank=None,
            world_size=None,
            tags={"bench": True},
            started_at=t0,
        )
        step_ns = int(gpu_seconds / batches * 1e9)
        rng = np.random.default_rng(0)
        insert = batch_insert_sql(run_id, t0, 0, RICH[CLOCKS:])
        per_epoch = 10_000
        for start in range(0, batches, CHUNK):
            n = np.arange(start, min(start + CHUNK, batches))
            t_return = n * step_ns + step_ns
            phase = (t_return / 1e9) % SAWTOOTH_PERIOD_S
            starved = phase > SAWTOOTH_PERIOD_S * (1 - STARVED_SHARE)
            wait_ns = np.where(starved, step_ns * 0.8, step_ns * 0.02) * rng.uniform(0.5, 1.5, len(n))
            t_request = t_return - wait_ns.astype(np.int64)
            ready = np.where(starved, 0, rng.integers(1, 2 * WORKERS + 1, len(n)))
            rows = [
                (
                    int(i // per_epoch),
                    int(i % per_epoch),
                    int(rq),
                    int(rt),
                    int(rt - step_ns),
                    int(r),
                    int(2 * WORKERS - r),
                    int(i % WORKERS),
                    1000 + int(i % WORKERS),
                    0,
                    int(i // WORKERS),
                    32,
                    1 << 20,
                    0,
                )
                for i, rq, rt, r in zip(n, t_request, t_return, ready, strict=True)
            ]
            fetch_rows = [
                (
                    1000 + int(i % WORKERS),
                    int(i % WORKERS),
                    0,
                    int(i // WORKERS),
                    t0 + rt / 1e9 - 0.02,
                    0.015,
                    0.012,
                    None,
                )
                for i, rt in zip(n, t_return, strict=True)
            ]
            store.write({}, statements=[(insert, rows), (fetch_insert_sql(run_id), fetch_rows)])
        gpu_ts = t0 + np.arange(0, gpu_seconds, 1 / gpu_hz)
        gpu_phase = (gpu_ts - t0) % SAWTOOTH_PERIOD_S
        util = np.where(gpu_phase > SAWTOOTH_PERIOD_S * (1 - STARVED_SHARE), 30.0, 90.0) + rng.normal(0, 3, len(gpu_ts))
        gpu_rows = [
            (run_id, float(t), 0, float(u), 20 << 30, 80 << 30, 250.0) for t, u in zip(gpu_ts, util, strict=True)
        ]
        host_ts = t0 + np.arange(0, gpu_seconds, 0.5)
        host_rows = [
            (
                run_id,
                float(t),
                40.0,
                json.dumps([round(float(v), 1) for v in rng.uniform(5, 100, CORES)]),
                64 << 30,
                1e8,
            )
            for t in host_ts
        ]
        proc_rows = [
            (run_id, float(t), pid, role, wid, 90.0, 2 << 30, None, None)
            for t in host_ts
            for pid, role, wid in [(1, "main", None)] + [(1000 + w, "worker", w) for w in range(WORKERS)]
        ]
        epochs = [
            (
                run_id,
                e,
                t0 + e * per_epoch * step_ns / 1e9,
                t0 + (e + 1) * per_epoch * step_ns / 1e9,
                0.5,
                per_epoch,
                "[]",
            )
            for e in range((batches + per_epoch - 1) // per_epoch)
        ]
        store.write(
            {"gpu_samples": gpu_rows, "host_samples": host_rows, "proc_samples": proc_rows},
            epochs=epochs,
            run_update={"status": "completed", "ended_at": t0 + gpu_seconds, "heartbeat_at": t0 + gpu_seconds},
            run_id=run_id,
        )
    finally:
        store.close()
    return run_id


def timed(label: str, fn: Callable[[], Any], results: dict[str, float]) -> Any:
    start = time.perf_counter()
    value = fn()
    results[label] = time.perf_counter() - start
    return value


def bench(path: str, *, app: bool = True) -> dict[str, float]:
    """Time what the run view does when it opens the newest run of ``path`` (cold: no Streamlit caches)."""
    from app.charts import build_run_figures
    from app.data import load_run_view
    from app.diagnosis import diagnose
    from collector.store.reader import Reader

    results: dict[str, float] = {}
    reader = timed("open file (schema check)", lambda: Reader(path), results)
    runs = timed("run list (sidebar)", reader.runs, results)
    run_id = int(runs["id"].iloc[0])
    data = timed("run view: series reduced in SQL", lambda: load_run_view(reader, run_id, None), results)
    figures = timed("run view: plotly figures", lambda: build_run_figures(data), results)
    results["= run view charts ready (sum of the above)"] = sum(results.values())
    timed("runs page: per-run totals (not on the run view's path)", reader.run_totals, results)
    start = time.perf_counter()
    build_run_figures(load_run_view(reader, run_id, 120.0))
    results["live window (last 120 s): series + figures"] = time.perf_counter() - start
    timed("diagnosis (collector.diagnose), drawn after the charts", lambda: diagnose(path, run_id), results)
    if app:
        results["AppTest: whole run page, cold caches"] = _apptest_seconds(path)
    results["largest trace, points"] = float(
        max(len(trace.x) for fig in figures.values() for trace in fig.data if trace.x is not None)
    )
    return results


def _apptest_seconds(path: str) -> float:
    """The whole run page rendered headless (queries, figures, diagnosis), as the server would."""
    from streamlit.testing.v1 import AppTest

    os.environ["STALLWATCH_DB"] = path
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app" / "streamlit_app.py"), default_timeout=120)
    main = sys.modules["__main__"]
    start = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - start
    sys.modules["__main__"] = main  # AppTest installs the app script as __main__
    if at.exception:
        raise RuntimeError(at.exception[0].value)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=1_000_000)
    parser.add_argument("--gpu-seconds", type=float, default=3600.0)
    parser.add_argument("--db", default=None, help="where to build the file (default: a temporary file)")
    parser.add_argument("--keep", action="store_true", help="keep the file")
    parser.add_argument("--no-app", action="store_true", help="skip the AppTest page render")
    args = parser.parse_args(argv)
    path = args.db or os.path.join(tempfile.mkdtemp(prefix="stallwatch-bench-"), "bench.sqlite")
    if not os.path.exists(path):
        start = time.perf_counter()
        build_synthetic(path, args.batches, args.gpu_seconds)
        print(
            f"built {path}: {args.batches:,} batches, {args.gpu_seconds * 10:,.0f} GPU samples "
            f"in {time.perf_counter() - start:.1f} s ({os.path.getsize(path) / 1e6:.0f} MB)"
        )
    for label, value in bench(path, app=not args.no_app).items():
        unit = "" if "points" in label else " s"
        print(f"{label:<58} {value:10,.0f}{unit}" if "points" in label else f"{label:<58} {value:10.3f}{unit}")
    if not args.keep and args.db is None:
        os.remove(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

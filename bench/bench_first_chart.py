"""Time to the first chart in Chromium: a fresh server's first open, then warm reloads, of a 1M-batch run.

    python bench/bench_first_chart.py [--db PATH] [--batches 1000000] [--reloads 5]

Builds the synthetic file of bench_dashboard.py (unless --db names one), starts
``python -m collector dashboard`` on it, and opens the Run page in headless
Chromium: the time from ``page.goto`` (or ``page.reload``) until the first plotly
chart has drawn its SVG. The warm reloads reuse the server and its caches, as a
user does who reopens or refreshes the page.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_dashboard import build_synthetic
from bench_live_page import CHROMIUM, REPO, free_port, wait_healthy

FIRST_CHART = ".js-plotly-plot .main-svg"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None)
    parser.add_argument("--batches", type=int, default=1_000_000)
    parser.add_argument("--reloads", type=int, default=5)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or os.path.join(tmp, "big.sqlite")
        if not os.path.exists(db):
            started = time.perf_counter()
            build_synthetic(db, batches=args.batches)
            print(f"built {db}: {args.batches:,} batches in {time.perf_counter() - started:.1f} s", flush=True)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "collector", "dashboard", db, "--port", str(port)],
            env=env,
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}/?run=1"
        try:
            wait_healthy(url.split("/?")[0])
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
                try:
                    page = browser.new_page(viewport={"width": 1440, "height": 1600})
                    started = time.perf_counter()
                    page.goto(url)
                    page.wait_for_selector(FIRST_CHART, timeout=120_000)
                    print(f"fresh server, first open: first chart after {time.perf_counter() - started:.2f} s")
                    page.get_by_text("Time waiting for data").wait_for(timeout=120_000)  # let the diagnosis finish
                    warm = []
                    for _ in range(args.reloads):
                        started = time.perf_counter()
                        page.reload()
                        page.wait_for_selector(FIRST_CHART, timeout=120_000)
                        warm.append(time.perf_counter() - started)
                        page.get_by_text("Time waiting for data").wait_for(timeout=120_000)
                    print(
                        f"warm reload: first chart after {statistics.median(warm):.2f} s median "
                        f"(min {min(warm):.2f}, max {max(warm):.2f}, {len(warm)} reloads)"
                    )
                finally:
                    browser.close()
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()

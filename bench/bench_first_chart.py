"""Time to the first chart in Chromium: a fresh server's first open, then warm reloads, of a 1M-batch run.

    python bench/bench_first_chart.py [--db PATH] [--batches 1000000] [--reloads 5] [--against CHECKOUT]

Builds the synthetic file of bench_dashboard.py (unless --db names one), starts
``python -m collector dashboard`` on it, and opens the Run page in headless
Chromium: the time from ``page.goto`` (or ``page.reload``) until the first plotly
chart has drawn its SVG (checked in each animation frame: a frame paints what it
finds), and until all seven charts have; and, timed in the page, from the
navigation's start to the task after the frame that painted the first chart's SVG.
The warm reloads reuse the server and its caches, as a user does who reopens or
refreshes the page.
``--against`` starts a second server from another checkout (``/work/main``, say)
and alternates the reloads between the two, so a busy machine slows both alike.
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
FIRST_CHART_IN_FRAME = f"document.querySelector('{FIRST_CHART}')"  # checked each frame, not every 100-500 ms
ALL_CHARTS = "document.querySelectorAll('.js-plotly-plot').length >= 7"
# In the page: milliseconds from the navigation's start to the task after the frame that painted the first SVG.
PAINT_CLOCK = """
window.swPainted = null;
const swSeen = new MutationObserver(() => {
  if (document.querySelector(".js-plotly-plot .main-svg")) {
    swSeen.disconnect();
    requestAnimationFrame(() => setTimeout(() => { window.swPainted = performance.now() / 1000; }, 0));
  }
});
swSeen.observe(document, {subtree: true, childList: true});
"""


def _spread(label: str, seconds: list[float]) -> str:
    return f"{label} {statistics.median(seconds):.2f} s median ({min(seconds):.2f}-{max(seconds):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None)
    parser.add_argument("--batches", type=int, default=1_000_000)
    parser.add_argument("--reloads", type=int, default=5)
    parser.add_argument("--against", default=None, help="another checkout's root, its reloads alternating with ours")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    checkouts = [str(REPO)] + ([str(Path(args.against).resolve())] if args.against else [])
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or os.path.join(tmp, "big.sqlite")
        if not os.path.exists(db):
            started = time.perf_counter()
            build_synthetic(db, batches=args.batches)
            print(f"built {db}: {args.batches:,} batches in {time.perf_counter() - started:.1f} s", flush=True)
        servers, urls = [], {}
        for checkout in checkouts:
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [checkout, os.environ.get("PYTHONPATH")])))
            port = free_port()
            servers.append(
                subprocess.Popen(
                    [sys.executable, "-m", "collector", "dashboard", os.path.abspath(db), "--port", str(port)],
                    env=env,
                    cwd=tmp,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            urls[checkout] = f"http://127.0.0.1:{port}/?run=1"
        try:
            for url in urls.values():
                wait_healthy(url.split("/?")[0])
            print("load average at the start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
                try:
                    pages = {c: browser.new_page(viewport={"width": 1440, "height": 1600}) for c in checkouts}
                    for checkout, page in pages.items():
                        page.add_init_script(PAINT_CLOCK)
                        started = time.perf_counter()
                        page.goto(urls[checkout])
                        page.wait_for_selector(FIRST_CHART, timeout=120_000)
                        print(
                            f"{checkout}: fresh server, first open: first chart after {time.perf_counter() - started:.2f} s"
                        )
                        page.get_by_text("Time waiting for data").wait_for(timeout=120_000)  # the diagnosis is done
                        page.wait_for_function(ALL_CHARTS, timeout=120_000)
                    first: dict[str, list[float]] = {c: [] for c in checkouts}
                    every: dict[str, list[float]] = {c: [] for c in checkouts}
                    painted: dict[str, list[float]] = {c: [] for c in checkouts}
                    for i in range(args.reloads):
                        for checkout in checkouts if i % 2 == 0 else checkouts[::-1]:
                            page = pages[checkout]
                            page.bring_to_front()
                            started = time.perf_counter()
                            page.reload()
                            page.wait_for_function(FIRST_CHART_IN_FRAME, polling="raf", timeout=120_000)
                            first[checkout].append(time.perf_counter() - started)
                            page.wait_for_function(ALL_CHARTS, timeout=120_000)
                            every[checkout].append(time.perf_counter() - started)
                            page.get_by_text("Time waiting for data").wait_for(timeout=120_000)
                            painted[checkout].append(page.wait_for_function("window.swPainted").json_value())
                    for checkout in checkouts:
                        print(
                            f"{checkout}: warm reload, {_spread('first chart', first[checkout])}, "
                            f"{_spread('all charts', every[checkout])}; in the page, "
                            f"{_spread('first chart painted', painted[checkout])}; {args.reloads} reloads"
                        )
                finally:
                    browser.close()
            print("load average at the end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
        finally:
            for server in servers:
                server.terminate()
                server.wait(timeout=10)


if __name__ == "__main__":
    main()

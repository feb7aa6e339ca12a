"""A simulated week (or less) recorded through the writer's own fold: file size, first chart, report, scrape.

    python bench/bench_week.py [--days 7] [--rate 200] [--keep-batches 100000] [--reloads 3] [--no-browser]

The bounded file is recorded through the Sink with ``keep_batches`` (bench/simulate.py:
the C hot loop's clock pairs, a 10 Hz GPU and 2 Hz host sampler, one flush per 10
simulated seconds); the unbounded one records ``--unbounded-batches`` the same way
with every row kept, and its size per batch is scaled to the week (a 6.9 GB file
does not fit this machine's budget). Each figure is printed beside the CPU that
other processes used meanwhile (/proc/stat less this process tree), as the
machine is shared.
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

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

import simulate
from bench_first_chart import FIRST_CHART_IN_FRAME  # checked each frame: a coarse wait reads up to 0.5 s late
from bench_live_page import CHROMIUM, REPO, free_port, wait_healthy


class OtherCpu:
    """Cores busy with other processes since ``start``: the machine's busy time less this process tree's."""

    def __init__(self) -> None:
        self.t0, self.busy0, self.ours0 = time.monotonic(), _busy_s(), _ours_s()

    def cores(self) -> float:
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        return max(0.0, (_busy_s() - self.busy0) - (_ours_s() - self.ours0)) / elapsed


def _busy_s() -> float:
    with open("/proc/stat") as f:
        fields = [float(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _ours_s() -> float:
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def first_chart_s(db: str, reloads: int = 3) -> tuple[float, float]:
    """(first open, median warm reload) seconds to the Run page's first plotly chart, in headless Chromium."""
    from playwright.sync_api import sync_playwright

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
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
                    page.wait_for_function(FIRST_CHART_IN_FRAME, polling="raf", timeout=120_000)
                    first = time.perf_counter() - started
                    page.get_by_text("Time waiting for data").wait_for(timeout=120_000)
                    warm = []
                    for _ in range(reloads):
                        started = time.perf_counter()
                        page.reload()
                        page.wait_for_function(FIRST_CHART_IN_FRAME, polling="raf", timeout=120_000)
                        warm.append(time.perf_counter() - started)
                        page.get_by_text("Time waiting for data").wait_for(timeout=120_000)
                finally:
                    browser.close()
        finally:
            server.terminate()
            server.wait(timeout=10)
    return first, statistics.median(warm)


def report_s(db: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "collector", "report", db], check=True, capture_output=True, cwd=REPO)
    return time.perf_counter() - started


def scrape_s(db: str) -> tuple[float, float, int]:
    """(first scrape: the exporter's start-up count, a second scrape, batches counted)."""
    from collector.export.sources import Exporter

    exporter = Exporter([db], grace_s=1e12, report=lambda text: None)
    started = time.perf_counter()
    runs = exporter.refresh().runs
    first = time.perf_counter() - started
    started = time.perf_counter()
    exporter.refresh()
    return first, time.perf_counter() - started, runs[0].batches


def measure(label: str, db: str, batches: int, reloads: int, browser: bool) -> None:
    size = os.path.getsize(db)
    print(f"{label}: {batches:,} batches, {size / 1e6:,.1f} MB ({size / batches:.2f} bytes a batch)", flush=True)
    other = OtherCpu()
    took = report_s(db)
    print(f"  report: {took:.2f} s (other processes {other.cores():.2f} cores)", flush=True)
    other = OtherCpu()
    first, again, counted = scrape_s(db)
    print(
        f"  exporter: first scrape {first:.3f} s, next {again:.3f} s, {counted:,} batches counted "
        f"(other processes {other.cores():.2f} cores)",
        flush=True,
    )
    if browser:
        other = OtherCpu()
        cold, warm = first_chart_s(db, reloads)
        print(
            f"  first chart: {cold:.2f} s fresh, {warm:.2f} s warm reload median "
            f"(other processes {other.cores():.2f} cores)",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--rate", type=float, default=200.0, help="batches per second")
    parser.add_argument("--keep-batches", type=int, default=100_000)
    parser.add_argument("--unbounded-batches", type=int, default=1_200_000)
    parser.add_argument("--reloads", type=int, default=3)
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--dir", default=None, help="keep the files here")
    args = parser.parse_args()
    batches = int(args.days * 86_400 * args.rate)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.dir or tmp
        bounded, full = os.path.join(folder, "week.sqlite"), os.path.join(folder, "unbounded.sqlite")
        for path in (bounded, full):
            for side in ("", "-wal", "-shm"):
                if os.path.exists(path + side):
                    os.remove(path + side)
        other, started = OtherCpu(), time.perf_counter()
        simulate.record(bounded, batches=batches, keep_batches=args.keep_batches, rate_hz=args.rate, flush_s=10.0)
        took = time.perf_counter() - started
        print(
            f"recorded {args.days:g} days at {args.rate:g} batches/s through the Sink (keep_batches="
            f"{args.keep_batches:,}) in {took:.0f} s: {took / batches * 1e6:.1f} us a batch, insert and fold "
            f"(other processes {other.cores():.2f} cores)",
            flush=True,
        )
        hours = batches / args.rate / 3600
        size = os.path.getsize(bounded)
        print(f"growth: {size / hours / 1e6:.1f} MB an hour on average over {hours:,.0f} h", flush=True)
        simulate.record(full, batches=args.unbounded_batches, keep_batches=None, rate_hz=args.rate, flush_s=10.0)
        per_batch = os.path.getsize(full) / args.unbounded_batches
        print(
            f"unbounded: {per_batch:.1f} bytes a batch (samples included): the same {batches:,} batches "
            f"would take {per_batch * batches / 1e9:.2f} GB",
            flush=True,
        )
        measure("bounded", bounded, batches, args.reloads, not args.no_browser)
        measure("unbounded", full, args.unbounded_batches, args.reloads, not args.no_browser)


if __name__ == "__main__":
    main()

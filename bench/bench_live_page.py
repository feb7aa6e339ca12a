"""What an open live page costs the dashboard server: CPU of the server process with no page, then with one open.

    python bench/bench_live_page.py [--seconds 60] [--rounds 2] [--demo-seconds 400]

Starts a live demo run (``python -m collector demo``), the dashboard on its file
(``python -m collector dashboard``), and headless Chromium. Each round measures the
server's CPU time (psutil, user + system, all its threads) over ``--seconds`` with no
page open, then over ``--seconds`` with the Run page open on the live run at the
default refresh, and prints both as a share of one core.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the dashboard did not answer at {url}")


def cpu_share(process: psutil.Process, seconds: float) -> float:
    """CPU seconds the process used per wall second over ``seconds`` (1.0 = one core)."""
    before, start = process.cpu_times(), time.monotonic()
    time.sleep(seconds)
    after, wall = process.cpu_times(), time.monotonic() - start
    return ((after.user - before.user) + (after.system - before.system)) / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--demo-seconds", type=float, default=400.0)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "live.sqlite")
        demo = subprocess.Popen(
            [sys.executable, "-m", "collector", "demo", "--db", db, "--seconds", f"{args.demo_seconds:g}"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "collector", "dashboard", db, "--port", str(port)],
            env=env,
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url)
            process = psutil.Process(server.pid)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
                try:
                    for round_ in range(1, args.rounds + 1):
                        idle = cpu_share(process, args.seconds)
                        page = browser.new_page(viewport={"width": 1440, "height": 1600})
                        page.goto(url)
                        page.wait_for_selector("text=live, refreshed every", timeout=90_000)
                        time.sleep(5)  # the first render (imports, caches) is not the steady cost
                        open_ = cpu_share(process, args.seconds)
                        page.close()
                        print(
                            f"round {round_}: server CPU, no page {idle:.1%} of a core; "
                            f"live Run page open {open_:.1%} (the page adds {open_ - idle:.1%})",
                            flush=True,
                        )
                finally:
                    browser.close()
        finally:
            for child in (server, demo):
                child.terminate()
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()


if __name__ == "__main__":
    main()

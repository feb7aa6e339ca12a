"""End to end: ``streamlit run app`` against a recorded run, opened in headless Chromium through Playwright."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import screenshot
from helpers import REPO

from app.components.report_panel import VERDICTS

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = REPO / "artifacts"
START_TIMEOUT_S = 60.0
RENDER_TIMEOUT_MS = 60_000
README_CLIP = {"x": 0, "y": 0, "width": 1440, "height": 1250}  # the banner, the cards, the line to paste, the sawtooth

pytestmark = pytest.mark.browser


def _require_browser() -> None:
    if os.path.exists(CHROMIUM):
        return
    if os.environ.get("STALLWATCH_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{CHROMIUM} is missing and STALLWATCH_REQUIRE_BROWSER=1: install Debian's chromium package")
    pytest.skip(f"{CHROMIUM} is missing (set STALLWATCH_REQUIRE_BROWSER=1 to make this a failure)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def dashboard_url(recorded_db: str, tmp_path: Path) -> Iterator[str]:
    """``streamlit run app -- --db FILE`` from the repository root, until it answers its health check."""
    _require_browser()
    port = _free_port()
    log = open(tmp_path / "streamlit.log", "w")  # noqa: SIM115 - closed in the finally below
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        "app",
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--server.headless",
        "true",
        "--",
        "--db",
        recorded_db,
    ]
    server = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"streamlit did not start: {(tmp_path / 'streamlit.log').read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _save_readme_picture(png: bytes) -> None:
    """The README's picture: into artifacts/ always, over docs/images/ when asked (NOTE [ A current screenshot ])."""
    stamp = screenshot.source_stamp()
    screenshot.save(png, ARTIFACTS / screenshot.SCREENSHOT.name, stamp)
    if screenshot.update_requested():
        screenshot.save(png, screenshot.SCREENSHOT, stamp)
    assert screenshot.stamp_of(ARTIFACTS / screenshot.SCREENSHOT.name) == stamp


def test_dashboard_renders_verdict_and_charts_in_chromium(dashboard_url: str) -> None:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    titles = [title for title, _ in VERDICTS.values()]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 2400})
            page.goto(f"{dashboard_url}/?run=1")  # the starved run: red banner, a line to paste
            page.wait_for_selector(".js-plotly-plot .main-svg", timeout=RENDER_TIMEOUT_MS)
            banner = page.locator("[data-testid='stAlert']").filter(has_text="—").first
            banner.wait_for(timeout=RENDER_TIMEOUT_MS)
            assert any(title in banner.inner_text() for title in titles)
            assert "Input-bound" in banner.inner_text()
            page.locator("code", has_text="DataLoader(..., num_workers=").first.wait_for(timeout=RENDER_TIMEOUT_MS)
            page.wait_for_function(
                "document.querySelectorAll('.js-plotly-plot').length >= 7", timeout=RENDER_TIMEOUT_MS
            )
            assert page.locator("h1", has_text="demo-starved").first.is_visible()
            assert page.locator("[data-testid='stException']").count() == 0
            page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
            _save_readme_picture(page.screenshot(clip=README_CLIP))

            page.goto(f"{dashboard_url}/runs")
            page.wait_for_selector("[data-testid='stDataFrame']", timeout=RENDER_TIMEOUT_MS)
            assert page.locator("[data-testid='stException']").count() == 0
            page.screenshot(path=str(ARTIFACTS / "dashboard-runs.png"), full_page=True)

            page.goto(f"{dashboard_url}/compare")
            page.wait_for_function(
                "document.querySelectorAll('.js-plotly-plot').length >= 3", timeout=RENDER_TIMEOUT_MS
            )
            assert page.locator("[data-testid='stException']").count() == 0
            page.screenshot(path=str(ARTIFACTS / "dashboard-compare.png"), full_page=True)
        finally:
            browser.close()


# Counts the charts on the page when the first one's SVG appears, before any frame could paint more.
COUNT_AT_FIRST_CHART = """
window.swChartsAtFirst = null;
new MutationObserver(() => {
  if (window.swChartsAtFirst === null && document.querySelector(".js-plotly-plot .main-svg")) {
    window.swChartsAtFirst = document.querySelectorAll(".js-plotly-plot").length;
  }
}).observe(document, {subtree: true, childList: true});
"""


def test_the_first_chart_mounts_alone_and_the_detail_charts_follow_by_themselves(dashboard_url: str) -> None:
    """See NOTE [ First chart first ] in app/components/after_paint.py: an order, not a time."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 2400})
            page.add_init_script(COUNT_AT_FIRST_CHART)
            # The first open, then a reload: a new session waits for the first chart's paint again.
            for open_page in (lambda: page.goto(f"{dashboard_url}/?run=1"), page.reload):
                open_page()
                page.wait_for_function(
                    "document.querySelectorAll('.js-plotly-plot').length >= 7", timeout=RENDER_TIMEOUT_MS
                )
                assert page.evaluate("window.swChartsAtFirst") == 1
            assert page.locator("[data-testid='stException']").count() == 0
        finally:
            browser.close()

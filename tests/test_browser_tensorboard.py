"""TensorBoard's scalar page, in headless Chromium, showing what watch(log=...) sent beside the loss; the README's picture."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import screenshot
import torch
from fixture_datasets import SlowDataset
from helpers import REPO
from test_browser_e2e import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, RENDER_TIMEOUT_MS, START_TIMEOUT_S, _free_port
from test_browser_e2e import _require_browser as require_browser
from torch.utils.data import DataLoader

from collector.record.watch import watch_with

pytestmark = pytest.mark.browser
PICTURE = REPO / "docs" / "images" / "tensorboard.png"
SOURCES = ("collector/export/live.py", "collector/record/live.py")  # what decides the figures shown


def write_logs(logdir: Path, db: str) -> None:
    """A starved loop's loss and stallwatch's figures, through one SummaryWriter (the recipe of docs/trackers.md)."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(logdir))
    net = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.2)
    loader = DataLoader(SlowDataset(60, sleep_s=0.02), batch_size=2)
    watched = watch_with(
        loader,
        db,
        run="tensorboard",
        gpu_hz=0,
        host_hz=0,
        log=lambda m, step: [writer.add_scalar(k, v, step) for k, v in m.items()],
        log_window_s=0.25,
    )
    step = 0
    for _ in range(2):
        for batch in watched:
            x = batch / 60.0
            loss = (net(x) - 2.0 * x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            writer.add_scalar("loss", loss.item(), step)
    watched.close()
    writer.close()


@pytest.fixture
def tensorboard_url(tmp_path: Path) -> Iterator[str]:
    require_browser()
    pytest.importorskip("tensorboard", reason="tensorboard is in requirements-dev.txt")
    logdir = tmp_path / "logs"
    write_logs(logdir, str(tmp_path / "stallwatch.sqlite"))
    port = _free_port()
    log = open(tmp_path / "tensorboard.log", "w")  # noqa: SIM115 - closed in the finally below
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1"]
    server = subprocess.Popen([*command, "--port", str(port), "--reload_interval", "0"], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{url}/data/runs", timeout=2) as answer:
                    if answer.status == 200 and answer.read().strip() not in (b"", b"[]"):
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            assert server.poll() is None, (tmp_path / "tensorboard.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "tensorboard did not answer"
            time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def source_stamp() -> str:
    import hashlib

    return hashlib.sha256(b"".join((REPO / name).read_bytes() for name in SOURCES)).hexdigest()[:16]


def test_tensorboard_scalar_page_shows_the_stall_figures_beside_the_loss(tensorboard_url: str) -> None:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 830})
            page.goto(f"{tensorboard_url}/?pinnedCards=%5B%5D#scalars&_smoothingWeight=0")
            for tag in ("loss", "stallwatch/waiting_for_data", "stallwatch/wait_ms", "stallwatch/step_ms"):
                page.get_by_text(tag, exact=True).first.wait_for(timeout=RENDER_TIMEOUT_MS)
            page.get_by_text("Ignore outliers in chart scaling").click()  # every window's point in view
            page.wait_for_function(
                "document.querySelectorAll('canvas, svg path').length > 4", timeout=RENDER_TIMEOUT_MS
            )
            time.sleep(1.0)  # the line charts draw on the next frames, after their cards appear
            png = page.screenshot()
        finally:
            browser.close()
    stamp = source_stamp()
    screenshot.save(png, ARTIFACTS / PICTURE.name, stamp)
    if screenshot.update_requested() or not PICTURE.exists():
        screenshot.save(png, PICTURE, stamp)
    assert screenshot.stamp_of(ARTIFACTS / PICTURE.name) == stamp

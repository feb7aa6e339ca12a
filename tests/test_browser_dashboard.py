"""In Chromium: the dashboard from an installed wheel in an empty directory, live from the first batch, and its zooms."""

from __future__ import annotations

import os
import site
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO
from test_browser_e2e import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, RENDER_TIMEOUT_MS, _free_port, _require_browser

from app.charts import timeline

pytestmark = [pytest.mark.browser, pytest.mark.slow]
START_TIMEOUT_S = 90.0
FIRST_CHART_NAMES = "Array.from(document.querySelectorAll('.js-plotly-plot')[0].data, t => t.name)"


def _wait_healthy(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the dashboard did not start: {log.read_text()[-3000:]}")
        time.sleep(0.1)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


def _first_batch_seen(db: Path, timeout_s: float) -> float:
    """monotonic() when the first batch row of ``db`` became visible to a reader."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if db.exists():
            try:
                conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
                try:
                    if conn.execute("SELECT 1 FROM batches LIMIT 1").fetchone():
                        return time.monotonic()
                finally:
                    conn.close()
            except sqlite3.Error:
                pass  # not created yet, or mid-creation
        time.sleep(0.02)
    pytest.fail(f"no batch in {db} after {timeout_s:g} s")


def _see_this_environment(venv: Path, env: dict[str, str]) -> None:
    """Let ``venv`` import what the running interpreter can (torch, psutil, streamlit), in a virtualenv too.

    ``--system-site-packages`` reaches only the base interpreter's packages: run from inside a
    virtualenv, the new venv would lack everything installed there. A ``.pth`` line adds each of
    this interpreter's site directories after the venv's own, so the wheel installed into the venv
    still comes first, and no ``.pth`` of those directories runs (an editable install of this clone
    stays out of sight).
    """
    site_dir = subprocess.run(
        [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.strip()
    Path(site_dir, "_this_environment.pth").write_text("".join(f"{path}\n" for path in site.getsitepackages()))


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (seeing this environment's packages, for torch) with stallwatch installed from a wheel built from this tree."""
    root = tmp_path_factory.mktemp("wheel")
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    source = root / "src"
    for name in filter(None, (f.decode() for f in files)):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes((REPO / name).read_bytes())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(root / "dist"), str(source)], check=True, env=env
    )
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, env=env)
    _see_this_environment(venv, env)
    (wheel,) = (root / "dist").glob("stallwatch-*.whl")
    subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "-q", "install", "--no-deps", str(wheel)], check=True, env=env
    )
    return venv


def test_wheel_dashboard_in_an_empty_directory_shows_a_run_started_after_the_page(
    installed: Path, tmp_path: Path
) -> None:
    """From the wheel's files only: the page opened first picks up the run without a reload."""
    _require_browser()
    from playwright.sync_api import sync_playwright

    empty = tmp_path / "job"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STALLWATCH_DB")}
    python = str(installed / "bin" / "python")
    where = subprocess.run(
        [python, "-c", "import collector, stallwatch_app; print(collector.__file__); print(stallwatch_app.__file__)"],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert all(path.startswith(str(installed)) for path in where), where  # the wheel's files, not the clone's
    port = _free_port()
    log = tmp_path / "dashboard.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [str(installed / "bin" / "stallwatch"), "dashboard", "--port", str(port)],
            cwd=empty,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    demo: subprocess.Popen[bytes] | None = None
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, server, log)
        assert f"reading {empty / 'stallwatch.sqlite'}" in log.read_text()
        ARTIFACTS.mkdir(exist_ok=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1440, "height": 1800})
                page.goto(url)
                page.get_by_text("Nothing recorded yet").wait_for(timeout=RENDER_TIMEOUT_MS)
                page.screenshot(path=str(ARTIFACTS / "dashboard-wheel-waiting.png"), full_page=True)
                demo = subprocess.Popen(
                    [python, "-m", "collector", "demo", "--seconds", "30"],
                    cwd=empty,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                first_batch = _first_batch_seen(empty / "stallwatch.sqlite", timeout_s=90)
                page.locator("h1", has_text="demo-starved").wait_for(timeout=10_000)
                shown_after_s = time.monotonic() - first_batch
                print(f"run shown {shown_after_s:.2f} s after its first batch was committed")
                assert shown_after_s < 5.0  # the target is 2 s (NOTE [ Live from the first second ]): see the note
                page.get_by_text("live, refreshed every").wait_for(timeout=RENDER_TIMEOUT_MS)
                page.wait_for_selector(".js-plotly-plot .main-svg", timeout=RENDER_TIMEOUT_MS)
                assert page.locator("[data-testid='stException']").count() == 0
                page.screenshot(path=str(ARTIFACTS / "dashboard-wheel-live.png"), full_page=True)
            finally:
                browser.close()
    finally:
        if demo is not None:
            _stop(demo)
        _stop(server)
    assert not list(empty.glob("app*")) and not (empty / ".streamlit").exists()  # nothing of the app's was needed here


@pytest.fixture(scope="module")
def zoom_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m collector dashboard`` from the clone on a 10-minute GPU run: 5,000 batches of 120 ms."""
    _require_browser()
    sys.path.insert(0, str(REPO / "bench"))
    from bench_dashboard import build_synthetic

    folder = tmp_path_factory.mktemp("zoom")
    gpu_db = str(folder / "gpu.sqlite")
    build_synthetic(gpu_db, batches=5_000, gpu_seconds=600.0)
    port = _free_port()
    log = folder / "dashboard.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "collector", "dashboard", gpu_db, "--port", str(port)],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, server, log)
        yield url
    finally:
        _stop(server)


def test_whole_run_shows_shares_per_slice_and_last_seconds_show_each_batch(zoom_url: str) -> None:
    _require_browser()
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1800})
            page.goto(zoom_url)
            page.get_by_text(timeline.TITLE_TREND).first.wait_for(timeout=RENDER_TIMEOUT_MS)
            names = page.evaluate(FIRST_CHART_NAMES)
            assert names[:3] == [timeline.COMPUTE, timeline.WAITING, timeline.GPU], names
            page.screenshot(path=str(ARTIFACTS / "dashboard-zoom-whole-run.png"), full_page=True)

            page.get_by_text("Last 10 s", exact=True).click()
            page.get_by_text(timeline.TITLE_PHASES).first.wait_for(timeout=RENDER_TIMEOUT_MS)
            names = page.evaluate(FIRST_CHART_NAMES)
            assert names[:3] == [timeline.COMPUTE, timeline.WAITING, timeline.GPU], names
            points = page.evaluate("document.querySelectorAll('.js-plotly-plot')[0]._fullData[1].x.length")
            assert points >= 2 * 80  # two points per batch: about 83 batches in 10 s of this run
            assert page.locator("[data-testid='stException']").count() == 0
            page.screenshot(path=str(ARTIFACTS / "dashboard-zoom-batches.png"), full_page=True)
        finally:
            browser.close()


@pytest.fixture(scope="module")
def job_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real 2-rank DDP job (gloo, torch.multiprocessing.spawn) recorded with watch(); rank 1's items cost 3x."""
    _require_browser()
    folder = tmp_path_factory.mktemp("job")
    db = folder / "job.sqlite"
    scripts = REPO / "tests" / "scripts"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(scripts)]), "OMP_NUM_THREADS": "1"}
    env.pop("STALLWATCH_JOB_STARTED", None)
    subprocess.run(
        [sys.executable, str(scripts / "fw_plain.py"), str(db), "2", "watch", "cost_ms=2", "slow_rank=1", "items=384"],
        cwd=folder,
        env=env,
        capture_output=True,
        timeout=300,
        check=True,
    )
    port = _free_port()
    log = folder / "dashboard.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "collector", "dashboard", str(db), "--port", str(port)],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, server, log)
        yield url
    finally:
        _stop(server)


def test_job_view_of_a_two_rank_recording_names_the_straggler(job_url: str) -> None:
    """From the Runs page to the job view: the job's verdict names rank 1, the chart marks it; a rank links back."""
    _require_browser()
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1800})
            page.goto(f"{job_url}/runs")
            page.get_by_role("button", name="Job view").click(timeout=RENDER_TIMEOUT_MS)
            page.get_by_text("Job verdict").wait_for(timeout=RENDER_TIMEOUT_MS)
            banner = page.locator("[data-testid='stAlert']", has_text="waited for data").first
            banner.wait_for(timeout=RENDER_TIMEOUT_MS)
            assert "Input-bound" in banner.inner_text() and "rank 1 waited for data" in banner.inner_text()
            page.wait_for_selector(".js-plotly-plot .main-svg", timeout=RENDER_TIMEOUT_MS)
            names = page.evaluate(FIRST_CHART_NAMES)
            assert names == ["rank 0", "rank 1 (straggler)"], names
            assert page.get_by_text("straggler rank", exact=False).count() >= 1  # the symptom, in What we see
            assert page.locator("[data-testid='stException']").count() == 0
            page.screenshot(path=str(ARTIFACTS / "dashboard-job-view.png"), full_page=True)

            page.get_by_role("button", name="Rank 1 in the Run view").click()  # one rank, and back to its job
            page.get_by_text("Rank 1 of 2 recorded ranks of job").wait_for(timeout=RENDER_TIMEOUT_MS)
            page.wait_for_selector(".js-plotly-plot .main-svg", timeout=RENDER_TIMEOUT_MS)
            page.screenshot(path=str(ARTIFACTS / "dashboard-job-rank-run.png"), full_page=True)
            page.get_by_role("button", name="Job view").click()
            page.get_by_text("Job verdict").wait_for(timeout=RENDER_TIMEOUT_MS)
            assert page.locator("[data-testid='stException']").count() == 0
        finally:
            browser.close()

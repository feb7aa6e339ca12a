"""The README and docs/: short, linked, in step with CI, and their picture current."""

from __future__ import annotations

import re

import screenshot
from helpers import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_readme_screenshot_is_current_with_the_pages_sources() -> None:
    assert screenshot.SCREENSHOT.is_file(), f"{screenshot.SCREENSHOT} is missing"
    made_from = screenshot.stamp_of(screenshot.SCREENSHOT)
    assert made_from == screenshot.source_stamp(), (
        f"{screenshot.SCREENSHOT.relative_to(REPO)} shows an older Run page (stamp {made_from}, sources now"
        f" {screenshot.source_stamp()}): make it again with"
        f" {screenshot.UPDATE_VARIABLE}=1 python -m pytest tests/test_browser_e2e.py"
    )


def test_readme_is_a_page_of_at_most_250_lines_that_shows_the_picture() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert f"]({screenshot.SCREENSHOT.relative_to(REPO).as_posix()})" in text


def test_every_relative_link_in_the_readme_and_docs_reaches_a_file() -> None:
    broken = []
    for page in [README, *DOCS]:
        for target in LINK.findall(page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert not broken, broken


def test_ci_runs_the_readmes_test_command() -> None:
    command = "pip install torch==2.14.1 torchvision==0.29.1 -r requirements-dev.txt -e . && python -m pytest"
    assert command in README.read_text()
    assert command in (REPO / ".ci" / "run").read_text().replace("pip install -q ", "pip install ")  # quieter in CI

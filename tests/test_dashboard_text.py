"""What the dashboard shows and opens: a file's text as text, only files under its folder or named at its start."""

from __future__ import annotations

import re
import sqlite3

import pytest
from helpers import _copy, shown, texts

from app import demo_launcher
from app.plain import md

HOSTILE = {
    "name": "![pixel](http://evil.example/p.png)",
    "hostname": "<img src=http://evil.example/x>",
    "error": "[reset your password](http://evil.example) :red[urgent] $x^2$",
    "warnings": '["**bold** [a link](http://evil.example)"]',
}


@pytest.mark.parametrize("text", [*HOSTILE.values(), "plain words", "a\\b `code` #1 <b>"])
def test_md_escapes_every_markdown_and_html_character_and_reads_back_as_the_same_text(text):
    escaped = md(text)
    assert shown(escaped) == text
    assert not re.search(r"(?<!\\)[\[\]()<>*`:$!#]", escaped)  # none left unescaped


def test_a_run_full_of_markdown_is_shown_as_its_text(recorded_db, tmp_path, app_for):
    path = str(tmp_path / "hostile.sqlite")
    _copy(recorded_db, path)
    conn = sqlite3.connect(path)
    sets = ", ".join(f"{column} = ?" for column in HOSTILE)
    conn.execute(f"UPDATE runs SET status = 'crashed', {sets} WHERE id = 2", list(HOSTILE.values()))
    conn.commit()
    conn.close()
    at = app_for(path, run_id=2)
    assert not at.exception
    page = [str(e.value) for kind in ("markdown", "caption", "error", "warning", "info") for e in getattr(at, kind)]
    leaks = [value for value in page if re.search(r"(?<!\\)\]\(http|(?<!\\)<img", value)]
    assert not leaks  # no link, image or tag as Markdown
    seen = texts(at)
    assert HOSTILE["error"] in seen and HOSTILE["hostname"] in seen and HOSTILE["name"] in seen


def test_the_sidebar_refuses_a_file_outside_the_dashboards_folder(
    recorded_db, odd_runs_db, tmp_path, app_for, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # started here, with recorded_db named (STALLWATCH_DB): odd_runs_db is elsewhere
    at = app_for(recorded_db)
    at.sidebar.text_input[0].set_value(odd_runs_db).run()
    assert not at.exception
    assert [t.value for t in at.title] == ["demo-healthy"]  # still the file it was started with
    (refused,) = [shown(e.value) for e in at.sidebar.error]
    assert refused.startswith(f"{odd_runs_db} is outside the folder this dashboard was started in")
    here = str(tmp_path / "here.sqlite")  # under its folder: opened (nothing there yet)
    at.sidebar.text_input[0].set_value(here).run()
    assert not at.sidebar.error and f"there is no `{here}` here" in texts(at)


class NotStarted:
    """A demo process stand-in: never finishes, records nothing."""

    pid = 0

    def poll(self) -> None:
        return None


def test_the_demo_writes_beside_the_file_the_dashboard_started_with_not_one_the_sidebar_names(
    tmp_path, app_for, monkeypatch
):
    started: list[str] = []

    def start_demo(db: str, seconds: float | None = None, scenario: str = "starved") -> tuple[NotStarted, str]:
        started.append(db)
        return NotStarted(), str(tmp_path / "demo.log")

    monkeypatch.setattr(demo_launcher, "start_demo", start_demo)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    at = app_for(str(tmp_path / "stallwatch.sqlite"))
    at.sidebar.text_input[0].set_value(str(tmp_path / "elsewhere" / "x.sqlite")).run()
    at.button(key="sw_start_demo").click().run()
    assert started == [str(tmp_path / "stallwatch-demo.sqlite")]

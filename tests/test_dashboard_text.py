"""The dashboard shows a file's text as text: a run's name, host, error or warnings never become Markdown."""

from __future__ import annotations

import re
import sqlite3

import pytest
from helpers import _copy, shown, texts

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

"""Text from a file, shown as text: every Markdown and HTML character escaped, so a file cannot style the page."""

from __future__ import annotations

import re

# NOTE [ File text is text ]
# st.markdown, st.caption, st.error and the other text elements render
# Markdown (links, images, Streamlit's :color[...] and :material/...:
# directives, LaTeX). A run's name, hostname, error, warnings and config
# values, and any message quoting them (a damaged value, a path), come from
# a file anyone can edit: each goes through ``md`` before it meets Markdown,
# which backslash-escapes every character that opens a Markdown, HTML or
# Streamlit construct (CommonMark reads an escaped punctuation character as
# itself), and those that open a list or a heading at a line's start, and
# drops control characters: a file can neither load a remote image nor draw
# a link, and the page reads the text as it is.
_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()<>#|~$:!&=])")
_LINE_START = re.compile(r"^(\s*)([-+]|\d+(?=\.))", re.MULTILINE)  # a list's bullet, or its number before a dot
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")
MAX_CHARS = 2000  # of one piece of file text on the page


def md(value: object) -> str:
    """``value`` as text that Markdown shows exactly, character for character."""
    text = _CONTROL.sub(" ", str(value))
    if len(text) > MAX_CHARS:
        text = text[: MAX_CHARS - 3] + "..."
    text = _PUNCTUATION.sub(r"\\\1", text)
    return _LINE_START.sub(_unlisted, text)


def _unlisted(match: re.Match[str]) -> str:
    indent, mark = match.group(1), match.group(2)
    return indent + ("\\" + mark if mark in "-+" else mark + "\\")

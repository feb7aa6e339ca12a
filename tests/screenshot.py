"""The README's picture of the Run page: made by the browser test, stamped with the sources it shows.

NOTE [ A current screenshot ]
The PNG in docs/images/ carries, in a PNG text chunk, a digest of every file that decides what
the Run page draws (the app and the diagnosis). tests/test_docs.py compares that stamp with the
checkout's, so a change to the page fails the suite until the picture is made again, by the
browser test that renders the demo's starved run:

    STALLWATCH_UPDATE_SCREENSHOT=1 python -m pytest tests/test_browser_e2e.py

A pixel comparison could not do this: a live recording never draws the same pixels twice.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

from helpers import REPO

SCREENSHOT = REPO / "docs" / "images" / "run-page.png"
SOURCES = ("app", "collector/diagnosis")
STAMP_KEY = "stallwatch-sources"
UPDATE_VARIABLE = "STALLWATCH_UPDATE_SCREENSHOT"


def source_stamp(root: Path = REPO) -> str:
    """A digest of the files the Run page is drawn from, by path and content."""
    digest = hashlib.sha256()
    for folder in SOURCES:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".py", ".toml") and "__pycache__" not in path.parts:
                digest.update(path.relative_to(root).as_posix().encode() + b"\0")
                digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def stamp_of(path: Path) -> str | None:
    """The stamp a screenshot was saved with, or None for a PNG without one."""
    from PIL import Image

    with Image.open(path) as image:
        return image.info.get(STAMP_KEY)


def save(png: bytes, path: Path, stamp: str) -> None:
    """Write ``png`` to ``path`` with ``stamp`` in a text chunk, palette-reduced to keep the repository small."""
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text(STAMP_KEY, stamp)
    path.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(io.BytesIO(png)) as image:
        image.convert("RGB").quantize(colors=256).save(path, pnginfo=info, optimize=True)


def update_requested() -> bool:
    return os.environ.get(UPDATE_VARIABLE) == "1"

"""What every subcommand shares: one-line usage errors, argument types, and the one default database path."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import NoReturn, TextIO

from collector.errors import CollectorWarning
from collector.store.schema import default_db_path

EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line on stderr and exit code 2, without the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"stallwatch: {message} (see {self.prog} --help)\n")


def positive_float(text: str) -> float:
    """An argparse type: a number above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def add_db_option(parser: argparse.ArgumentParser) -> None:
    """``--db PATH``, defaulting to ``$STALLWATCH_DB``, else ``stallwatch.sqlite`` here."""
    parser.add_argument("--db", default=default_db_path(), help="SQLite file (default: $STALLWATCH_DB or %(default)s)")


def one_line_warnings(stream: TextIO | None = None) -> None:
    """Show each ``CollectorWarning`` once, as one line on stderr, without Python's file:line and source echo.

    On the command line the user wrote no ``watch()`` line to point at (``demo``, ``run``, ``sweep``),
    so the location and the repeated source line are noise; other warnings keep Python's format.
    """
    shown: set[str] = set()
    default = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if not issubclass(category, CollectorWarning):
            default(message, category, filename, lineno, file, line)
            return
        text = " ".join(str(message).split())
        if text in shown:
            return
        shown.add(text)
        out = stream or sys.stderr
        print(text if text.startswith("stallwatch:") else f"stallwatch: {text}", file=out, flush=True)

    warnings.showwarning = show

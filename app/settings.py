"""Which file the dashboard reads: the sidebar's choice, else ``--db``, else ``STALLWATCH_DB``, else the default."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from collector.store.schema import DEFAULT_DB, ENV_DB

DEMO_DB = "stallwatch-demo.sqlite"


def db_from_args(argv: Sequence[str]) -> str | None:
    """``--db PATH`` from the script's arguments (``streamlit run app -- --db PATH``); unknown ones are ignored."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--db", default=None)
    args, _ = parser.parse_known_args(list(argv))
    return args.db


def default_db(argv: Sequence[str], environ: dict[str, str] | os._Environ[str]) -> str:
    return db_from_args(argv) or environ.get(ENV_DB) or DEFAULT_DB


def demo_db_for(path: str) -> str:
    """Where the one-click demo writes: ``stallwatch-demo.sqlite`` beside the default file."""
    return os.path.join(os.path.dirname(os.path.abspath(path)), DEMO_DB)

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


# NOTE [ What the dashboard opens ]
# On a shared node anyone who reaches the dashboard's port uses it with its
# owner's rights. So it opens only files under the folder it was started in
# (its working directory) and those named when it was started (--db,
# $STALLWATCH_DB), whatever the sidebar is given, and its one-click demo
# writes only stallwatch-demo.sqlite beside the file it was started with.
def refusal(path: str, argv: Sequence[str], environ: dict[str, str] | os._Environ[str]) -> str | None:
    """None where the dashboard may open ``path``; else one line saying why not and what to do."""
    real, start = os.path.realpath(path), os.path.realpath(os.getcwd())
    default = default_db(argv, environ)
    named = {os.path.realpath(p) for p in (db_from_args(argv), environ.get(ENV_DB), default, demo_db_for(default)) if p}
    if real in named or real.startswith(start.rstrip(os.sep) + os.sep):
        return None
    return (
        f"{path} is outside the folder this dashboard was started in ({start}) and was not named when it was "
        f"started: run `stallwatch dashboard {path}` to open it"
    )


def demo_db_for(path: str) -> str:
    """Where the one-click demo writes: ``stallwatch-demo.sqlite`` beside the default file."""
    return os.path.join(os.path.dirname(os.path.abspath(path)), DEMO_DB)

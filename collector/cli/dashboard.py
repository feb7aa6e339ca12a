"""``stallwatch dashboard [DB]``: start the Streamlit dashboard on a file, from any directory, on 127.0.0.1."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from collector.cli.args import EXIT_USAGE
from collector.store.schema import default_db_path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8501
PACKAGE = "stallwatch_app"  # the app's name in an installed distribution: NOTE [ The app's package name ]
ENTRY = "streamlit_app.py"
NO_STREAMLIT = (
    "stallwatch: the dashboard needs the [app] extra (streamlit, plotly): pip install 'stallwatch[app]'"
    " (from a clone: pip install -e '.[app]')"
)


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dashboard",
        help="open the dashboard on a stallwatch file (live while a run records)",
        description="Start stallwatch's Streamlit dashboard on DB, from any directory. It listens on "
        f"{DEFAULT_HOST} only; from a laptop, tunnel to it: ssh -L PORT:localhost:PORT you@host. "
        "The file is opened read-only, and need not exist yet: an open page picks up the first run.",
    )
    parser.add_argument(
        "db", nargs="?", default=default_db_path(), help="SQLite file (default: $STALLWATCH_DB or %(default)s)"
    )
    parser.add_argument("--port", type=_port, default=DEFAULT_PORT, help="port (default %(default)s)")
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        metavar="ADDR",
        help="address to listen on (default %(default)s: this machine only; the dashboard has no login)",
    )
    parser.set_defaults(handler=_main)


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"must be a port number 1-65535, got {text!r}")
    return int(text)


def app_script() -> Path | None:
    """The dashboard's entry script: the installed ``stallwatch_app``, or ``app/`` beside a clone's ``collector``.

    Located as a file, never imported: the app imports the collector, not the other way round.
    """
    root = Path(__file__).resolve().parents[2]  # site-packages, or the clone
    for candidate in (root / PACKAGE / ENTRY, root / "app" / ENTRY):
        if candidate.is_file() and (candidate.parent.name == PACKAGE or (root / "pyproject.toml").is_file()):
            return candidate
    spec = importlib.util.find_spec(PACKAGE)  # an editable install maps the package elsewhere
    if spec is not None and spec.submodule_search_locations:
        candidate = Path(next(iter(spec.submodule_search_locations))) / ENTRY
        if candidate.is_file():
            return candidate
    return None


def streamlit_args(script: Path, db: str, host: str, port: int) -> list[str]:
    """``streamlit run`` arguments: the listening address set here, whatever config files say."""
    return [
        "run",
        str(script),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        # As app/.streamlit/config.toml says why: a full gc.collect() after each refresh and
        # the polling watcher of the app's sources were most of an open live page's CPU.
        "--runner.postScriptGC",
        "false",
        "--server.fileWatcherType",
        "none",
        "--",
        "--db",
        os.path.abspath(db),
    ]


def _main(args: argparse.Namespace) -> int:
    if os.path.isdir(args.db):
        print(f"stallwatch: {args.db} is a directory; pass the SQLite file", file=sys.stderr)
        return EXIT_USAGE
    script = app_script()
    if script is None:
        print("stallwatch: the dashboard's files are not installed with this collector; reinstall stallwatch[app]")
        return EXIT_USAGE
    try:
        from streamlit.web import cli as streamlit_cli
    except ImportError:
        print(NO_STREAMLIT, file=sys.stderr)
        return EXIT_USAGE
    state = "" if os.path.exists(args.db) else " (not there yet: the page shows the first run as soon as it starts)"
    print(f"stallwatch dashboard: http://{args.host}:{args.port} reading {os.path.abspath(args.db)}{state}")
    if args.host not in (DEFAULT_HOST, "localhost", "::1"):
        print(f"stallwatch: listening on {args.host}: anyone who reaches it sees your runs (there is no login)")
    print("Ctrl-C stops it.", flush=True)
    try:
        streamlit_cli.main.main(args=streamlit_args(script, args.db, args.host, args.port), prog_name="streamlit")
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int | None) else EXIT_USAGE
    return 0

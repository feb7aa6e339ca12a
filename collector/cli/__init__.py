"""The command-line router: each subcommand lives in its own module, whose ``add_parser`` adds it with its handler."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from collector.cli.args import EXIT_USAGE, OneLineParser, one_line_warnings
from collector.errors import StallwatchError

# subcommand -> module with add_parser(subparsers), which sets the parser's handler(args) -> exit status
SUBCOMMANDS = {
    "demo": "collector.cli.demo",
    "report": "collector.cli.report",
    "sweep": "collector.cli.sweep",
    "run": "collector.cli.run",
    "exporter": "collector.cli.exporter",
    "merge": "collector.cli.merge",
    "dashboard": "collector.cli.dashboard",
}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m collector",
        description="stallwatch: see and fix a GPU starved by its DataLoader.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS.values():
        importlib.import_module(module_name).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    one_line_warnings()
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.handler(args) or 0)
    except StallwatchError as exc:
        print(f"stallwatch: {exc}", file=sys.stderr)
        return EXIT_USAGE

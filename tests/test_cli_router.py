"""The router's contract: each subcommand's module adds its parser with the handler ``main`` calls."""

from __future__ import annotations

import argparse

from collector.cli import SUBCOMMANDS, build_parser


def test_every_subcommand_module_adds_its_parser_with_a_handler():
    parser = build_parser()
    (choices,) = [a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(choices) == set(SUBCOMMANDS)
    for name, subparser in choices.items():
        assert callable(subparser.get_default("handler")), f"{name} sets no handler"

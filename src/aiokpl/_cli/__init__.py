"""The ``aiokpl`` command line: the parser and the table of subcommands.

Each subcommand lives in a module with an ``add_parser(commands, parents)`` function that
registers it (with ``set_defaults(handler=...)``, a function from the parsed arguments to the
exit status); :data:`SUBCOMMANDS` lists them in ``--help`` order. ``parents`` carries the global
options (``--region``, ``--endpoint-url``, ``--profile``, ``--no-verify-ssl``, ``--backend``;
see :mod:`aiokpl._cli.options`), which a subcommand that talks to Kinesis passes on to its
``add_parser``. Adding a subcommand is one import and one line in the table. ``demo`` and
``local`` are the two that start a local Kinesis (:mod:`aiokpl._cli.demo`,
:mod:`aiokpl._cli.local`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from . import coordinate, demo, local, put, tail
from .options import add_global_options, backend_problem, global_options_parent

__all__ = ("SUBCOMMANDS", "build_parser", "main")


AddParser = Callable[[Any, list[argparse.ArgumentParser]], None]

SUBCOMMANDS: list[AddParser] = [
    demo.add_parser,
    local.add_parser,
    put.add_parser,
    tail.add_parser,
    coordinate.add_parser,
]
"""The ``add_parser(commands, parents)`` function of every subcommand, in ``--help`` order."""


def build_parser() -> argparse.ArgumentParser:
    """The ``aiokpl`` argument parser, with every subcommand of :data:`SUBCOMMANDS`."""
    parser = argparse.ArgumentParser(prog="aiokpl", description="aiokpl command line")
    add_global_options(parser, top_level=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parents = [global_options_parent()]
    for add_parser in SUBCOMMANDS:
        add_parser(commands, parents)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    # argparse fills a ``nargs="*"`` positional at its first chance, so in
    # ``aiokpl put STREAM --json a.txt`` the file would be left over. A subcommand that sets
    # ``intermixed`` to such an attribute gets the leftover positionals appended to it.
    intermixed = getattr(args, "intermixed", None)
    if extras and intermixed and all(e == "-" or not e.startswith("-") for e in extras):
        # A new list: the attribute may be the parser's default list, shared between runs.
        setattr(args, intermixed, [*getattr(args, intermixed), *extras])
    elif extras:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    problem = backend_problem(getattr(args, "backend", "asyncio"))
    if problem is not None:
        parser.error(problem)
    handler: Any = args.handler
    return int(handler(args))

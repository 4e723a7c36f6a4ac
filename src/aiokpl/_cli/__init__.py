"""The ``aiokpl`` command line: the parser and the table of subcommands.

Each subcommand lives in a module with an ``add_parser(commands, parents)`` function that
registers it (with ``set_defaults(handler=...)``, a function from the parsed arguments to the
exit status); :data:`SUBCOMMANDS` lists them in ``--help`` order. ``parents`` carries the global
options (``--region``, ``--endpoint-url``, ``--profile``, ``--no-verify-ssl``, ``--backend``;
see :mod:`aiokpl._cli.options`), which a subcommand that talks to Kinesis passes on to its
``add_parser``. Adding a subcommand is one import and one line in the table. ``demo`` and
``local`` are the two that start a local Kinesis (:mod:`aiokpl._cli.demo`,
:mod:`aiokpl._cli.local`).

Each subcommand's parser is a :class:`CommandParser`, which reports an option it does not know
with its own usage (``aiokpl put: error: ...``), not the top-level one. :func:`main` turns a
broken AWS setup that botocore reports only when a client is created (a profile that does not
exist, an unusable endpoint) into one line and exit status 2, whichever subcommand met it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .._version import __version__
from . import coordinate, demo, local, put, spool, tail
from .options import (
    EXIT_USAGE,
    add_global_options,
    backend_problem,
    global_options_parent,
    setup_problem,
)

__all__ = ("SUBCOMMANDS", "CommandParser", "build_parser", "main")


AddParser = Callable[[Any, list[argparse.ArgumentParser]], None]

SUBCOMMANDS: list[AddParser] = [
    demo.add_parser,
    local.add_parser,
    put.add_parser,
    tail.add_parser,
    coordinate.add_parser,
    spool.add_parser,
]
"""The ``add_parser(commands, parents)`` function of every subcommand, in ``--help`` order."""


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: arguments it does not know are its usage error, not the top's.

    argparse hands a subcommand's unknown arguments up to the top-level parser, whose error
    then shows the top-level usage. Here the subcommand reports them itself, except the
    leftover positionals of a subcommand that sets ``intermixed``: argparse fills a
    ``nargs="*"`` positional at its first chance, so in ``aiokpl put STREAM --json a.txt`` the
    file is left over, and is appended to the attribute ``intermixed`` names.
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        intermixed = getattr(parsed, "intermixed", None)
        if extras and intermixed and all(e == "-" or not e.startswith("-") for e in extras):
            # A new list: the attribute may be the parser's default list, shared between runs.
            setattr(parsed, intermixed, [*getattr(parsed, intermixed), *extras])
        elif extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, []


def build_parser() -> argparse.ArgumentParser:
    """The ``aiokpl`` argument parser, with every subcommand of :data:`SUBCOMMANDS`."""
    parser = argparse.ArgumentParser(prog="aiokpl", description="aiokpl command line")
    group = add_global_options(
        parser,
        top_level=True,
        endpoint_help="Kinesis endpoint instead of the region's (e.g. a local server); for "
        "coordinate, the S3 or DynamoDB endpoint",
    )
    group.add_argument(
        "--version", action="version", version=f"aiokpl {__version__}", help="print the version"
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=CommandParser
    )
    parents = [global_options_parent()]
    for add_parser in SUBCOMMANDS:
        add_parser(commands, parents)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    problem = backend_problem(getattr(args, "backend", "asyncio"))
    if problem is not None:
        parser.error(problem)
    handler: Any = args.handler
    try:
        return int(handler(args))
    except Exception as exc:
        setup = setup_problem(exc)
        if setup is None:
            raise
        print(f"aiokpl {args.command}: {setup}", file=sys.stderr)
        return EXIT_USAGE

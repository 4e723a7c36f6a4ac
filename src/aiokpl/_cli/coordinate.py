"""``aiokpl coordinate``: run the summary role of a coordination group until interrupted.

Exactly one process per group runs the summary (see ``docs/coordination.md``); this is that
process, for deployments where no producer should carry the role. It opens its own S3 or
DynamoDB client with the default credential chain (environment, profile, instance role) and
runs :func:`aiokpl.coordination.run_summarizer`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from .._coordination.coordinator import run_summarizer
from .._coordination.stores import DynamoDBStore, S3Store
from .._core.errors import ConfigError
from .._kinesis import create_client
from .options import (
    EXIT_USAGE,
    config_from_args,
    global_options_parent,
    insecure_warning,
    interrupted,
    service_message,
    setup_problem,
    usage_message,
)
from .options import run as run_async

__all__ = ("add_parser",)


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``coordinate`` with the subcommands of the ``aiokpl`` parser.

    ``parents`` is not used: this command's ``--endpoint-url`` is S3's or DynamoDB's, so it
    takes the global options from a parent whose help says so.
    """
    endpoint_help = "S3 or DynamoDB endpoint instead of the region's (e.g. a local server)"
    parser: argparse.ArgumentParser = commands.add_parser(
        "coordinate",
        parents=[global_options_parent(endpoint_help=endpoint_help)],
        help="run the summary of a coordination group (S3 or DynamoDB) until interrupted",
        description=(
            "Summarize the reports of the producers of one coordination group every "
            "interval. Run exactly one per group."
        ),
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--s3", metavar="BUCKET/PREFIX", help="an S3 bucket and key prefix")
    where.add_argument("--dynamodb", metavar="TABLE", help="a DynamoDB table")
    parser.add_argument(
        "--group",
        default="aiokpl",
        help="the DynamoDB partition key of the group (default: %(default)s)",
    )
    parser.add_argument(
        "--create-table",
        action="store_true",
        help="create the DynamoDB table (on demand, with TTL) first",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=5.0,
        help="seconds between summaries (default: %(default)s)",
    )
    parser.add_argument(
        "--staleness",
        type=float,
        default=None,
        help="seconds after which a report that has not changed stops counting (default: 3 × "
        "interval)",
    )
    parser.add_argument("--rounds", type=int, default=None, help="stop after N summaries")
    parser.set_defaults(handler=_coordinate)


async def _run(args: argparse.Namespace) -> None:
    # --region, --endpoint-url, --profile, --no-verify-ssl, --ca-bundle
    config = config_from_args(args)
    warning = insecure_warning(args)
    if warning is not None:
        print(f"aiokpl coordinate: {warning}", file=sys.stderr)
    service = "s3" if args.s3 is not None else "dynamodb"
    async with create_client(config, service) as client:
        store: S3Store | DynamoDBStore
        if args.s3 is not None:
            bucket, _, prefix = args.s3.partition("/")
            store = S3Store(client, bucket, prefix)
        else:
            store = DynamoDBStore(client, args.dynamodb, args.group)
            if args.create_table:
                await store.create_table()
        print(f"aiokpl coordinate: summarizing {store!r} every {args.interval:g} s", flush=True)
        await run_summarizer(
            store, interval=args.interval, staleness=args.staleness, rounds=args.rounds
        )


def _coordinate(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        run_async(_run, args, backend=args.backend)
    except ConfigError as exc:  # no region: said in the command line's words
        print(f"aiokpl coordinate: {usage_message(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        problem = setup_problem(exc) or f"{type(exc).__name__}: {service_message(str(exc))}"
        print(f"aiokpl coordinate: {problem}", file=sys.stderr)
        return EXIT_USAGE
    except BaseException as exc:
        if not interrupted(exc):  # Ctrl-C stops the summary: a normal end
            raise
    return 0

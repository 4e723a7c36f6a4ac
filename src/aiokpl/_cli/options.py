"""What every ``aiokpl`` subcommand shares: global options, exit codes, argument types.

The AWS options are spelled as the AWS CLI spells them (``--region``, ``--endpoint-url``,
``--profile``, ``--no-verify-ssl``) and, as there, may be given before the subcommand or after
it: ``aiokpl --region eu-west-1 put events`` and ``aiokpl put events --region eu-west-1`` are
the same. The top-level parser holds the defaults; each subcommand's copy of the options uses
``argparse.SUPPRESS`` as its default, so it sets a value only when the option is on its part of
the command line and never overwrites one given before the subcommand.

Credentials are never taken on the command line: the default chain (environment variables,
``--profile``, container or instance roles) supplies them.

Errors meant for a program are reworded for a command line user here: the producer's "no
region" error names ``Config(region=...)``, the command line's names ``--region``
(:func:`usage_message`), and ``--backend trio`` without trio installed is a usage error naming
the extra to install (:func:`backend_problem`), not anyio's ``LookupError``.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
from typing import Any

from .._core.config import Config
from .._core.errors import ConfigError
from .._core.hashing import parse_stream_arn
from .._kinesis import check_region

__all__ = (
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_SERVICE_ERROR",
    "EXIT_USAGE",
    "add_global_options",
    "backend_problem",
    "config_from_args",
    "global_options_parent",
    "made_of",
    "positive_float",
    "positive_int",
    "usage_message",
)

EXIT_OK = 0
"""Everything worked (``put``: every record was delivered)."""
EXIT_FAILED = 1
"""``put``: some records failed; they are in the dead-letter file."""
EXIT_USAGE = 2
"""A bad option or argument, an unreadable input file, no region (argparse also uses 2)."""
EXIT_SERVICE_ERROR = 3
"""Kinesis refused the command: stream not found, access denied, endpoint unreachable."""
EXIT_INTERRUPTED = 130
"""``put`` or ``demo`` was interrupted (Ctrl-C, SIGTERM); what was read so far was reported."""

BACKENDS = ("asyncio", "trio")


def add_global_options(parser: argparse.ArgumentParser, *, top_level: bool) -> None:
    """Add the global options to ``parser``.

    Args:
        parser: the top-level parser, or a subcommand's parent parser.
        top_level: whether ``parser`` is the top-level one, which holds the defaults.
    """

    def default(value: Any) -> Any:
        return value if top_level else argparse.SUPPRESS

    group = parser.add_argument_group("global options")
    group.add_argument(
        "--region", default=default(None), help="AWS region (default: from the environment)"
    )
    group.add_argument(
        "--endpoint-url",
        default=default(None),
        metavar="URL",
        help="Kinesis endpoint instead of the region's (e.g. a local server)",
    )
    group.add_argument(
        "--profile", default=default(None), help="named profile of your AWS configuration"
    )
    group.add_argument(
        "--no-verify-ssl",
        dest="verify_ssl",
        action="store_false",
        default=default(True),
        help="do not verify the endpoint's TLS certificate",
    )
    add_backend_option(group, top_level=top_level)


def add_backend_option(parser: Any, *, top_level: bool) -> None:
    """Add ``--backend asyncio|trio`` (alone: ``demo`` takes it without the AWS options)."""
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="asyncio" if top_level else argparse.SUPPRESS,
        help="event loop to run on (default: asyncio)",
    )


def backend_problem(backend: str) -> str | None:
    """Why ``--backend backend`` cannot run here (the ``trio`` extra is missing), or None.

    trio needs the trio package and aiobotocore's httpx backend (httpx2, or the older httpx).
    """
    if backend != "trio":
        return None
    missing_trio = importlib.util.find_spec("trio") is None
    missing_httpx = all(importlib.util.find_spec(name) is None for name in ("httpx2", "httpx"))
    if missing_trio or missing_httpx:
        return "--backend trio needs the trio extra: pip install 'aiokpl[trio]'"
    return None


def usage_message(exc: ConfigError) -> str:
    """``exc``'s message, in the command line's words (``--region``, not ``Config(region=)``)."""
    message = str(exc)
    if message.startswith("no AWS region"):
        return (
            "no AWS region: pass --region (e.g. --region us-east-1), or set the "
            "AWS_DEFAULT_REGION variable or a region in your AWS profile (--profile)"
        )
    return message


def global_options_parent() -> argparse.ArgumentParser:
    """A parent parser giving a subcommand the global options (see ``add_parser(parents=)``)."""
    parent = argparse.ArgumentParser(add_help=False)
    add_global_options(parent, top_level=False)
    return parent


def config_from_args(args: argparse.Namespace, **changes: Any) -> Config:
    """The producer or client configuration the global options describe, plus ``changes``.

    A command's ``STREAM`` given as a stream ARN sets the region when ``--region`` does not.

    Raises:
        ConfigError: a value in ``changes`` is out of range.
        InvalidRecordError: ``STREAM`` is a malformed stream ARN, or one of another region
            than ``--region``.
    """
    region = args.region
    stream = getattr(args, "stream", None)
    if isinstance(stream, str):
        arn = parse_stream_arn(stream)
        if arn is not None:
            check_region(arn, stream, region)
            region = arn.region
    return Config(
        region=region,
        endpoint_url=args.endpoint_url,
        profile_name=args.profile,
        verify_ssl=args.verify_ssl,
        **changes,
    )


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
    return value


def made_of(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether ``exc`` is a ``kind``, or an exception group of nothing else.

    A Ctrl-C or a closed pipe reaches the top wrapped in exception groups when it struck inside
    a task group (trio's ``KeyboardInterrupt`` always does); the command line treats the
    wrapped and the bare exception alike.
    """
    if isinstance(exc, kind):
        return True
    inner: tuple[BaseException, ...] = getattr(exc, "exceptions", ())  # a group (3.10: backport)
    return bool(inner) and all(made_of(e, kind) for e in inner)

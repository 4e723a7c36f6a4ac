"""What every ``aiokpl`` subcommand shares: global options, exit codes, argument types.

The AWS options are spelled as the AWS CLI spells them (``--region``, ``--endpoint-url``,
``--profile``, ``--no-verify-ssl``, ``--ca-bundle``) and, as there, may be given before the
subcommand or after it: ``aiokpl --region eu-west-1 put events`` and ``aiokpl put events
--region eu-west-1`` are the same. The top-level parser holds the defaults; each subcommand's
copy of the options uses ``argparse.SUPPRESS`` as its default, so it sets a value only when the
option is on its part of the command line and never overwrites one given before the subcommand.

Credentials are never taken on the command line: the default chain (environment variables,
``--profile``, container or instance roles) supplies them. TLS is verified as the AWS CLI does
(``--ca-bundle``, else ``AWS_CA_BUNDLE`` or the profile's ``ca_bundle``); ``--no-verify-ssl``
turns it off, and the command says so on stderr (:func:`insecure_warning`).

Errors meant for a program are reworded for a command line user here: the producer's "no
region" error names ``Config(region=...)``, the command line's names ``--region``
(:func:`usage_message`), and ``--backend trio`` without trio installed is a usage error naming
the extra to install (:func:`backend_problem`), not anyio's ``LookupError``. An endpoint without
a scheme is a usage error of ``--endpoint-url`` (:func:`endpoint_url`); a profile that does not
exist, or an endpoint set badly in the environment or the profile, is one line and exit status 2
(:func:`setup_problem`), not botocore's traceback; and a service error whose message is a web
page (an endpoint that is not Kinesis) is summarised in one line (:func:`service_message`).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import math
import os
import re
import sys
import warnings
from collections.abc import Awaitable, Callable
from html import unescape
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

import anyio
import botocore.exceptions

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
    "endpoint_url",
    "existing_file",
    "global_options_parent",
    "insecure_warning",
    "interrupted",
    "made_of",
    "positive_float",
    "positive_int",
    "service_message",
    "setup_problem",
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

MAX_SERVICE_MESSAGE = 200
"""Longest service error message printed (an endpoint that is not Kinesis may send pages)."""


class ArgumentGroup(Protocol):
    """Where options are added: a parser or one of its groups (argparse's group class is
    private, so its one method used here is named instead)."""

    def add_argument(self, *name_or_flags: str, **kwargs: Any) -> argparse.Action: ...


def add_global_options(
    parser: argparse.ArgumentParser,
    *,
    top_level: bool,
    endpoint_help: str = "Kinesis endpoint instead of the region's (e.g. a local server)",
) -> ArgumentGroup:
    """Add the global options to ``parser``; returns their group.

    Args:
        parser: the top-level parser, or a subcommand's parent parser.
        top_level: whether ``parser`` is the top-level one, which holds the defaults.
        endpoint_help: ``--endpoint-url``'s help: which service's endpoint it is.
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
        type=endpoint_url,
        metavar="URL",
        help=endpoint_help,
    )
    group.add_argument(
        "--profile", default=default(None), help="named profile of your AWS configuration"
    )
    group.add_argument(
        "--no-verify-ssl",
        dest="verify_ssl",
        action="store_false",
        default=default(True),
        help="do not verify the endpoint's TLS certificate (a warning says so)",
    )
    group.add_argument(
        "--ca-bundle",
        default=default(None),
        type=existing_file,
        metavar="PATH",
        help="PEM file of the certificate authorities to trust, e.g. a proxy's private CA "
        "(default: the AWS_CA_BUNDLE variable, the profile's ca_bundle, else the system's)",
    )
    add_backend_option(group, top_level=top_level)
    return group


def endpoint_url(text: str) -> str:
    """An argparse type: an ``http://`` or ``https://`` URL with a host.

    botocore refuses anything else only once a client is created, with a ``ValueError``
    traceback; ``127.0.0.1:4567`` (no scheme) is the usual slip.
    """
    try:
        parts = urlsplit(text)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        valid = False
    if valid:
        return text
    if "://" not in text:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no scheme: give the whole URL, e.g. http://{text}"
        )
    raise argparse.ArgumentTypeError(f"not an http:// or https:// URL: {text!r}")


def existing_file(text: str) -> str:
    """An argparse type: the path of a file that exists (``--ca-bundle``)."""
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    return text


def insecure_warning(args: argparse.Namespace) -> str | None:
    """The warning a command prints when ``--no-verify-ssl`` turns TLS verification off."""
    if args.verify_ssl:
        return None
    return (
        "warning: --no-verify-ssl: the endpoint's TLS certificate is not verified, so anyone "
        "on the network path can read and change what is sent, the session token included "
        "(--ca-bundle trusts a private CA instead)"
    )


def setup_problem(exc: BaseException) -> str | None:
    """What is wrong with the AWS setup, in one line, if ``exc`` (or a group of it) says so.

    botocore raises these while a client is created, before any request: a profile that does
    not exist (``--profile``, ``AWS_PROFILE``) and an endpoint it cannot use (set in
    ``AWS_ENDPOINT_URL...`` or the profile; ``--endpoint-url`` is checked by its type first).
    Anything else is None: not a setup problem.
    """
    for inner in getattr(exc, "exceptions", ()):  # a group (3.10: the backport)
        found = setup_problem(inner)
        if found is not None:
            return found
    if isinstance(exc, botocore.exceptions.ProfileNotFound):
        profile = exc.kwargs.get("profile", "")
        return (
            f"no AWS profile named {profile!r} (from --profile or AWS_PROFILE) in "
            "~/.aws/config or ~/.aws/credentials"
        )
    prefix = "Invalid endpoint: "
    if isinstance(exc, ValueError) and str(exc).startswith(prefix):
        return (
            f"invalid endpoint {str(exc)[len(prefix) :]!r} (from the environment or the "
            "profile): an endpoint URL starts with http:// or https://"
        )
    return None


_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)
_NOT_TEXT = re.compile(r"<(head|script|style)\b.*?</\1\s*>", re.I | re.S)
_TAG = re.compile(r"<[^>]*>")


def service_message(message: str) -> str:
    """A service error's message on one line of at most :data:`MAX_SERVICE_MESSAGE` characters.

    An endpoint that is not Kinesis (a web server, another service) answers with an HTML page,
    which botocore passes on whole as the message: it is summarised as its title and text.
    """
    if re.match(r"\s*<(!doctype|html|head|body)", message, re.I):
        found = _TITLE.search(message)
        title = " ".join(unescape(found.group(1)).split()) if found else ""
        text = " ".join(unescape(_TAG.sub(" ", _NOT_TEXT.sub(" ", message))).split())
        if title and text.startswith(title):  # the page's heading repeats its title
            text = text[len(title) :].lstrip()
        summary = f"{title}: {text}" if title and text else title or text
        message = f"the endpoint answered with a web page, not as Kinesis does: {summary}"
    message = " ".join(message.split())
    if len(message) > MAX_SERVICE_MESSAGE:
        message = message[: MAX_SERVICE_MESSAGE - 1] + "…"
    return message


def add_backend_option(parser: ArgumentGroup, *, top_level: bool) -> None:
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


def global_options_parent(**options: Any) -> argparse.ArgumentParser:
    """A parent parser giving a subcommand the global options (see ``add_parser(parents=)``).

    ``options`` go to :func:`add_global_options` (``endpoint_help``).
    """
    parent = argparse.ArgumentParser(add_help=False)
    add_global_options(parent, top_level=False, **options)
    return parent


def config_from_args(args: argparse.Namespace, **changes: Any) -> Config:
    """The producer or client configuration the global options describe, plus ``changes``.

    A command's ``STREAM`` given as a stream ARN sets the region when ``--region`` does not.

    Raises:
        ConfigError: a value in ``changes`` is out of range, or ``--ca-bundle`` is given with
            ``--no-verify-ssl``.
        InvalidRecordError: ``STREAM`` is a malformed stream ARN, or one of another region
            than ``--region``.
    """
    if args.ca_bundle is not None and not args.verify_ssl:
        raise ConfigError("--ca-bundle is given with --no-verify-ssl, which ignores it")
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
        ca_bundle=args.ca_bundle,
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


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc``, out of ``anyio.run``, means Ctrl-C: :func:`made_of` ``KeyboardInterrupt``.

    On Python 3.10, anyio's asyncio runner answers Ctrl-C by cancelling the main task and lets
    the ``CancelledError`` out instead of a ``KeyboardInterrupt`` (3.11's runner turns it
    into one); nothing else cancels that task from outside, so there it means the same.
    """
    if made_of(exc, KeyboardInterrupt):
        return True
    return sys.version_info < (3, 11) and made_of(exc, asyncio.CancelledError)


_T = TypeVar("_T")


def run(func: Callable[..., Awaitable[_T]], *args: object, backend: str) -> _T:
    """``anyio.run(func, *args, backend=backend)``, quiet about the coroutine a Ctrl-C orphans.

    Trio delivers ``KeyboardInterrupt`` wherever the program stands, so it can strike between
    ``producer.put_record(...)`` making its coroutine and the ``await`` that would start it;
    Python then warns that the coroutine "was never awaited", a second line after the
    command's one-line "interrupted" (seen on Python 3.10). Only that warning, only during the
    run, is silenced: the interrupt itself is reported as always.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"coroutine '.*' was never awaited", RuntimeWarning)
        return anyio.run(func, *args, backend=backend)

"""``aiokpl tail STREAM``: print a stream's user records as JSON lines, following new ones.

The reading itself is :func:`aiokpl._cli.reader.tail_stream`; this module parses the options, turns
each user record into one JSON line on stdout (flushed after every page, so a pipe sees records
as they arrive; characters a terminal would obey rather than print are escaped: see
:mod:`aiokpl._cli.terminal`), stops after ``--count`` records, and turns Ctrl-C and a closed
pipe into a quiet exit 0.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
from datetime import datetime, timezone
from typing import Any, TextIO

import anyio

from .._core.config import Config
from .._core.errors import ConfigError
from .._core.trace_context import trace_context_of
from .._core.wire import DeaggregatedRecord
from .._kinesis import create_client
from .options import (
    EXIT_OK,
    EXIT_SERVICE_ERROR,
    EXIT_USAGE,
    config_from_args,
    insecure_warning,
    interrupted,
    made_of,
    positive_float,
    positive_int,
    service_message,
    usage_message,
)
from .options import run as run_async
from .reader import StartPosition, TailError, tail_stream
from .terminal import json_line

__all__ = ("add_parser", "format_record", "parse_timestamp")

DATA_MODES = ("auto", "text", "base64")


def parse_timestamp(text: str) -> datetime:
    """An argparse type: an ISO 8601 date-time or a number of seconds since the Unix epoch.

    A date-time without a UTC offset is taken as UTC; ``Z`` is accepted for ``+00:00``.

    Raises:
        argparse.ArgumentTypeError: neither form.
    """
    try:
        return datetime.fromtimestamp(float(text), tz=timezone.utc)
    except (ValueError, OverflowError, OSError):
        pass
    iso = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 time (2024-05-01T12:00:00Z) or epoch seconds: {text!r}"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _timestamp_text(value: Any) -> str | None:
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
    elif isinstance(value, (int, float)):
        moment = datetime.fromtimestamp(value, tz=timezone.utc)
    else:
        return None
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def format_record(stream: str, shard_id: str, record: DeaggregatedRecord, data_mode: str) -> str:
    """One user record as a JSON line (without the newline).

    Keys: ``stream``, ``shard_id``, ``partition_key`` (``null`` for a record stored without one,
    on a stream that places records itself: ``AUTO`` distribution), ``explicit_hash_key``
    (``null`` unless the record came out of an aggregate that gave it one: Kinesis does not
    return it otherwise),
    ``sequence_number``, ``sub_sequence_number``, ``aggregated``,
    ``approximate_arrival_timestamp`` (ISO 8601, UTC, milliseconds), ``data`` and
    ``data_encoding`` (``"text"`` or ``"base64"``); and ``trace``, only when the user record
    carries a trace context (its tags, see ``aiokpl.tracing``): ``{"traceparent": ...,
    "tracestate": ...}`` (``tracestate`` ``null`` when it has none). Characters a terminal
    would obey rather than print (controls, bidirectional overrides) are ``\\uXXXX`` escapes
    (:func:`aiokpl._cli.terminal.json_line`): the same JSON once read.

    Args:
        stream: the stream name.
        shard_id: the shard the record was read from.
        record: the user record.
        data_mode: ``"auto"`` (text when the data is valid UTF-8, else base64), ``"text"``
            (undecodable bytes become U+FFFD) or ``"base64"``.
    """
    data = record.data
    if data_mode == "base64":
        text, encoding = base64.b64encode(data).decode("ascii"), "base64"
    elif data_mode == "text":
        text, encoding = data.decode("utf-8", errors="replace"), "text"
    else:
        try:
            text, encoding = data.decode("utf-8"), "text"
        except UnicodeDecodeError:
            text, encoding = base64.b64encode(data).decode("ascii"), "base64"
    line: dict[str, Any] = {
        "stream": stream,
        "shard_id": shard_id,
        "partition_key": record.partition_key,
        "explicit_hash_key": record.explicit_hash_key,
        "sequence_number": record.sequence_number,
        "sub_sequence_number": record.sub_sequence_number,
        "aggregated": record.aggregated,
        "approximate_arrival_timestamp": _timestamp_text(record.approximate_arrival_timestamp),
        "data": text,
        "data_encoding": encoding,
    }
    context = trace_context_of(record.tags)
    if context is not None:
        line["trace"] = {"traceparent": context.traceparent, "tracestate": context.tracestate}
    return json_line(line)


class _Printer:
    """Writes records to ``stdout`` and cancels ``scope`` once ``count`` are out."""

    def __init__(
        self,
        stream: str,
        data_mode: str,
        count: int | None,
        stdout: TextIO,
        scope: anyio.CancelScope,
    ) -> None:
        self._stream = stream
        self._data_mode = data_mode
        self._count = count
        self._stdout = stdout
        self._scope = scope
        self.printed = 0

    def __call__(self, shard_id: str, records: list[DeaggregatedRecord]) -> None:
        if self._count is not None:
            records = records[: self._count - self.printed]
        self._stdout.write(
            "".join(
                format_record(self._stream, shard_id, record, self._data_mode) + "\n"
                for record in records
            )
        )
        self._stdout.flush()
        self.printed += len(records)
        if self._count is not None and self.printed >= self._count:
            self._scope.cancel()


DESCRIPTION = """\
Print the user records of a stream as JSON lines (aggregates are split), reading every shard
at once and following new records until interrupted (Ctrl-C exits 0), --count records were
printed, or, with --no-follow, every shard is caught up. Exit status: 0 on a normal end, 2 for a
usage error, 3 when Kinesis refused (stream not found, access denied).
"""


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``tail`` with the subcommands of the ``aiokpl`` parser."""
    tail = commands.add_parser(
        "tail",
        parents=parents,
        help="print a stream's records as JSON lines",
        description=DESCRIPTION,
    )
    tail.add_argument("stream", metavar="STREAM", help="the stream to read: its name or its ARN")
    start = tail.add_mutually_exclusive_group()
    start.add_argument(
        "--trim-horizon",
        dest="start",
        action="store_const",
        const="TRIM_HORIZON",
        help="start at the oldest record the stream keeps",
    )
    start.add_argument(
        "--latest",
        dest="start",
        action="store_const",
        const="LATEST",
        help="start with the records written from now on (the default)",
    )
    start.add_argument(
        "--at-timestamp",
        type=parse_timestamp,
        metavar="TIME",
        help="start at the first record that arrived at or after TIME: ISO 8601 "
        "(2024-05-01T12:00:00Z; no offset means UTC) or seconds since the Unix epoch",
    )
    tail.add_argument(
        "--count", type=positive_int, metavar="N", help="stop after printing N records"
    )
    tail.add_argument(
        "--no-follow",
        dest="follow",
        action="store_false",
        help="stop once every shard is caught up instead of waiting for new records",
    )
    tail.add_argument(
        "--data",
        choices=DATA_MODES,
        default="auto",
        help="how data is printed: auto (text when it is valid UTF-8, else base64), text (invalid "
        "bytes become U+FFFD) or base64 (default: %(default)s)",
    )
    tail.add_argument(
        "--poll-interval",
        type=positive_float,
        metavar="SECONDS",
        default=1.0,
        help="seconds to wait between polls of a shard that had nothing new (default: %(default)s)",
    )
    tail.add_argument(
        "-q", "--quiet", action="store_true", help="no notes on stderr (shards, retries)"
    )
    tail.set_defaults(handler=run_tail_command)


def _start_of(args: argparse.Namespace) -> StartPosition:
    if args.at_timestamp is not None:
        return StartPosition("AT_TIMESTAMP", args.at_timestamp)
    return StartPosition(args.start or "LATEST")


def run_tail_command(
    args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Run ``aiokpl tail`` as ``args`` say; returns the exit status."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"aiokpl tail: {exc}", file=stderr)
        return EXIT_USAGE
    warning = insecure_warning(args)
    if warning is not None:
        print(f"aiokpl tail: {warning}", file=stderr)
    try:
        return run_async(_tail_main, config, args, stdout, stderr, backend=args.backend)
    except BaseException as exc:
        if interrupted(exc):
            return EXIT_OK
        if not made_of(exc, BrokenPipeError):
            raise
        # The reader went away (`aiokpl tail ... | head`): stop quietly, like `tail` does;
        # stdout is pointed at /dev/null so that the interpreter's final flush cannot fail.
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stdout.fileno())
        except (OSError, ValueError, AttributeError):  # pragma: no cover - not a real file
            pass
        finally:
            os.close(devnull)
        return EXIT_OK


async def _tail_main(
    config: Config, args: argparse.Namespace, stdout: TextIO, stderr: TextIO
) -> int:
    def note(message: str) -> None:
        if not args.quiet:
            print(f"aiokpl tail: {message}", file=stderr, flush=True)

    try:
        async with create_client(config) as client:
            with anyio.CancelScope() as scope:
                printer = _Printer(args.stream, args.data, args.count, stdout, scope)
                await tail_stream(
                    client,
                    args.stream,
                    start=_start_of(args),
                    on_records=printer,
                    follow=args.follow,
                    poll_interval=args.poll_interval,
                    on_warning=note,
                    on_shard_started=lambda shard, kind: note(f"reading {shard} from {kind}"),
                )
    except ConfigError as exc:
        print(f"aiokpl tail: {usage_message(exc)}", file=stderr)
        return EXIT_USAGE
    except TailError as exc:
        message = f"{exc.code}: {service_message(exc.message)}"
        print(f"aiokpl tail: cannot read {args.stream!r}: {message}", file=stderr)
        return EXIT_SERVICE_ERROR
    return EXIT_OK

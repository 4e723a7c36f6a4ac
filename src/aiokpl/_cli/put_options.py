"""``aiokpl put``'s arguments: the input, then one group per concern (records, output, producer).

The table of options only: what each means is in its help, which ``make docs-tables`` copies
into ``docs/cli.md``. The command that reads them is :mod:`aiokpl._cli.put`.
"""

from __future__ import annotations

import argparse

from .lines import FieldPath, Template
from .options import positive_float, positive_int

__all__ = ("DESCRIPTION", "add_put_arguments")

DESCRIPTION = """\
Put one record per line of the FILEs (standard input when there is none, or for '-').
Failed and invalid lines go to a dead-letter file, with their reason; the exit status is
0 when every record was delivered, 1 when some failed, 2 for a usage error, 3 when Kinesis
refused the command (stream not found, access denied), 130 when interrupted.
"""


def add_put_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``put``'s positional arguments and option groups to its parser, in help order."""
    _add_inputs(parser)
    _add_record_options(parser)
    _add_output_options(parser)
    _add_producer_options(parser)


def _add_inputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "stream", metavar="STREAM", help="the stream to write to: its name or its ARN"
    )
    # default=[]: argparse then knows FILE is optional, and says only STREAM when it is missing.
    parser.add_argument(
        "files",
        metavar="FILE",
        nargs="*",
        default=[],
        help="input files, read in order ('-': stdin; default: stdin)",
    )


def _add_record_options(parser: argparse.ArgumentParser) -> None:
    """How a line becomes a record: JSON or not, and where its key, hash key and data are."""
    records = parser.add_argument_group("records")
    records.add_argument(
        "--json",
        action="store_true",
        help="each line is a JSON document (blank lines skipped); needed by every --...-field "
        "option and by templates that read fields",
    )
    key = records.add_mutually_exclusive_group()
    key.add_argument(
        "--partition-key-field",
        type=FieldPath.parse,
        metavar="PATH",
        help="partition key from this JSON field (dotted path: user.id). Without this, "
        "--partition-key-template or --no-partition-key, each record gets a random key (32 hex "
        "digits)",
    )
    key.add_argument(
        "--partition-key-template",
        type=Template.parse,
        metavar="TEMPLATE",
        help="partition key from a template: '{user.id}-{n}' ({n}: the line number)",
    )
    key.add_argument(
        "--no-partition-key",
        action="store_true",
        help="put each record without a partition key: a stream that places records itself "
        "(AUTO record distribution) takes it as it is; on one that routes by key, the producer "
        "places it (key '-', an explicit hash key of the shard with the most room) unless "
        "--explicit-hash-key-field gives one",
    )
    records.add_argument(
        "--explicit-hash-key-field",
        type=FieldPath.parse,
        metavar="PATH",
        help="explicit hash key from this JSON field: a decimal string or an integer, 0 … 2¹²⁸−1",
    )
    records.add_argument(
        "--data-field",
        type=FieldPath.parse,
        metavar="PATH",
        help="data from this JSON field: a string as its UTF-8 bytes, anything else as compact "
        "JSON (default: the whole line, as it is)",
    )


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    """Where failed lines and the report go, and whether progress is shown."""
    output = parser.add_argument_group("output")
    output.add_argument(
        "--dead-letter",
        metavar="FILE",
        help="where failed lines go, appended as JSON lines (default: NAME.dead-letter.jsonl, "
        "NAME the stream's name, also when STREAM is its ARN)",
    )
    output.add_argument(
        "--report-json", metavar="FILE", help="also write the final report as JSON ('-': stdout)"
    )
    output.add_argument(
        "--no-progress", action="store_true", help="no progress line, even on a terminal"
    )


def _add_producer_options(parser: argparse.ArgumentParser) -> None:
    """The producer's settings that a run may change, and the reading rate."""
    producer = parser.add_argument_group("producer")
    producer.add_argument(
        "--no-aggregation", action="store_true", help="one user record per Kinesis record"
    )
    producer.add_argument(
        "--max-buffered-ms",
        type=positive_int,
        metavar="MS",
        default=100,
        help="longest a record waits to be batched, in ms: Config.record_max_buffered_time_ms "
        "(default: %(default)s)",
    )
    producer.add_argument(
        "--record-ttl-ms",
        type=positive_int,
        metavar="MS",
        default=30_000,
        help="a record not delivered after this many ms fails with code Expired: "
        "Config.record_ttl_ms (default: %(default)s)",
    )
    producer.add_argument(
        "--rate-limit",
        type=positive_float,
        metavar="RECORDS_PER_S",
        help="read at most this many records per second, in bursts of one second (default: as "
        "fast as Kinesis takes them)",
    )
    producer.add_argument(
        "--max-outstanding-records",
        type=positive_int,
        metavar="N",
        default=10_000,
        help="records in flight at most; reading waits beyond (default: %(default)s)",
    )
    producer.add_argument(
        "--max-record-size",
        type=positive_int,
        metavar="BYTES",
        default=1024 * 1024,
        help="largest record (partition key + data) accepted; raise it for a stream whose "
        "limit was raised (default: %(default)s)",
    )

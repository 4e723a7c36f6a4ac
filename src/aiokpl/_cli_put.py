"""``aiokpl put STREAM [FILE...]``: one record per input line, through the producer.

The input is streamed: a worker thread reads blocks of at most :data:`READ_SIZE` bytes (so a slow
pipe never blocks the event loop, and the producer keeps sending while it waits), the blocks are
split into lines, and each line becomes a ``put_record``, which waits whenever the producer holds
``max_outstanding_records`` / ``max_outstanding_bytes``. Memory is therefore bounded by those
two numbers and :data:`MAX_LINE_SIZE`, never by the size of the input.

Every line ends in exactly one of these: delivered; failed by Kinesis (its result's code, e.g.
``ProvisionedThroughputExceededException`` after the TTL); or rejected before it was sent (bad
JSON, a missing field, a record over the limits). Failed and rejected lines are counted by code
in the report and written, with their reason and the record, to the dead-letter file, which is
created only when the first one happens.

The pure parts (line splitting, field paths, partition-key templates, line parsing, the report)
take no I/O and are tested on their own.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import stat
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import IO, Any, NamedTuple, TextIO

import anyio
import anyio.lowlevel
import anyio.to_thread

from ._cli_options import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SERVICE_ERROR,
    EXIT_USAGE,
    config_from_args,
    made_of,
    positive_float,
    positive_int,
)
from ._core.config import Config
from ._core.errors import ConfigError, InvalidRecordError, InvalidRecordTypeError
from ._kinesis import create_client, error_of
from ._outcome import Outcome
from ._producer import Producer
from ._rate_limiter import RateLimiter

__all__ = (
    "BadLine",
    "DeadLetters",
    "FieldPath",
    "Line",
    "LineParser",
    "LineSplitter",
    "ParsedRecord",
    "PutReport",
    "Template",
    "add_parser",
)

READ_SIZE = 64 * 1024
"""Largest block read from an input at once."""

MAX_LINE_SIZE = 16 * 1024 * 1024
"""Lines longer than this (10 MiB, the largest record, plus room for JSON) are not kept."""

PROGRESS_INTERVAL = 0.25
"""Seconds between two redraws of the progress line."""

MAX_REPORTED_BAD_LINES = 20
"""Bad lines described one by one on stderr; the dead-letter file has them all."""


# --------------------------------------------------------------------------------------------
# Lines
# --------------------------------------------------------------------------------------------


class Line(NamedTuple):
    """One input line.

    Attributes:
        number: its 1-based line number in its input.
        data: its bytes without the ``\\n``, or ``None`` if it was longer than the limit.
        size: its length in bytes, without the ``\\n``.
    """

    number: int
    data: bytes | None
    size: int


class LineSplitter:
    """Splits a byte stream, block by block, into numbered lines.

    Only a ``\\n`` ends a line (a ``\\r`` before it stays part of the line). A line longer than
    ``max_size`` is dropped as it arrives and comes out with ``data=None``, so memory stays within
    ``max_size`` plus one block whatever the input. A last line without a newline comes out of
    :meth:`end`.

    Args:
        max_size: the longest line kept, in bytes.
    """

    def __init__(self, max_size: int = MAX_LINE_SIZE) -> None:
        self._max_size = max_size
        self._pending = bytearray()
        self._dropped = 0  # bytes of the current line already dropped (it is too long)
        self._number = 0

    def feed(self, block: bytes) -> list[Line]:
        """The lines that ``block`` completes, in order."""
        lines: list[Line] = []
        start = 0
        while True:
            newline = block.find(b"\n", start)
            if newline < 0:
                break
            self._append(block, start, newline)
            lines.append(self._take())
            start = newline + 1
        self._append(block, start, len(block))
        return lines

    def end(self) -> list[Line]:
        """The last line, if the input did not end with a newline."""
        if self._pending or self._dropped:
            return [self._take()]
        return []

    def _append(self, block: bytes, start: int, stop: int) -> None:
        if self._dropped:
            self._dropped += stop - start
        elif len(self._pending) + stop - start > self._max_size:
            self._dropped = len(self._pending) + stop - start
            self._pending.clear()
        else:
            self._pending += block[start:stop]

    def _take(self) -> Line:
        self._number += 1
        if self._dropped:
            line = Line(self._number, None, self._dropped)
            self._dropped = 0
        else:
            line = Line(self._number, bytes(self._pending), len(self._pending))
            self._pending.clear()
        return line


# --------------------------------------------------------------------------------------------
# Fields and templates
# --------------------------------------------------------------------------------------------


class FieldError(ValueError):
    """A JSON line lacks a field, or the field's value does not fit its use."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class FieldPath:
    """A dotted path to a value in a JSON document: ``user.id``, ``items.0.sku``.

    A segment reads the key of that name from an object, or the item at that index (a
    non-negative decimal) from an array. A leading ``.`` (``.user.id``, as in jq) is allowed and
    changes nothing. Keys that contain a dot cannot be reached.

    Attributes:
        text: the path as written (without a leading dot).
        segments: its parts.
    """

    text: str
    segments: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> FieldPath:
        """Parse ``text``.

        Raises:
            ValueError: an empty path or an empty segment (``a..b``).
        """
        body = text[1:] if text.startswith(".") else text
        segments = tuple(body.split("."))
        if not body or not all(segments):
            raise ValueError(f"invalid field path {text!r}: write names separated by dots")
        return cls(body, segments)

    def lookup(self, document: Any) -> Any:
        """The value at this path in ``document``.

        Raises:
            FieldError: code ``"MissingField"`` if a segment is not there.
        """
        value = document
        for segment in self.segments:
            if isinstance(value, dict) and segment in value:
                value = value[segment]
            elif isinstance(value, list) and segment.isdigit() and int(segment) < len(value):
                value = value[int(segment)]
            else:
                raise FieldError("MissingField", f"no field {self.text!r}")
        return value

    def text_of(self, document: Any) -> str:
        """The value at this path as text: a string as it is, a number or boolean as in JSON.

        Raises:
            FieldError: ``"MissingField"``, or ``"InvalidField"`` for null, an object or an array.
        """
        value = self.lookup(document)
        if isinstance(value, str):
            return value
        if isinstance(value, (bool, int, float)):
            return json.dumps(value)
        kind = "null" if value is None else "an object" if isinstance(value, dict) else "an array"
        raise FieldError(
            "InvalidField", f"field {self.text!r} is {kind}, not a string, number or boolean"
        )


LINE_NUMBER = "n"
"""The template placeholder of the line number."""


@dataclass(frozen=True)
class Template:
    """A partition-key template: text with ``{placeholders}``.

    ``{n}`` is the line's number in its input (from 1); any other placeholder is a
    :class:`FieldPath` into the JSON line (``{user.id}``; ``{.n}`` reaches a field named
    ``n``). ``{{`` and ``}}`` stand for literal braces. Values are rendered as
    :meth:`FieldPath.text_of` does.

    Attributes:
        text: the template as written.
        parts: literal strings, field paths, and ``None`` for ``{n}``, in order.
    """

    text: str
    parts: tuple[str | FieldPath | None, ...]

    @classmethod
    def parse(cls, text: str) -> Template:
        """Parse ``text``.

        Raises:
            ValueError: an unmatched brace or an invalid placeholder (the message gives its
                position).
        """
        parts: list[str | FieldPath | None] = []
        literal: list[str] = []
        i = 0
        while i < len(text):
            char = text[i]
            if char in "{}" and text[i + 1 : i + 2] == char:
                literal.append(char)
                i += 2
            elif char == "}":
                raise ValueError(f"template {text!r}: '}}' at {i} closes nothing (write '}}}}')")
            elif char == "{":
                close = text.find("}", i)
                if close < 0:
                    raise ValueError(f"template {text!r}: '{{' at {i} is never closed")
                name = text[i + 1 : close]
                if literal:
                    parts.append("".join(literal))
                    literal = []
                try:
                    parts.append(None if name == LINE_NUMBER else FieldPath.parse(name))
                except ValueError as exc:
                    raise ValueError(f"template {text!r}: placeholder at {i}: {exc}") from None
                i = close + 1
            else:
                literal.append(char)
                i += 1
        if literal:
            parts.append("".join(literal))
        return cls(text, tuple(parts))

    @property
    def fields(self) -> tuple[FieldPath, ...]:
        """The field paths the template reads."""
        return tuple(part for part in self.parts if isinstance(part, FieldPath))

    def render(self, document: Any, line_number: int) -> str:
        """The template filled in from ``document`` and ``line_number``.

        Raises:
            FieldError: a field is missing or is not a scalar.
        """
        out = []
        for part in self.parts:
            if part is None:
                out.append(str(line_number))
            elif isinstance(part, str):
                out.append(part)
            else:
                out.append(part.text_of(document))
        return "".join(out)


# --------------------------------------------------------------------------------------------
# From a line to a record
# --------------------------------------------------------------------------------------------


class ParsedRecord(NamedTuple):
    """What one line puts: the ``put_record`` arguments."""

    partition_key: str
    data: bytes
    explicit_hash_key: str | None


class BadLine(NamedTuple):
    """Why a line cannot become a record.

    Attributes:
        code: ``"InvalidJson"``, ``"MissingField"``, ``"InvalidField"``, ``"LineTooLong"``, or
            ``"InvalidRecord"`` (the producer refused the record: a key or the size is out
            of limits).
        message: what is wrong, naming the field or the limit.
    """

    code: str
    message: str


def random_partition_key(rng: random.Random) -> str:
    """32 random hexadecimal digits: spreads records evenly over the shards."""
    return f"{rng.getrandbits(128):032x}"


@dataclass(frozen=True)
class LineParser:
    """Turns input lines into records, as the ``put`` options say.

    Attributes:
        json_lines: each line is a JSON document (required by every field option).
        partition_key_field: the field holding the partition key.
        partition_key_template: a template giving the partition key.
        explicit_hash_key_field: the field holding an explicit hash key (decimal string or
            integer).
        data_field: the field holding the data; otherwise the data is the line itself.
        random_key: the source of random partition keys (used when neither of the above).
    """

    json_lines: bool = False
    partition_key_field: FieldPath | None = None
    partition_key_template: Template | None = None
    explicit_hash_key_field: FieldPath | None = None
    data_field: FieldPath | None = None
    random_key: Callable[[], str] = field(
        default_factory=lambda: partial(random_partition_key, random.Random())
    )

    def __post_init__(self) -> None:
        if self.partition_key_field and self.partition_key_template:
            raise ValueError("give a partition key field or a template, not both")
        if not self.json_lines:
            needs_json = [
                name
                for name, value in (
                    ("--partition-key-field", self.partition_key_field),
                    ("--explicit-hash-key-field", self.explicit_hash_key_field),
                    ("--data-field", self.data_field),
                )
                if value is not None
            ]
            if self.partition_key_template and self.partition_key_template.fields:
                needs_json.append("a --partition-key-template with fields")
            if needs_json:
                raise ValueError(f"{', '.join(needs_json)} read JSON fields: add --json")

    def parse(self, line: bytes, number: int) -> ParsedRecord | BadLine:
        """The record ``line`` (the ``number``-th of its input) stands for, or why it cannot be."""
        document: Any = None
        if self.json_lines:
            try:
                document = json.loads(line)
            except ValueError as exc:  # UnicodeDecodeError is a ValueError too
                return BadLine("InvalidJson", f"invalid JSON: {exc}")
        try:
            if self.partition_key_field is not None:
                partition_key = self.partition_key_field.text_of(document)
            elif self.partition_key_template is not None:
                partition_key = self.partition_key_template.render(document, number)
            else:
                partition_key = self.random_key()
            explicit_hash_key = None
            if self.explicit_hash_key_field is not None:
                explicit_hash_key = self.explicit_hash_key_field.text_of(document)
            data = line
            if self.data_field is not None:
                value = self.data_field.lookup(document)
                text = (
                    value
                    if isinstance(value, str)
                    else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
                )
                data = text.encode()
        except FieldError as exc:
            return BadLine(exc.code, str(exc))
        return ParsedRecord(partition_key, data, explicit_hash_key)


# --------------------------------------------------------------------------------------------
# Report and dead letters
# --------------------------------------------------------------------------------------------


@dataclass
class PutReport:
    """What a ``put`` run did.

    Attributes:
        stream: the stream written to.
        lines: input lines read, blank ones included.
        blank: blank lines, skipped.
        delivered: records delivered.
        delivered_bytes: data bytes of the delivered records.
        failed: failed and rejected lines by error code.
        retries: attempts beyond the first, over all records.
        seconds: from the first read to the last result.
        dead_letters: lines written to the dead-letter file.
        dead_letter_path: that file, once created.
        dead_letter_error: why writing it failed, if it did.
        interrupted: the run was stopped by Ctrl-C.
    """

    stream: str
    lines: int = 0
    blank: int = 0
    delivered: int = 0
    delivered_bytes: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    seconds: float = 0.0
    dead_letters: int = 0
    dead_letter_path: str | None = None
    dead_letter_error: str | None = None
    interrupted: bool = False

    @property
    def failed_total(self) -> int:
        """Failed and rejected lines, all codes."""
        return sum(self.failed.values())

    @property
    def records_per_second(self) -> float:
        """Delivered records per second of the run."""
        return self.delivered / self.seconds if self.seconds > 0 else 0.0

    def exit_status(self) -> int:
        """The command's exit status (see the module :mod:`aiokpl._cli_options`)."""
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_FAILED if self.failed_total or self.dead_letter_error else EXIT_OK

    def as_json(self) -> dict[str, Any]:
        """The report as a JSON-able dict (``--report-json``)."""
        return {
            "stream": self.stream,
            "lines": self.lines,
            "blank_lines": self.blank,
            "delivered": self.delivered,
            "delivered_bytes": self.delivered_bytes,
            "failed": self.failed_total,
            "failed_by_code": dict(sorted(self.failed.items())),
            "retries": self.retries,
            "seconds": round(self.seconds, 3),
            "records_per_second": round(self.records_per_second, 1),
            "dead_letters": self.dead_letters,
            "dead_letter_file": self.dead_letter_path,
            "dead_letter_error": self.dead_letter_error,
            "interrupted": self.interrupted,
            "exit_status": self.exit_status(),
        }

    def format(self) -> str:
        """The human-readable report printed on stderr at the end."""
        failed = ", ".join(f"{code} {n:,}" for code, n in sorted(self.failed.items()))
        rows = [
            ("stream", self.stream),
            (
                "lines read",
                f"{self.lines:,}" + (f" ({self.blank:,} blank, skipped)" if self.blank else ""),
            ),
            ("delivered", f"{self.delivered:,} records, {_size(self.delivered_bytes)}"),
            ("rate", f"{self.records_per_second:,.0f} records/s over {self.seconds:.2f} s"),
            ("retries", f"{self.retries:,}"),
            ("failed", f"{self.failed_total:,}" + (f" ({failed})" if failed else "")),
        ]
        if self.dead_letter_path is not None:
            rows.append(("dead letters", f"{self.dead_letters:,} in {self.dead_letter_path}"))
        if self.dead_letter_error is not None:
            rows.append(("dead letters", f"NOT ALL WRITTEN: {self.dead_letter_error}"))
        if self.interrupted:
            rows.append(("interrupted", "stopped by Ctrl-C before the end of the input"))
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name:>{width}}  {value}" for name, value in rows)


def _size(count: int) -> str:
    if count < 1024:
        return f"{count:,} bytes"
    value = count / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} GiB"


def progress_line(report: PutReport, put: int, elapsed: float) -> str:
    """The progress line redrawn on a terminal while records are put."""
    rate = report.delivered / elapsed if elapsed > 0 else 0.0
    pending = put - report.delivered - report.failed_total
    line = (
        f"put {put:,} · delivered {report.delivered:,} ({_size(report.delivered_bytes)}) · "
        f"{rate:,.0f}/s · pending {max(pending, 0):,}"
    )
    if report.failed_total:
        line += f" · failed {report.failed_total:,}"
    return line


def encode_data(data: bytes) -> tuple[str, str]:
    """``(text, "text")`` if ``data`` is valid UTF-8, else ``(base64, "base64")``."""
    try:
        return data.decode("utf-8"), "text"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


class DeadLetters:
    """The dead-letter file: one JSON line per failed or rejected input line.

    The file is opened (for appending) when the first entry arrives, so a run without failures
    leaves no file. A write error is remembered, not raised (entries arrive in the producer's
    result callbacks); the report shows it and the exit status is then non-zero.

    Each entry has: ``source`` (the file name, ``-`` for stdin), ``line``, ``error_code``,
    ``error_message``, ``attempts`` (0 for a line rejected before it was sent),
    ``partition_key`` and ``explicit_hash_key`` (``null`` when the line never became a record),
    ``data`` and ``data_encoding`` (``"text"``, or ``"base64"`` when the bytes are not UTF-8;
    the whole line when it never became a record, ``null`` for a line over the length limit).
    """

    def __init__(self, path: str, report: PutReport) -> None:
        self.path = path
        self._report = report
        self._file: TextIO | None = None

    def write(
        self,
        *,
        source: str,
        line: int,
        code: str,
        message: str,
        attempts: int,
        partition_key: str | None,
        explicit_hash_key: str | None,
        data: bytes | None,
    ) -> None:
        """Append one entry."""
        text, encoding = encode_data(data) if data is not None else (None, None)
        entry = {
            "source": source,
            "line": line,
            "error_code": code,
            "error_message": message,
            "attempts": attempts,
            "partition_key": partition_key,
            "explicit_hash_key": explicit_hash_key,
            "data": text,
            "data_encoding": encoding,
        }
        if self._report.dead_letter_error is not None:
            return
        try:
            if self._file is None:
                self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
                self._report.dead_letter_path = self.path
            self._file.write(json.dumps(entry, ensure_ascii=False) + "\n")
        except OSError as exc:
            self._report.dead_letter_error = f"{self.path}: {exc.strerror or exc}"
        else:
            self._report.dead_letters += 1

    def close(self) -> None:
        """Flush and close the file, if it was opened."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError as exc:  # pragma: no cover - a full disk at the last flush
                self._report.dead_letter_error = f"{self.path}: {exc.strerror or exc}"
            self._file = None


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    """An opened input: its name for messages and its binary file."""

    name: str
    file: IO[bytes]


class PutRun:
    """One ``put`` run: reads the inputs, puts the records, tracks every result.

    Args:
        stream: the stream to write to.
        inputs: the opened inputs, read in order.
        parser: turns lines into records.
        dead_letters: where failed lines go.
        report: the counters, updated as the run goes (read it even after an interruption).
        rate_limit: at most this many records per second over the whole run, or ``None``.
        stderr: where bad lines, the progress line and warnings go.
        progress: whether to redraw a progress line (on a terminal).
    """

    def __init__(
        self,
        *,
        stream: str,
        inputs: list[Input],
        parser: LineParser,
        dead_letters: DeadLetters,
        report: PutReport,
        rate_limit: float | None = None,
        stderr: TextIO = sys.stderr,
        progress: bool = False,
    ) -> None:
        self._stream = stream
        self._inputs = inputs
        self._parser = parser
        self._dead_letters = dead_letters
        self.report = report
        self._rate_limit = rate_limit
        self._stderr = stderr
        self._progress = progress
        self._put = 0
        self._bad_lines_shown = 0

    async def run(self, producer: Producer) -> None:
        """Put every line of every input through ``producer``; return when all have a result."""
        started = anyio.current_time()
        try:
            async with anyio.create_task_group() as task_group:
                if self._progress:
                    task_group.start_soon(self._redraw, started)
                await self._put_all(producer)
                await producer.flush()
                task_group.cancel_scope.cancel()
        finally:
            self.report.seconds = anyio.current_time() - started
            if self._progress:
                self._stderr.write("\r\x1b[K")
                self._stderr.flush()

    async def _put_all(self, producer: Producer) -> None:
        limiter = RateLimiter(self._rate_limit) if self._rate_limit else None
        for source in self._inputs:
            async for line in _lines(source.file):
                self.report.lines += 1
                if line.data is None:
                    self._reject(
                        source.name,
                        line,
                        BadLine(
                            "LineTooLong",
                            f"line of {line.size:,} bytes is over the limit of "
                            f"{MAX_LINE_SIZE:,} bytes",
                        ),
                    )
                    continue
                if not line.data.strip():
                    self.report.blank += 1
                    continue
                parsed = self._parser.parse(line.data, line.number)
                if isinstance(parsed, BadLine):
                    self._reject(source.name, line, parsed)
                    continue
                if limiter is not None:
                    await limiter.acquire()
                try:
                    outcome = await producer.put_record(
                        stream=self._stream,
                        partition_key=parsed.partition_key,
                        data=parsed.data,
                        explicit_hash_key=parsed.explicit_hash_key,
                    )
                except (InvalidRecordError, InvalidRecordTypeError) as exc:
                    self._reject(source.name, line, BadLine("InvalidRecord", str(exc)))
                    continue
                self._put += 1
                outcome.add_done_callback(
                    partial(self._on_result, source.name, line.number, parsed)
                )

    def _reject(self, source: str, line: Line, bad: BadLine) -> None:
        self.report.failed[bad.code] += 1
        if self._bad_lines_shown < MAX_REPORTED_BAD_LINES:
            self._bad_lines_shown += 1
            self._print(f"{source}:{line.number}: {bad.code}: {bad.message}")
            if self._bad_lines_shown == MAX_REPORTED_BAD_LINES:
                self._print("(further bad lines are not shown here; the dead-letter file has them)")
        self._dead_letters.write(
            source=source,
            line=line.number,
            code=bad.code,
            message=bad.message,
            attempts=0,
            partition_key=None,
            explicit_hash_key=None,
            data=line.data,
        )

    def _on_result(
        self, source: str, number: int, record: ParsedRecord, outcome: Outcome[Any]
    ) -> None:
        result = outcome.result()
        self.report.retries += len(result.attempts) - 1
        if result.success:
            self.report.delivered += 1
            self.report.delivered_bytes += len(record.data)
            return
        code = result.error_code or "Unknown"
        self.report.failed[code] += 1
        self._dead_letters.write(
            source=source,
            line=number,
            code=code,
            message=result.error_message or "",
            attempts=len(result.attempts),
            partition_key=record.partition_key,
            explicit_hash_key=record.explicit_hash_key,
            data=record.data,
        )

    def _print(self, message: str) -> None:
        if self._progress:
            message = "\r\x1b[K" + message
        print(message, file=self._stderr, flush=True)

    async def _redraw(self, started: float) -> None:
        while True:
            await anyio.sleep(PROGRESS_INTERVAL)
            line = progress_line(self.report, self._put, anyio.current_time() - started)
            self._stderr.write(f"\r{line}\x1b[K")
            self._stderr.flush()


def _may_block(file: IO[bytes]) -> bool:
    """Whether reading ``file`` can wait for a writer (a pipe, a terminal, a socket).

    Regular files and in-memory buffers never make a read wait for long, so they are read in
    the event loop's thread; anything else in a worker thread.
    """
    try:
        return not stat.S_ISREG(os.fstat(file.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):  # io.BytesIO has no file descriptor
        return False


async def _lines(file: IO[bytes]) -> AsyncIterator[Line]:
    """The lines of ``file``, read a block at a time (in a worker thread if it may block)."""
    splitter = LineSplitter()
    read = getattr(file, "read1", file.read)
    threaded = _may_block(file)
    while True:
        if threaded:
            # abandon_on_cancel: Ctrl-C must not wait for a terminal or a pipe to send more.
            block = await anyio.to_thread.run_sync(read, READ_SIZE, abandon_on_cancel=True)
        else:
            block = read(READ_SIZE)
            await anyio.lowlevel.checkpoint()
        if not block:
            break
        for line in splitter.feed(block):
            yield line
    for line in splitter.end():
        yield line


# --------------------------------------------------------------------------------------------
# The subcommand
# --------------------------------------------------------------------------------------------

DESCRIPTION = """\
Put one record per line of the FILEs (standard input when there is none, or for '-').
Failed and invalid lines go to a dead-letter file, with their reason; the exit status is
0 when every record was delivered, 1 when some failed, 2 for a usage error, 3 when Kinesis
refused the command (stream not found, access denied), 130 when interrupted.
"""


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``put`` with the subcommands of the ``aiokpl`` parser."""
    put = commands.add_parser(
        "put",
        parents=parents,
        help="put one record per input line",
        description=DESCRIPTION,
    )
    put.add_argument("stream", metavar="STREAM", help="the stream to write to")
    put.add_argument("files", metavar="FILE", nargs="*", help="input files ('-': stdin)")
    records = put.add_argument_group("records")
    records.add_argument(
        "--json", action="store_true", help="each line is a JSON document (blank lines skipped)"
    )
    key = records.add_mutually_exclusive_group()
    key.add_argument(
        "--partition-key-field",
        type=FieldPath.parse,
        metavar="PATH",
        help="partition key from this JSON field (dotted path: user.id)",
    )
    key.add_argument(
        "--partition-key-template",
        type=Template.parse,
        metavar="TEMPLATE",
        help="partition key from a template: '{user.id}-{n}' ({n}: the line number)",
    )
    records.add_argument(
        "--explicit-hash-key-field",
        type=FieldPath.parse,
        metavar="PATH",
        help="explicit hash key (decimal) from this JSON field",
    )
    records.add_argument(
        "--data-field",
        type=FieldPath.parse,
        metavar="PATH",
        help="data from this JSON field (a string as UTF-8, else compact JSON); default: the line",
    )
    output = put.add_argument_group("output")
    output.add_argument(
        "--dead-letter",
        metavar="FILE",
        help="where failed lines go, appended as JSON lines (default: STREAM.dead-letter.jsonl)",
    )
    output.add_argument(
        "--report-json", metavar="FILE", help="also write the final report as JSON ('-': stdout)"
    )
    output.add_argument(
        "--no-progress", action="store_true", help="no progress line, even on a terminal"
    )
    producer = put.add_argument_group("producer")
    producer.add_argument(
        "--no-aggregation", action="store_true", help="one user record per Kinesis record"
    )
    producer.add_argument(
        "--max-buffered-ms",
        type=positive_int,
        metavar="MS",
        default=100,
        help="longest a record waits to be batched (100)",
    )
    producer.add_argument(
        "--record-ttl-ms",
        type=positive_int,
        metavar="MS",
        default=30_000,
        help="a record not delivered after this fails with code Expired (30000)",
    )
    producer.add_argument(
        "--rate-limit",
        type=positive_float,
        metavar="RECORDS_PER_S",
        help="read at most this many records per second (default: as fast as Kinesis takes)",
    )
    producer.add_argument(
        "--max-outstanding-records",
        type=positive_int,
        metavar="N",
        default=10_000,
        help="records in flight at most; input reading waits beyond (10000)",
    )
    producer.add_argument(
        "--max-record-size",
        type=positive_int,
        metavar="BYTES",
        default=1024 * 1024,
        help="largest record (partition key + data) accepted; raise it for a stream whose "
        "limit was raised (1048576)",
    )
    put.set_defaults(handler=run_put_command, intermixed="files")


def _parser_from_args(args: argparse.Namespace) -> LineParser:
    return LineParser(
        json_lines=args.json,
        partition_key_field=args.partition_key_field,
        partition_key_template=args.partition_key_template,
        explicit_hash_key_field=args.explicit_hash_key_field,
        data_field=args.data_field,
    )


def _open_inputs(names: list[str]) -> Iterator[Input]:
    for name in names or ["-"]:
        if name == "-":
            yield Input("-", sys.stdin.buffer)
        else:
            yield Input(name, open(name, "rb"))  # noqa: SIM115 - closed by the caller


async def _stream_check(client: Any, stream: str) -> tuple[str, str] | None:
    """``(code, message)`` if ``stream`` cannot be listed (wrong name, no access), else None."""
    try:
        await client.list_shards(StreamName=stream)
    except Exception as exc:  # every client error becomes data here
        return error_of(exc)
    return None


def run_put_command(args: argparse.Namespace, stderr: TextIO | None = None) -> int:
    """Run ``aiokpl put`` as ``args`` say; returns the exit status."""
    stderr = stderr or sys.stderr
    try:
        parser = _parser_from_args(args)
        config = config_from_args(
            args,
            aggregation_enabled=not args.no_aggregation,
            record_max_buffered_time_ms=args.max_buffered_ms,
            record_ttl_ms=args.record_ttl_ms,
            max_outstanding_records=args.max_outstanding_records,
            max_record_size=args.max_record_size,
        )
    except (ValueError, ConfigError) as exc:
        print(f"aiokpl put: {exc}", file=stderr)
        return EXIT_USAGE
    inputs: list[Input] = []
    try:
        try:
            inputs.extend(_open_inputs(args.files))
        except OSError as exc:
            print(f"aiokpl put: cannot read {exc.filename}: {exc.strerror}", file=stderr)
            return EXIT_USAGE
        report = PutReport(stream=args.stream)
        dead_letters = DeadLetters(args.dead_letter or f"{args.stream}.dead-letter.jsonl", report)
        run = PutRun(
            stream=args.stream,
            inputs=inputs,
            parser=parser,
            dead_letters=dead_letters,
            report=report,
            rate_limit=args.rate_limit,
            stderr=stderr,
            progress=not args.no_progress and stderr.isatty(),
        )
        try:
            status = anyio.run(_put_main, config, args.stream, run, stderr, backend=args.backend)
        except BaseException as exc:
            if not made_of(exc, KeyboardInterrupt):
                raise
            report.interrupted = True
            status = None
        finally:
            dead_letters.close()
        if status is not None:
            return status
    finally:
        for source in inputs:
            if source.name != "-":
                source.file.close()
    return _finish(args, report, stderr)


async def _put_main(config: Config, stream: str, run: PutRun, stderr: TextIO) -> int | None:
    """Check the stream, then run; returns an early exit status, or None when the run ended."""
    try:
        async with create_client(config) as client:
            refused = await _stream_check(client, stream)
            if refused is not None:
                code, message = refused
                print(f"aiokpl put: cannot write to {stream!r}: {code}: {message}", file=stderr)
                return EXIT_SERVICE_ERROR
            async with Producer(config, client=client) as producer:
                await run.run(producer)
    except ConfigError as exc:
        print(f"aiokpl put: {exc}", file=stderr)
        return EXIT_USAGE
    return None


def _finish(args: argparse.Namespace, report: PutReport, stderr: TextIO) -> int:
    print(report.format(), file=stderr)
    if args.report_json:
        text = json.dumps(report.as_json(), indent=2)
        if args.report_json == "-":
            print(text, flush=True)
        else:
            try:
                with open(args.report_json, "w", encoding="utf-8") as file:
                    file.write(text + "\n")
            except OSError as exc:
                print(f"aiokpl put: cannot write the report: {exc}", file=stderr)
    return report.exit_status()

"""The pure half of ``aiokpl put``: from input bytes to ``put_record`` arguments.

* :class:`LineSplitter` cuts a byte stream into numbered lines, block by block, holding at most
  one line (up to :data:`MAX_LINE_SIZE`) and one block, whatever the input;
* :class:`FieldPath` reads a value out of a JSON document by a dotted path (``user.id``);
* :class:`Template` builds a partition key from fields and the line number (``{user.id}-{n}``);
* :class:`LineParser` turns one line into a :class:`ParsedRecord`, or a :class:`BadLine` saying
  why it cannot be one (bad lines are data, never exceptions).

No I/O, no event loop: everything here is tested on its own (``tests/test_cli.py``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

__all__ = (
    "LINE_NUMBER",
    "MAX_LINE_SIZE",
    "BadLine",
    "FieldError",
    "FieldPath",
    "Line",
    "LineParser",
    "LineSplitter",
    "ParsedRecord",
    "Template",
    "random_partition_key",
)

MAX_LINE_SIZE = 16 * 1024 * 1024
"""Lines longer than this (10 MiB, the largest record, plus room for JSON) are not kept."""


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
    """What one line puts: the ``put_record`` arguments (``partition_key`` is ``None`` for a
    record put without one: ``--no-partition-key``)."""

    partition_key: str | None
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
        no_partition_key: every record goes without a partition key (not with a key field
            or template).
        random_key: the source of random partition keys (used when none of the key options
            is given).
    """

    json_lines: bool = False
    partition_key_field: FieldPath | None = None
    partition_key_template: Template | None = None
    explicit_hash_key_field: FieldPath | None = None
    data_field: FieldPath | None = None
    no_partition_key: bool = False
    random_key: Callable[[], str] = field(
        default_factory=lambda: partial(random_partition_key, random.Random())
    )

    def __post_init__(self) -> None:
        if self.partition_key_field and self.partition_key_template:
            raise ValueError("give a partition key field or a template, not both")
        if self.no_partition_key and (self.partition_key_field or self.partition_key_template):
            raise ValueError(
                "--no-partition-key and a partition key field or template exclude each other"
            )
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
            partition_key: str | None
            if self.partition_key_field is not None:
                partition_key = self.partition_key_field.text_of(document)
            elif self.partition_key_template is not None:
                partition_key = self.partition_key_template.render(document, number)
            elif self.no_partition_key:
                partition_key = None
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

"""Hostile input for the tests and the fuzz targets of issue 33: crafted aggregates and spool
segments, a ``Deduper``'s stored state held in memory, and a bound on the work a test lets
code do with them.

Where the issue sets a target (decoding any 1 MiB record in time linear in its size, recovery
linear in a segment's size), a test bounds the work by the process's CPU time
(``time.process_time``: other processes on the machine do not count), at a limit many times
what the linear code takes under coverage on a loaded machine and many times less than what
the quadratic code it replaced took. Never a tight timed assertion: the figures themselves are
measured and reported (``docs/aggregation.md``, ``docs/spool.md``), not asserted.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager

from aiokpl._core.wire import MAGIC, varint
from aiokpl._spool.format import encode_header, encode_record_fields

__all__ = (
    "MIB",
    "MemoryStore",
    "at_most_cpu_seconds",
    "framed",
    "hostile_aggregates",
    "record_frame",
    "segment_of",
)

MIB = 1 << 20


@contextmanager
def at_most_cpu_seconds(limit: float, what: str) -> Iterator[None]:
    """Fail if the block takes more than ``limit`` seconds of this process's CPU time."""
    start = time.process_time()
    yield
    spent = time.process_time() - start
    assert spent <= limit, f"{what} took {spent:.1f} s of CPU, over the {limit} s allowed"


def framed(body: bytes) -> bytes:
    """An aggregate of ``body``: magic, body, the body's MD5 (valid framing, whatever it is)."""
    return MAGIC + body + hashlib.md5(body).digest()


def _field(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + varint(len(payload)) + payload


def _fill(unit: bytes, budget: int) -> bytes:
    return unit * (budget // len(unit))


@functools.cache
def hostile_aggregates(size: int = MIB) -> dict[str, bytes]:
    """Aggregates of up to ``size`` bytes, each of one shape repeated as often as it fits:
    the shapes that make a decoder do the most work per byte (tags, unknown fields, repeated
    fields, table entries, records of a few bytes), and the shapes encoders write."""
    budget = size - 64  # the framing and the few bytes around the repeated part
    key = _field(0x0A, b"k")

    def record_with(extra: bytes) -> bytes:  # one record whose fields after its data repeat
        return framed(key + _field(0x1A, b"\x08\x00\x1a\x00" + _fill(extra, budget)))

    def records(record: bytes, tables: bytes = key) -> bytes:
        return framed(tables + _fill(_field(0x1A, record), budget))

    def tail(fields: bytes, tables: bytes = key) -> bytes:
        return framed(tables + _fill(fields, budget) + _field(0x1A, b"\x08\x00\x1a\x00"))

    return {
        "one record of 1 MiB of data": framed(
            key + _field(0x1A, b"\x08\x00" + _field(0x1A, b"x" * budget))
        ),
        "empty tags": record_with(b'"\x02\n\x00'),
        "tags k=v": record_with(b'"\x06\n\x01k\x12\x01v'),
        "tags of 40 bytes": record_with(
            _field(0x22, _field(0x0A, b"k" * 18) + _field(0x12, b"v" * 16))
        ),
        "tags of 200 bytes": record_with(
            _field(0x22, _field(0x0A, b"k" * 98) + _field(0x12, b"v" * 96))
        ),
        "tags with unknown fields": record_with(b'"\x04\n\x00\x18\x00'),
        "one tag of unknown fields": framed(
            key
            + _field(
                0x1A, b"\x08\x00\x1a\x00" + _field(0x22, b"\n\x00" + _fill(b"\x18\x00", budget))
            )
        ),
        "unknown varint fields in a record": record_with(b"\x28\x00"),
        "repeated data fields": record_with(b"\x1a\x00"),
        "repeated partition key indexes": record_with(b"\x08\x00"),
        "repeated explicit hash key indexes": framed(
            key
            + _field(0x12, b"1")
            + _field(0x1A, b"\x08\x00\x1a\x00" + _fill(b"\x10\x00", budget))
        ),
        "records of 6 bytes": records(b"\x08\x00\x1a\x00"),
        "records with an explicit hash key": records(
            b"\x08\x00\x10\x00\x1a\x00", key + _field(0x12, b"1")
        ),
        "records with a tag": records(b'\x08\x00\x1a\x00"\x04\n\x02ab'),
        "records with their fields reversed": records(b"\x1a\x00\x08\x00"),
        "records with 3-byte lengths": records(b"\x08\x00" + _field(0x1A, b"x" * 17_000)),
        "empty partition keys": tail(b"\n\x00", b""),
        "partition keys of 1 byte": tail(b"\n\x01a", b""),
        "empty explicit hash keys": tail(b"\x12\x00"),
        "unknown varint fields": tail(b"\x28\x00"),
        "unknown fixed64 fields": tail(b"\x29" + bytes(8)),
        "unknown empty fields": tail(b"\x2a\x00"),
        "unknown 10-byte varints": tail(b"\x28" + b"\xff" * 9 + b"\x01"),
        "unknown fields of 2-byte tags": tail(b"\x80\x01\x00"),
    }


class MemoryStore:
    """A ``DeduperStore`` holding one document in memory: the stored state a ``Deduper`` is
    handed (any bytes, or ``None``: nothing stored), and what it saves."""

    def __init__(self, data: bytes | None) -> None:
        self.data = data

    def load(self) -> bytes | None:
        return self.data

    def save(self, data: bytes) -> None:
        self.data = data


def record_frame(
    sequence_number: int,
    *,
    accepted_at: float = 1.0,
    encoded_tags: bytes = b"",
    stream: str = "s",
    data: bytes = b"x",
) -> bytes:
    """One framed spool record, its CRC valid whatever its fields hold."""
    return encode_record_fields(sequence_number, accepted_at, stream, "k", None, data, encoded_tags)


def segment_of(producer_id: bytes, *frames: bytes) -> bytes:
    """A segment's bytes: its header, then ``frames``."""
    return encode_header(producer_id) + b"".join(frames)

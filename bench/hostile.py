"""Hostile aggregates (issue 33): the shapes that make a decoder do the most work per byte.

``hostile_aggregates(size)`` builds one aggregate of each shape, its framing valid, whatever its
body holds: tags, unknown fields, repeated fields, key table entries and records of a few
bytes, repeated as often as they fit, and the shapes encoders write. The codec benchmark times
decoding each at 1 MiB (the target: 50 ms for any); the tests (``tests/hostile.py`` re-exports
these) and the fuzz targets read them.
"""

from __future__ import annotations

import functools
import hashlib

from aiokpl._core.wire import MAGIC, varint

__all__ = ("MIB", "framed", "hostile_aggregates")

MIB = 1 << 20


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

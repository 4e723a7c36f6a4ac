"""The KPL aggregation format's wire: its framing, its shared types and varint writing.

An aggregated record is the 4 magic bytes ``F3 89 9A C2``, then a protobuf (proto2)
``AggregatedRecord`` body, then the 16-byte MD5 digest of that body::

    message AggregatedRecord {
      repeated string partition_key_table     = 1;
      repeated string explicit_hash_key_table = 2;
      repeated Record records                 = 3;
    }
    message Record {
      required uint64 partition_key_index     = 1;
      optional uint64 explicit_hash_key_index = 2;
      required bytes  data                    = 3;
      repeated Tag    tags                    = 4;
    }
    message Tag { required string key = 1; optional string value = 2; }

The codec is five modules: this one (the framing constants ``MAGIC``, ``DIGEST_SIZE`` and
``FRAMING_OVERHEAD``; the ``Tag``, ``Record`` and ``DeaggregatedRecord`` types; writing and
reading varints), ``encoder`` (tags, ``AggregateBuilder``, ``encode``), ``decoder`` (reading the
body, ``decode``, ``is_aggregated``), ``canonical`` (the decoder's fast path) and
``deaggregation`` (the consumer side: ``deaggregate``, ``deaggregate_records``, hash-key
ranges). The public face of all five is ``aiokpl.aggregation``.

Invariants:

* ``FRAMING_OVERHEAD`` is ``len(MAGIC) + DIGEST_SIZE``: everything but the body.
* ``varint(n)`` is the protobuf base-128 varint of ``n`` and ``varint_len(n)`` its length;
  below ``VARINT_CACHE`` both come from a table built at import (no loop per call).

Mirrors ``KinesisRecord`` in the KPL (``aws/kinesis/core/kinesis_record.cc``) and its
``aggregation-format.md``. Where we differ: the protobuf encoding is written by hand, here and
in ``encoder`` and ``decoder``: no protobuf dependency, and a faster encoder and decoder for
this one schema.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from .errors import AggregationFormatError

__all__ = (
    "DIGEST_SIZE",
    "FRAMING_OVERHEAD",
    "MAGIC",
    "DeaggregatedRecord",
    "Record",
    "Tag",
    "Tags",
)

MAGIC = b"\xf3\x89\x9a\xc2"
"""The 4 bytes every aggregated record starts with."""

DIGEST_SIZE = 16
"""Size of the MD5 digest of the protobuf body that ends every aggregated record."""

FRAMING_OVERHEAD = 20
"""Bytes an aggregated record has besides its protobuf body: the magic (4) and digest (16)."""

MAGIC_SIZE = len(MAGIC)


class Tag(NamedTuple):
    """One tag of a user record: the format's ``message Tag { key; optional value; }``.

    A plain ``(key, value)`` pair is accepted wherever a ``Tag`` is; records read back carry
    ``Tag`` objects.

    Attributes:
        key: the tag's key.
        value: the tag's value, or ``None`` for a tag that has none (not the same as ``""``:
            the format tells them apart).
    """

    key: str
    value: str | None = None


Tags = Mapping[str, str | None] | Iterable[Tag | tuple[str, str | None]]
"""What ``tags=`` accepts: a mapping of key to value, or ``Tag`` objects / ``(key, value)``
pairs (which keep their order and may repeat a key, as the format allows)."""


class Record(NamedTuple):
    """A user record, as it goes into ``encode`` and comes out of ``decode``.

    A plain ``(partition_key, data)``, ``(partition_key, data, explicit_hash_key)`` or
    ``(partition_key, data, explicit_hash_key, tags)`` tuple is accepted wherever a ``Record``
    is.

    Attributes:
        partition_key: the record's partition key.
        data: the record's payload.
        explicit_hash_key: the record's explicit hash key (a decimal string), or ``None``.
        tags: the record's tags, in order; ``()`` for none. ``encode`` also takes any
            :data:`Tags` form here (a mapping, or ``(key, value)`` pairs).
    """

    partition_key: str
    data: bytes
    explicit_hash_key: str | None = None
    tags: tuple[Tag, ...] = ()


class DeaggregatedRecord(NamedTuple):
    """A user record read back from a Kinesis record by ``deaggregate``.

    Attributes:
        partition_key: the user record's partition key (for a record that was not aggregated,
            the Kinesis record's own); ``None`` for a record that was not aggregated and was
            stored without one (on a stream whose record distribution strategy is ``AUTO``).
            A user record of an aggregate always has one: a record put to aiokpl without a
            key is ``"-"`` there.
        data: the user record's payload.
        explicit_hash_key: the user record's explicit hash key, or ``None`` if it had none (always
            ``None`` for a record that was not aggregated: Kinesis does not return it).
        sequence_number: the sequence number of the Kinesis record it came in, shared by every
            user record of one aggregate; ``None`` if the input had none.
        sub_sequence_number: the user record's index inside its aggregate; 0 for a record that was
            not aggregated.
        aggregated: whether the record came out of a KPL aggregate.
        approximate_arrival_timestamp: the Kinesis record's arrival time, passed through as
            given (a ``datetime`` from boto3, a float of epoch seconds from Lambda), or ``None``.
        tags: the user record's tags (``Tag`` objects, in order); ``()`` if it had none, and
            always for a record that was not aggregated.
    """

    partition_key: str | None
    data: bytes
    explicit_hash_key: str | None
    sequence_number: str | None
    sub_sequence_number: int
    aggregated: bool
    approximate_arrival_timestamp: Any
    tags: tuple[Tag, ...] = ()


# --------------------------------------------------------------------------------------------
# Varints. Field tags and lengths below 16384 come from a precomputed table: no call, no loop.
# --------------------------------------------------------------------------------------------

VARINT_CACHE = 16384  # every varint below this is 1 or 2 bytes


def _varint_slow(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Tag 0x1A (field 3, wire type 2) followed by each length below VARINT_CACHE: the prefix of both
# AggregatedRecord.records and Record.data, the two fields written for every record.
TAG3_LEN: tuple[bytes, ...] = tuple(
    [bytes((0x1A, i)) for i in range(0x80)]
    + [bytes((0x1A, (i & 0x7F) | 0x80, i >> 7)) for i in range(0x80, VARINT_CACHE)]
)


def varint(value: int) -> bytes:
    return TAG3_LEN[value][1:] if value < VARINT_CACHE else _varint_slow(value)


def varint_len(value: int) -> int:
    return 1 if value < 0x80 else (value.bit_length() + 6) // 7


def tag3_len(value: int) -> bytes:
    return TAG3_LEN[value] if value < VARINT_CACHE else b"\x1a" + _varint_slow(value)


# Reading a varint, for ``decoder`` and ``canonical``.


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Read the varint at ``buf[pos]``; return its value and the position after it."""
    start = pos
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift == 70:
            raise AggregationFormatError(
                f"malformed aggregate body: varint at byte {start} is longer than 10 bytes"
            )

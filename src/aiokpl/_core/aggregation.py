"""The KPL aggregation format: many user records packed into one Kinesis record.

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

Invariants:

* Sizes are exact: ``AggregateBuilder.size`` is ``len(builder.encode())`` and
  ``AggregateBuilder.size_if_added`` is the size after the next ``AggregateBuilder.add``,
  to the byte, in O(1) (tags included: a record's tags are encoded once, when it is put).
* Keys are deduplicated: each distinct partition key (and explicit hash key) appears once in
  its table, in order of first appearance; records refer to it by index. A record without an
  explicit hash key omits field 2.
* Fields are written in field-number order (tables, then records; in a record its indexes,
  its data, then its tags), as protobuf serializers do; the decoder accepts any order, skips
  unknown fields by wire type, and raises ``aiokpl.AggregationFormatError`` for anything it
  cannot read (it never guesses).
* Tags (``Record.tags``, field 4) are kept in the order given, duplicates included, as the
  format allows; a record without tags writes none and decodes to ``()``. Records without tags
  cost what they cost before tags were supported: one falsy check when added, one constant
  column when decoded.

Mirrors ``KinesisRecord`` in the KPL (``aws/kinesis/core/kinesis_record.cc``) and its
``aggregation-format.md``. Differences: the KPL estimates an aggregate's size and checks it when
serialising; we keep the exact size incrementally (varint-length arithmetic), so the aggregator
knows before adding a record whether it fits. The protobuf encoding is written by hand: no
protobuf dependency, and a faster encoder and decoder for this one schema. The KPL defines
tags in its format (``aws/kinesis/protobuf/messages.proto``) but never writes them: its
``PutRecord`` IPC message and its Java ``addUserRecord`` have no tags, and its
``KinesisRecord::after_add`` sets only keys and data. We write them (and read them back), so
that a record's tags travel with it inside an aggregate.

Consumer side, ``deaggregate(..., shard=...)`` drops the user records whose hash key lies
outside the shard they were read from, as the KCL's ``AggregatorUtil.deaggregate`` does (the
copies an aggregate sent with a stale shard map leaves on the wrong shard). Where we differ:
the KCL drops the *whole* aggregate as soon as one of its user records is out of range; we
drop exactly the out-of-range ones. A producer that resends only those (ours, and the KPL's
``retrier.cc`` ``succeed_if_correct_shard``) reports the others delivered, with that shard's
sequence number: dropping them would lose them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from struct import Struct
from typing import Any, NamedTuple, NoReturn, cast

from .errors import AggregationFormatError, InvalidRecordError, InvalidRecordTypeError
from .hashing import MAX_HASH_KEY, hash_key_of

__all__ = (
    "DIGEST_SIZE",
    "FRAMING_OVERHEAD",
    "MAGIC",
    "AggregateBuilder",
    "DeaggregatedRecord",
    "Record",
    "Tag",
    "Tags",
    "check_tags",
    "deaggregate",
    "deaggregate_records",
    "decode",
    "decode_tags",
    "encode",
    "encode_tags",
    "hash_key_range",
    "is_aggregated",
)

MAGIC = b"\xf3\x89\x9a\xc2"
"""The 4 bytes every aggregated record starts with."""

DIGEST_SIZE = 16
"""Size of the MD5 digest of the protobuf body that ends every aggregated record."""

FRAMING_OVERHEAD = 20
"""Bytes an aggregated record has besides its protobuf body: the magic (4) and digest (16)."""

_MAGIC_SIZE = len(MAGIC)


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
            the Kinesis record's own).
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

    partition_key: str
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

_CACHE = 16384  # every varint below this is 1 or 2 bytes


def _varint_slow(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Tag 0x1A (field 3, wire type 2) followed by each length below _CACHE: the prefix of both
# AggregatedRecord.records and Record.data, the two fields written for every record.
_TAG3_LEN: tuple[bytes, ...] = tuple(
    [bytes((0x1A, i)) for i in range(0x80)]
    + [bytes((0x1A, (i & 0x7F) | 0x80, i >> 7)) for i in range(0x80, _CACHE)]
)


def _varint(value: int) -> bytes:
    return _TAG3_LEN[value][1:] if value < _CACHE else _varint_slow(value)


def _varint_len(value: int) -> int:
    return 1 if value < 0x80 else (value.bit_length() + 6) // 7


_NO_LIMIT = float("inf")


def _encoded_len(key: str | bytes) -> int:
    """The length of a key once UTF-8 encoded (keys may come as ``str`` or already encoded)."""
    return len(key.encode()) if isinstance(key, str) else len(key)


def _tag3_len(value: int) -> bytes:
    return _TAG3_LEN[value] if value < _CACHE else b"\x1a" + _varint_slow(value)


# --------------------------------------------------------------------------------------------
# Tags: validated and encoded once (the Record's field 4 entries), when the record is put.
# --------------------------------------------------------------------------------------------


def _tag_text(value: object, what: str, index: int) -> bytes:
    if type(value) is not str:
        if not isinstance(value, str):
            raise InvalidRecordTypeError(
                f"tags[{index}]: a tag's {what} must be a str, not {type(value).__name__}"
            )
        value = str(value)
    try:
        return value.encode()
    except UnicodeEncodeError:
        raise InvalidRecordError(
            f"tags[{index}]: a tag's {what} must be encodable as UTF-8 (it contains a lone "
            "surrogate)"
        ) from None


def encode_tags(tags: Tags | None) -> bytes:
    """Validate a record's tags and encode them as its ``Record.tags`` fields (field 4).

    Args:
        tags: a mapping of key to value, or an iterable of ``Tag`` objects / ``(key, value)``
            pairs; keys are ``str``, values ``str`` or ``None``. ``None`` means no tags.

    Returns:
        The encoded fields, in the order given; ``b""`` for no tags.

    Raises:
        InvalidRecordTypeError: ``tags`` is not a mapping or an iterable of pairs, or a key or
            value has the wrong type (a ``TypeError``).
        InvalidRecordError: a key or value is not encodable as UTF-8 (a ``ValueError``).
    """
    if tags is None:
        return b""
    if isinstance(tags, Mapping):
        pairs: Iterable[Any] = tags.items()
    elif isinstance(tags, str | bytes | bytearray | memoryview) or not isinstance(tags, Iterable):
        raise InvalidRecordTypeError(
            "tags must be a mapping of str to str or None, or an iterable of (key, value) "
            f"pairs, not {type(tags).__name__}"
        )
    else:
        pairs = tags
    out = []
    for index, pair in enumerate(pairs):
        text = isinstance(pair, str | bytes)
        if text or not isinstance(pair, Sequence) or len(pair) != 2:
            shape = "" if text or not isinstance(pair, Sequence) else f" of length {len(pair)}"
            raise InvalidRecordTypeError(
                f"tags[{index}]: a tag is a Tag or a (key, value) pair, not "
                f"{type(pair).__name__}{shape}"
            )
        key, value = pair
        encoded = _tag_text(key, "key", index)
        message = b"\n" + _varint(len(encoded)) + encoded
        if value is not None:
            encoded = _tag_text(value, "value", index)
            message += b"\x12" + _varint(len(encoded)) + encoded
        out.append(b'"' + _varint(len(message)) + message)
    return b"".join(out)


def check_tags(
    tags: Tags,
    partition_key: str,
    size: int,
    explicit_hash_key: str | None,
    max_record_size: int,
) -> tuple[bytes, int]:
    """Validate and encode the tags of a record the producer is about to accept.

    A record with tags may end up alone in its Kinesis record, which is then an aggregate of
    one (a raw record has no place for tags): that aggregate plus the partition key must fit
    ``max_record_size``, as Kinesis counts it.

    Args:
        tags: the ``tags=`` argument (not ``None``).
        partition_key: the record's partition key, validated.
        size: its partition key's UTF-8 length plus its data's, validated.
        explicit_hash_key: its explicit hash key as a decimal string, or ``None``.
        max_record_size: ``Config.max_record_size``.

    Returns:
        The encoded tags (``b""`` for none: the record is then an ordinary one) and the
        record's size counting them (``size`` plus their encoded length).

    Raises:
        InvalidRecordTypeError: ``tags`` or a key or value has the wrong type.
        InvalidRecordError: a key or value is not UTF-8, or the record as an aggregate of one
            is over ``max_record_size``.
    """
    encoded = encode_tags(tags)
    if not encoded:
        return encoded, size
    key_size = len(partition_key.encode())
    alone = key_size + _aggregate_of_one_size(
        key_size, size - key_size, explicit_hash_key, len(encoded)
    )
    if alone > max_record_size:
        raise InvalidRecordError(
            f"data plus partition_key plus tags is {alone} bytes sent alone (as an aggregate "
            f"of one, the only way tags travel), over max_record_size ({max_record_size})"
        )
    return encoded, size + len(encoded)


def _aggregate_of_one_size(
    key_size: int, data_size: int, explicit_hash_key: str | None, tags_size: int
) -> int:
    """The exact size of an aggregate holding one record, framing included."""

    def field(n: int) -> int:  # tag, length, value
        return 1 + _varint_len(n) + n

    inner = 2 + field(data_size) + tags_size  # partition_key_index 0, data, tags
    body = field(key_size)  # the partition key table
    if explicit_hash_key is not None:
        body += field(len(explicit_hash_key))  # the explicit hash key table
        inner += 2  # explicit_hash_key_index 0
    return FRAMING_OVERHEAD + body + field(inner)


# --------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------


class AggregateBuilder:
    """Builds one aggregated record incrementally, knowing its exact size at every step.

    This is what the producer's aggregator uses: ``size_if_added`` says in O(1) whether one
    more record still fits the size limit, ``add`` adds it, ``encode`` produces the
    aggregate. Keys come in already encoded (the producer hashes those bytes anyway) and are
    not validated: that is the caller's job.

    Example:
        ```python
        from aiokpl.aggregation import AggregateBuilder

        pending = [(b"user-%d" % i, b"x" * 1_000) for i in range(100)]
        limit, aggregates = 51_200, []
        builder = AggregateBuilder()
        for key, data in pending:
            if builder.count and builder.size_if_added(key, len(data)) > limit:
                aggregates.append(builder.encode())
                builder.clear()
            builder.add(key, data)
        aggregates.append(builder.encode())
        ```
    """

    __slots__ = (
        "_body_size",
        "_ehk_fields",
        "_ehk_table",
        "_pk_fields",
        "_pk_table",
        "_records",
    )

    def __init__(self) -> None:
        """Create an empty builder."""
        # key -> the record field that refers to it (tag + index), in first-appearance order.
        # Keys may be given as str or as their encoding: a key given both ways gets two table
        # entries, which wastes a few bytes but stays a valid, exactly sized aggregate.
        self._pk_fields: dict[str | bytes, bytes] = {}
        self._ehk_fields: dict[str | bytes, bytes] = {}
        # the encoded table entries (tag + length + key)
        self._pk_table: list[bytes] = []
        self._ehk_table: list[bytes] = []
        # two items per record: its header (tag, length, indexes, data tag and length), its data
        self._records: list[bytes] = []
        self._body_size = 0

    @property
    def count(self) -> int:
        """The number of user records added so far."""
        return len(self._records) >> 1

    @property
    def size(self) -> int:
        """The exact size in bytes of ``encode``'s result, framing included.

        0 while the builder is empty (``encode`` refuses to encode no records); at least
        ``FRAMING_OVERHEAD`` + 1 once it holds a record.
        """
        return self._body_size + FRAMING_OVERHEAD if self._records else 0

    def size_if_added(
        self,
        partition_key: str | bytes,
        data_len: int,
        explicit_hash_key: str | bytes | None = None,
        tags: Tags | None = None,
    ) -> int:
        """The exact size the aggregate would have after adding one more record, in O(1).

        That is ``size`` after ``add(partition_key, data, explicit_hash_key, tags)`` with
        ``len(data) == data_len``, framing included.

        Args:
            partition_key: the record's partition key (``str``, or its UTF-8 encoding).
            data_len: the length of the record's data in bytes.
            explicit_hash_key: the record's explicit hash key (a decimal ``str``, or its ASCII
                encoding), or ``None``.
            tags: the record's tags (any :data:`Tags` form), or ``None``.

        Returns:
            The aggregate's size in bytes if the record were added.

        Raises:
            InvalidRecordTypeError: ``tags`` is not a :data:`Tags` form, or a key or value is
                not a ``str`` (``None`` for a value).
            InvalidRecordError: a tag is not encodable as UTF-8.
        """
        size = self._body_size + FRAMING_OVERHEAD
        field = self._pk_fields.get(partition_key)
        if field is None:
            n = _encoded_len(partition_key)
            size += 1 + (1 if n < 0x80 else _varint_len(n)) + n
            index = len(self._pk_fields)
            inner = 2 if index < 0x80 else 1 + _varint_len(index)
        else:
            inner = len(field)
        if explicit_hash_key is not None:
            field = self._ehk_fields.get(explicit_hash_key)
            if field is None:
                n = _encoded_len(explicit_hash_key)
                size += 1 + (1 if n < 0x80 else _varint_len(n)) + n
                index = len(self._ehk_fields)
                inner += 2 if index < 0x80 else 1 + _varint_len(index)
            else:
                inner += len(field)
        inner += 1 + (1 if data_len < 0x80 else _varint_len(data_len)) + data_len
        if tags is not None:
            inner += len(encode_tags(tags))
        return size + 1 + (1 if inner < 0x80 else _varint_len(inner)) + inner

    def add(
        self,
        partition_key: str | bytes,
        data: bytes,
        explicit_hash_key: str | bytes | None = None,
        tags: Tags | None = None,
    ) -> None:
        """Add one user record.

        The builder keeps a reference to ``data`` (no copy) for a record without tags: do not
        mutate it until the aggregate is encoded. A record's tags follow its data on the wire,
        so a tagged record's data is copied once, joined with its encoded tags.

        Args:
            partition_key: the record's partition key (``str``, or its UTF-8 encoding).
            data: the record's payload: ``bytes``, or a bytes-like object whose ``len()`` is its
                size in bytes (a ``bytearray``, a 1-D memoryview of bytes).
            explicit_hash_key: the record's explicit hash key (a decimal ``str``, or its ASCII
                encoding), or ``None``.
            tags: the record's tags (any :data:`Tags` form), or ``None``.

        Raises:
            InvalidRecordTypeError: ``tags`` is not a :data:`Tags` form, or a key or value is
                not a ``str`` (``None`` for a value).
            InvalidRecordError: a tag is not encodable as UTF-8.
        """
        self.try_add(
            partition_key,
            data,
            explicit_hash_key,
            _NO_LIMIT,
            b"" if tags is None else encode_tags(tags),
        )

    def try_add(
        self,
        partition_key: str | bytes,
        data: bytes,
        explicit_hash_key: str | bytes | None,
        max_size: float,
        encoded_tags: bytes = b"",
    ) -> int:
        """Add one user record if the aggregate then stays within ``max_size`` bytes.

        One call does the work of ``size_if_added`` and ``add``, looking each key up once: the
        producer's aggregator calls it for every record. An empty builder takes any record,
        however large (such a record is then sent on its own).

        Args:
            partition_key: as for :meth:`add`.
            data: as for :meth:`add`.
            explicit_hash_key: as for :meth:`add`.
            max_size: the largest aggregate allowed, framing included.
            encoded_tags: the record's tags already encoded as ``Record.tags`` fields (the
                producer validates and encodes them once, at put); ``b""`` for none. To add a
                record with tags in any :data:`Tags` form, use :meth:`add`.

        Returns:
            The number of records the builder now holds, or 0 if the record would not fit
            (the builder is then unchanged).
        """
        pk_fields = self._pk_fields
        pk_field = pk_fields.get(partition_key)
        added = 0
        pk_entry = ehk_entry = ehk_field = None
        if pk_field is None:
            # A new key: its table entry, and the record field holding its index.
            encoded = partition_key.encode() if isinstance(partition_key, str) else partition_key
            pk_entry = b"\n" + _varint(len(encoded)) + encoded
            pk_field = b"\x08" + _varint(len(pk_fields))
            added = len(pk_entry)
        field = pk_field
        if explicit_hash_key is not None:
            ehk_field = self._ehk_fields.get(explicit_hash_key)
            if ehk_field is None:
                encoded = (
                    explicit_hash_key.encode()
                    if isinstance(explicit_hash_key, str)
                    else explicit_hash_key
                )
                ehk_entry = b"\x12" + _varint(len(encoded)) + encoded
                ehk_field = b"\x10" + _varint(len(self._ehk_fields))
                added += len(ehk_entry)
            field += ehk_field
        n = len(data)
        field += _TAG3_LEN[n] if n < _CACHE else _tag3_len(n)
        if encoded_tags:  # they follow the data: one copy, for tagged records only
            data = b"".join((data, encoded_tags))
            n = len(data)
        inner = len(field) + n
        header = (_TAG3_LEN[inner] if inner < _CACHE else _tag3_len(inner)) + field
        added += len(header) + n
        records = self._records
        if records and self._body_size + added + FRAMING_OVERHEAD > max_size:
            return 0
        if pk_entry is not None:
            pk_fields[partition_key] = pk_field
            self._pk_table.append(pk_entry)
        if ehk_entry is not None:
            self._ehk_fields[explicit_hash_key] = ehk_field  # type: ignore[index,assignment]
            self._ehk_table.append(ehk_entry)
        records += (header, data)
        self._body_size += added
        return len(records) >> 1

    def encode(self) -> bytes:
        """Encode the records added so far as one aggregated record.

        The builder is left as it is: call ``clear`` to start the next aggregate.

        Returns:
            The aggregate (magic, protobuf body, MD5 digest), exactly ``size`` bytes long.

        Raises:
            ValueError: if no record was added.
        """
        if not self._records:
            raise ValueError("cannot encode an aggregate of no records")
        body = b"".join(self._pk_table + self._ehk_table + self._records)
        return b"".join((MAGIC, body, hashlib.md5(body, usedforsecurity=False).digest()))

    def clear(self) -> None:
        """Remove every record, making the builder empty again."""
        self._pk_fields.clear()
        self._ehk_fields.clear()
        self._pk_table.clear()
        self._ehk_table.clear()
        self._records.clear()
        self._body_size = 0


def encode(records: Iterable[Record | tuple[Any, ...]]) -> bytes:
    """Encode user records as one aggregated record (even a single one).

    Args:
        records: ``Record`` objects, or ``(partition_key, data)`` /
            ``(partition_key, data, explicit_hash_key)`` /
            ``(partition_key, data, explicit_hash_key, tags)`` tuples. ``data`` may be any
            bytes-like object (it is copied if it is not ``bytes``); the explicit hash key
            may be ``None``; ``tags`` is any :data:`Tags` form, or ``None``.

    Returns:
        The aggregated record (magic, protobuf body, MD5 digest).

    Raises:
        ValueError: if ``records`` is empty, a record has fewer than 2 or more than 4 items,
            an explicit hash key is not ASCII (``UnicodeEncodeError``), or a tag is not
            encodable as UTF-8.
        TypeError: if a partition key or explicit hash key is not a ``str``, data is not
            bytes-like, or ``tags`` is malformed.
    """
    builder = AggregateBuilder()
    try_add = builder.try_add
    for record in cast("Iterable[Sequence[Any]]", records):
        n = len(record)
        tags = b""
        if n == 4:
            partition_key, data, explicit_hash_key, given = record
            if given:
                tags = encode_tags(given)
        elif n == 3:
            partition_key, data, explicit_hash_key = record
        elif n == 2:
            partition_key, data = record
            explicit_hash_key = None
        else:
            raise ValueError(
                "a record is (partition_key, data), (partition_key, data, explicit_hash_key) "
                f"or (partition_key, data, explicit_hash_key, tags), not a sequence of length {n}"
            )
        if type(partition_key) is not str:
            raise TypeError(f"partition key must be str, not {type(partition_key).__name__}")
        if type(data) is not bytes:
            if not isinstance(data, (bytearray, memoryview)):
                raise TypeError(f"data must be bytes-like, not {type(data).__name__}")
            data = bytes(data)
        if explicit_hash_key is None:
            try_add(partition_key, data, None, _NO_LIMIT, tags)
        elif type(explicit_hash_key) is str:
            try_add(partition_key, data, explicit_hash_key.encode("ascii"), _NO_LIMIT, tags)
        else:
            raise TypeError(
                f"explicit hash key must be str or None, not {type(explicit_hash_key).__name__}"
            )
    return builder.encode()


# --------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
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


def _read_tag(buf: bytes, pos: int) -> tuple[int, int]:
    """Read the multi-byte field tag at ``buf[pos]``: a varint of at most 5 bytes."""
    tag, end = _read_varint(buf, pos)
    if end - pos > 5:
        raise AggregationFormatError(
            f"malformed aggregate body: field tag at byte {pos} is longer than 5 bytes"
        )
    return tag, end


def _skip_field(
    buf: bytes, pos: int, limit: int, tag: int, field_start: int, record_start: int = -1
) -> int:
    """Skip the value of a field whose tag is read, at ``buf[pos]``; return the position after.

    Like protobuf parsers, a known field with an unexpected wire type lands here too: it is
    skipped as an unknown field. ``record_start`` is the position of the enclosing record, or
    -1 for a field of the ``AggregatedRecord`` itself (used in error messages).
    """
    wire_type = tag & 7
    if tag >> 3 == 0 or tag > 0xFFFFFFFF:  # field numbers are 1 ... 2**29 - 1
        raise AggregationFormatError(
            f"malformed aggregate body: field number {tag >> 3} at byte {field_start}"
            f"{_of_record(record_start)} is out of range"
        )
    if wire_type == 0:
        _, pos = _read_varint(buf, pos)
    elif wire_type == 2:
        length, pos = _read_varint(buf, pos)
        pos += length
    elif wire_type == 1:
        pos += 8
    elif wire_type == 5:
        pos += 4
    else:
        raise AggregationFormatError(
            f"malformed aggregate body: field {tag >> 3} at byte {field_start}"
            f"{_of_record(record_start)} has unsupported wire type {wire_type}"
        )
    if pos > limit:
        raise AggregationFormatError(
            f"malformed aggregate body: field {tag >> 3} at byte {field_start}"
            f"{_of_record(record_start)} runs past the end of the "
            f"{'body' if record_start < 0 else 'record'}"
        )
    return pos


def _of_record(record_start: int) -> str:
    return "" if record_start < 0 else f" of the record at byte {record_start}"


def _parse_tag(buf: bytes, pos: int, stop: int, start: int) -> Tag:
    """Parse the ``Tag`` in ``buf[pos:stop]``, of the record at byte ``start``."""
    key = value = None
    tag_start = pos
    while pos < stop:
        field_start = pos
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _read_tag(buf, pos)
        if tag == 0x0A or tag == 0x12:  # key, value
            length, pos = _read_varint(buf, pos)
            end = pos + length
            if end > stop:
                raise AggregationFormatError(
                    f"malformed aggregate body: a field of the tag at byte {tag_start} of the "
                    f"record at byte {start} runs past the end of the tag"
                )
            try:
                text = buf[pos:end].decode()
            except UnicodeDecodeError:
                raise AggregationFormatError(
                    f"malformed aggregate body: the tag at byte {tag_start} of the record at "
                    f"byte {start} has a {'key' if tag == 0x0A else 'value'} that is not valid "
                    "UTF-8"
                ) from None
            if tag == 0x0A:
                key = text
            else:
                value = text
            pos = end
        else:
            pos = _skip_field(buf, pos, stop, tag, field_start, start)
    if pos != stop:
        raise AggregationFormatError(
            f"malformed aggregate body: a field of the tag at byte {tag_start} of the record at "
            f"byte {start} runs past the end of the tag"
        )
    if key is None:
        raise AggregationFormatError(
            f"malformed aggregate body: the tag at byte {tag_start} of the record at byte "
            f"{start} has no key (a required field)"
        )
    return Tag(key, value)


def decode_tags(encoded: bytes) -> tuple[Tag, ...]:
    """The tags :func:`encode_tags` encoded, back as ``Tag`` objects.

    Raises:
        AggregationFormatError: ``encoded`` is not a run of ``Record.tags`` fields.
    """
    tags: tuple[Tag, ...] = ()
    pos, stop = 0, len(encoded)
    while pos < stop:
        if encoded[pos] != 0x22:
            raise AggregationFormatError(f"not an encoded tag at byte {pos}")
        length, pos = _read_varint(encoded, pos + 1)
        tags += (_parse_tag(encoded, pos, pos + length, 0),)
        pos += length
    return tags


def _parse_record(
    buf: bytes, pos: int, stop: int, start: int
) -> tuple[int, int, bytes, tuple[Tag, ...]]:
    """Parse the ``Record`` in ``buf[pos:stop]`` (any field order, tags, unknown fields).

    Returns:
        Its partition key index, explicit hash key index (-1 if absent), data and tags.
    """
    pk_index = ehk_index = -1
    data: bytes | None = None
    tags: tuple[Tag, ...] = ()
    while pos < stop:
        field_start = pos
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _read_tag(buf, pos)
        if tag == 0x08:  # partition_key_index
            pk_index, pos = _read_varint(buf, pos)
        elif tag == 0x1A:  # data
            length, pos = _read_varint(buf, pos)
            data_end = pos + length
            if data_end > stop:
                raise AggregationFormatError(
                    f"malformed aggregate body: data of the record at byte {start} runs past "
                    "the end of the record"
                )
            data = buf[pos:data_end]
            pos = data_end
        elif tag == 0x10:  # explicit_hash_key_index
            ehk_index, pos = _read_varint(buf, pos)
        elif tag == 0x22:  # tags
            length, pos = _read_varint(buf, pos)
            tag_end = pos + length
            if tag_end > stop:
                raise AggregationFormatError(
                    f"malformed aggregate body: a tag of the record at byte {start} runs past "
                    "the end of the record"
                )
            tags += (_parse_tag(buf, pos, tag_end, start),)
            pos = tag_end
        else:  # unknown fields
            pos = _skip_field(buf, pos, stop, tag, field_start, start)
    if pos != stop:
        raise AggregationFormatError(
            f"malformed aggregate body: a field of the record at byte {start} runs past the "
            "end of the record"
        )
    if pk_index < 0:
        raise AggregationFormatError(
            f"malformed aggregate body: record at byte {start} has no partition_key_index "
            "(a required field)"
        )
    if data is None:
        raise AggregationFormatError(
            f"malformed aggregate body: record at byte {start} has no data (a required field)"
        )
    return pk_index, ehk_index, data, tags


# The records' partition keys, data, explicit hash keys and tags, as parallel lists; the last
# two are None when no record has one (the common case costs no list).
_Columns = tuple[list[str], list[bytes], list[str | None] | None, list[tuple[Tag, ...]] | None]


def _parse(buf: bytes, pos: int, end: int) -> _Columns:
    """Parse the ``AggregatedRecord`` in ``buf[pos:end]``: the fast path, else the general one.

    ``buf`` must extend at least 16 bytes past ``end`` (the digest does), so that the fast path
    may peek past the body before deciding to give up.

    Returns:
        The records' partition keys, data and explicit hash keys, as parallel lists; ``None``
        instead of the last when no record has an explicit hash key.

    Raises:
        AggregationFormatError: if the body is malformed.
    """
    try:
        columns = _parse_canonical(buf, pos, end)
    except (IndexError, UnicodeDecodeError, AggregationFormatError):
        columns = None  # the general path says what is wrong, if anything
    return _parse_general(buf, pos, end) if columns is None else columns


# A key table of ASCII partition keys shorter than 128 bytes, decoded in one piece, split into
# its entries: "", length, key, length, key, ... (the tag 0A is the separator).
_split_key_table = re.compile("\n(.)", re.DOTALL).split

# The first 7 bytes of a record: its whole header when the record is shorter than 128 bytes.
_record_header = Struct("7B").unpack_from


def _parse_canonical(buf: bytes, pos: int, end: int) -> _Columns | None:
    """The fast path: parse a body laid out as encoders write it, or return ``None``.

    That layout is: the key tables, then the records, each record's fields in field-number
    order (``08 index [10 index] 1A length data``), varints in the records of at most 2 bytes,
    no tags, no unknown fields. On anything else (including any malformed input) this returns
    ``None`` or raises (``IndexError``, ``UnicodeDecodeError``, ``AggregationFormatError``),
    and ``_parse_general`` takes over; it never returns a result that ``_parse_general`` would
    not. A record is trusted only if its data ends exactly where the record does, which puts
    the header that was read inside the record.

    Two loops do the common case with few bytecodes per item: a table of ASCII partition keys
    with 1-byte lengths is decoded and split in one piece, by ``_fast_key_table``; records with
    no explicit hash key are read from one ``struct`` unpack of their first bytes. Anything else
    goes through ``_read_key_tables`` and ``_parse_records``, which take any canonical layout.
    """
    tables = _fast_key_table(buf, pos, end)
    if tables is None:
        partition_keys, explicit_hash_keys, pos = _read_key_tables(buf, pos, end)
    else:
        partition_keys, pos = tables
        explicit_hash_keys = []
    keys: list[str] = []
    datas: list[bytes] = []
    add_key = keys.append
    add_data = datas.append
    header = _record_header
    while pos < end:
        # The record's tag, its length and the first bytes of its body.
        tag, n, b1, b2, b3, b4, b5 = header(buf, pos)
        if tag != 0x1A:
            break
        if n < 0x80:  # 1A n 08 index 1A length data
            if b1 != 0x08:
                break
            stop = pos + 2 + n
            if b2 < 0x80:  # a 1-byte index: data length n - 4, data at pos + 6
                if b3 != 0x1A or b4 != n - 4:
                    break
                add_key(partition_keys[b2])
                add_data(buf[pos + 6 : stop])
            else:  # a 2-byte index: data length n - 5, data at pos + 7
                if b3 >= 0x80 or b4 != 0x1A or b5 != n - 5:
                    break
                add_key(partition_keys[(b2 & 0x7F) | (b3 << 7)])
                add_data(buf[pos + 7 : stop])
        else:  # 1A n n 08 index 1A length data: records of more than 127 bytes
            if b1 >= 0x80 or b2 != 0x08:
                break
            stop = pos + 3 + ((n & 0x7F) | (b1 << 7))
            if b3 < 0x80:  # a 1-byte index: the data length at pos + 6
                if b4 != 0x1A:
                    break
                index = b3
                start = pos + 6
            else:  # a 2-byte index: the data length at pos + 7
                if b4 >= 0x80 or b5 != 0x1A:
                    break
                index = (b3 & 0x7F) | (b4 << 7)
                start = pos + 7
            # The data length must make the data end where the record does.
            length = stop - start - 1  # the data length, if it takes 1 byte
            if length < 0x80:
                if buf[start] != length:
                    break
                start += 1
            else:
                length -= 1  # it takes 2
                if buf[start] != (length & 0x7F) | 0x80 or buf[start + 1] != length >> 7:
                    break
                start += 2
            add_key(partition_keys[index])
            add_data(buf[start:stop])
        pos = stop
    else:
        return (keys, datas, None, None) if pos == end else None
    return _parse_records(buf, pos, end, partition_keys, explicit_hash_keys, keys, datas)


def _fast_key_table(buf: bytes, pos: int, end: int) -> tuple[list[str], int] | None:
    """Read a partition key table of ASCII keys with 1-byte lengths in one piece, or ``None``.

    The table is taken to end at the first ``1A`` byte (the first record's tag), decoded as
    ASCII (so byte offsets are character offsets) and split at each ``0A`` tag, capturing the
    length byte that follows. It is accepted only if every captured length is the length of the
    key that follows it: the table is then exactly a run of ``0A length key`` entries, which a
    byte-by-byte reading would find too. Tables this does not take are left to
    ``_read_key_tables``: keys of 26 bytes (a length byte of ``1A``) or holding a ``1A`` byte,
    most keys holding a ``0A`` byte (the split goes wrong, and the check sees it), non-ASCII
    keys, explicit hash key tables.

    Returns:
        The partition keys and the position where the table ends, or ``None``.
    """
    stop = buf.find(b"\x1a", pos, end)
    if stop < 0:
        return None
    try:
        parts = _split_key_table(buf[pos:stop].decode("ascii"))
        keys = parts[2::2]
        if parts[0] or "".join(parts[1::2]).encode() != bytes(map(len, keys)):
            return None
    except ValueError:  # not ASCII, or a key of more than 255 characters
        return None
    return keys, stop


def _read_key_tables(buf: bytes, pos: int, end: int) -> tuple[list[str], list[str], int]:
    """Read the key table entries at ``pos``, entry by entry: the keys and where they end.

    Raises ``IndexError``, ``UnicodeDecodeError`` or ``AggregationFormatError`` on what it
    cannot read (``_parse`` then leaves the body to ``_parse_general``).
    """
    partition_keys: list[str] = []
    explicit_hash_keys: list[str] = []
    while pos < end:
        tag = buf[pos]
        if tag != 0x0A and tag != 0x12:
            break
        b = buf[pos + 1]
        if b < 0x80:  # keys are short: a one-byte length, read here without a call
            pos += 2
            stop = pos + b
        else:
            length, pos = _read_varint(buf, pos + 1)
            stop = pos + length
        (partition_keys if tag == 0x0A else explicit_hash_keys).append(buf[pos:stop].decode())
        pos = stop
    return partition_keys, explicit_hash_keys, pos


def _parse_records(
    buf: bytes,
    pos: int,
    end: int,
    partition_keys: list[str],
    explicit_hash_keys: list[str],
    keys: list[str],
    datas: list[bytes],
) -> _Columns | None:
    """Go on with the records at ``pos`` in any canonical layout (the fast loop stopped there).

    ``keys`` and ``datas`` hold the records read so far (none with an explicit hash key).
    """
    with_ehk: list[tuple[int, str]] = []  # (record number, explicit hash key), sparse
    add_key = keys.append
    add_data = datas.append
    while pos < end:
        if buf[pos] != 0x1A:  # not a record: a table after the records, a tag, unknown fields
            return None
        b = buf[pos + 1]
        if b < 0x80:
            pos += 2
            stop = pos + b
        else:
            c = buf[pos + 2]
            if c >= 0x80:
                return None
            pos += 3
            stop = pos + ((b & 0x7F) | (c << 7))
        if buf[pos] != 0x08:
            return None
        b = buf[pos + 1]
        if b < 0x80:
            add_key(partition_keys[b])
            pos += 2
        else:
            c = buf[pos + 2]
            if c >= 0x80:
                return None
            add_key(partition_keys[(b & 0x7F) | (c << 7)])
            pos += 3
        tag = buf[pos]
        if tag == 0x10:
            b = buf[pos + 1]
            if b < 0x80:
                pos += 2
            else:
                c = buf[pos + 2]
                if c >= 0x80:
                    return None
                b = (b & 0x7F) | (c << 7)
                pos += 3
            with_ehk.append((len(datas), explicit_hash_keys[b]))
            tag = buf[pos]
        if tag != 0x1A:
            return None
        b = buf[pos + 1]
        if b < 0x80:
            pos += 2
            if pos + b != stop:
                return None
        else:
            c = buf[pos + 2]
            pos += 3
            if c >= 0x80 or pos + ((b & 0x7F) | (c << 7)) != stop:
                return None
        add_data(buf[pos:stop])
        pos = stop
    if pos != end:
        return None
    if not with_ehk:
        return keys, datas, None, None
    ehk_column: list[str | None] = [None] * len(datas)
    for i, explicit_hash_key in with_ehk:
        ehk_column[i] = explicit_hash_key
    return keys, datas, ehk_column, None


def _parse_general(buf: bytes, pos: int, end: int) -> _Columns:
    """Parse any valid body exactly (fields in any order, tags and unknown fields skipped).

    A field that runs past ``end`` is reported as such. Reads never go more than 14 bytes past
    ``end`` (a tag of at most 5 bytes starting before ``end``, then a varint of at most 10), so
    the 16-byte digest that follows the body keeps them inside ``buf``: no ``IndexError``.

    Raises:
        AggregationFormatError: naming what is wrong, if the body is malformed.
    """
    pk_table: list[bytes] = []
    ehk_table: list[bytes] = []
    pk_indexes: list[int] = []
    ehk_indexes: list[int] = []
    datas: list[bytes] = []
    tags: list[tuple[Tag, ...]] = []
    try:
        while pos < end:
            start = pos
            tag = buf[pos]
            if tag < 0x80:
                pos += 1
            else:
                tag, pos = _read_tag(buf, pos)
            if tag == 0x1A:  # records
                length, pos = _read_varint(buf, pos)
                stop = pos + length
                if stop > end:
                    raise AggregationFormatError(
                        f"malformed aggregate body: record at byte {start} runs past the end "
                        "of the body"
                    )
                pk_index, ehk_index, data, record_tags = _parse_record(buf, pos, stop, start)
                pk_indexes.append(pk_index)
                ehk_indexes.append(ehk_index)
                datas.append(data)
                tags.append(record_tags)
                pos = stop
            elif tag == 0x0A or tag == 0x12:  # partition_key_table, explicit_hash_key_table
                length, pos = _read_varint(buf, pos)
                stop = pos + length
                if stop > end:
                    raise AggregationFormatError(
                        f"malformed aggregate body: key table entry at byte {start} runs past "
                        "the end of the body"
                    )
                (pk_table if tag == 0x0A else ehk_table).append(buf[pos:stop])
                pos = stop
            else:  # unknown fields
                pos = _skip_field(buf, pos, end, tag, start)
    except IndexError:  # pragma: no cover - unreachable, see the docstring; defence in depth
        raise AggregationFormatError(
            "malformed aggregate body: truncated (a field runs past the end of the data)"
        ) from None

    partition_keys = _decode_table(pk_table, "partition key")
    explicit_hash_keys: list[str | None] = []
    explicit_hash_keys += _decode_table(ehk_table, "explicit hash key")
    if pk_indexes and max(pk_indexes) >= len(partition_keys):
        _raise_bad_index(pk_indexes, len(partition_keys), "partition key")
    if ehk_indexes and max(ehk_indexes) >= len(explicit_hash_keys):
        _raise_bad_index(ehk_indexes, len(explicit_hash_keys), "explicit hash key")
    explicit_hash_keys.append(None)  # index -1: the record has no explicit hash key
    return (
        list(map(partition_keys.__getitem__, pk_indexes)),
        datas,
        list(map(explicit_hash_keys.__getitem__, ehk_indexes)),
        tags if any(tags) else None,
    )


def _decode_table(table: list[bytes], what: str) -> list[str]:
    keys: list[str] = []
    for i, key in enumerate(table):
        try:
            keys.append(key.decode())
        except UnicodeDecodeError:
            raise AggregationFormatError(
                f"malformed aggregate body: {what} table entry {i} is not valid UTF-8"
            ) from None
    return keys


def _raise_bad_index(indexes: list[int], table_size: int, what: str) -> NoReturn:
    record = next(i for i, index in enumerate(indexes) if index >= table_size)
    raise AggregationFormatError(
        f"malformed aggregate body: record {record} refers to {what} {indexes[record]}, but the "
        f"{what} table has {table_size} entr{'y' if table_size == 1 else 'ies'}"
    )


def _check_framing(blob: bytes) -> None:
    if blob[:_MAGIC_SIZE] != MAGIC:
        raise AggregationFormatError(
            f"not a KPL aggregate: does not start with the magic bytes F3 89 9A C2 "
            f"(starts with {blob[:_MAGIC_SIZE].hex(' ').upper() or 'nothing'})"
        )
    if len(blob) < FRAMING_OVERHEAD:
        raise AggregationFormatError(
            f"not a KPL aggregate: {len(blob)} bytes is too short, an aggregate has at least "
            f"{FRAMING_OVERHEAD} (4 magic bytes and a 16-byte MD5 digest)"
        )
    body = memoryview(blob)[_MAGIC_SIZE:-DIGEST_SIZE]
    if hashlib.md5(body, usedforsecurity=False).digest() != blob[-DIGEST_SIZE:]:
        raise AggregationFormatError(
            "not a KPL aggregate: the MD5 digest does not match the body (corrupted or truncated)"
        )


# Records are built by ``map(_tuple_new, repeat(cls), zip(...))``: tuple.__new__ on each row,
# no Python call per record (a NamedTuple's own __new__ is a Python function).
# Hot path: no Python call per decoded record (188 ns per record, 143 vs 331 ns for a
# four-field NamedTuple, timeit).
_tuple_new = tuple.__new__

# Sub-sequence numbers 0, 1, 2, ... shared by every aggregate's records: the same int objects
# (no allocation per record above 256) make the records cheaper for the garbage collector to
# traverse, and they keep a long list of them smaller. Replaced, never mutated (thread-safe).
_sub_sequence_numbers: tuple[int, ...] = ()
_SHARED_SUB_SEQUENCE_NUMBERS = 1 << 16


def _sub_sequence_numbers_for(count: int) -> Sequence[int]:
    """At least the numbers ``0 ... count - 1``, in order (possibly more)."""
    global _sub_sequence_numbers
    numbers = _sub_sequence_numbers
    if count <= len(numbers):
        return numbers
    if count > _SHARED_SUB_SEQUENCE_NUMBERS:
        return range(count)
    numbers = _sub_sequence_numbers = tuple(range(max(count, 2 * len(numbers), 1024)))
    return numbers


def decode(blob: bytes | bytearray | memoryview) -> list[Record]:
    """Decode an aggregated record into its user records.

    Args:
        blob: the Kinesis record's data.

    An aggregate of no records is valid (though never produced) and decodes to ``[]``.

    Returns:
        The user records, in order.

    Raises:
        AggregationFormatError: if the blob does not start with the magic bytes, is shorter than
            ``FRAMING_OVERHEAD``, its MD5 digest does not match, or its protobuf body is
            malformed (truncated, an unsupported wire type, a required field missing, an index
            outside its key table, a key that is not UTF-8). The message says which.
    """
    if type(blob) is not bytes:
        blob = bytes(blob)
    _check_framing(blob)
    keys, datas, explicit_hash_keys, tags = _parse(blob, _MAGIC_SIZE, len(blob) - DIGEST_SIZE)
    ehks = repeat(None) if explicit_hash_keys is None else explicit_hash_keys
    rows = zip(keys, datas, ehks, repeat(()) if tags is None else tags, strict=False)
    return list(map(_tuple_new, repeat(Record), rows))


def is_aggregated(blob: bytes | bytearray | memoryview) -> bool:
    """Whether ``blob`` is framed as a KPL aggregate.

    Checks the framing only (magic bytes, length, MD5 digest of the body), not the protobuf
    body: ``decode`` may still raise for a blob this accepts, though a matching digest makes
    that very unlikely unless the blob was crafted.

    Args:
        blob: a Kinesis record's data.

    That is: ``blob`` starts with ``MAGIC``, is at least ``FRAMING_OVERHEAD`` bytes long, and
    ends with the MD5 digest of what lies between.

    Returns:
        Whether the framing is that of an aggregate.
    """
    return (
        len(blob) >= FRAMING_OVERHEAD
        and blob[:_MAGIC_SIZE] == MAGIC
        and hashlib.md5(memoryview(blob)[_MAGIC_SIZE:-DIGEST_SIZE], usedforsecurity=False).digest()
        == blob[-DIGEST_SIZE:]
    )


# --------------------------------------------------------------------------------------------
# Consumer side
# --------------------------------------------------------------------------------------------


def _require(record: Mapping[str, Any], key: str, what: str) -> Any:
    try:
        return record[key]
    except KeyError:
        raise ValueError(f"{what} has no {key!r} key") from None


ShardLike = Mapping[str, Any] | tuple[int | str, int | str]
"""What ``shard=`` accepts: a shard entry of a ``ListShards`` / ``DescribeStream`` response
(a mapping with ``HashKeyRange``), a ``HashKeyRange`` mapping itself, or a ``(starting,
ending)`` pair of hash keys (``int`` or decimal ``str``), both inclusive."""


def _hash_key(value: object, what: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.isdecimal() and value.isascii():
        number = int(value)
    else:
        raise ValueError(f"shard: the {what} hash key must be a decimal integer, got {value!r}")
    if not 0 <= number <= MAX_HASH_KEY:
        raise ValueError(f"shard: the {what} hash key must be in 0 … 2**128-1, got {number}")
    return number


def hash_key_range(shard: ShardLike) -> tuple[int, int]:
    """The inclusive ``(starting, ending)`` hash keys of ``shard``, as ``deaggregate`` reads it.

    Raises:
        ValueError: a key is missing, not a decimal hash key, or the range is empty.
        TypeError: ``shard`` is neither a mapping nor a pair.
    """
    if isinstance(shard, Mapping):
        key_range = shard.get("HashKeyRange", shard)
        try:
            starting = key_range["StartingHashKey"]
            ending = key_range["EndingHashKey"]
        except (KeyError, TypeError):
            raise ValueError(
                "shard: a shard entry (ListShards, DescribeStream) has a 'HashKeyRange' with "
                "'StartingHashKey' and 'EndingHashKey'; got a mapping with keys "
                f"{sorted(map(str, shard))}"
            ) from None
    elif isinstance(shard, tuple | list) and len(shard) == 2:
        starting, ending = shard
    else:
        raise TypeError(
            "shard must be a shard entry of ListShards or DescribeStream (a mapping with "
            f"'HashKeyRange') or a (starting, ending) pair, not {type(shard).__name__}"
        )
    start = _hash_key(starting, "starting")
    end = _hash_key(ending, "ending")
    if start > end:
        raise ValueError(f"shard: the starting hash key {start} is above the ending one {end}")
    return start, end


def deaggregate(
    record: Mapping[str, Any], *, shard: ShardLike | None = None
) -> list[DeaggregatedRecord]:
    """Split one Kinesis record, as a consumer receives it, into its user records.

    Accepts three shapes of record:

    * a record from boto3's or aiobotocore's ``get_records``: ``Data`` (bytes),
      ``PartitionKey``, ``SequenceNumber``, ``ApproximateArrivalTimestamp``;
    * a record of a Lambda Kinesis event: ``{"eventSource": "aws:kinesis", "kinesis": {...}}``;
    * the ``"kinesis"`` dict of such a record on its own: ``data`` (base64), ``partitionKey``,
      ``sequenceNumber``, ``approximateArrivalTimestamp``.

    Like AWS's deaggregators (the KCL's and ``aws_kinesis_agg``), data that is not framed as an
    aggregate (no magic bytes, a digest that does not match, nothing between the magic and the
    digest) is an ordinary record and comes back as a single ``DeaggregatedRecord`` with
    ``aggregated=False``. Unlike ``aws_kinesis_agg``, which passes such a record through (or
    drops its records) silently, data that is framed as an aggregate but whose protobuf body is
    malformed raises: a matching MD5 digest rules out chance.

    Args:
        record: the Kinesis record, in one of the shapes above. Only the keys named above are
            read; ``SequenceNumber`` and ``ApproximateArrivalTimestamp`` (and their Lambda
            spellings) may be absent.
        shard: the shard the record was read from, to drop the user records of an aggregate
            whose hash key (explicit, or the MD5 of the partition key) lies outside its range,
            as the KCL does: the stale copies an aggregate sent with an outdated shard map
            leaves behind around a reshard, whose producer resent them to the right shard.
            A ``ListShards`` / ``DescribeStream`` shard entry, its ``HashKeyRange``, or a
            ``(starting, ending)`` pair (inclusive). A record that was not aggregated is
            never dropped (Kinesis routed it itself). ``None`` (the default) keeps every
            user record.

    Each user record comes with the Kinesis record's sequence number and arrival time, and its
    own sub-sequence number (its index in the aggregate, also when others were dropped).

    Returns:
        The user records, in order.

    Raises:
        ValueError: if the record is none of these shapes (the message names the missing key),
            a Lambda record's data is not valid base64, or ``shard`` has no valid hash key
            range.
        TypeError: if ``shard`` is neither a mapping nor a pair.
        AggregationFormatError: if the data is framed as an aggregate but its body is malformed
            (with ``shard``, also if an explicit hash key in it is not a decimal integer).
    """
    key_range = None if shard is None else hash_key_range(shard)
    return list(_deaggregate(record, key_range))


def _in_range(
    records: Iterable[DeaggregatedRecord], key_range: tuple[int, int]
) -> list[DeaggregatedRecord]:
    """The records whose hash key lies in ``key_range`` (inclusive)."""
    start, end = key_range
    by_partition_key: dict[str, int] = {}
    kept = []
    for user_record in records:
        ehk = user_record.explicit_hash_key
        if ehk is None:
            key = user_record.partition_key
            hash_key = by_partition_key.get(key)
            if hash_key is None:
                hash_key = by_partition_key[key] = hash_key_of(key.encode())
        elif ehk.isdecimal() and ehk.isascii():
            hash_key = int(ehk)
        else:
            raise AggregationFormatError(
                f"malformed aggregate body: explicit hash key {ehk[:50]!r} is not a decimal integer"
            )
        if start <= hash_key <= end:
            kept.append(user_record)
    return kept


def _deaggregate(
    record: Mapping[str, Any], key_range: tuple[int, int] | None = None
) -> Iterable[DeaggregatedRecord]:
    """``deaggregate``, its records as an iterator (``deaggregate_records`` extends its list)."""
    if "Data" in record:
        data = record["Data"]
        partition_key = _require(record, "PartitionKey", "boto3 Kinesis record")
        sequence_number = record.get("SequenceNumber")
        timestamp = record.get("ApproximateArrivalTimestamp")
    else:
        if "kinesis" in record:
            record = record["kinesis"]
            what = "Lambda Kinesis record's 'kinesis' dict"
        elif "data" in record:
            what = "Lambda 'kinesis' dict"
        else:
            raise ValueError(
                "not a Kinesis record: no 'Data' key (boto3 get_records), 'kinesis' key (Lambda "
                "event record) or 'data' key (a Lambda record's 'kinesis' dict)"
            )
        encoded = _require(record, "data", what)
        partition_key = _require(record, "partitionKey", what)
        sequence_number = record.get("sequenceNumber")
        timestamp = record.get("approximateArrivalTimestamp")
        try:
            data = base64.b64decode(encoded, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"{what}: 'data' is not valid base64 ({exc})") from None
    if type(data) is not bytes:
        data = bytes(data)
    end = len(data) - DIGEST_SIZE
    if (
        end > _MAGIC_SIZE
        and data[:_MAGIC_SIZE] == MAGIC
        and hashlib.md5(memoryview(data)[_MAGIC_SIZE:end], usedforsecurity=False).digest()
        == data[end:]
    ):
        partition_keys, datas, explicit_hash_keys, tags = _parse(data, _MAGIC_SIZE, end)
        # zip stops at the first column's end: the others may be longer, or endless.
        rows = zip(
            partition_keys,
            datas,
            repeat(None) if explicit_hash_keys is None else explicit_hash_keys,
            repeat(sequence_number),
            _sub_sequence_numbers_for(len(datas)),
            repeat(True),
            repeat(timestamp),
            repeat(()) if tags is None else tags,
        )
        user_records = map(_tuple_new, repeat(DeaggregatedRecord), rows)
        return user_records if key_range is None else _in_range(user_records, key_range)
    return [DeaggregatedRecord(partition_key, data, None, sequence_number, 0, False, timestamp)]


def deaggregate_records(
    records: Iterable[Mapping[str, Any]] | Mapping[str, Any],
    *,
    shard: ShardLike | None = None,
) -> list[DeaggregatedRecord]:
    """Split many Kinesis records into their user records, as ``deaggregate`` does each.

    Args:
        records: Kinesis records in any of the shapes ``deaggregate`` accepts (the
            ``Records`` of a ``get_records`` response, say); or a whole Lambda event (a mapping
            with a ``"Records"`` key); or a single record.
        shard: the shard they were all read from, as for ``deaggregate``; ``None`` keeps
            every user record. (A Lambda event may mix shards: pass ``shard`` only for records
            of one shard.)

    Returns:
        Every user record, in order, flattened into one list.

    Raises:
        ValueError: as ``deaggregate``.
        TypeError: as ``deaggregate``.
        AggregationFormatError: as ``deaggregate``.
    """
    key_range = None if shard is None else hash_key_range(shard)
    items: Iterable[Mapping[str, Any]]
    if isinstance(records, Mapping):
        if "Records" not in records:
            return list(_deaggregate(records, key_range))
        items = records["Records"]
    else:
        items = records
    out: list[DeaggregatedRecord] = []
    for record in items:
        out += _deaggregate(record, key_range)
    return out

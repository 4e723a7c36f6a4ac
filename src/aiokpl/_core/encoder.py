"""The KPL aggregation format's encoder: a record's tags, ``AggregateBuilder`` and ``encode``.

The format itself (framing, messages) is described in ``wire``. Tags are validated and encoded
once, when a record is put (``encode_tags``, ``check_tags``); ``AggregateBuilder`` packs user
records into one aggregate, knowing its exact size at every step.

Invariants:

* Sizes are exact: ``AggregateBuilder.size`` is ``len(builder.encode())`` and
  ``AggregateBuilder.size_if_added`` is the size after the next ``AggregateBuilder.add``,
  to the byte, in O(1) (tags included: a record's tags are encoded once, when it is put).
* Keys are deduplicated: each distinct partition key (and explicit hash key) appears once in
  its table, in order of first appearance; records refer to it by index. A record without an
  explicit hash key omits field 2.
* Fields are written in field-number order (tables, then records; in a record its indexes,
  its data, then its tags), as protobuf serializers do (``decoder`` reads any order).
* Tags (``Record.tags``, field 4) are kept in the order given, duplicates included, as the
  format allows; a record without tags writes none. Records without tags cost what they cost
  before tags were supported: one falsy check when added.

Mirrors ``KinesisRecord`` in the KPL (``aws/kinesis/core/kinesis_record.cc``) and its
``aggregation-format.md``. Differences: the KPL estimates an aggregate's size and checks it when
serialising; we keep the exact size incrementally (varint-length arithmetic), so the aggregator
knows before adding a record whether it fits. The KPL defines tags in its format
(``aws/kinesis/protobuf/messages.proto``) but never writes them: its ``PutRecord`` IPC message
and its Java ``addUserRecord`` have no tags, and its ``KinesisRecord::after_add`` sets only keys
and data. We write them (and ``decoder`` reads them back), so that a record's tags travel with
it inside an aggregate.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn, cast

from .errors import InvalidRecordError, InvalidRecordTypeError
from .wire import (
    FRAMING_OVERHEAD,
    MAGIC,
    TAG3_LEN,
    VARINT_CACHE,
    Record,
    Tags,
    tag3_len,
    varint,
    varint_len,
)

__all__ = (
    "MAX_TAGS",
    "AggregateBuilder",
    "aggregate_of_one_size",
    "check_tags",
    "encode",
    "encode_tags",
)


_NO_LIMIT = float("inf")

MAX_TAGS = 1000
"""The most tags a user record may have at put (``check_tags``). Each tag costs work on every
path that reads it (the put's checks, the spool, ``deaggregate``, the ``Deduper``) while it
may take as little as 4 bytes, so the record size limit alone does not bound that work: a
1 MiB record could hold 260,000 tags. Decoders read any number (what others wrote)."""


def _encoded_len(key: str | bytes) -> int:
    """The length of a key once UTF-8 encoded (keys may come as ``str`` or already encoded)."""
    return len(key.encode()) if isinstance(key, str) else len(key)


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


def encode_tags(tags: Tags | None, max_tags: int | None = None) -> bytes:
    """Validate a record's tags and encode them as its ``Record.tags`` fields (field 4).

    Args:
        tags: a mapping of key to value, or an iterable of ``Tag`` objects / ``(key, value)``
            pairs; keys are ``str``, values ``str`` or ``None``. ``None`` means no tags.
        max_tags: the most tags allowed (``None``: any number); an iterable is read no
            further than one tag past it.

    Returns:
        The encoded fields, in the order given; ``b""`` for no tags.

    Raises:
        InvalidRecordTypeError: ``tags`` is not a mapping or an iterable of pairs, or a key or
            value has the wrong type (a ``TypeError``).
        InvalidRecordError: a key or value is not encodable as UTF-8, or there are more than
            ``max_tags`` tags (a ``ValueError``).
    """
    if tags is None:
        return b""
    if isinstance(tags, Mapping):
        if max_tags is not None and len(tags) > max_tags:
            _raise_too_many_tags(max_tags)
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
        if max_tags is not None and index >= max_tags:
            _raise_too_many_tags(max_tags)
        text = isinstance(pair, str | bytes)
        if text or not isinstance(pair, Sequence) or len(pair) != 2:
            shape = "" if text or not isinstance(pair, Sequence) else f" of length {len(pair)}"
            raise InvalidRecordTypeError(
                f"tags[{index}]: a tag is a Tag or a (key, value) pair, not "
                f"{type(pair).__name__}{shape}"
            )
        key, value = pair
        encoded = _tag_text(key, "key", index)
        message = b"\n" + varint(len(encoded)) + encoded
        if value is not None:
            encoded = _tag_text(value, "value", index)
            message += b"\x12" + varint(len(encoded)) + encoded
        out.append(b'"' + varint(len(message)) + message)
    return b"".join(out)


def _raise_too_many_tags(max_tags: int) -> NoReturn:
    raise InvalidRecordError(
        f"tags: more than {max_tags} tags; a record may have at most {max_tags}"
    )


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
        InvalidRecordError: a key or value is not UTF-8, there are more than :data:`MAX_TAGS`
            tags, or the record as an aggregate of one is over ``max_record_size``.
    """
    encoded = encode_tags(tags, MAX_TAGS)
    if not encoded:
        return encoded, size
    key_size = len(partition_key.encode())
    alone = key_size + aggregate_of_one_size(
        key_size, size - key_size, explicit_hash_key, len(encoded)
    )
    if alone > max_record_size:
        raise InvalidRecordError(
            f"data plus partition_key plus tags is {alone} bytes sent alone (as an aggregate "
            f"of one, the only way tags travel), over max_record_size ({max_record_size})"
        )
    return encoded, size + len(encoded)


def aggregate_of_one_size(
    key_size: int, data_size: int, explicit_hash_key: str | None, tags_size: int
) -> int:
    """The exact size of an aggregate holding one record, framing included."""

    def field(n: int) -> int:  # tag, length, value
        return 1 + varint_len(n) + n

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
            size += 1 + (1 if n < 0x80 else varint_len(n)) + n
            index = len(self._pk_fields)
            inner = 2 if index < 0x80 else 1 + varint_len(index)
        else:
            inner = len(field)
        if explicit_hash_key is not None:
            field = self._ehk_fields.get(explicit_hash_key)
            if field is None:
                n = _encoded_len(explicit_hash_key)
                size += 1 + (1 if n < 0x80 else varint_len(n)) + n
                index = len(self._ehk_fields)
                inner += 2 if index < 0x80 else 1 + varint_len(index)
            else:
                inner += len(field)
        inner += 1 + (1 if data_len < 0x80 else varint_len(data_len)) + data_len
        if tags is not None:
            inner += len(encode_tags(tags))
        return size + 1 + (1 if inner < 0x80 else varint_len(inner)) + inner

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
            pk_entry = b"\n" + varint(len(encoded)) + encoded
            pk_field = b"\x08" + varint(len(pk_fields))
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
                ehk_entry = b"\x12" + varint(len(encoded)) + encoded
                ehk_field = b"\x10" + varint(len(self._ehk_fields))
                added += len(ehk_entry)
            field += ehk_field
        n = len(data)
        field += TAG3_LEN[n] if n < VARINT_CACHE else tag3_len(n)
        if encoded_tags:  # they follow the data: one copy, for tagged records only
            data = b"".join((data, encoded_tags))
            n = len(data)
        inner = len(field) + n
        header = (TAG3_LEN[inner] if inner < VARINT_CACHE else tag3_len(inner)) + field
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

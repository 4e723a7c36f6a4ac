"""The KPL aggregation format's decoder: ``decode``, ``is_aggregated`` and ``decode_tags``.

The format itself (framing, messages) is described in ``wire``. ``parse_body`` reads an
``AggregatedRecord`` body into columns (partition keys, data, explicit hash keys, tags); ``decode``
here and ``deaggregation`` build their records from them.

Two implementations read a body and a run of tags: the C decoder (``_cdecoder.c``), used when it
was built and ``AIOKPL_NO_EXTENSIONS`` is not set, and the pure-Python one here
(``parse_body_python``, ``decode_tags_python``). They return the same values and raise the same
errors, with the same messages, for any input (the tests and the fuzz target compare them); the C
one takes a few nanoseconds per field whatever the body holds, where Python's loops take up to a
few hundred milliseconds on a crafted 1 MiB record (``docs/aggregation.md``).

Invariants:

* The decoder accepts any valid body: fields in any order, unknown fields skipped by wire type;
  it raises ``aiokpl.AggregationFormatError`` for anything it cannot read, naming what is wrong
  (it never guesses).
* The fast path (``canonical.parse_canonical``) never returns a result the general parser
  (``_parse_general``) would not: on anything it does not recognise, it gives up and the
  general parser decides.
* Tags (``Record.tags``, field 4) are returned in the order written, duplicates included; a
  record without tags decodes to ``()``. Records without tags cost what they cost before tags
  were supported: one constant column when decoded.
* Reads never go more than 14 bytes past the body: the 16-byte digest that follows keeps them
  inside the buffer (the C decoder checks every read against the buffer's length instead).

Mirrors the KPL's ``aggregation-format.md`` (the KPL itself only writes aggregates: its
consumers, the KCL and ``aws_kinesis_agg``, read them). Where we differ: a body is parsed by
hand, with a fast path for the layout encoders write, not by a generated protobuf parser; and
we read the tags the KPL's format defines (see ``encoder``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from itertools import count as count_from
from itertools import islice, repeat
from types import ModuleType
from typing import Any, NoReturn, TypeVar

from .canonical import Columns, parse_canonical, read_tags
from .errors import AggregationFormatError
from .wire import DIGEST_SIZE, FRAMING_OVERHEAD, MAGIC, MAGIC_SIZE, Record, Tag, read_varint

_R = TypeVar("_R", bound=tuple[Any, ...])

__all__ = (
    "decode",
    "decode_tags",
    "is_aggregated",
    "native_decoder",
)


def _read_tag(buf: bytes, pos: int) -> tuple[int, int]:
    """Read the multi-byte field tag at ``buf[pos]``: a varint of at most 5 bytes."""
    tag, end = read_varint(buf, pos)
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
        _, pos = read_varint(buf, pos)
    elif wire_type == 2:
        length, pos = read_varint(buf, pos)
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
            length, pos = read_varint(buf, pos)
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
    # Here pos == stop: a key or value past the tag raised above, and _skip_field raises for a
    # field past its limit (a field tag read across the end leads to one of the two).
    if key is None:
        raise AggregationFormatError(
            f"malformed aggregate body: the tag at byte {tag_start} of the record at byte "
            f"{start} has no key (a required field)"
        )
    return Tag(key, value)


def decode_tags_python(encoded: bytes) -> tuple[Tag, ...]:
    """The tags :func:`encode_tags` encoded, back as ``Tag`` objects (``decode_tags`` in Python).

    Raises:
        AggregationFormatError: ``encoded`` is not a run of ``Record.tags`` fields (a tag
            that runs past its end included).
    """
    try:  # the layout encoders write, in a short loop (it may read past the end: IndexError)
        fast = read_tags(encoded, 0, len(encoded))
    except (IndexError, UnicodeDecodeError):
        fast = None  # the loop below says what is wrong, if anything
    if fast is not None:
        return fast
    tags: list[Tag] = []
    pos, stop = 0, len(encoded)
    try:
        while pos < stop:
            start = pos
            if encoded[pos] != 0x22:
                raise AggregationFormatError(f"not an encoded tag at byte {pos}")
            length, pos = read_varint(encoded, pos + 1)
            end = pos + length
            if end > stop:
                raise AggregationFormatError(f"the tag at byte {start} runs past the end")
            tags.append(_parse_tag(encoded, pos, end, 0))
            pos = end
    except IndexError:  # a varint cut off by the end: nothing pads what follows here
        raise AggregationFormatError(f"a tag is cut off at byte {stop}") from None
    return tuple(tags)


def _parse_record(
    buf: bytes, pos: int, stop: int, start: int
) -> tuple[int, int, bytes, tuple[Tag, ...]]:
    """Parse the ``Record`` in ``buf[pos:stop]`` (any field order, tags, unknown fields).

    Returns:
        Its partition key index, explicit hash key index (-1 if absent), data and tags.
    """
    pk_index = ehk_index = -1
    data: bytes | None = None
    tags: list[Tag] = []
    while pos < stop:
        field_start = pos
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _read_tag(buf, pos)
        if tag == 0x08:  # partition_key_index
            pk_index, pos = read_varint(buf, pos)
        elif tag == 0x1A:  # data
            length, pos = read_varint(buf, pos)
            data_end = pos + length
            if data_end > stop:
                raise AggregationFormatError(
                    f"malformed aggregate body: data of the record at byte {start} runs past "
                    "the end of the record"
                )
            data = buf[pos:data_end]
            pos = data_end
        elif tag == 0x10:  # explicit_hash_key_index
            ehk_index, pos = read_varint(buf, pos)
        elif tag == 0x22:  # tags
            length, pos = read_varint(buf, pos)
            tag_end = pos + length
            if tag_end > stop:
                raise AggregationFormatError(
                    f"malformed aggregate body: a tag of the record at byte {start} runs past "
                    "the end of the record"
                )
            tags.append(_parse_tag(buf, pos, tag_end, start))
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
    return pk_index, ehk_index, data, tuple(tags)


def parse_body_python(buf: bytes, pos: int, end: int) -> Columns:
    """Parse the ``AggregatedRecord`` in ``buf[pos:end]``: the fast path, else the general one.

    ``buf`` must extend at least 16 bytes past ``end`` (the digest does), so that the fast path
    may peek past the body before deciding to give up.

    Returns:
        The records' partition keys, data, explicit hash keys and tags, as parallel lists;
        ``None`` instead of either of the last two when no record has one.

    Raises:
        AggregationFormatError: if the body is malformed.
    """
    try:
        columns = parse_canonical(buf, pos, end)
    except (IndexError, UnicodeDecodeError, AggregationFormatError):
        columns = None  # the general path says what is wrong, if anything
    return _parse_general(buf, pos, end) if columns is None else columns


def _parse_general(buf: bytes, pos: int, end: int) -> Columns:
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
                length, pos = read_varint(buf, pos)
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
                length, pos = read_varint(buf, pos)
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
    highest_ehk_index = max(ehk_indexes, default=-1)  # -1: no record has an explicit hash key
    if highest_ehk_index >= len(explicit_hash_keys):
        _raise_bad_index(ehk_indexes, len(explicit_hash_keys), "explicit hash key")
    explicit_hash_keys.append(None)  # index -1: the record has no explicit hash key
    return (
        list(map(partition_keys.__getitem__, pk_indexes)),
        datas,
        list(map(explicit_hash_keys.__getitem__, ehk_indexes)) if highest_ehk_index >= 0 else None,
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
    if blob[:MAGIC_SIZE] != MAGIC:
        raise AggregationFormatError(
            f"not a KPL aggregate: does not start with the magic bytes F3 89 9A C2 "
            f"(starts with {blob[:MAGIC_SIZE].hex(' ').upper() or 'nothing'})"
        )
    if len(blob) < FRAMING_OVERHEAD:
        raise AggregationFormatError(
            f"not a KPL aggregate: {len(blob)} bytes is too short, an aggregate has at least "
            f"{FRAMING_OVERHEAD} (4 magic bytes and a 16-byte MD5 digest)"
        )
    body = memoryview(blob)[MAGIC_SIZE:-DIGEST_SIZE]
    if hashlib.md5(body, usedforsecurity=False).digest() != blob[-DIGEST_SIZE:]:
        raise AggregationFormatError(
            "not a KPL aggregate: the MD5 digest does not match the body (corrupted or truncated)"
        )


def records_python(cls: type[_R], count: int, fields: tuple[Any, ...], varying: int) -> list[_R]:
    """A list of ``count`` tuples of ``cls`` (a named tuple) built from columns (``records``).

    Field ``j`` of record ``i`` is ``fields[j][i]`` where bit ``j`` of ``varying`` is set
    (``fields[j] + i`` if ``fields[j]`` is an int: numbers), else ``fields[j]``. Each record is
    made by ``tuple.__new__``, with no Python call per record (a NamedTuple's own ``__new__`` is
    a Python function: 143 vs 331 ns for four fields, timeit).
    """
    columns = [
        (count_from(field) if type(field) is int else field) if varying >> j & 1 else repeat(field)
        for j, field in enumerate(fields)
    ]
    return list(islice(map(tuple_new, repeat(cls), zip(*columns, strict=False)), count))


tuple_new = tuple.__new__


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
    keys, datas, explicit_hash_keys, tags = parse_body(blob, MAGIC_SIZE, len(blob) - DIGEST_SIZE)
    fields = (keys, datas, explicit_hash_keys, () if tags is None else tags)
    varying = 0b0011 | (explicit_hash_keys is not None) << 2 | (tags is not None) << 3
    return records(Record, len(datas), fields, varying)


def native_decoder(environ: Mapping[str, str] = os.environ) -> ModuleType | None:
    """The C decoder (``_cdecoder``), or ``None``: it was not built (no compiler at install
    time), or ``AIOKPL_NO_EXTENSIONS`` is set in ``environ`` to anything but the empty string."""
    if environ.get("AIOKPL_NO_EXTENSIONS"):
        return None
    try:
        from . import _cdecoder
    except ImportError:
        return None
    return _cdecoder


NATIVE = native_decoder()
"""The C decoder this process uses, or ``None`` for the pure-Python one (read once, at import)."""

parse_body: Callable[[bytes, int, int], Columns] = (
    parse_body_python if NATIVE is None else NATIVE.parse_body
)
"""Parse the ``AggregatedRecord`` in ``buf[pos:end]`` (``parse_body_python`` says how)."""

decode_tags: Callable[[bytes], tuple[Tag, ...]] = (
    decode_tags_python if NATIVE is None else NATIVE.decode_tags
)
"""The tags ``encode_tags`` encoded, back as ``Tag`` objects (``decode_tags_python`` says how)."""

records: Callable[[type[_R], int, tuple[Any, ...], int], list[_R]] = (
    records_python if NATIVE is None else NATIVE.records
)
"""The records ``decode`` and ``deaggregate`` build from a body's columns (``records_python``
says how). The C decoder's leaves each record the collector need not follow (its items are
strings, bytes, numbers, ``None``, datetimes, tuples of tags) untracked: CPython never untracks
a named tuple, and a program that kept a million decoded records paid for collections that
walked them all, more than half of ``deaggregate_records``' time in the codec benchmark."""


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
        and blob[:MAGIC_SIZE] == MAGIC
        and hashlib.md5(memoryview(blob)[MAGIC_SIZE:-DIGEST_SIZE], usedforsecurity=False).digest()
        == blob[-DIGEST_SIZE:]
    )

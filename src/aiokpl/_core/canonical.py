"""The decoder's fast path: a body laid out as encoders write it, read with few bytecodes.

``decoder.parse_body`` tries ``parse_canonical`` first and, when it returns ``None`` or raises,
reads the body with its general parser, which accepts any valid body and names what is wrong
with an invalid one. The layout taken here is the one ``encoder`` (and the KPL) write: the key
tables, then the records, each record's fields in field-number order, tags of under 128 bytes
(an identity tag is one), no unknown fields.

Invariants:

* ``parse_canonical`` never returns a result the general parser would not: on anything it does
  not recognise (malformed input included) it returns ``None`` or raises ``IndexError``,
  ``UnicodeDecodeError`` or ``AggregationFormatError``, and the general parser decides.
* Reads never go more than 14 bytes past the body: the 16-byte digest that follows keeps them
  inside the buffer.

The KPL has no decoder (its consumers, the KCL and ``aws_kinesis_agg``, read aggregates with a
generated protobuf parser); this path exists because a consumer decodes every record it reads.
"""

from __future__ import annotations

import re
from struct import Struct
from typing import Any

from .wire import Tag, read_varint

# The records' partition keys, data, explicit hash keys and tags, as parallel lists; the last
# two are None when no record has one (the common case costs no list).
Columns = tuple[list[str], list[bytes], list[str | None] | None, list[tuple[Tag, ...]] | None]


# A key table of ASCII partition keys shorter than 128 bytes, decoded in one piece, split into
# its entries: "", length, key, length, key, ... (the tag 0A is the separator).
_split_key_table = re.compile("\n(.)", re.DOTALL).split

# The first 7 bytes of a record: its whole header when the record is shorter than 128 bytes.
_record_header = Struct("7B").unpack_from


def parse_canonical(buf: bytes, pos: int, end: int) -> Columns | None:
    """The fast path: parse a body laid out as encoders write it, or return ``None``.

    That layout is: the key tables, then the records, each record's fields in field-number
    order (``08 index [10 index] 1A length data [tags]``), indexes of at most 2 bytes and
    lengths of at most 3 (records under 2 MiB), tags as ``read_tags`` takes them, no unknown
    fields. On anything else (including
    any malformed input) this returns ``None`` or raises (``IndexError``,
    ``UnicodeDecodeError``, ``AggregationFormatError``), and the general parser (``decoder``)
    takes over; it never returns a result that the general parser would not. A record is
    trusted only if its data (or its last tag) ends exactly where the record does, which puts
    the header that was read inside the record.

    Two loops do the common case with few bytecodes per item: a table of ASCII partition keys
    with 1-byte lengths is decoded and split in one piece, by ``fast_key_table``; records with
    no explicit hash key and no tags are read from one ``struct`` unpack of their first bytes.
    Anything else goes through ``read_key_tables`` and ``parse_records``, which take any
    canonical layout.
    """
    tables = fast_key_table(buf, pos, end)
    if tables is None:
        partition_keys, explicit_hash_keys, pos = read_key_tables(buf, pos, end)
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
    return parse_records(buf, pos, end, partition_keys, explicit_hash_keys, keys, datas)


def fast_key_table(buf: bytes, pos: int, end: int) -> tuple[list[str], int] | None:
    """Read a partition key table of ASCII keys with 1-byte lengths in one piece, or ``None``.

    The table is taken to end at the first ``1A`` byte (the first record's tag), decoded as
    ASCII (so byte offsets are character offsets) and split at each ``0A`` tag, capturing the
    length byte that follows. It is accepted only if every captured length is the length of the
    key that follows it: the table is then exactly a run of ``0A length key`` entries, which a
    byte-by-byte reading would find too. Tables this does not take are left to
    ``read_key_tables``: keys of 26 bytes (a length byte of ``1A``) or holding a ``1A`` byte,
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


def read_key_tables(buf: bytes, pos: int, end: int) -> tuple[list[str], list[str], int]:
    """Read the key table entries at ``pos``, entry by entry: the keys and where they end.

    Raises ``IndexError``, ``UnicodeDecodeError`` or ``AggregationFormatError`` on what it
    cannot read (``parse_body`` then leaves the body to the general parser (``decoder``)).
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
            length, pos = read_varint(buf, pos + 1)
            stop = pos + length
        (partition_keys if tag == 0x0A else explicit_hash_keys).append(buf[pos:stop].decode())
        pos = stop
    return partition_keys, explicit_hash_keys, pos


def parse_records(
    buf: bytes,
    pos: int,
    end: int,
    partition_keys: list[str],
    explicit_hash_keys: list[str],
    keys: list[str],
    datas: list[bytes],
) -> Columns | None:
    """Go on with the records at ``pos`` in any canonical layout (the fast loop stopped there).

    ``keys`` and ``datas`` hold the records read so far (none with an explicit hash key).
    """
    with_ehk: list[tuple[int, str]] = []  # (record number, explicit hash key), sparse
    with_tags: list[tuple[int, tuple[Tag, ...]]] = []  # (record number, its tags), sparse
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
            length = long_length(buf, pos + 1)
            if length is None:
                return None
            stop, pos = length
            stop += pos
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
            data_end = pos + b
        else:
            length = long_length(buf, pos + 1)
            if length is None:
                return None
            data_end, pos = length
            data_end += pos
        if data_end != stop:  # the record's tags follow its data, or it is not canonical
            if data_end > stop:
                return None
            record_tags = read_tags(buf, data_end, stop)
            if record_tags is None:
                return None
            with_tags.append((len(datas), record_tags))
        add_data(buf[pos:data_end])
        pos = stop
    if pos != end:
        return None
    return keys, datas, _sparse(with_ehk, len(datas)), _sparse(with_tags, len(datas), ())


def long_length(buf: bytes, pos: int) -> tuple[int, int] | None:
    """The length of 2 or 3 bytes at ``buf[pos]`` (whose first byte is 0x80 or more), and the
    position after it; ``None`` for a longer one (4 bytes from 2 MiB on: the general parser's).
    """
    b = buf[pos]
    c = buf[pos + 1]
    if c < 0x80:
        return (b & 0x7F) | (c << 7), pos + 2
    d = buf[pos + 2]
    if d >= 0x80:
        return None
    return (b & 0x7F) | ((c & 0x7F) << 7) | (d << 14), pos + 3


def _sparse(items: list[tuple[int, Any]], count: int, default: Any = None) -> list[Any] | None:
    """A column of ``count`` items from its ``(index, item)`` pairs; ``None`` for no pairs."""
    if not items:
        return None
    column = [default] * count
    for i, item in items:
        column[i] = item
    return column


def read_tags(buf: bytes, pos: int, stop: int) -> tuple[Tag, ...] | None:
    """Read a record's tags in ``buf[pos:stop]`` as encoders write them, or return ``None``.

    That layout is a run of ``22 n 0A k key [12 v value]``, every length in one byte (tags
    of less than 128 bytes, as an identity tag is); the general parser takes anything else.
    Reads stay inside ``buf[:stop + 4]``: no tag is read past the end of its record.
    """
    tags: list[Tag] = []
    add = tags.append
    while pos < stop:
        n = buf[pos + 1]
        tag_stop = pos + 2 + n
        k = buf[pos + 3]
        key_end = pos + 4 + k
        if (
            buf[pos] != 0x22
            or n >= 0x80
            or tag_stop > stop
            or buf[pos + 2] != 0x0A
            or k >= 0x80
            or key_end > tag_stop
        ):
            return None
        if key_end == tag_stop:
            add(tuple_new(Tag, (buf[pos + 4 : key_end].decode(), None)))
        else:
            v = buf[key_end + 1]
            if buf[key_end] != 0x12 or v >= 0x80 or key_end + 2 + v != tag_stop:
                return None
            value = buf[key_end + 2 : tag_stop].decode()
            add(tuple_new(Tag, (buf[pos + 4 : key_end].decode(), value)))
        pos = tag_stop
    return tuple(tags)


# Hot path: tags are built by tuple.__new__, not Tag(...), whose __new__ is a Python function
# (a call less per tag: about half of read_tags' time, cProfile on 87,376 records of a tag).
tuple_new = tuple.__new__

"""The spool's on-disk format: segment headers and length + CRC framed entries (pure).

A spool is a directory of segment files named ``{number:020d}.seg``, each written by one
writer session and only appended to. A segment starts with a :data:`HEADER_BYTES` header::

    magic "AIOKPLSP" | version u16 | flags u16 (0) | producer id (16 bytes) | crc32 u32

and goes on with frames, one per entry::

    length u24 + check u8 | crc32 u32 | body (length bytes: kind u8, then the kind's fields)

The CRC (``zlib.crc32``, the IEEE polynomial: in the standard library and in C, where crc32c
would be a runtime dependency, ``google-crc32c``, and finds single-bit flips no better)
covers the length field and the body, so a flipped bit in either is seen. Integers are
little-endian.

Two kinds of entry. A **record** (:class:`SpoolRecord`): its sequence number, the wall-clock
time it was accepted, stream, partition key, explicit hash key, tags and data. Its producer id
is the segment header's (every record of a segment has its writer's id, so writing it once per
segment saves 16 bytes a record). An **acknowledgement** (:class:`SpoolAck`): a producer id, an
outcome (delivered or failed) and runs of sequence numbers it resolves. State is rebuilt from
these entries alone: there is no index to keep in agreement with them.

How a frame that does not check is classified (:func:`read_frame`) decides what recovery does:

- **torn** (the last write was cut off by a crash): the frame's header is cut, or its body
  runs past the end of the file under a length whose check byte matches, or everything from
  the frame on is zero bytes (a file system that extended the file before its data reached
  the disk). Truncated.
- **corrupt**: a length whose check byte does not match (so a damaged length is never taken
  for a cut frame), a length over :data:`MAX_ENTRY_BYTES` or under one byte, a complete frame
  whose CRC does not match, an unknown kind, or an entry whose CRC matches but which does not
  decode (every field of a record is checked, also when it is not decoded: a kept record
  always decodes). Nothing after it in that
  segment can be framed, so the segment is kept up to that point and a copy is moved aside.
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from .._core.decoder import decode_tags
from .._core.encoder import encode_tags

__all__ = (
    "EARLIEST_ACCEPTED_AT",
    "FORMAT_VERSION",
    "HEADER_BYTES",
    "LATEST_ACCEPTED_AT",
    "MAGIC",
    "MAX_ENTRY_BYTES",
    "PRODUCER_ID_BYTES",
    "SEGMENT_SUFFIX",
    "AckOutcome",
    "Frame",
    "FrameStatus",
    "HeaderError",
    "SpoolAck",
    "SpoolRecord",
    "checked_records",
    "decode_header",
    "decode_record",
    "encode_ack",
    "encode_header",
    "encode_record",
    "encode_record_fields",
    "read_frame",
    "segment_name",
    "segment_number",
)

MAGIC = b"AIOKPLSP"
FORMAT_VERSION = 1
PRODUCER_ID_BYTES = 16
SEGMENT_SUFFIX = ".seg"
EARLIEST_ACCEPTED_AT = -62_135_596_800.0
"""0001-01-01T00:00:00Z, the earliest acceptance time a record may have: the span of a
``datetime`` (``aiokpl spool dump`` shows it as one); NaN, infinities and times outside that
span make a record malformed."""
LATEST_ACCEPTED_AT = 253_402_300_799.0
"""9999-12-31T23:59:59Z, the latest acceptance time a record may have."""
MAX_ENTRY_BYTES = 8 * 1024 * 1024
"""The longest body a frame may have: a record holds at most 1 MiB of data and short keys, so
a longer length can only be a damaged length field."""

_HEADER = struct.Struct(f"<8sHH{PRODUCER_ID_BYTES}s")
_HEADER_CRC = struct.Struct("<I")
HEADER_BYTES = _HEADER.size + _HEADER_CRC.size
_FRAME = struct.Struct("<II")
_LENGTH = struct.Struct("<I")
# kind, seq, accepted_at, lengths of stream, key, explicit hash key, encoded tags and data
_RECORD = struct.Struct("<BQdHHHII")
_ACK = struct.Struct(f"<B{PRODUCER_ID_BYTES}sBI")  # kind, producer id, outcome, run count
_RUN = struct.Struct("<QI")  # first sequence number, count
_SEQUENCE = struct.Struct("<Q")

_KIND_RECORD = 1
_KIND_ACK = 2
_pack_record = _RECORD.pack
_pack_length = _LENGTH.pack
_crc32 = zlib.crc32


class AckOutcome(enum.IntEnum):
    """How a record was resolved: either way it is not replayed."""

    DELIVERED = 1
    FAILED = 2


@dataclass(frozen=True)
class SpoolRecord:
    """A record as the spool keeps it; ``(producer_id, sequence_number)`` is its identity."""

    producer_id: bytes
    sequence_number: int
    accepted_at: float
    """Wall-clock seconds since the epoch when the producer accepted it (given by the caller)."""
    stream: str
    partition_key: str
    explicit_hash_key: str | None
    data: bytes
    tags: tuple[tuple[str, str | None], ...] = ()
    """The user's tags (an identity tag is not kept: it is rebuilt from the identity)."""

    @property
    def encoded_tags(self) -> bytes:
        """The tags as the aggregation format's ``Record.tags`` fields, as they are stored."""
        return encode_tags(self.tags)


@dataclass(frozen=True)
class SpoolAck:
    """Sequence numbers of one producer resolved with one outcome, as runs ``(first, count)``."""

    producer_id: bytes
    outcome: AckOutcome
    runs: tuple[tuple[int, int], ...]


class HeaderError(ValueError):
    """A segment header that is not one: wrong magic, version or CRC."""


class FrameStatus(enum.Enum):
    """What :func:`read_frame` found at an offset."""

    OK = "ok"
    END = "end"
    TORN = "torn"
    CORRUPT = "corrupt"


@dataclass(slots=True)  # not frozen: one is made per frame, and frozen ones cost twice
class Frame:
    """One :func:`read_frame` result: the entry (when ``OK``) and where the next frame starts."""

    status: FrameStatus
    offset: int
    end: int
    entry: SpoolRecord | SpoolAck | None = None
    sequence_number: int | None = None
    """A record's sequence number (also when it was checked but not decoded)."""


def segment_name(number: int) -> str:
    """The file name of segment ``number``."""
    return f"{number:020d}{SEGMENT_SUFFIX}"


def segment_number(name: str) -> int | None:
    """The number of a segment file name, or ``None`` for any other name."""
    stem = name[: -len(SEGMENT_SUFFIX)]
    if not name.endswith(SEGMENT_SUFFIX) or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def encode_header(producer_id: bytes) -> bytes:
    """A segment header for a writer with ``producer_id``."""
    if len(producer_id) != PRODUCER_ID_BYTES:
        raise ValueError(f"a producer id is {PRODUCER_ID_BYTES} bytes, not {len(producer_id)}")
    head = _HEADER.pack(MAGIC, FORMAT_VERSION, 0, producer_id)
    return head + _HEADER_CRC.pack(zlib.crc32(head))


def decode_header(data: bytes) -> bytes:
    """The producer id of a segment that starts with ``data`` (at least :data:`HEADER_BYTES`).

    Raises:
        HeaderError: not a header this version wrote.
    """
    head = data[: _HEADER.size]
    magic, version, _flags, producer_id = _HEADER.unpack(head)
    (crc,) = _HEADER_CRC.unpack_from(data, _HEADER.size)
    if magic != MAGIC:
        raise HeaderError(f"not a spool segment (magic {magic!r})")
    if crc != zlib.crc32(head):
        raise HeaderError("segment header CRC mismatch")
    if version != FORMAT_VERSION:
        raise HeaderError(f"segment format version {version}, this aiokpl reads {FORMAT_VERSION}")
    return bytes(producer_id)


def _length_word(length: int) -> tuple[bytes, int]:
    """The frame's first word: the body's length (24 bits) and a check byte of it; and the
    word's CRC-32, where the frame's CRC of the body starts."""
    word = _LENGTH_WORDS.get(length)
    if word is None:
        packed = _LENGTH.pack(length | _length_check(length) << 24)
        word = (packed, zlib.crc32(packed))
        if len(_LENGTH_WORDS) < _LENGTH_WORDS_KEPT:
            _LENGTH_WORDS[length] = word
    return word


# Hot path: a producer's records have few distinct lengths; their words are kept (a lookup,
# not a CRC and a pack: about 250 ns less per record, timeit), and with each the word's CRC,
# where the body's starts (50 ns less again), up to a bounded number.
_LENGTH_WORDS: dict[int, tuple[bytes, int]] = {}
_LENGTH_WORDS_KEPT = 4096


def _length_check(length: int) -> int:
    # The low byte of the length's CRC-32: every 1- and 2-bit flip of a 24-bit length changes
    # it (tests/test_spool_format.py checks all of them), so a damaged length is never taken
    # for a frame cut short by a crash.
    return zlib.crc32(length.to_bytes(3, "little")) & 0xFF


def _frame(body: bytes) -> bytes:
    length, seed = _length_word(len(body))
    return length + _LENGTH.pack(zlib.crc32(body, seed)) + body


def encode_record(record: SpoolRecord) -> bytes:
    """One framed record entry (its producer id is the segment's, so not written)."""
    return encode_record_fields(
        record.sequence_number,
        record.accepted_at,
        record.stream,
        record.partition_key,
        record.explicit_hash_key,
        record.data,
        record.encoded_tags,
    )


def encode_record_fields(
    sequence_number: int,
    accepted_at: float,
    stream: str,
    partition_key: str,
    explicit_hash_key: str | None,
    data: bytes,
    encoded_tags: bytes = b"",
) -> bytes:
    """:func:`encode_record` without building a :class:`SpoolRecord` (the put path's): the tags
    as the producer holds them, already encoded as the aggregation format's ``Record.tags``
    fields, so a put decodes nothing."""
    stream_bytes = stream.encode()
    key = partition_key.encode()
    hash_key = explicit_hash_key.encode() if explicit_hash_key else b""
    body = b"".join(
        (
            _pack_record(
                _KIND_RECORD,
                sequence_number,
                accepted_at,
                len(stream_bytes),
                len(key),
                len(hash_key),
                len(encoded_tags),
                len(data),
            ),
            stream_bytes,
            key,
            hash_key,
            encoded_tags,
            data,
        )
    )
    word = _LENGTH_WORDS.get(len(body))  # _length_word, inline: a call less per record
    if word is None:
        word = _length_word(len(body))
    return b"".join((word[0], _pack_length(_crc32(body, word[1])), body))


def encode_ack(ack: SpoolAck) -> bytes:
    """One framed acknowledgement entry."""
    fixed = _ACK.pack(_KIND_ACK, ack.producer_id, ack.outcome, len(ack.runs))
    return _frame(fixed + b"".join(_RUN.pack(first, count) for first, count in ack.runs))


def _record_layout(body: memoryview) -> tuple[int, float, int, int, int, int]:
    """A record body's sequence number, acceptance time and the lengths of its stream, key,
    explicit hash key and tags, once they are checked to add up to the body (with its data).

    Raises (a body no writer of this version writes, even with a matching CRC):
        ValueError: its lengths do not add up to the frame, or its acceptance time is not a
            time (NaN, infinite, outside the years 1 ... 9999).
        struct.error: the body is shorter than a record's fixed fields.
    """
    _kind, seq, accepted_at, n_stream, n_key, n_hash, n_tags, n_data = _RECORD.unpack_from(body)
    if _RECORD.size + n_stream + n_key + n_hash + n_tags + n_data != len(body):
        raise ValueError("record lengths do not add up to the frame")
    if not EARLIEST_ACCEPTED_AT <= accepted_at <= LATEST_ACCEPTED_AT:  # NaN fails too
        raise ValueError(f"record accepted at {accepted_at!r}, not a time")
    return int(seq), accepted_at, n_stream, n_key, n_hash, n_tags


def _check_record(body: memoryview) -> int:
    """A record's sequence number, once every field is checked as :func:`_decode_record`
    decodes it (so a record recovery keeps always decodes when it is replayed), building
    nothing.

    Raises:
        ValueError: as :func:`_record_layout`, a text is not UTF-8, or the tags are malformed
            (an ``AggregationFormatError``).
        struct.error: as :func:`_record_layout`.
    """
    seq, _, n_stream, n_key, n_hash, n_tags = _record_layout(body)
    at = _RECORD.size
    key_at = at + n_stream
    hash_at = key_at + n_key
    tags_at = hash_at + n_hash
    # The three texts are each UTF-8 if and only if they are together and the key and the
    # hash key start characters (not with a continuation byte): one decode, not three.
    str(body[at:tags_at], "utf-8")
    if (n_key and 0x80 <= body[key_at] < 0xC0) or (n_hash and 0x80 <= body[hash_at] < 0xC0):
        raise ValueError("a record's key starts inside a character: not UTF-8")
    if n_tags:
        decode_tags(bytes(body[tags_at : tags_at + n_tags]))
    return seq


def _decode_record(body: memoryview, producer_id: bytes) -> SpoolRecord:
    """The record whose body is ``body``. Raises as :func:`_check_record`."""
    seq, accepted_at, n_stream, n_key, n_hash, n_tags = _record_layout(body)
    at = _RECORD.size
    stream = str(body[at : at + n_stream], "utf-8")
    at += n_stream
    key = str(body[at : at + n_key], "utf-8")
    at += n_key
    hash_key = str(body[at : at + n_hash], "utf-8") or None
    at += n_hash
    tags = decode_tags(bytes(body[at : at + n_tags])) if n_tags else ()
    data = bytes(body[at + n_tags :])
    return SpoolRecord(producer_id, seq, accepted_at, stream, key, hash_key, data, tags)


def _decode_ack(body: memoryview) -> SpoolAck:
    _kind, producer_id, outcome, n_runs = _ACK.unpack_from(body)
    if _ACK.size + n_runs * _RUN.size != len(body):
        raise ValueError("acknowledgement lengths do not add up to the frame")
    runs = tuple(_RUN.iter_unpack(body[_ACK.size :]))
    return SpoolAck(bytes(producer_id), AckOutcome(outcome), runs)


def read_frame(
    data: bytes | memoryview, offset: int, producer_id: bytes, *, decode_records: bool = True
) -> Frame:
    """The frame at ``offset`` of a segment's bytes ``data``, decoded and classified.

    With ``decode_records=False`` a record is checked (CRC, lengths) but not decoded: the
    frame has its ``sequence_number`` and no ``entry`` (recovery decodes only the records it
    replays). Pure: recovery and the ``aiokpl spool`` tools both walk segments with it.
    """
    view = memoryview(data)
    size = len(view)
    if offset == size:
        return Frame(FrameStatus.END, offset, offset)
    if offset + _FRAME.size > size:
        return Frame(FrameStatus.TORN, offset, size)
    word, crc = _FRAME.unpack_from(view, offset)
    length = word & 0xFFFFFF
    end = offset + _FRAME.size + length
    plausible = 1 <= length <= MAX_ENTRY_BYTES and word >> 24 == _length_check(length)
    if plausible and end <= size:
        body = view[offset + _FRAME.size : end]
        if zlib.crc32(body, zlib.crc32(view[offset : offset + _LENGTH.size])) == crc:
            frame = _decode(body, producer_id, decode_records)
            if frame is not None:
                entry, seq = frame
                return Frame(FrameStatus.OK, offset, end, entry, seq)
        status = FrameStatus.CORRUPT
    else:
        status = FrameStatus.TORN if plausible else FrameStatus.CORRUPT
    if not bytes(view[offset:]).strip(b"\x00"):
        status = FrameStatus.TORN  # a zero-filled tail: space the file system gave, never written
    return Frame(status, offset, size)


def checked_records(data: bytes | memoryview, size: int) -> Iterator[tuple[int, int, int]]:
    """``(sequence number, body start, body end)`` of each record among the frames between the
    header and ``size``, frames :func:`read_frame` has already checked (no CRC again)."""
    view = memoryview(data)
    offset = HEADER_BYTES
    while offset < size:
        (word,) = _LENGTH.unpack_from(view, offset)
        start = offset + _FRAME.size
        length = word & 0xFFFFFF
        offset = start + length
        if view[start] == _KIND_RECORD:
            yield _SEQUENCE.unpack_from(view, start + 1)[0], start, offset


def decode_record(
    data: bytes | memoryview, start: int, end: int, producer_id: bytes
) -> SpoolRecord:
    """The record whose body is ``data[start:end]``, a body :func:`read_frame` checked."""
    return _decode_record(memoryview(data)[start:end], producer_id)


def _decode(
    body: memoryview, producer_id: bytes, decode_records: bool
) -> tuple[SpoolRecord | SpoolAck | None, int | None] | None:
    try:
        if body[0] == _KIND_RECORD:
            if not decode_records:
                return None, _check_record(body)
            record = _decode_record(body, producer_id)
            return record, record.sequence_number
        if body[0] == _KIND_ACK:
            return _decode_ack(body), None
    except (ValueError, IndexError, OverflowError, struct.error):
        # What malformed content raises (an AggregationFormatError, for tags, and a
        # UnicodeDecodeError are ValueErrors). The CRC matched, so a writer wrote these bytes:
        # a bug, another version or a crafted file, not damage. Kept apart like damage all the
        # same, rather than refusing to start (the fuzz tests feed it any bytes).
        pass
    return None

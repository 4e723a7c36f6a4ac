"""The put path's framing of a record (``encode_record_fields``) against the frame layout
written out here from the format's description: its kept length words (and their CRCs) give
the very bytes computed from scratch, for lengths kept and for lengths past the bound."""

from __future__ import annotations

import struct
import zlib

import pytest

from aiokpl._spool import format as spool_format
from aiokpl._spool.format import (
    AckOutcome,
    FrameStatus,
    SpoolAck,
    encode_ack,
    encode_record_fields,
    read_frame,
)


def from_scratch(seq: int, at: float, stream: str, key: str, ehk: str | None, data: bytes) -> bytes:
    """``length u24 + check u8 | crc32 u32 | body``, the CRC over the length word then the
    body, the check byte the low byte of the 3-byte length's CRC-32."""
    fields = (stream.encode(), key.encode(), (ehk or "").encode(), b"", data)
    body = struct.pack("<BQdHHHII", 1, seq, at, *map(len, fields)) + b"".join(fields)
    check = zlib.crc32(len(body).to_bytes(3, "little")) & 0xFF
    word = struct.pack("<I", len(body) | check << 24)
    return word + struct.pack("<I", zlib.crc32(body, zlib.crc32(word))) + body


def test_kept_length_words_frame_records_as_computed_from_scratch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(spool_format, "_LENGTH_WORDS", {})
    monkeypatch.setattr(spool_format, "_LENGTH_WORDS_KEPT", 8)  # later lengths: not kept
    for _ in range(2):  # the second round reads what the first kept
        for size in range(20):
            ehk = "1" * size if size % 3 == 0 else None
            expected = from_scratch(size, 1.5, "s", "k" * size, ehk, b"d" * size)
            assert encode_record_fields(size, 1.5, "s", "k" * size, ehk, b"d" * size) == expected
    kept = spool_format._LENGTH_WORDS
    assert len(kept) == 8
    for length, (word, seed) in kept.items():
        assert struct.unpack("<I", word)[0] & 0xFFFFFF == length
        assert seed == zlib.crc32(word)  # the body's CRC starts from the word's


def test_acknowledgements_use_the_same_kept_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spool_format, "_LENGTH_WORDS", {})
    producer = b"p" * 16
    entry = SpoolAck(producer, AckOutcome.DELIVERED, ((0, 3), (7, 1)))
    framed = encode_ack(entry)
    assert encode_ack(entry) == framed  # the second through the kept word
    frame = read_frame(framed, 0, producer)
    assert (frame.status, frame.entry, frame.end) == (FrameStatus.OK, entry, len(framed))

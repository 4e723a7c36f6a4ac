"""Producer identities in record tags: which producer wrote a user record, and where in its order.

With identities on, every user record carries one tag, ``aiokpl.id``, whose value is the
producer's id and the record's sequence number::

    aiokpl.id = "ZQx1n2W0d5fhbyuB7w7ZgA.1042"
                 \\____ producer id ____/ \\ sequence

* The **producer id** is 16 random bytes (``os.urandom``) in URL-safe base64 without padding:
  22 characters, the most compact text a protobuf ``string`` carries in one byte per character
  (raw bytes are not valid UTF-8). A producer draws a new one each time it starts.
* The **sequence number** counts the producer's user records from 0, one per record accepted,
  across all its streams, in decimal: readable in any dump, as short as the number is (7
  characters for the ten millionth record; a fixed-width form would pay its full width from the
  first record), and canonical (no sign, no leading zero, at most ``MAX_SEQUENCE``), so one
  number has exactly one spelling and two copies of a record compare equal as text.
* The ``.`` costs one byte and lets a reader see where the id ends.

One tag rather than two (``pid`` and ``seq``): each tag costs 6 bytes of protobuf framing plus
its key, so the pair would cost 16 bytes more per record. The tag is ``IDENTITY_TAG_OVERHEAD``
(38) bytes plus the sequence's digits: 44 bytes per record below a million records, 47 below a
billion (``identity_tag_size``).

**No restart epoch.** A producer id is never reused for new records: a producer that restarts
draws a new id, so its sequence may start again from 0 without colliding with the records of its
previous run, and nothing (no counter, no epoch) has to be persisted and fsync'd before it sends.
A *replayed* record (a spool's, after a crash) is sent with the identity it was given when first
accepted: the spool keeps it with the record. A consumer's ``Deduper`` then sees the replay under
the old run's id, in that id's window. A copied spool directory (a restored backup, a cloned
machine) stays safe too: two processes replaying the same records give them the same identities
(copies of the same records), and their new records get different ids. An epoch is what a new
id already is.

**Reserved keys.** Every tag key starting with ``aiokpl.`` (``RESERVED_PREFIX``) is aiokpl's:
a user's tag with such a key would be read as an identity, or as a malformed one.
``is_reserved_key`` is the check the put paths make, to refuse it. The format writers
(``encode``, ``AggregateBuilder``) write any key, so tests and consumers can build records that
carry identities.

Reading: ``identity_of`` returns ``None`` for a record without the tag and raises
:class:`IdentityTagError` for a malformed one (a value that is not ``ID.SEQUENCE`` in the form
above, or the tag given twice). User tags and the identity tag coexist in any order.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from .encoder import aggregate_of_one_size
from .errors import AggregationFormatError
from .wire import Tag

__all__ = (
    "IDENTITY_KEY",
    "IDENTITY_SIZE_BOUND",
    "IDENTITY_TAG_OVERHEAD",
    "MAX_SEQUENCE",
    "PRODUCER_ID_BYTES",
    "RESERVED_PREFIX",
    "Identity",
    "IdentityEncoder",
    "IdentityTagError",
    "alone_size",
    "identity_of",
    "identity_tag",
    "identity_tag_size",
    "is_reserved_key",
    "new_producer_id",
    "parse_identity",
    "read_identity",
)

IDENTITY_KEY = "aiokpl.id"
"""The key of the tag that carries a user record's identity."""

RESERVED_PREFIX = "aiokpl."
"""Tag keys starting with this are aiokpl's: the put paths refuse them in a user's tags."""

PRODUCER_ID_BYTES = 16
"""A producer id's size before it is rendered: 128 random bits, so ids never collide."""

MAX_SEQUENCE = 2**63 - 1
"""The largest sequence number (a signed 64-bit integer: what consumers in other languages read
without loss)."""

# The tag message, all but the value's digits: field 4 of Record (tag 0x22) and its length, the
# key (0x0A, 9, "aiokpl.id"), the value's field tag (0x12) and its length, the id and the dot.
IDENTITY_TAG_OVERHEAD = 2 + 2 + len(IDENTITY_KEY) + 2 + 22 + 1
"""Bytes the identity tag adds to a user record in an aggregate, besides the sequence's digits."""

IDENTITY_SIZE_BOUND = IDENTITY_TAG_OVERHEAD + len(str(MAX_SEQUENCE))
"""The most bytes an identity tag adds to a record (the largest sequence number's): what a
producer with identities keeps free in ``max_outstanding_bytes`` for each record it lets in."""

# A canonical id: 21 characters carry 126 bits, the 22nd the last 2 (its low 4 bits are zero).
_ID = r"[A-Za-z0-9_-]{21}[AQgw]"
_match = re.compile(rf"({_ID})\.(0|[1-9][0-9]{{0,18}})").fullmatch
_PRODUCER_ID = re.compile(_ID)


class IdentityTagError(AggregationFormatError):
    """A record's ``aiokpl.id`` tag is malformed: not ``PRODUCER_ID.SEQUENCE`` in canonical
    form, without a value, or present twice.

    Raised by :func:`identity_of` (the ``Deduper`` counts such records as ``malformed`` and
    passes them through). Also an ``AggregationFormatError`` and so a ``ValueError``.
    """


class Identity(NamedTuple):
    """A user record's identity: its producer's id and its sequence number there.

    Attributes:
        producer_id: the producer's id, 22 characters of URL-safe base64 (16 random bytes).
        sequence: the record's number in that producer's order, from 0.
    """

    producer_id: str
    sequence: int


class _Tagged(Protocol):
    @property
    def tags(self) -> tuple[Tag, ...]: ...


def new_producer_id() -> str:
    """A new producer id: 16 random bytes from ``os.urandom``, rendered in 22 characters."""
    return base64.urlsafe_b64encode(os.urandom(PRODUCER_ID_BYTES)).rstrip(b"=").decode()


def _check_producer_id(producer_id: str) -> None:
    if type(producer_id) is not str or _PRODUCER_ID.fullmatch(producer_id) is None:
        raise ValueError(
            "producer_id must be 22 characters of URL-safe base64 (16 bytes, as "
            f"new_producer_id() makes), got {producer_id!r}"
        )


def _check_sequence(sequence: int) -> None:
    if type(sequence) is not int or not 0 <= sequence <= MAX_SEQUENCE:
        raise ValueError(f"sequence must be an int in 0 … 2**63-1, got {sequence!r}")


def identity_tag(producer_id: str, sequence: int) -> Tag:
    """The tag that gives a user record the identity ``(producer_id, sequence)``.

    Raises:
        ValueError: ``producer_id`` is not a producer id (22 characters of URL-safe base64), or
            ``sequence`` is not an int in 0 … ``MAX_SEQUENCE``.
    """
    _check_producer_id(producer_id)
    _check_sequence(sequence)
    return Tag(IDENTITY_KEY, f"{producer_id}.{sequence}")


def identity_tag_size(sequence: int) -> int:
    """The bytes the identity tag of ``sequence`` adds to a user record in an aggregate."""
    return IDENTITY_TAG_OVERHEAD + len(str(sequence))


def alone_size(key_size: int, data_size: int, explicit_hash_key: str | None, tags: int) -> int:
    """What Kinesis counts for a user record sent as an aggregate of one (the only way a
    record with tags travels): its partition key plus the aggregate, framing included.

    Args:
        key_size: the partition key's UTF-8 length.
        data_size: the data's length.
        explicit_hash_key: the explicit hash key (decimal), or ``None``.
        tags: the length of its encoded tags (the identity's included).
    """

    return key_size + aggregate_of_one_size(key_size, data_size, explicit_hash_key, tags)


def parse_identity(value: str) -> Identity:
    """The identity an ``aiokpl.id`` tag's value spells.

    Raises:
        IdentityTagError: ``value`` is not ``PRODUCER_ID.SEQUENCE`` in canonical form.
    """
    return Identity(*_parse(value))


def _parse(value: str) -> tuple[str, int]:
    match = _match(value)
    if match is not None:
        producer_id, digits = match.groups()
        sequence = int(digits)
        if sequence <= MAX_SEQUENCE:
            return producer_id, sequence
    raise IdentityTagError(
        f"malformed {IDENTITY_KEY} tag: {value[:60]!r} is not a producer id (22 characters "
        "of URL-safe base64), a dot and a sequence number in canonical decimal"
    )


def identity_of(record: _Tagged) -> Identity | None:
    """The identity a user record carries in its tags, or ``None`` if it carries none.

    Args:
        record: a user record as ``deaggregate`` returns it (anything with a ``tags`` tuple of
            ``Tag`` objects: ``DeaggregatedRecord``, ``Record``).

    Raises:
        IdentityTagError: the tag is malformed (see :func:`parse_identity`), has no value, or
            is present twice.
    """
    found = read_identity(record.tags)
    return None if found is None else Identity(*found)


def read_identity(tags: Sequence[Tag]) -> tuple[str, int] | None:
    """``identity_of`` on a record's tags, as a plain ``(producer_id, sequence)`` pair: the
    ``Deduper``'s per-record read (a record with only the identity tag takes the short path)."""
    if len(tags) == 1:
        key, value = tags[0]
        if key != IDENTITY_KEY:
            return None
    elif not tags:
        return None
    else:
        found = [tag for tag in tags if tag[0] == IDENTITY_KEY]
        if not found:
            return None
        if len(found) > 1:
            raise IdentityTagError(f"malformed {IDENTITY_KEY} tag: the record has two")
        value = found[0][1]
    if value is None:
        raise IdentityTagError(f"malformed {IDENTITY_KEY} tag: it has no value")
    return _parse(value)


def is_reserved_key(key: str) -> bool:
    """Whether a tag key is aiokpl's (it starts with ``aiokpl.``): a user's tags may not use it."""
    return key.startswith(RESERVED_PREFIX)


class IdentityEncoder:
    """Writes one producer's identity tags, already encoded as ``Record.tags`` fields.

    The producer's put path calls :meth:`encode` once per record and appends the bytes to the
    record's encoded user tags: the same bytes ``encode_tags([identity_tag(id, sequence)])``
    gives, with only the digits formatted per record.

    Args:
        producer_id: the producer's id (from :func:`new_producer_id`).

    Raises:
        ValueError: ``producer_id`` is not a producer id.
    """

    __slots__ = ("_prefixes", "producer_id")

    def __init__(self, producer_id: str) -> None:
        _check_producer_id(producer_id)
        self.producer_id = producer_id
        # Everything before the digits, for each count of digits: the tag's field and length,
        # the key field, the value field's tag and length, the id and the dot. A record then
        # costs its digits and one concatenation.
        head = b"\n\x09" + IDENTITY_KEY.encode() + b"\x12"
        self._prefixes = [b""]
        for digits in range(1, len(str(MAX_SEQUENCE)) + 1):
            value = f"{producer_id}.".encode()
            message_size = len(head) + 1 + len(value) + digits
            self._prefixes.append(
                b'"' + bytes((message_size,)) + head + bytes((len(value) + digits,)) + value
            )

    def encode(self, sequence: int) -> bytes:
        """The identity tag of record number ``sequence``, encoded (every length fits a byte).

        Raises:
            ValueError: ``sequence`` is not an int in 0 … ``MAX_SEQUENCE``.
        """
        _check_sequence(sequence)
        return self.encode_next(sequence)

    def encode_next(self, sequence: int) -> bytes:
        """:meth:`encode` for a sequence the caller numbers itself (from 0, one per record, so
        always in range): the producer's put path, without the check."""
        digits = b"%d" % sequence
        return self._prefixes[len(digits)] + digits

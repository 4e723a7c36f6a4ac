"""Admission: what a put must pass before a producer takes it, for both producers.

:class:`~aiokpl.Producer` and :class:`~aiokpl.SyncProducer` accept records the same way, so
they share this one path: the stream's name (and, for an ARN, its region), the record's fields
(:func:`~aiokpl._core.hashing.check_user_record`), its tags, a ``put_records`` group, and the
bounds on what may be outstanding (``max_outstanding_records`` / ``max_outstanding_bytes``)
with the messages that say so. Each producer counts what is outstanding its own way (the async
one in its ledger, the blocking one under its lock, records being handed over included) and
waits for room its own way (an event, a condition); what fits, and what is said when nothing
does, is decided here.

A ``SyncProducer`` checks a record in its caller's thread and hands the checked fields over;
the producer's loop then enqueues them as they are, never checking them again.

Everything here is synchronous and pure but for the objects it is given: tests call it
directly (``tests/test_admission.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from itertools import islice
from typing import Any

from ._core.config import Config
from ._core.decoder import decode_tags
from ._core.encoder import check_tags
from ._core.errors import InvalidRecordError, InvalidRecordTypeError
from ._core.hashing import check_stream_name, check_user_record, parse_stream_arn
from ._core.identity import IDENTITY_SIZE_BOUND, RESERVED_PREFIX, is_reserved_key
from ._core.results import RecordResult
from ._core.wire import Tags
from ._kinesis import check_region
from ._outcome import Outcome
from ._record import TaggedRecord, UserRecord

__all__ = (
    "Accepted",
    "Admission",
    "build_group",
    "check_records_argument",
    "fields_of",
)

_RESERVED = RESERVED_PREFIX.encode()

# A checked record, as check_user_record returns it: partition key, size (the key's UTF-8
# length plus the data's, the tags' encoding included once checked), data, hash key, and the
# explicit hash key as given (None if none).
Accepted = tuple[str, int, bytes, int, "str | None"]

RECORD_SHAPES = (
    "a record is a (partition_key, data), (partition_key, data, explicit_hash_key) or "
    "(partition_key, data, explicit_hash_key, tags) sequence"
)


def check_records_argument(records: object) -> None:
    """Refuse a ``records`` argument that is not a collection of records, naming it.

    ``None`` or a number would fail with Python's bare "not iterable"; a string, bytes or a
    mapping would be iterated into characters, ints or keys, each then refused as a record
    with a message about ``records[0]`` that hides the real mistake.
    """
    if isinstance(records, str | bytes | bytearray | memoryview | Mapping) or not isinstance(
        records, Iterable
    ):
        raise InvalidRecordTypeError(
            "records must be an iterable (a list, say) of records, where "
            f"{RECORD_SHAPES}; got {type(records).__name__}"
        )


def fields_of(record: Any) -> tuple[Any, Any, Any, Any]:
    """``(partition_key, data, explicit_hash_key, tags)`` of one item given to ``put_records``."""
    if isinstance(record, str | bytes | bytearray | memoryview) or not isinstance(record, Sequence):
        raise InvalidRecordTypeError(f"{RECORD_SHAPES}, not {type(record).__name__}")
    if len(record) == 2:
        return record[0], record[1], None, None
    if len(record) == 3:
        return record[0], record[1], record[2], None
    if len(record) == 4:
        return record[0], record[1], record[2], record[3]
    raise InvalidRecordTypeError(f"{RECORD_SHAPES}, not one of length {len(record)}")


class Admission:
    """One producer's rules for accepting a put: its limits, its region, its bounds.

    Attributes:
        max_record_size: ``Config.max_record_size``.
        max_records: ``Config.max_outstanding_records``.
        max_bytes: ``Config.max_outstanding_bytes``.
        region: the one region the producer writes to (an ARN elsewhere is refused); ``None``
            if it writes to any ARN's region. An async producer learns it when it starts.
        reserve: bytes each record may grow by after its room was counted (the identity tag
            of ``Config.record_identities``; 0 without).
        blocked: why no put may go in now (the spool's disk is full), or ``None``.
    """

    __slots__ = (
        "aggregation",
        "blocked",
        "max_bytes",
        "max_record_size",
        "max_records",
        "region",
        "reserve",
    )

    def __init__(self, config: Config, region: str | None = None) -> None:
        self.aggregation = config.aggregation_enabled
        self.max_record_size = config.max_record_size
        self.max_records = config.max_outstanding_records
        self.max_bytes = config.max_outstanding_bytes
        self.region = region
        self.reserve = IDENTITY_SIZE_BOUND if config.record_identities else 0
        self.blocked: str | None = None

    def check_stream(self, stream: object) -> None:
        """Check a put's ``stream``: a valid name, or an ARN in the producer's region.

        Raises:
            InvalidRecordTypeError: ``stream`` is not a ``str``.
            InvalidRecordError: it is not a valid name or ARN, or the ARN is in another region.
        """
        name = check_stream_name(stream)
        arn = parse_stream_arn(name)
        if arn is not None:
            check_region(arn, name, self.region)

    def check_record(
        self, partition_key: Any, data: Any, explicit_hash_key: Any, tags: Any
    ) -> tuple[Accepted, bytes]:
        """Check one record's fields: the record as accepted, and its encoded tags (or ``b""``).

        Not for the hot paths, which call :func:`check_user_record` and :meth:`check_tags`
        themselves (one call and one tuple fewer a record); for the rest, the same checks.
        """
        item = check_user_record(partition_key, data, explicit_hash_key, self.max_record_size)
        if tags is None:
            return item, b""
        encoded, size = self.check_tags(tags, item[0], item[1], item[4])
        return (item[0], size, item[2], item[3], item[4]), encoded

    def check_tags(self, tags: Tags, key: str, size: int, ehk: str | None) -> tuple[bytes, int]:
        """Check a put's ``tags`` (not ``None``): their encoding, and the record's new size.

        Raises:
            InvalidRecordTypeError: the tags have the wrong shape or types.
            InvalidRecordError: they are too large, or non-empty while aggregation is off.
        """
        encoded, size = check_tags(tags, key, size, ehk, self.max_record_size)
        if encoded and not self.aggregation:
            raise InvalidRecordError(
                "tags need aggregation (Config.aggregation_enabled is False): a record sent "
                "raw has no place for them"
            )
        if _RESERVED in encoded:  # rare: then read the keys themselves (a value may say it)
            for tag in decode_tags(encoded):
                if is_reserved_key(tag.key):
                    raise InvalidRecordError(
                        f"tag key {tag.key!r} is reserved: keys starting with "
                        f"{RESERVED_PREFIX!r} are aiokpl's (the record identity "
                        "'aiokpl.id' is written by the producer with Config.record_identities)"
                    )
        return encoded, size

    def check_many(
        self, records: Iterable[Sequence[Any]]
    ) -> tuple[list[Accepted], int, dict[int, bytes] | None]:
        """Check a ``put_records`` group: the records accepted, their total size, and the
        encoded tags of those that have some, by index (``None`` if none has).

        A group of more records than ``max_outstanding_records`` is refused before any of
        them is checked: at once when it has a length, after ``max_outstanding_records + 1``
        of them otherwise (an iterator is not drawn further).

        Raises:
            InvalidRecordTypeError: ``records`` is not a collection of records, or one record
                has the wrong shape or types (the message starts with ``records[i]``).
            InvalidRecordError: a record breaks a limit (likewise named), or there are more
                than ``max_outstanding_records``.
        """
        check_records_argument(records)
        most = self.max_records
        if isinstance(records, Sized):
            self._check_count(len(records))
        else:
            records = islice(records, most + 1)
        check = check_user_record
        limit = self.max_record_size
        accepted: list[Accepted] = []
        tagged: dict[int, bytes] | None = None
        size = 0
        index = 0
        try:
            for index, record in enumerate(records):
                if type(record) is tuple and len(record) == 2:
                    item = check(record[0], record[1], None, limit)
                else:
                    item, encoded = self.check_record(*fields_of(record))
                    if encoded:
                        if tagged is None:
                            tagged = {}
                        tagged[index] = encoded
                size += item[1]
                accepted.append(item)
        except (InvalidRecordError, InvalidRecordTypeError) as exc:
            raise type(exc)(f"records[{index}]: {exc}") from None
        if len(accepted) > most:  # an iterator, drawn one record past the bound
            self._check_count(len(accepted), more=True)
        return accepted, size, tagged

    def _check_count(self, count: int, *, more: bool = False) -> None:
        """Refuse a group of more than ``max_outstanding_records`` (``more``: ``count`` or
        more), before its records are checked."""
        if count > self.max_records:
            self._refuse_group(f"{count}{' or more' if more else ''} records")

    # --- room -------------------------------------------------------------------------------
    def fits(self, records: int, outstanding_bytes: int, size: int, count: int = 1) -> bool:
        """Whether ``count`` more records of ``size`` bytes in all fit beside ``records``
        records of ``outstanding_bytes`` bytes outstanding."""
        return records + count <= self.max_records and outstanding_bytes + size <= self.max_bytes

    def fits_reserving(
        self, records: int, outstanding_bytes: int, size: int, count: int = 1
    ) -> bool:
        """:meth:`fits`, keeping :attr:`reserve` bytes free for each of the ``count`` records
        (their identity tags, added once they are let in)."""
        return (
            records + count <= self.max_records
            and outstanding_bytes + size + count * self.reserve <= self.max_bytes
        )

    def check_group(self, count: int, size: int) -> None:
        """Refuse a group that could never be outstanding at once, even in an empty producer.

        Raises:
            InvalidRecordError: ``count`` records or ``size`` bytes exceed the bounds.
        """
        if count > self.max_records or size + count * self.reserve > self.max_bytes:
            self._refuse_group(f"{count} records of {size} bytes")

    def _refuse_group(self, group: str) -> None:
        raise InvalidRecordError(
            f"records: {group} can never be outstanding at once (max_outstanding_records="
            f"{self.max_records}, max_outstanding_bytes={self.max_bytes}); put them in smaller "
            "groups"
        )

    def holds(self, records: int, outstanding_bytes: int) -> str:
        """What a producer full at ``records`` / ``outstanding_bytes`` says it holds."""
        held = (
            f"the producer holds {records} records / {outstanding_bytes} bytes "
            f"(max_outstanding_records={self.max_records}, "
            f"max_outstanding_bytes={self.max_bytes})"
        )
        return held if self.blocked is None else f"{self.blocked}; {held}"


def build_group(
    stream: str,
    accepted: list[Accepted],
    tagged: dict[int, bytes] | None,
    stamps: tuple[float, float, float],
    epoch: int,
    outstanding: dict[UserRecord, None],
    put: Callable[[UserRecord, int], object],
) -> list[Outcome[RecordResult]]:
    """Build the records of a checked ``put_records`` group, count each outstanding and put it.

    The group shares one arrival, deadline and expiry (``stamps``): 96 bytes fewer a record
    than four floats of its own (``sys.getsizeof``). ``put(record, hash_key)`` is the stream's
    aggregator's ``put``; ``outstanding`` the producer's ledger of outstanding records.
    """
    now, deadline, expires_at = stamps
    records: list[Outcome[RecordResult]] = []
    if tagged is None:
        for key, size, payload, hash_key, ehk in accepted:
            record = UserRecord(stream, key, payload, ehk, size, now, deadline, expires_at, epoch)
            outstanding[record] = None
            put(record, hash_key)
            records.append(record)
        return records
    for index, (key, size, payload, hash_key, ehk) in enumerate(accepted):
        tags = tagged.get(index)
        if tags is None:
            record = UserRecord(stream, key, payload, ehk, size, now, deadline, expires_at, epoch)
        else:
            record = TaggedRecord(
                stream, key, payload, ehk, size, now, deadline, expires_at, epoch, tags
            )
        outstanding[record] = None
        put(record, hash_key)
        records.append(record)
    return records

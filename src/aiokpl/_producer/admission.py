"""Admission: what a put must pass before a producer takes it, for both producers.

:class:`~aiokpl.Producer` and :class:`~aiokpl.SyncProducer` accept records the same way, so
they share this one path: the stream's name (and, for an ARN, its region), the record's fields
(:func:`~aiokpl._core.hashing.check_user_record`), its tags, a ``put_records`` group, and the
bounds on what may be outstanding (``max_outstanding_records`` / ``max_outstanding_bytes``)
with the messages that say so. Each producer counts what is outstanding its own way (the async
one in its ledger, the blocking one under its lock, records being handed over included) and
waits for room its own way (an event, a condition); what fits, and what is said when nothing
does, is decided here.

What a check returns is the record itself, built by the producer's one builder
(``_record.record_classes``) and not yet entered, with its hash key (which the record does not
keep): :meth:`Admission.check` for one record, :meth:`Admission.check_many` for a
``put_records`` group. A ``SyncProducer`` checks a record in its caller's thread and hands the
record over; the producer's loop then enters it as it is, never checking it again.

Everything here is synchronous and pure but for the objects it is given: tests call it
directly (``tests/test_admission.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Sized
from itertools import islice
from typing import TYPE_CHECKING, Any

from .._core.config import Config
from .._core.decoder import decode_tags
from .._core.encoder import check_tags
from .._core.errors import InvalidRecordError, InvalidRecordTypeError
from .._core.hashing import check_stream_name, check_user_record, parse_stream_arn
from .._core.identity import IDENTITY_SIZE_BOUND, RESERVED_PREFIX, is_reserved_key
from .._core.wire import Tags
from .._kinesis import check_region
from .._record import TaggedRecord, UserRecord, record_classes

if TYPE_CHECKING:
    from .._tracing import Tracing

__all__ = ("Admission", "check_records_argument", "fields_of")

_RESERVED = RESERVED_PREFIX.encode()

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
        untagged: the class of a checked record without tags, ``tagged``: with tags
            (``_record.record_classes``, chosen by ``config``: :meth:`check` is where both
            producers build every record put).
        tracing: the producer's tracing (``Config.tracing``), which gives each record built
            the trace context current where it is put; ``None`` without.
    """

    __slots__ = (
        "aggregation",
        "blocked",
        "max_bytes",
        "max_record_size",
        "max_records",
        "region",
        "reserve",
        "tagged",
        "tracing",
        "untagged",
    )

    def __init__(
        self, config: Config, region: str | None = None, tracing: Tracing | None = None
    ) -> None:
        self.untagged, self.tagged = record_classes(
            spool=config.spool_directory is not None,
            identities=config.record_identities,
            tracing=tracing is not None,
        )
        self.tracing = tracing
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

    def check(
        self, stream: str, partition_key: Any, data: Any, explicit_hash_key: Any, tags: Any
    ) -> tuple[UserRecord, int]:
        """Check one record's fields (its ``stream`` is checked apart: see
        :meth:`check_stream`): the record, built and not yet entered, and its hash key.

        The one check of every put path (``put_record``, ``put_record_nowait``, a
        ``SyncProducer``'s ``put_record``, a ``put_records`` item that is not a pair).

        Raises:
            InvalidRecordTypeError: a field has the wrong type.
            InvalidRecordError: a field is out of its limits.
        """
        key, size, payload, hash_key, ehk = check_user_record(
            partition_key, data, explicit_hash_key, self.max_record_size
        )
        if tags is None:
            record = self.untagged(stream, key, payload, ehk, size)
        else:
            encoded, size = self.check_tags(tags, key, size, ehk)
            if encoded:
                record = self.tagged(stream, key, payload, ehk, size, encoded)
            else:
                record = self.untagged(stream, key, payload, ehk, size)
        if self.tracing is not None:  # here: in the caller's thread, its context current
            assert isinstance(record, TaggedRecord)  # record_classes(tracing=True)
            self.tracing.capture(record)
        return record, hash_key

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
        self, stream: str, records: Iterable[Sequence[Any]]
    ) -> tuple[list[UserRecord], list[int], int]:
        """Check a ``put_records`` group to ``stream``: its records, built and not yet
        entered; their hash keys, in the same order; and their total size.

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
        check = self.check
        built: list[UserRecord] = []
        hash_keys: list[int] = []
        size = 0
        try:
            for record in records:
                if type(record) is tuple and len(record) == 2:
                    item, hash_key = check(stream, record[0], record[1], None, None)
                else:
                    item, hash_key = check(stream, *fields_of(record))
                size += item.size
                built.append(item)
                hash_keys.append(hash_key)
        except (InvalidRecordError, InvalidRecordTypeError) as exc:
            raise type(exc)(f"records[{len(built)}]: {exc}") from None
        if len(built) > most:  # an iterator, drawn one record past the bound
            self._check_count(len(built), more=True)
        return built, hash_keys, size

    def _check_count(self, count: int, *, more: bool = False) -> None:
        """Refuse a group of more than ``max_outstanding_records`` (``more``: ``count`` or
        more), before its records are checked."""
        if count > self.max_records:
            self._refuse_group(f"{count}{' or more' if more else ''} records")

    # --- room -------------------------------------------------------------------------------
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

"""``UserRecord``: one record as put by the caller, which is also the caller's ``Outcome``.

The pipeline tracks each record with one object, and that object is what ``put_record``
returns: an :class:`~aiokpl.Outcome` subclass. Two objects per record (a record and a separate
future) cost twice the allocations and twice the garbage collector's attention for nothing.

The pure core does not import this class: it reads and changes records through the protocol
``UserRecordLike`` (``_core/records.py``), which this class satisfies.

Invariants:

* the record's hash key is not kept: it is computed at ``put`` for the shard prediction and
  again (cheaply) on the rare paths that need it later, so a record carries no 128-bit integer;
* ``deadline <= expires_at`` always: a record is never scheduled past its TTL;
* once resolved, a record drops its data: an outcome kept by the caller does not keep the
  payload alive. Its result is built from plain values on first use;
* a record with tags is a :class:`TaggedRecord`, whose one extra slot holds them encoded
  (the aggregate's ``Record.tags`` fields, validated and encoded once at put): a record without
  tags is as small as before tags existed and reads ``encoded_tags`` (``b""``) from its class;
* so with a record's trace context (``Config.tracing``): a traced record is a
  :class:`TaggedRecord`, whose ``trace_tags`` (the ``aiokpl.trace`` tags, apart from its own:
  they go only where the record travels in an aggregate) and ``trace`` (its creation context,
  which "send" spans link to) are set at put; any other record reads ``b""`` and ``None``.

Mirrors ``UserRecord`` in the KPL (``aws/kinesis/core/user_record.h``), which has no tags.
"""

from __future__ import annotations

from typing import Protocol

from ._core.hashing import KEYLESS, PLACED_PARTITION_KEY, hash_key_of
from ._core.records import Delivered, result_of
from ._core.results import Attempt, FailedRecord, RecordResult
from ._outcome import Outcome, settle

__all__ = (
    "DurableSpool",
    "SpooledRecord",
    "TaggedRecord",
    "UserRecord",
    "record_classes",
)

_RELEASED = b""


class UserRecord(Outcome[RecordResult]):
    """One record in the pipeline, and the caller's handle on its result."""

    # Overridden by TaggedRecord's slots: a record without tags (or trace context) carries
    # nothing for them.
    encoded_tags: bytes = b""
    trace_tags: bytes = b""
    trace: object | None = None
    # Set as the record enters the producer (unset until then): its times by the intake (when
    # it arrived, the last attempt's end until its first; when it is to be sent, never past its
    # expiry), its flush generation by the ledger's add.
    last_end: float
    deadline: float
    expires_at: float
    epoch: int

    __slots__ = (
        "attempts",
        "data",
        "data_size",
        "deadline",
        "delivered",
        "epoch",
        "expires_at",
        "explicit_hash_key",
        "last_end",
        "partition_key",
        "predicted_shard",
        "size",
        "stream",
    )

    def __init__(
        self,
        stream: str,
        partition_key: str,
        data: bytes,
        explicit_hash_key: str | None,
        size: int,
    ) -> None:
        self._done = False
        self._result = None
        self._event = None
        self._callbacks = None
        self.stream = stream
        self.partition_key = partition_key
        self.data = data
        # Kept once the data is released: the UserRecordsDataPut metric reads it.
        self.data_size = len(data)
        self.explicit_hash_key = explicit_hash_key
        # What counts against the limits: the partition key's UTF-8 length plus the data's.
        self.size = size
        self.predicted_shard: str | None = None
        # A tuple, grown on each failed attempt: most records have none, and a tuple is one
        # object where a list plus the final tuple would be two for the garbage collector.
        self.attempts: tuple[Attempt, ...] = ()
        # The successful attempt, shared by every record of the same Kinesis record.
        self.delivered: Delivered | None = None

    @property
    def hash_key(self) -> int:
        """The record's 128-bit hash key: its explicit hash key, or the MD5 of its key;
        ``KEYLESS`` for a record put without either, until it is placed."""
        ehk = self.explicit_hash_key
        if ehk is not None:
            return int(ehk)
        key = self.partition_key
        return hash_key_of(key.encode()) if key else KEYLESS

    def place(self, hash_key: int) -> None:
        """Give a record put without a key the hash key ``hash_key`` (the producer chose its
        shard) and the partition key that goes with it. *Mutates* the record."""
        self.partition_key = PLACED_PARTITION_KEY
        self.explicit_hash_key = str(hash_key)

    def add_attempt(self, attempt: Attempt) -> None:
        """Record one more failed attempt; it ends when ``attempt`` ended."""
        self.attempts += (attempt,)
        self.last_end = attempt.ended_at

    def set_deadline(self, deadline: float) -> None:
        """Move the deadline, never past the expiry (KPL ``TimeSensitive``)."""
        self.deadline = deadline if deadline < self.expires_at else self.expires_at

    def resolve(self) -> None:
        """Resolve the record with what it holds now, and let go of its data: the ledger's
        call (``_pipeline/ledger.py``, the one place that resolves records). Its waiters wake
        and its done-callbacks run now."""
        self.data = _RELEASED
        if self._event is None and self._callbacks is None:
            self._done = True  # nobody is waiting yet: the common case, without a call
        else:
            settle(self)

    def resolve_failed(self, failed: FailedRecord | None) -> None:
        """Resolve the record as failed; its result carries ``failed`` (the record as put,
        built while it still held its data) when ``Config.return_record_on_failure`` asks."""
        if failed is not None:
            self._result = RecordResult(False, None, None, self.attempts, failed)
        self.resolve()

    def _built(self) -> RecordResult:
        result = self._result
        if result is None:
            result = self._result = result_of(self.attempts, self.delivered, self.last_end)
        return result

    def __repr__(self) -> str:
        if self._done:
            return f"<Outcome done: {self._built()!r}>"
        return (
            f"<Outcome pending: stream={self.stream!r} size={self.size} "
            f"shard={self.predicted_shard!r} attempts={len(self.attempts)}>"
        )


class TaggedRecord(UserRecord):
    """A :class:`UserRecord` with tags: ``encoded_tags`` holds them as the aggregate's
    ``Record.tags`` fields (never empty once the record entered the producer: a producer that
    writes identities builds every record as one, and adds its identity tag as it enters).

    With ``Config.tracing``, every record is one: ``trace_tags`` holds its trace context as
    encoded tags, written into its aggregate beside ``encoded_tags`` (``b""``: none), and
    ``trace`` its creation context (an OpenTelemetry ``SpanContext``; ``None``: none)."""

    __slots__ = ("encoded_tags", "trace", "trace_tags")

    def __init__(
        self,
        stream: str,
        partition_key: str,
        data: bytes,
        explicit_hash_key: str | None,
        size: int,
        encoded_tags: bytes = b"",
    ) -> None:
        UserRecord.__init__(self, stream, partition_key, data, explicit_hash_key, size)
        self.encoded_tags = encoded_tags
        self.trace_tags = b""
        self.trace: object | None = None


class DurableSpool(Protocol):
    """What a spooled record asks of its spool (``aiokpl._spooling.Spool``)."""

    def is_durable(self, producer_id: bytes, sequence: int) -> bool: ...

    async def wait_durable(self, producer_id: bytes, sequence: int) -> None: ...


class SpooledRecord(TaggedRecord):
    """A record in the producer's durable spool: its identity there (the writer's producer id
    and its sequence number), and the spool that answers whether it is durable. Only a
    producer with a spool makes these, so records elsewhere carry none of these slots; they
    are set when the record is framed into the spool (:meth:`in_spool`), as it enters.

    ``encoded_tags`` may be empty here (a spooled record without tags).
    """

    __slots__ = ("spool", "spool_id", "spool_seq")

    spool: DurableSpool
    spool_id: bytes
    spool_seq: int

    def in_spool(self, spool: DurableSpool, spool_id: bytes, spool_seq: int) -> None:
        """The record is framed into ``spool`` as ``spool_seq`` of producer ``spool_id``.
        *Mutates* the record."""
        self.spool = spool
        self.spool_id = spool_id
        self.spool_seq = spool_seq

    @property
    def durable(self) -> bool:
        return self.spool.is_durable(self.spool_id, self.spool_seq)

    async def wait_durable(self) -> None:
        await self.spool.wait_durable(self.spool_id, self.spool_seq)


def record_classes(
    *, spool: bool, identities: bool, tracing: bool = False
) -> tuple[type[UserRecord], type[TaggedRecord]]:
    """The classes a producer builds its records with, chosen once, when it is made: for a
    record without tags, and for one with. Records that will be framed into a spool are
    :class:`SpooledRecord`s and records that will get an identity tag or a trace context
    :class:`TaggedRecord`s, whatever their own tags; the rest are a :class:`UserRecord` (no
    slot for tags) or a :class:`TaggedRecord`."""
    if spool:
        return SpooledRecord, SpooledRecord
    if identities or tracing:
        return TaggedRecord, TaggedRecord
    return UserRecord, TaggedRecord


# What a caller holds is an Outcome: errors and reprs name that public type ("'Outcome' object
# has no attribute 'is_set'"), never these classes.
UserRecord.__name__ = UserRecord.__qualname__ = "Outcome"
TaggedRecord.__name__ = TaggedRecord.__qualname__ = "Outcome"
SpooledRecord.__name__ = SpooledRecord.__qualname__ = "Outcome"

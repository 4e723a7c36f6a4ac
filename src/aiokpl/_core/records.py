"""Kinesis records (what goes on the wire), and how a user record's result is built.

A user record (:class:`UserRecordLike` here; ``aiokpl._record.UserRecord`` in the pipeline)
is what the caller put: validated, hashed and
timestamped once; it keeps its identity through every retry, so its attempt history and arrival
time survive. A :class:`KinesisRecord` is what goes on the wire: one user record sent as it is,
or an aggregate of several bound for the same predicted shard.

Invariants:

* a Kinesis record's ``deadline``/``expires_at`` are the earliest of its user records';
* a Kinesis record holding one user record is sent raw with that record's partition key and
  its hash key as explicit hash key; an aggregate uses partition key ``"a"`` and the hash key
  of its first user record (KPL ``kinesis_record.cc``);
* except a lone user record with tags: a raw Kinesis record has no place for them, so it goes
  as an aggregate of one (with its own partition key and hash key, so it is routed exactly as
  the raw record would be), which every KPL-aware deaggregator reads. The KPL never meets the
  case: it has no tags.

Mirrors ``KinesisRecord`` in the KPL. A plain slotted class, not a dataclass: it is allocated on
the hot path.
"""

from __future__ import annotations

from typing import Any, Protocol

from .decoder import decode
from .encoder import AggregateBuilder
from .results import Attempt, RecordResult

__all__ = (
    "AGGREGATE_PARTITION_KEY",
    "IN_AGGREGATE",
    "Delivered",
    "KinesisRecord",
    "UserRecordLike",
    "result_of",
)

IN_AGGREGATE = bytes(bytearray(b"<in an aggregate>"))
"""Stands for a user record's data while the encoded aggregate holds the only copy. A private
object, told apart by identity: no caller's data is ever this very object."""

Delivered = tuple[float, float, str, str]
"""A successful request as plain values: started, ended, shard id, sequence number. Every user
record of one Kinesis record shares the same tuple."""

AGGREGATE_PARTITION_KEY = "a"
"""Partition key of every aggregate: the explicit hash key does the routing."""


class UserRecordLike(Protocol):
    """What the core reads and changes on a user record.

    The pipeline's record is ``aiokpl._record.UserRecord``, which also is the caller's
    ``Outcome``; the core knows only these members, so it imports nothing of the shell. The
    core *mutates* records through them: :meth:`KinesisRecord.seal` and
    :meth:`KinesisRecord.restore_data` set ``deadline`` and ``data``; the retry policy adds
    attempts, moves deadlines and sets ``delivered``.
    """

    partition_key: str
    data: bytes
    explicit_hash_key: str | None
    size: int
    predicted_shard: str | None
    deadline: float
    expires_at: float
    last_end: float
    attempts: tuple[Attempt, ...]
    delivered: Delivered | None

    @property
    def hash_key(self) -> int:
        """The record's 128-bit hash key."""
        ...

    @property
    def encoded_tags(self) -> bytes:
        """The record's tags encoded as the aggregate's ``Record.tags`` fields; ``b""``."""
        ...

    def add_attempt(self, attempt: Attempt) -> None:
        """Record one more failed attempt (it also sets ``last_end``)."""

    def set_deadline(self, deadline: float) -> None:
        """Move the deadline, never past ``expires_at``."""


class KinesisRecord:
    """One entry of a ``PutRecords`` request: a raw user record or an aggregate."""

    __slots__ = (
        "data",
        "deadline",
        "expires_at",
        "explicit_hash_key",
        "partition_key",
        "predicted_shard",
        "records",
        "size",
    )

    def __init__(
        self,
        records: list[UserRecordLike],
        data: bytes,
        partition_key: str,
        explicit_hash_key: str,
        predicted_shard: str | None,
        deadline: float,
        expires_at: float,
        partition_key_size: int,
    ) -> None:
        self.records = records
        self.data = data
        self.partition_key = partition_key
        self.explicit_hash_key = explicit_hash_key
        self.predicted_shard = predicted_shard
        self.deadline = deadline
        self.expires_at = expires_at
        # What Kinesis counts against the request and shard limits: key plus data.
        self.size = partition_key_size + len(data)

    @classmethod
    def single(cls, record: UserRecordLike, hash_key: int) -> KinesisRecord:
        """A Kinesis record carrying one user record as it is (no aggregation framing).

        ``hash_key`` is the record's hash key (it travels as the explicit hash key).
        """
        ehk = record.explicit_hash_key
        routed_by = ehk
        if routed_by is None:
            # A record without a key goes without one (only to a stream that places records).
            routed_by = str(hash_key) if hash_key >= 0 else ""
        data = record.data
        tags = record.encoded_tags
        if tags:  # an aggregate of one: a raw record has no place for tags
            builder = AggregateBuilder()
            builder.try_add(record.partition_key, data, ehk, float("inf"), tags)
            blob = builder.encode()
            return cls(
                [record],
                blob,
                record.partition_key,
                routed_by,
                record.predicted_shard,
                record.deadline,
                record.expires_at,
                record.size - len(data) - len(tags),
            )
        return cls(
            [record],
            data,
            record.partition_key,
            routed_by,
            record.predicted_shard,
            record.deadline,
            record.expires_at,
            record.size - len(data),
        )

    def seal(self, release_data: bool) -> None:
        """Settle the user records of an aggregate inside it, in one pass (the aggregator
        calls this as it closes their batch).

        Each takes the aggregate's deadline: its own is not read again until a retry sets a
        new one, so a million records in flight do not keep a million floats. With
        ``release_data`` each also drops its data, since the blob holds a copy. That halves the
        memory of a backlog: a record waiting in the limiter, the collector or a request is
        then one copy of its bytes, not two. :meth:`restore_data` gets them back when the
        records leave the aggregate (a retry), decoding the blob once.
        """
        records = self.records
        if len(records) < 2:
            return  # a raw record: its blob is its data, its deadline the record's own
        deadline = self.deadline
        if release_data:
            for record in records:
                record.deadline = deadline
                record.data = IN_AGGREGATE
        else:
            for record in records:
                record.deadline = deadline

    def restore_data(self) -> None:
        """Give the user records their data back from the blob, after :meth:`seal` released it."""
        records = self.records
        if len(records) > 1 and any(record.data is IN_AGGREGATE for record in records):
            for record, decoded in zip(records, decode(self.data), strict=True):
                record.data = decoded.data

    def entry(self) -> dict[str, Any]:
        """The ``PutRecordsRequestEntry`` for this record (a record put without a key, to a
        stream that places records itself, goes without one: its keys are ``""`` here)."""
        if self.partition_key:
            return {
                "Data": self.data,
                "PartitionKey": self.partition_key,
                "ExplicitHashKey": self.explicit_hash_key,
            }
        return {"Data": self.data}

    def __repr__(self) -> str:
        return (
            f"<KinesisRecord records={len(self.records)} size={self.size} "
            f"shard={self.predicted_shard!r}>"
        )


def result_of(
    attempts: tuple[Attempt, ...], delivered: Delivered | None, last_end: float
) -> RecordResult:
    """Build a record's :class:`RecordResult` from its failed attempts and, if it was
    delivered, the successful request (``last_end``: when the attempt before it ended)."""
    if delivered is None:
        return RecordResult(False, None, None, attempts)
    started, ended, shard_id, sequence_number = delivered
    last = Attempt(started, ended, started - last_end, True, None, None, shard_id, sequence_number)
    return RecordResult(True, shard_id, sequence_number, (*attempts, last))

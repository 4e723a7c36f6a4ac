"""The records that travel through the pipeline: user records, and Kinesis records built from them.

A :class:`UserRecord` is what the caller put: validated, hashed once, timestamped once. It keeps
its identity through every retry, so its attempt history and arrival time survive. A
:class:`KinesisRecord` is what goes on the wire: one user record sent as it is, or an aggregate
of several bound for the same predicted shard.

Invariants:

* a user record's hash key, sizes and encoded partition key are computed once, at ``put``;
* ``deadline <= expires_at`` always: a record is never scheduled past its TTL;
* a Kinesis record's ``deadline``/``expires_at`` are the earliest of its user records';
* a Kinesis record holding one user record is sent raw with that record's partition key and
  its hash key as explicit hash key; an aggregate uses partition key ``"a"`` and the hash key
  of its first user record (KPL ``kinesis_record.cc``).

Mirrors ``UserRecord`` and ``KinesisRecord`` in the KPL. These are plain slotted classes, not
dataclasses: one of each is allocated per record on the hot path.
"""

from __future__ import annotations

from typing import Any

from .results import Attempt, FailedRecord, RecordResult

__all__ = (
    "AGGREGATE_PARTITION_KEY",
    "KinesisRecord",
    "UserRecord",
    "failed_record_of",
    "failed_result_of",
    "result_of",
)

Delivered = tuple[float, float, float, str, str]
"""A successful attempt as plain values: started, ended, delay, shard id, sequence number."""

ResultParts = tuple[tuple[Attempt, ...], Delivered | None]
"""A record's failed attempts and, if delivered, its successful one."""

AGGREGATE_PARTITION_KEY = "a"
"""Partition key of every aggregate: the explicit hash key does the routing."""


class UserRecord:
    """One record as put by the caller, with everything the pipeline tracks about it."""

    __slots__ = (
        "arrival",
        "attempts",
        "data",
        "deadline",
        "delivered",
        "expires_at",
        "explicit_hash_key",
        "hash_key",
        "last_end",
        "outcome",
        "partition_key",
        "partition_key_bytes",
        "predicted_shard",
        "seq",
        "size",
        "stream",
    )

    def __init__(
        self,
        stream: str,
        partition_key: str,
        partition_key_bytes: bytes,
        data: bytes,
        hash_key: int,
        explicit_hash_key: str | None,
        arrival: float,
        deadline: float,
        expires_at: float,
        seq: int,
        outcome: Any,
    ) -> None:
        self.stream = stream
        self.partition_key = partition_key
        self.partition_key_bytes = partition_key_bytes
        self.data = data
        self.hash_key = hash_key
        self.explicit_hash_key = explicit_hash_key
        self.size = len(partition_key_bytes) + len(data)
        self.arrival = arrival
        self.last_end = arrival
        self.deadline = deadline if deadline < expires_at else expires_at
        self.expires_at = expires_at
        self.seq = seq
        self.outcome = outcome
        self.predicted_shard: str | None = None
        # A tuple, grown on each attempt: most records have one, and a tuple is one object
        # where a list plus the final tuple would be two for the garbage collector.
        self.attempts: tuple[Attempt, ...] = ()
        # The successful attempt as plain values (started, ended, delay, shard id, sequence
        # number): a tuple of atomic values stops being tracked by the garbage collector, so a
        # delivered record costs it nothing until someone asks for its result.
        self.delivered: Delivered | None = None

    def outcome_parts(
        self,
    ) -> tuple[tuple[Attempt, ...], tuple[float, float, float, str, str] | None]:
        """What :func:`result_of` needs, without the record's data (which can then be freed)."""
        return self.attempts, self.delivered

    def add_attempt(self, attempt: Attempt) -> None:
        """Record one more attempt; it ends when ``attempt`` ended."""
        self.attempts += (attempt,)
        self.last_end = attempt.ended_at

    def set_deadline(self, deadline: float) -> None:
        """Move the deadline, never past the expiry (KPL ``TimeSensitive``)."""
        self.deadline = deadline if deadline < self.expires_at else self.expires_at

    def __repr__(self) -> str:
        return (
            f"<UserRecord stream={self.stream!r} size={self.size} "
            f"shard={self.predicted_shard!r} attempts={len(self.attempts)}>"
        )


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
        records: list[UserRecord],
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
    def single(cls, record: UserRecord) -> KinesisRecord:
        """A Kinesis record carrying one user record as it is (no aggregation framing)."""
        ehk = record.explicit_hash_key
        return cls(
            [record],
            record.data,
            record.partition_key,
            ehk if ehk is not None else str(record.hash_key),
            record.predicted_shard,
            record.deadline,
            record.expires_at,
            len(record.partition_key_bytes),
        )

    def entry(self) -> dict[str, Any]:
        """The ``PutRecordsRequestEntry`` for this record."""
        return {
            "Data": self.data,
            "PartitionKey": self.partition_key,
            "ExplicitHashKey": self.explicit_hash_key,
        }

    def __repr__(self) -> str:
        return (
            f"<KinesisRecord records={len(self.records)} size={self.size} "
            f"shard={self.predicted_shard!r}>"
        )


def result_of(parts: ResultParts) -> RecordResult:
    """Build a record's :class:`RecordResult` from :meth:`UserRecord.outcome_parts`."""
    attempts, delivered = parts
    if delivered is None:
        return RecordResult(False, None, None, attempts)
    started, ended, delay, shard_id, sequence_number = delivered
    last = Attempt(started, ended, delay, True, None, None, shard_id, sequence_number)
    return RecordResult(True, shard_id, sequence_number, (*attempts, last))


def failed_record_of(record: UserRecord) -> FailedRecord:
    """The public copy of a failed user record, for a result or a failure callback."""
    return FailedRecord(record.stream, record.partition_key, record.data, record.explicit_hash_key)


def failed_result_of(parts: tuple[tuple[Attempt, ...], FailedRecord]) -> RecordResult:
    """Build a failed record's :class:`RecordResult` carrying the record itself.

    ``parts`` is the record's attempts and its :func:`failed_record_of`; used instead of
    :func:`result_of` when ``Config.return_record_on_failure`` is set.
    """
    attempts, record = parts
    return RecordResult(False, None, None, attempts, record)

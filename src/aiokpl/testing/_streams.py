"""The fake's streams and shards: what a test reads back, and the mutable state behind it.

What is here: :class:`StoredRecord` and :class:`FakeShard` (the frozen views a test reads),
``_Shard`` (a shard's hash-key range, records and sequence numbers), ``_Throttle`` (a shard's
optional token bucket), ``_Stream`` (its shards, the routing table over the open ones, its
settings, and where a record goes: by its hash key, or on an ``AUTO`` stream to an open shard
drawn at random) and ``_Autoscale`` (the state of a stream's automatic resharding), and the
service's rules for one record. The model (``_model``) holds the streams of one fake and
changes them.

Invariants: a stream's routing table and its list of open shards hold exactly its open shards
(the list in shard id order); a shard's records are in the order they were stored; every
stream gets a unique ``uid`` (see ``_model``); only an on-demand stream is ``AUTO``.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from typing import Any

from .._core.hashing import MAX_HASH_KEY, hash_key_of
from .._core.shards import ShardRange, ShardTable
from .._core.token_bucket import TokenBucket
from ._validation import _AUTO, _USER_PARTITION_KEY, _partition_of, _Rejected, _sequence_str

__all__ = ("FakeShard", "StoredRecord")

_stream_uids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record as the fake stored it.

    Attributes:
        stream: The stream name.
        shard_id: The shard the record was routed to.
        sequence_number: Its sequence number, as returned by ``PutRecords``.
        partition_key: The partition key it was put with; ``None`` for a record put without
            one (which only a stream whose record distribution strategy is ``AUTO`` takes;
            ``GetRecords`` then returns it without a ``PartitionKey``).
        explicit_hash_key: The explicit hash key it was put with, or ``None``.
        data: The data blob.
        arrival_time: The fake's clock reading when the record was stored (seconds).
    """

    stream: str
    shard_id: str
    sequence_number: str
    partition_key: str | None
    explicit_hash_key: str | None
    data: bytes
    arrival_time: float


@dataclass(frozen=True, slots=True)
class FakeShard:
    """A snapshot of one shard of a fake stream.

    Attributes:
        shard_id: ``shardId-000000000000`` and so on, in creation order.
        starting_hash_key: The first hash key the shard owns.
        ending_hash_key: The last hash key the shard owns (inclusive).
        parent_shard_id: The shard it was split from, or the first of the two it was merged
            from; ``None`` for an original shard.
        adjacent_parent_shard_id: The second shard of a merge; ``None`` otherwise.
        starting_sequence_number: The shard's ``StartingSequenceNumber``.
        ending_sequence_number: The shard's ``EndingSequenceNumber``; ``None`` while it is open.
        record_count: How many records the shard holds.
        created_at: The fake's clock reading when the shard was created.
        closed_at: The clock reading when it was split or merged; ``None`` while it is open.

    ``hash_key in shard`` tells whether the shard's range contains an ``int`` hash key.
    """

    shard_id: str
    starting_hash_key: int
    ending_hash_key: int
    parent_shard_id: str | None
    adjacent_parent_shard_id: str | None
    starting_sequence_number: str
    ending_sequence_number: str | None
    record_count: int
    created_at: float = 0.0
    closed_at: float | None = None

    @property
    def is_open(self) -> bool:
        """Whether the shard accepts new records (it has not been split or merged)."""
        return self.ending_sequence_number is None

    def __contains__(self, hash_key: object) -> bool:
        return isinstance(hash_key, int) and (
            self.starting_hash_key <= hash_key <= self.ending_hash_key
        )


class _Shard:
    __slots__ = (
        "adjacent_parent",
        "bucket",
        "closed_at",
        "created_at",
        "end",
        "ending_sequence",
        "parent",
        "records",
        "sequences",
        "shard_id",
        "start",
        "starting_sequence",
    )

    def __init__(
        self,
        shard_id: str,
        start: int,
        end: int,
        starting_sequence: int,
        created_at: float,
        bucket: TokenBucket | None,
        parent: str | None = None,
        adjacent_parent: str | None = None,
    ) -> None:
        self.shard_id = shard_id
        self.start = start
        self.end = end
        self.parent = parent
        self.adjacent_parent = adjacent_parent
        self.starting_sequence = starting_sequence
        self.ending_sequence: int | None = None
        self.created_at = created_at
        self.closed_at: float | None = None
        self.bucket = bucket
        self.records: list[StoredRecord] = []
        self.sequences: list[int] = []

    def describe(self) -> dict[str, Any]:
        shard: dict[str, Any] = {"ShardId": self.shard_id}
        if self.parent is not None:
            shard["ParentShardId"] = self.parent
        if self.adjacent_parent is not None:
            shard["AdjacentParentShardId"] = self.adjacent_parent
        shard["HashKeyRange"] = {
            "StartingHashKey": str(self.start),
            "EndingHashKey": str(self.end),
        }
        sequence_range = {"StartingSequenceNumber": _sequence_str(self.starting_sequence)}
        if self.ending_sequence is not None:
            sequence_range["EndingSequenceNumber"] = _sequence_str(self.ending_sequence)
        shard["SequenceNumberRange"] = sequence_range
        return shard

    def snapshot(self) -> FakeShard:
        return FakeShard(
            shard_id=self.shard_id,
            starting_hash_key=self.start,
            ending_hash_key=self.end,
            parent_shard_id=self.parent,
            adjacent_parent_shard_id=self.adjacent_parent,
            starting_sequence_number=_sequence_str(self.starting_sequence),
            ending_sequence_number=(
                None if self.ending_sequence is None else _sequence_str(self.ending_sequence)
            ),
            record_count=len(self.records),
            created_at=self.created_at,
            closed_at=self.closed_at,
        )


@dataclass(frozen=True)
class _Throttle:
    records_per_second: float
    bytes_per_second: float
    burst_seconds: float

    def bucket(self) -> TokenBucket:
        return TokenBucket(
            [
                (self.records_per_second, self.records_per_second * self.burst_seconds),
                (self.bytes_per_second, self.bytes_per_second * self.burst_seconds),
            ]
        )


class _Stream:
    __slots__ = (
        "account",
        "arn",
        "autoscale",
        "created_at",
        "distribution",
        "max_record_size",
        "mode",
        "name",
        "next_shard_index",
        "open_shards",
        "open_table",
        "shards",
        "throttle",
        "uid",
    )

    def __init__(
        self,
        name: str,
        created_at: float,
        throttle: _Throttle | None,
        max_record_size: int,
        mode: str,
        account: str,
        region: str,
    ) -> None:
        self.name = name
        self.account = account
        self.arn = f"arn:{_partition_of(region)}:kinesis:{region}:{account}:stream/{name}"
        self.autoscale: _Autoscale | None = None
        self.uid = next(_stream_uids)
        self.created_at = created_at
        self.throttle = throttle
        self.max_record_size = max_record_size
        self.mode = mode
        # USER_PARTITION_KEY: by hash key; AUTO (on-demand streams only): a random open shard.
        self.distribution = _USER_PARTITION_KEY
        self.shards: dict[str, _Shard] = {}
        self.next_shard_index = 0
        self.open_table = ShardTable()
        self.open_shards: list[_Shard] = []

    def new_shard(
        self,
        start: int,
        end: int,
        sequence: int,
        now: float,
        parent: str | None = None,
        adjacent_parent: str | None = None,
    ) -> _Shard:
        shard_id = f"shardId-{self.next_shard_index:012d}"
        self.next_shard_index += 1
        bucket = None if self.throttle is None else self.throttle.bucket()
        shard = _Shard(shard_id, start, end, sequence, now, bucket, parent, adjacent_parent)
        self.shards[shard_id] = shard
        return shard

    def close(self, shard: _Shard, sequence: int, now: float) -> None:
        shard.ending_sequence = sequence
        shard.closed_at = now

    def reindex(self) -> None:
        self.open_shards = [s for s in self.shards.values() if s.ending_sequence is None]
        self.open_table = ShardTable(
            ShardRange(s.shard_id, s.start, s.end) for s in self.open_shards
        )

    @property
    def auto(self) -> bool:
        """Whether the service, not the records' keys, places the records (``AUTO``)."""
        return self.distribution == _AUTO

    def place(
        self, key_bytes: bytes | None, explicit_hash_key: str | None, placement: random.Random
    ) -> _Shard:
        """The open shard a record goes to: drawn at random (each open shard alike) on an
        ``AUTO`` stream, where its keys are ignored; else the one whose range holds its
        explicit hash key, or the MD5 of its partition key (``key_bytes``, UTF-8; ``None``
        for a record without one, which only an ``AUTO`` stream takes)."""
        if self.distribution == _AUTO:
            shards = self.open_shards
            return shards[placement.randrange(len(shards))]
        if explicit_hash_key is not None:
            return self.route(int(explicit_hash_key))
        assert key_bytes is not None  # a record without a key was refused before
        return self.route(hash_key_of(key_bytes))

    def route(self, hash_key: int) -> _Shard:
        shard_id = self.open_table.lookup(hash_key)
        # The open shards always cover the whole key space: split and merge keep it so.
        assert shard_id is not None
        return self.shards[shard_id]

    def shard(self, shard_id: str) -> _Shard:
        shard = self.shards.get(shard_id)
        if shard is None:
            raise _Rejected(
                "ResourceNotFoundException",
                f"Shard {shard_id} in stream {self.name} under account {self.account} "
                "does not exist",
            )
        return shard


class _Autoscale:
    """The automatic resharding of one stream (see :meth:`FakeKinesis.auto_reshard`)."""

    __slots__ = ("events", "every", "marks", "max_open", "merge_every", "min_open", "next_at")

    def __init__(
        self, every: float, merge_every: int, min_open: int, max_open: int, now: float
    ) -> None:
        self.every = every
        self.merge_every = merge_every
        self.min_open = min_open
        self.max_open = max_open
        self.next_at = now + every
        self.events = 0
        # Records each shard held at the last reshard: its load since is the difference.
        self.marks: dict[str, int] = {}


def _throttled(stream: _Stream, shard: _Shard) -> tuple[str, str]:
    return (
        "ProvisionedThroughputExceededException",
        f"Rate exceeded for shard {shard.shard_id} in stream {stream.name} "
        f"under account {stream.account}.",
    )


def _check_record_rules(
    stream: _Stream,
    key_bytes: bytes,
    data: bytes,
    explicit_hash_key: str | None,
    index: int | None,
) -> int:
    """The service's own rules for one record, past the API constraints; returns its size."""
    if explicit_hash_key is not None and int(explicit_hash_key) > MAX_HASH_KEY:
        raise _Rejected(
            "InvalidArgumentException",
            "Invalid ExplicitHashKey. ExplicitHashKey must be in the range: [0, 2^128-1]. "
            f"Specified value was {explicit_hash_key}",
        )
    size = len(key_bytes) + len(data)
    if size > stream.max_record_size:
        which = "The record" if index is None else f"Record {index}"
        raise _Rejected(
            "InvalidArgumentException",
            f"{which} is {size} bytes (partition key plus data), over the maximum record "
            f"size of stream {stream.name}: {stream.max_record_size} bytes.",
        )
    return size

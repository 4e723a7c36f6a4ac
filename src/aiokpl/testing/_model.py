"""The fake's service model: streams, shards, sequence numbers, stored records, resharding.

What is here: :class:`StoredRecord` and :class:`FakeShard` (what a test reads back), the
mutable shards and streams behind them, each shard's optional token bucket, and
:class:`_Model`, the streams of one region and account: it resolves a stream by name or ARN,
creates streams whose shards split the hash-key space evenly, stores records with the next
sequence number, splits and merges shards, and reshards a stream on its own under load
(:meth:`_Model.auto_reshard`). The API operations (``_operations``) work on it, and the setup
helpers of :class:`~aiokpl.testing.FakeKinesis` call it directly.

Invariants:

* the open shards of a stream always cover the whole hash-key space, without overlap: a new
  stream splits it evenly, and split and merge replace parents by children covering exactly
  their ranges, so routing a hash key always finds one open shard;
* sequence numbers are one counter for the whole model, so they strictly increase in the
  order records are stored, across streams and shards; as strings they have a fixed 56 digits
  (``_SEQUENCE_BASE`` plus the counter), so string order is numeric order;
* a closed shard keeps its records and gets the last sequence number issued before it closed
  as its ending sequence number; shard ids count up per stream, children after parents;
* every stream gets a unique ``uid``: tokens and iterators carry it, so they are not found
  once the stream is deleted, even if a stream of the same name is created again;
* the model reads no clock but the one it was given; setup helpers may run outside an event
  loop, where ``anyio.current_time`` raises, and then read 0.

Errors: the model raises :class:`~aiokpl.testing._validation._Rejected` for service errors
(the facade turns them into ``ClientError``) and ``ValueError`` from the setup helpers, which a
test calls directly.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._core.hashing import MAX_HASH_KEY
from .._core.shards import ShardRange, ShardTable
from .._core.token_bucket import TokenBucket
from ._validation import (
    _LARGEST_MAX_RECORD_SIZE,
    _REGION_NAME,
    _STREAM_ARN,
    _STREAM_ARN_PARTS,
    _STREAM_ARN_PATTERN,
    _STREAM_NAME,
    _partition_of,
    _Rejected,
    _sequence_str,
    _validation,
)

__all__ = ("FakeShard", "StoredRecord")

_ACCOUNT_ID = "123456789012"
_REGION = "us-east-1"
_ON_DEMAND = "ON_DEMAND"
_PROVISIONED = "PROVISIONED"

_stream_uids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record as the fake stored it.

    Attributes:
        stream: The stream name.
        shard_id: The shard the record was routed to.
        sequence_number: Its sequence number, as returned by ``PutRecords``.
        partition_key: The partition key it was put with.
        explicit_hash_key: The explicit hash key it was put with, or ``None``.
        data: The data blob.
        arrival_time: The fake's clock reading when the record was stored (seconds).
    """

    stream: str
    shard_id: str
    sequence_number: str
    partition_key: str
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
        "max_record_size",
        "mode",
        "name",
        "next_shard_index",
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
        self.shards: dict[str, _Shard] = {}
        self.next_shard_index = 0
        self.open_table = ShardTable()

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
        self.open_table = ShardTable(
            ShardRange(s.shard_id, s.start, s.end)
            for s in self.shards.values()
            if s.ending_sequence is None
        )

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


class _Model:
    """The streams of one fake, in one region and one account (see the module documentation).

    Args:
        clock: Returns the current time in seconds; ``anyio.current_time`` by default.
        region: The region of the streams.
        account: The 12-digit account that owns them.

    Raises:
        ValueError: ``account`` is not 12 digits, or ``region`` is not a region name.
    """

    __slots__ = ("account", "clock", "operation", "region", "sequence", "streams")

    def __init__(self, clock: Callable[[], float], region: str, account: str) -> None:
        if not isinstance(account, str) or re.fullmatch(r"\d{12}", account) is None:
            raise ValueError(f"account_id must be 12 digits, got {account!r}")
        if not isinstance(region, str) or _REGION_NAME.fullmatch(region) is None:
            raise ValueError(f"region must be a region name such as 'us-east-1', got {region!r}")
        self.clock = clock
        self.region = region
        self.account = account
        self.streams: dict[str, _Stream] = {}
        self.sequence = 0
        self.operation = ""  # of the call being served, for messages

    def record_count(self) -> int:
        """How many records all streams hold."""
        return sum(
            len(shard.records)
            for stream in self.streams.values()
            for shard in stream.shards.values()
        )

    # -- setup (raises ValueError) -----------------------------------------------------------

    def add_stream(
        self,
        name: str,
        shard_count: int,
        *,
        throttle: bool,
        records_per_second: float,
        bytes_per_second: float,
        burst_seconds: float,
        max_record_size: int,
        on_demand: bool,
    ) -> None:
        """Create a stream as :meth:`aiokpl.testing.FakeKinesis.add_stream` documents."""
        if _STREAM_NAME.fullmatch(name) is None:
            raise ValueError(
                f"stream name must be 1 … 128 characters of a-z A-Z 0-9 _ . -, got {name!r}"
            )
        if name in self.streams:
            raise ValueError(f"stream {name!r} already exists")
        if shard_count < 1:
            raise ValueError(f"shard_count must be at least 1, got {shard_count!r}")
        for label, value in (
            ("records_per_second", records_per_second),
            ("bytes_per_second", bytes_per_second),
            ("burst_seconds", burst_seconds),
        ):
            if not 0.0 < value < math.inf:
                raise ValueError(f"{label} must be a positive finite number, got {value!r}")
        if not 1 <= max_record_size <= _LARGEST_MAX_RECORD_SIZE:
            raise ValueError(
                f"max_record_size must be 1 … {_LARGEST_MAX_RECORD_SIZE} bytes, "
                f"got {max_record_size!r}"
            )
        limits = (
            _Throttle(records_per_second, bytes_per_second, burst_seconds) if throttle else None
        )
        mode = _ON_DEMAND if on_demand else _PROVISIONED
        self.create(name, shard_count, limits, max_record_size, mode)

    def set_auto_reshard(
        self,
        stream: str,
        every_seconds: float,
        merge_every: int,
        min_open_shards: int,
        max_open_shards: int,
    ) -> None:
        """Reshard ``stream`` as :meth:`aiokpl.testing.FakeKinesis.auto_reshard` documents."""
        state = self.setup_stream(stream)
        if not 0.0 < every_seconds < math.inf:
            raise ValueError(f"every_seconds must be a positive number, got {every_seconds!r}")
        if merge_every < 0:
            raise ValueError(f"merge_every must be >= 0, got {merge_every!r}")
        if not 1 <= min_open_shards <= max_open_shards:
            raise ValueError(
                "need 1 <= min_open_shards <= max_open_shards, got "
                f"{min_open_shards!r} and {max_open_shards!r}"
            )
        autoscale = _Autoscale(
            every_seconds, merge_every, min_open_shards, max_open_shards, self.setup_now()
        )
        autoscale.marks = {shard_id: len(s.records) for shard_id, s in state.shards.items()}
        state.autoscale = autoscale

    def now(self) -> float:
        return self.clock()

    def setup_now(self) -> float:
        # Setup helpers may run outside an event loop, where anyio has no clock.
        try:
            return self.clock()
        except RuntimeError:
            return 0.0

    def setup_stream(self, name: str) -> _Stream:
        stream = self.streams.get(name)
        if stream is None and isinstance(name, str) and name.startswith("arn:"):
            # A stream named by its ARN (this fake's region and account only).
            stream = self.streams.get(name.rpartition("/")[2])
            if stream is not None and stream.arn != name:
                stream = None
        if stream is None:
            raise ValueError(f"no stream named {name!r}")
        return stream

    def stream_arn(self, name: str) -> str:
        """The ARN of stream ``name`` in this region and account (it need not exist)."""
        partition = _partition_of(self.region)
        return f"arn:{partition}:kinesis:{self.region}:{self.account}:stream/{name}"

    # -- the model (raises _Rejected) --------------------------------------------------------

    def create(
        self,
        name: str,
        shard_count: int,
        throttle: _Throttle | None,
        max_record_size: int,
        mode: str,
    ) -> None:
        now = self.setup_now()
        stream = _Stream(name, now, throttle, max_record_size, mode, self.account, self.region)
        width = (MAX_HASH_KEY + 1) // shard_count
        for index in range(shard_count):
            start = index * width
            end = MAX_HASH_KEY if index == shard_count - 1 else start + width - 1
            stream.new_shard(start, end, self.sequence, now)
        stream.reindex()
        self.streams[name] = stream

    def stream(self, name: str | None, arn: str | None) -> _Stream:
        if arn is not None:
            parts = _STREAM_ARN_PARTS.fullmatch(arn) if isinstance(arn, str) else None
            if parts is None or _STREAM_ARN.fullmatch(arn) is None:
                raise _validation(
                    arn, "streamARN", f"satisfy regular expression pattern: {_STREAM_ARN_PATTERN}"
                )
            partition, region, account, from_arn = parts.groups()
            if account != self.account:
                # Another account's stream: without a resource policy that grants this
                # account access, the service denies the call.
                raise _Rejected(
                    "AccessDeniedException",
                    f"User: arn:aws:iam::{self.account}:user/fake is not authorized to perform: "
                    f"kinesis:{self.operation} on resource: {arn} because no resource-based "
                    f"policy allows the kinesis:{self.operation} action",
                )
            if region != self.region or partition != _partition_of(self.region):
                # Another region's stream, asked of this region's endpoint.
                raise _Rejected(
                    "ResourceNotFoundException",
                    f"Stream {from_arn} under account {account} not found.",
                )
            if name is not None and name != from_arn:
                raise _Rejected(
                    "InvalidArgumentException",
                    f"StreamARN {arn} and StreamName {name} do not name the same stream.",
                )
            name = from_arn
        if name is None:
            raise _Rejected(
                "InvalidArgumentException", "Either StreamName or StreamARN must be provided."
            )
        if not isinstance(name, str) or _STREAM_NAME.fullmatch(name) is None:
            raise _validation(
                name, "streamName", "satisfy regular expression pattern: [a-zA-Z0-9_.-]+"
            )
        stream = self.streams.get(name)
        if stream is None:
            raise _Rejected(
                "ResourceNotFoundException",
                f"Stream {name} under account {self.account} not found.",
            )
        return stream

    def next_sequence(self) -> int:
        self.sequence += 1
        return self.sequence

    def store(
        self,
        stream: _Stream,
        shard: _Shard,
        partition_key: str,
        explicit_hash_key: str | None,
        data: bytes,
        now: float,
    ) -> str:
        number = self.next_sequence()
        sequence = _sequence_str(number)
        shard.records.append(
            StoredRecord(
                stream.name, shard.shard_id, sequence, partition_key, explicit_hash_key, data, now
            )
        )
        shard.sequences.append(number)
        return sequence

    def open_shard(self, stream: _Stream, shard_id: str) -> _Shard:
        shard = stream.shard(shard_id)
        if shard.ending_sequence is not None:
            raise _Rejected(
                "InvalidArgumentException",
                f"Shard {shard_id} in stream {stream.name} under account {self.account} has "
                "already been merged or split, and thus is not eligible for merging or splitting.",
            )
        return shard

    def split(self, stream: _Stream, shard_id: str, new_starting_hash_key: int) -> tuple[str, str]:
        parent = self.open_shard(stream, shard_id)
        if not parent.start < new_starting_hash_key <= parent.end:
            raise _Rejected(
                "InvalidArgumentException",
                f"NewStartingHashKey {new_starting_hash_key} used in SplitShard on shard "
                f"{shard_id} in stream {stream.name} under account {self.account} is not both "
                f"greater than one plus the shard's StartingHashKey {parent.start} and less "
                f"than the shard's EndingHashKey {parent.end}.",
            )
        now = self.setup_now()
        stream.close(parent, self.sequence, now)
        lower = stream.new_shard(
            parent.start, new_starting_hash_key - 1, self.sequence, now, parent=shard_id
        )
        upper = stream.new_shard(
            new_starting_hash_key, parent.end, self.sequence, now, parent=shard_id
        )
        stream.reindex()
        return lower.shard_id, upper.shard_id

    def merge(self, stream: _Stream, shard_id: str, adjacent_shard_id: str) -> str:
        first = self.open_shard(stream, shard_id)
        second = self.open_shard(stream, adjacent_shard_id)
        if first.end + 1 != second.start and second.end + 1 != first.start:
            raise _Rejected(
                "InvalidArgumentException",
                f"Shards {shard_id} and {adjacent_shard_id} in stream {stream.name} under "
                f"account {stream.account} are not an adjacent pair of shards eligible for merging",
            )
        now = self.setup_now()
        stream.close(first, self.sequence, now)
        stream.close(second, self.sequence, now)
        child = stream.new_shard(
            min(first.start, second.start),
            max(first.end, second.end),
            self.sequence,
            now,
            parent=shard_id,
            adjacent_parent=adjacent_shard_id,
        )
        stream.reindex()
        return child.shard_id

    def auto_reshard(self, stream: _Stream, autoscale: _Autoscale, now: float) -> None:
        marks = autoscale.marks
        open_shards = sorted(
            (shard for shard in stream.shards.values() if shard.ending_sequence is None),
            key=lambda shard: shard.start,
        )
        load = {
            shard.shard_id: len(shard.records) - marks.get(shard.shard_id, 0)
            for shard in open_shards
        }
        if not any(load.values()):
            return  # no load since the last reshard: nothing to scale for
        autoscale.events += 1
        autoscale.next_at = now + autoscale.every
        count = len(open_shards)
        merge = (
            autoscale.merge_every > 0 and autoscale.events % autoscale.merge_every == 0
        ) or count >= autoscale.max_open
        if count <= autoscale.min_open:
            merge = False
        if merge and count >= 2:
            pairs = list(itertools.pairwise(open_shards))
            first, second = min(pairs, key=lambda p: load[p[0].shard_id] + load[p[1].shard_id])
            self.merge(stream, first.shard_id, second.shard_id)
        else:
            hottest = max(open_shards, key=lambda shard: (load[shard.shard_id], -shard.start))
            if hottest.end > hottest.start:
                self.split(stream, hottest.shard_id, (hottest.start + hottest.end + 1) // 2)
        autoscale.marks = {shard_id: len(s.records) for shard_id, s in stream.shards.items()}

"""The fake's service model: streams, shards, sequence numbers, stored records, resharding.

What is here: :class:`_Model`, the streams of one region and account: it resolves a stream by
name or ARN, creates streams whose shards split the hash-key space evenly, stores records with
the next sequence number, splits and merges shards, reshards a stream on its own under load
(:meth:`_Model.auto_reshard`), sets a stream's record distribution strategy, and holds the
seeded generator that places the records of ``AUTO`` streams. The streams and shards it
holds, and what a test reads back of them (:class:`StoredRecord`, :class:`FakeShard`), are
``_streams``'. The API operations
(``_operations``) work on the model, and the setup helpers of
:class:`~aiokpl.testing.FakeKinesis` call it directly.

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
  loop, where ``anyio.current_time`` raises, and then read 0;
* only an on-demand stream can be ``AUTO``; one placement generator, ``random.Random(seed)``,
  serves every stream, one draw per record placed on an ``AUTO`` stream, so the same seed and
  the same calls place the same records on the same shards.

Errors: the model raises :class:`~aiokpl.testing._validation._Rejected` for service errors
(the facade turns them into ``ClientError``) and ``ValueError`` from the setup helpers, which a
test calls directly.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Callable

from .._core.hashing import MAX_HASH_KEY
from ._streams import (
    StoredRecord,
    _Autoscale,
    _Shard,
    _Stream,
    _Throttle,
)
from ._validation import (
    _AUTO,
    _DISTRIBUTIONS,
    _LARGEST_MAX_RECORD_SIZE,
    _REGION_NAME,
    _STREAM_ARN,
    _STREAM_ARN_PARTS,
    _STREAM_ARN_PATTERN,
    _STREAM_NAME,
    _USER_PARTITION_KEY,
    _partition_of,
    _Rejected,
    _sequence_str,
    _validation,
)

__all__ = ("_Model",)

_ACCOUNT_ID = "123456789012"
_REGION = "us-east-1"
_ON_DEMAND = "ON_DEMAND"
_PROVISIONED = "PROVISIONED"


class _Model:
    """The streams of one fake, in one region and one account (see the module documentation).

    Args:
        clock: Returns the current time in seconds; ``anyio.current_time`` by default.
        region: The region of the streams.
        account: The 12-digit account that owns them.
        placement_seed: The seed of the generator that places the records of ``AUTO`` streams.

    Raises:
        ValueError: ``account`` is not 12 digits, or ``region`` is not a region name.
    """

    __slots__ = ("account", "clock", "operation", "placement", "region", "sequence", "streams")

    def __init__(
        self, clock: Callable[[], float], region: str, account: str, placement_seed: int = 0
    ) -> None:
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
        self.placement = random.Random(placement_seed)

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
        record_distribution: str,
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
        _setup_distribution(record_distribution, on_demand, name)
        limits = (
            _Throttle(records_per_second, bytes_per_second, burst_seconds) if throttle else None
        )
        mode = _ON_DEMAND if on_demand else _PROVISIONED
        self.create(name, shard_count, limits, max_record_size, mode, record_distribution)

    def set_record_distribution(self, stream: str, strategy: str) -> None:
        """Set a stream's strategy as :meth:`aiokpl.testing.FakeKinesis.set_record_distribution`
        documents."""
        state = self.setup_stream(stream)
        _setup_distribution(strategy, state.mode == _ON_DEMAND, state.name)
        state.distribution = strategy

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
        distribution: str = _USER_PARTITION_KEY,
    ) -> None:
        now = self.setup_now()
        stream = _Stream(name, now, throttle, max_record_size, mode, self.account, self.region)
        stream.distribution = distribution
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

    def update_distribution(self, stream: _Stream, strategy: str) -> None:
        """``UpdateStreamRecordDistributionStrategy``: on-demand streams only, at once."""
        if stream.mode != _ON_DEMAND:
            raise _Rejected(
                "InvalidArgumentException",
                f"Stream {stream.name} under account {stream.account} is in PROVISIONED mode: "
                "the record distribution strategy applies only to streams in ON_DEMAND mode.",
            )
        stream.distribution = strategy

    def store(
        self,
        stream: _Stream,
        shard: _Shard,
        partition_key: str | None,
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


def _setup_distribution(strategy: str, on_demand: bool, name: str) -> None:
    """Check a strategy a setup helper was given (raises ``ValueError``)."""
    if strategy not in _DISTRIBUTIONS:
        raise ValueError(
            f"record_distribution must be one of {', '.join(_DISTRIBUTIONS)}, got {strategy!r}"
        )
    if strategy == _AUTO and not on_demand:
        raise ValueError(
            f"stream {name!r} is provisioned: only an on-demand stream (on_demand=True) can "
            "have the AUTO record distribution strategy"
        )

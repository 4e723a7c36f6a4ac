"""Aggregator: packs user records bound for the same predicted shard into one Kinesis record.

Each predicted shard of a stream has at most one open batch. A record joins its shard's batch;
the batch closes, becoming a :class:`~aiokpl._core.records.KinesisRecord` handed to the
limiter, when

* the record would push the aggregate past ``aggregation_max_size`` (exact wire size): the
  batch closes *before* the record, which starts the next batch;
* it reaches ``aggregation_max_count`` records;
* the earliest deadline among its records arrives (one scheduler entry per batch, none per
  record).

A record with aggregation disabled becomes a Kinesis record of its own at once, and so does a
record with no predicted shard once the stream's first map load attempt has ended without a map
(failed; the next attempts run in the background). A lone record larger than
``aggregation_max_size`` is sent alone, raw (with tags, as an aggregate of one: see
``KinesisRecord.single``). The KPL's equivalent is ``aggregator.h`` with ``reducer.h``.

**Start-up hold** (better than the KPL, which sends everything put before its first map
unpredicted: unaggregated and not rate limited, a throttling storm when a producer starts with
a burst). A record put while the stream's *first* map load attempt runs (never loaded, no
attempt failed yet) is held, retried records included. When the attempt ends, the held records
are put again, in deadline then arrival order: predicted and aggregated with the new map, or
alone as above if it failed. Held records stay outstanding, so ``max_outstanding_*`` bound
them. Invariants of the hold:

* a held record is never held past its own deadline: one scheduler entry for the whole hold,
  at its earliest release time, releases (alone, unpredicted) what is due then. The release
  time is the deadline less the collector's grace, so the record is sent at its deadline,
  exactly as it would have been without the hold. (The entry first arms the release and a
  second one, a microsecond later, does it: a map that answered while the event loop was
  busy past both times, with the very puts that filled the hold say, is installed first);
* ``flush`` does not release the held records: they go when the attempt ends (at most their
  deadline), and the stream is flushed then. Sending them at once, unaggregated, would
  recreate the start-up storm in the commonest start-up flush of all: a short program that
  puts a burst and exits (exit flushes);
* holding costs nothing once the first attempt has ended: the check sits on the path of
  records without a prediction only.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Container
from typing import TYPE_CHECKING, cast

from .._core.encoder import AggregateBuilder
from .._core.records import AGGREGATE_PARTITION_KEY, KinesisRecord, UserRecordLike
from .._core.statistics import AggregatorStatistics

if TYPE_CHECKING:
    from .._record import UserRecord
    from .scheduler import Scheduler
    from .shard_map import ShardMap

__all__ = ("Aggregator",)


class _Batch:
    """The open aggregate of one predicted shard."""

    __slots__ = (
        "aggregator",
        "builder",
        "deadline",
        "expires_at",
        "first_hash_key",
        "open",
        "records",
        "shard",
    )

    def __init__(self, aggregator: Aggregator, shard: str, first_hash_key: int) -> None:
        self.aggregator = aggregator
        self.shard = shard
        # The aggregate's explicit hash key (KPL: its first record's); records keep none.
        self.first_hash_key = first_hash_key
        self.builder = AggregateBuilder()
        self.records: list[UserRecord] = []
        self.deadline = float("inf")
        self.expires_at = float("inf")
        self.open = True

    def on_due(self, now: float) -> None:
        if self.open and self.deadline <= now:
            self.aggregator.close_batch(self)


# Seconds between noticing that held records are due and releasing them: one turn of the
# event loop, so that a map whose answer is already in (the loop was busy, with the very puts
# that filled the hold, say) is installed first and the records go aggregated.
_RELEASE_TURN = 1e-6


class _Hold:
    """Records waiting for the stream's first map: a heap by deadline, one scheduler entry.

    Release is in two steps, each a scheduler entry: at ``deadline - lead - _RELEASE_TURN``
    (or later, if the loop was late) the hold is armed, and ``_RELEASE_TURN`` after the
    arming what was due at it is released. Under a virtual clock the records go exactly at
    ``deadline - lead``; on a loop that was busy past both times, the map's answer, if it has
    come, is installed in between.
    """

    __slots__ = ("aggregator", "armed_at", "count", "lead", "next_at", "records", "scheduler")

    def __init__(self, aggregator: Aggregator, scheduler: Scheduler, lead: float) -> None:
        self.aggregator = aggregator
        self.scheduler = scheduler
        # (deadline, arrival number, record, hash key): ordered by deadline, then arrival.
        self.records: list[tuple[float, int, UserRecord, int]] = []
        self.count = 0
        # How long before its deadline a record is released (the collector's grace), plus
        # the turn between arming and releasing.
        self.lead = lead + _RELEASE_TURN
        # The time of the latest scheduler entry that counts; earlier entries are stale.
        self.next_at = math.inf
        # When the hold was armed: records due by then go at the next entry. None: not armed.
        self.armed_at: float | None = None

    def add(self, record: UserRecord, hash_key: int) -> None:
        deadline = record.deadline
        heapq.heappush(self.records, (deadline, self.count, record, hash_key))
        self.count += 1
        due = deadline - self.lead
        if due < self.next_at:
            self.next_at = due
            self.scheduler.call_at(due, self)

    def on_due(self, now: float) -> None:
        if now < self.next_at:
            return  # an entry superseded by an earlier one, or by the end of the hold
        armed_at = self.armed_at
        if armed_at is None:
            self.armed_at = now
            self.next_at = now + _RELEASE_TURN
            self.scheduler.call_at(self.next_at, self)
            return
        self.armed_at = None
        self.next_at = math.inf
        records = self.records
        lead = self.lead
        single = self.aggregator.single
        while records and records[0][0] - lead <= armed_at:
            _, _, record, hash_key = heapq.heappop(records)
            single(record, hash_key)
        if records:
            self.next_at = records[0][0] - lead
            self.scheduler.call_at(self.next_at, self)

    def take(self) -> list[tuple[float, int, UserRecord, int]]:
        """Every held record, in deadline then arrival order; the hold is left empty."""
        records, self.records = self.records, []
        self.next_at = math.inf
        self.armed_at = None
        records.sort()
        return records


class Aggregator:
    """The aggregator of one stream.

    Args:
        shard_map: predicts shards.
        scheduler: serves batch deadlines.
        emit: receives every Kinesis record produced (the limiter's ``put``).
        enabled: ``Config.aggregation_enabled``.
        max_size: ``Config.aggregation_max_size``.
        max_count: ``Config.aggregation_max_count``.
        release_data: let aggregated records drop their data while the encoded aggregate
            holds it (see ``KinesisRecord.seal``); off when failed records must keep
            their data for the caller.
        release_lead: how long before its deadline a held record is released: the
            collector's grace, so that it is sent at its deadline.
        flush_stream: flushes the whole stream; called when held records are released
            after a ``flush`` asked for them.
    """

    def __init__(
        self,
        shard_map: ShardMap,
        scheduler: Scheduler,
        emit: Callable[[KinesisRecord], None],
        *,
        enabled: bool,
        max_size: int,
        max_count: int,
        release_data: bool = True,
        release_lead: float = 0.0,
        flush_stream: Callable[[], None] | None = None,
    ) -> None:
        self._shard_map = shard_map
        self._scheduler = scheduler
        self._emit = emit
        self._enabled = enabled
        self._max_size = max_size
        self._max_count = max_count
        self._release_data = release_data
        self._batches: dict[str, _Batch] = {}
        self.kinesis_records_out = 0
        self._hold = _Hold(self, scheduler, release_lead)
        self._hold_registered = False
        self._flush_stream = flush_stream
        self._flush_on_release = False

    @property
    def buffered_records(self) -> int:
        return sum(len(batch.records) for batch in self._batches.values())

    @property
    def held_records(self) -> int:
        """User records held until the first map load attempt ends."""
        return len(self._hold.records)

    def put(self, record: UserRecord, hash_key: int) -> None:
        """Add one record (new, or back from the retrier) whose hash key is ``hash_key``."""
        # Hot path: the shard map's table read inline, no method call (30 ns per record,
        # 51 vs 81 ns, timeit).
        table = self._shard_map.table
        shard = table.lookup(hash_key) if table is not None else None
        record.predicted_shard = shard
        if shard is None:
            shard_map = self._shard_map
            if shard_map.first_attempt_pending:
                self._hold_record(record, hash_key)
                return
            if shard_map.dormant:
                shard_map.wanted()  # a missing stream's map is tried again only when needed
            self.kinesis_records_out += 1
            self._emit(KinesisRecord.single(record, hash_key))
            return
        if not self._enabled:
            self.kinesis_records_out += 1
            self._emit(KinesisRecord.single(record, hash_key))
            return
        batch = self._batches.get(shard)
        if batch is None:
            batch = self._batches[shard] = _Batch(self, shard, hash_key)
        ehk = record.explicit_hash_key
        key = record.partition_key
        data = record.data
        tags = record.encoded_tags
        max_size = self._max_size
        count = batch.builder.try_add(key, data, ehk, max_size, tags)
        if not count:  # it would not fit: this batch is done, the record starts the next
            self.close_batch(batch)
            batch = self._batches[shard] = _Batch(self, shard, hash_key)
            count = batch.builder.try_add(key, data, ehk, max_size, tags)
        batch.records.append(record)
        if record.expires_at < batch.expires_at:
            batch.expires_at = record.expires_at
        earlier = record.deadline < batch.deadline
        if earlier:
            batch.deadline = record.deadline
        if count >= self._max_count or (count == 1 and batch.builder.size > max_size):
            self.close_batch(batch)  # full, or a lone record too large to aggregate
        elif earlier:
            self._scheduler.call_at(record.deadline, batch)

    def single(self, record: UserRecord, hash_key: int) -> None:
        """Send ``record`` alone and unpredicted (a held record at its release time)."""
        record.predicted_shard = None
        self.kinesis_records_out += 1
        self._emit(KinesisRecord.single(record, hash_key))

    def _hold_record(self, record: UserRecord, hash_key: int) -> None:
        if not self._hold_registered:
            self._hold_registered = True
            # The first attempt is running (the map starts it with the stream), so this only
            # asks to be told when it ends.
            self._shard_map.after_refresh(self._release)
        self._hold.add(record, hash_key)

    def _release(self) -> None:
        """The first map load attempt ended: put the held records again."""
        self._hold_registered = False
        put = self.put
        for _, _, record, hash_key in self._hold.take():
            put(record, hash_key)
        if self._flush_on_release:
            self._flush_on_release = False
            if self._flush_stream is not None:
                self._flush_stream()

    def close_batch(self, batch: _Batch) -> None:
        """Turn ``batch`` into a Kinesis record and hand it on."""
        batch.open = False
        if self._batches.get(batch.shard) is batch:
            del self._batches[batch.shard]
        records = batch.records
        # The scheduler may still hold this batch until its old deadline: keep nothing in it.
        batch.records = []
        self.kinesis_records_out += 1
        if len(records) == 1:
            self._emit(KinesisRecord.single(records[0], batch.first_hash_key))
            return
        first = records[0]
        ehk = first.explicit_hash_key
        blob = batch.builder.encode()
        batch.builder.clear()
        kinesis_record = KinesisRecord(
            cast("list[UserRecordLike]", records),
            blob,
            AGGREGATE_PARTITION_KEY,
            ehk if ehk is not None else str(batch.first_hash_key),
            batch.shard,
            batch.deadline,
            batch.expires_at,
            len(AGGREGATE_PARTITION_KEY),
        )
        kinesis_record.seal(self._release_data)
        self._emit(kinesis_record)

    def close_batches_outside(self, shards: Container[str]) -> None:
        """Close now the open batches of shards not in ``shards`` (a new map dropped them).

        With ``ordering="shard"``: their records were predicted with the old map, so they
        must reach their shard's lane before that lane retires and the lanes of the new
        shards open; see ``OrderedLimiter``.
        """
        for batch in [batch for shard, batch in self._batches.items() if shard not in shards]:
            self.close_batch(batch)

    def flush(self) -> None:
        """Close every open batch now (``Producer.flush`` and shutdown).

        Held records stay held until the first map load attempt ends (at most until their
        deadlines), and the stream is flushed then: see the module's start-up hold.
        """
        for batch in list(self._batches.values()):
            self.close_batch(batch)
        if self._hold.records:
            self._flush_on_release = True

    def statistics(self) -> AggregatorStatistics:
        """A snapshot: records in open aggregates, and held until the first map loads."""
        return AggregatorStatistics(
            aggregating=self.buffered_records, waiting_for_shard_map=self.held_records
        )

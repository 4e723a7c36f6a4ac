"""Aggregator: packs user records bound for the same predicted shard into one Kinesis record.

Each predicted shard of a stream has at most one open batch. A record joins its shard's batch;
the batch closes, becoming a :class:`~aiokpl._core.records.KinesisRecord` handed to the
limiter, when

* the record would push the aggregate past ``aggregation_max_size`` (exact wire size): the
  batch closes *before* the record, which starts the next batch;
* it reaches ``aggregation_max_count`` records;
* the earliest deadline among its records arrives (one scheduler entry per batch, none per
  record).

A record with no predicted shard (no map loaded yet) or with aggregation disabled becomes a
Kinesis record of its own at once. A lone record larger than ``aggregation_max_size`` is sent
alone, raw. The KPL's equivalent is ``aggregator.h`` with ``reducer.h``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._core.aggregation import AggregateBuilder
from .._core.records import AGGREGATE_PARTITION_KEY, KinesisRecord

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

    @property
    def buffered_records(self) -> int:
        return sum(len(batch.records) for batch in self._batches.values())

    def put(self, record: UserRecord, hash_key: int) -> None:
        """Add one record (new, or back from the retrier) whose hash key is ``hash_key``."""
        table = self._shard_map.table  # ShardMap.predict, inlined: this runs once per record
        shard = table.lookup(hash_key) if table is not None else None
        record.predicted_shard = shard
        if shard is None or not self._enabled:
            self.kinesis_records_out += 1
            self._emit(KinesisRecord.single(record, hash_key))
            return
        batch = self._batches.get(shard)
        if batch is None:
            batch = self._batches[shard] = _Batch(self, shard, hash_key)
        ehk = record.explicit_hash_key
        key = record.partition_key
        data = record.data
        max_size = self._max_size
        count = batch.builder.try_add(key, data, ehk, max_size)
        if not count:  # it would not fit: this batch is done, the record starts the next
            self.close_batch(batch)
            batch = self._batches[shard] = _Batch(self, shard, hash_key)
            count = batch.builder.try_add(key, data, ehk, max_size)
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
            records,
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

    def flush(self) -> None:
        """Close every open batch now (``Producer.flush`` and shutdown)."""
        for batch in list(self._batches.values()):
            self.close_batch(batch)

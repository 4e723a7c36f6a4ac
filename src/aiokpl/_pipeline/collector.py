"""Collector: gathers admitted Kinesis records into ``PutRecords`` requests.

One open request per stream. It is sent when

* it holds ``collection_max_count`` records (at most 500, the service limit);
* one more record would take it past ``collection_max_size`` bytes (keys plus data, as the
  service counts): it is sent *before* that record, which starts the next request;
* the records it holds for one predicted shard reach 256 KiB: sending then keeps traffic to a
  shard smooth instead of bursty (KPL ``collector.h``);
* the earliest deadline among its records arrives.

With aggregation on, a record entering the collector gets a short grace, its deadline pushed
to at least now + min(50 ms, 20% of ``record_max_buffered_time``), so it can share a request
with its neighbours (KPL ``pipeline.h``, ``collector_put``). Never past its expiry.

With ``ordering="shard"`` (:class:`OrderedCollector`) a record that comes in already past its
deadline gets no grace: it waited for its shard's previous request to be answered, and every
moment it waits here is a moment its shard sends nothing. The records that one answer frees
are admitted together, so they still share the next request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._core.records import KinesisRecord
from .._core.statistics import CollectorStatistics

if TYPE_CHECKING:
    from .scheduler import Scheduler

__all__ = ("Collector", "OrderedCollector")

SHARD_FLUSH_BYTES = 256 * 1024


class _Request:
    __slots__ = ("collector", "deadline", "open", "records", "shard_bytes", "size")

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.records: list[KinesisRecord] = []
        self.size = 0
        self.shard_bytes: dict[str | None, int] = {}
        self.deadline = float("inf")
        self.open = True

    def on_due(self, now: float) -> None:
        if self.open and self.deadline <= now:
            self.collector.send_current()


class Collector:
    """The collector of one stream.

    Args:
        scheduler: serves request deadlines.
        emit: receives each request's Kinesis records (the sender's ``submit``).
        clock: the producer's clock.
        max_count: ``Config.collection_max_count``.
        max_size: ``Config.collection_max_size``.
        grace: the minimum time a record waits here for company (0 without aggregation).
    """

    def __init__(
        self,
        scheduler: Scheduler,
        emit: Callable[[list[KinesisRecord]], None],
        clock: Callable[[], float],
        *,
        max_count: int,
        max_size: int,
        grace: float,
    ) -> None:
        self._scheduler = scheduler
        self._emit = emit
        self._clock = clock
        self._max_count = max_count
        self._max_size = max_size
        self._grace = grace
        self._current = _Request(self)

    @property
    def buffered_records(self) -> int:
        return len(self._current.records)

    def put(self, record: KinesisRecord) -> None:
        if self._grace:
            floor = self._clock() + self._grace
            if record.deadline < floor:
                record.deadline = floor if floor < record.expires_at else record.expires_at
        request = self._current
        if request.records and request.size + record.size > self._max_size:
            self.send_current()
            request = self._current
        request.records.append(record)
        request.size += record.size
        shard = record.predicted_shard
        shard_bytes = request.shard_bytes.get(shard, 0) + record.size
        request.shard_bytes[shard] = shard_bytes
        if len(request.records) >= self._max_count or (
            shard is not None and shard_bytes >= SHARD_FLUSH_BYTES
        ):
            self.send_current()
        elif record.deadline < request.deadline:
            request.deadline = record.deadline
            self._scheduler.call_at(record.deadline, request)

    def send_current(self) -> None:
        """Send the open request now, if it holds anything."""
        request = self._current
        if not request.records:
            return
        request.open = False
        self._current = _Request(self)
        records, request.records = request.records, []  # the scheduler may still hold it
        self._emit(records)

    flush = send_current

    def statistics(self) -> CollectorStatistics:
        """A snapshot: Kinesis records in the open request."""
        return CollectorStatistics(collecting=self.buffered_records)


class OrderedCollector(Collector):
    """The collector of one stream with ``ordering="shard"``: no grace for late records."""

    def put(self, record: KinesisRecord) -> None:
        if record.deadline <= self._clock():
            grace, self._grace = self._grace, 0.0
            try:
                super().put(record)
            finally:
                self._grace = grace
        else:
            super().put(record)

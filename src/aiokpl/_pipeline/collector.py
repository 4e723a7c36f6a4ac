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

The grace a record gets is the router's to give (``put``'s ``grace``): with
``ordering="shard"`` a record that comes in already past its deadline gets none (see
``_pipeline/ordering.py``).

The collector holds no reference to the sender: ``put`` and ``due`` return the requests to
send, and the stream's router sends them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._core.records import KinesisRecord
from .._core.statistics import CollectorStatistics

if TYPE_CHECKING:
    from .scheduler import Deadlines

__all__ = ("Collector",)

# What put returns when it sends nothing (most puts): no allocation.
_NOTHING: tuple[list[KinesisRecord], ...] = ()

SHARD_FLUSH_BYTES = 256 * 1024


class _Request:
    __slots__ = ("deadline", "open", "records", "shard_bytes", "size")

    def __init__(self) -> None:
        self.records: list[KinesisRecord] = []
        self.size = 0
        self.shard_bytes: dict[str | None, int] = {}
        self.deadline = float("inf")
        self.open = True


class Collector:
    """The collector of one stream.

    Args:
        deadlines: serves request deadlines (each comes back as the router's call of ``due``).
        max_count: ``Config.collection_max_count``.
        max_size: ``Config.collection_max_size``.
    """

    def __init__(self, deadlines: Deadlines, *, max_count: int, max_size: int) -> None:
        self._deadlines = deadlines
        self._max_count = max_count
        self._max_size = max_size
        self._current = _Request()

    @property
    def max_count(self) -> int:
        """The most records a request holds (``Config.collection_max_count``)."""
        return self._max_count

    @property
    def max_size(self) -> int:
        """The most bytes a request holds (``Config.collection_max_size``)."""
        return self._max_size

    @property
    def buffered_records(self) -> int:
        return len(self._current.records)

    def put(
        self, record: KinesisRecord, now: float, grace: float = 0.0
    ) -> Sequence[list[KinesisRecord]]:
        """Add ``record``, whose deadline is pushed to at least ``now + grace`` (never past
        its expiry); returns the requests to send now (none, one, or rarely two: the open
        one, sent before a record that would take it past the size limit, and the new one,
        full at once)."""
        if grace:
            floor = now + grace
            if record.deadline < floor:
                record.deadline = floor if floor < record.expires_at else record.expires_at
        sent: Sequence[list[KinesisRecord]] = _NOTHING
        request = self._current
        if request.records and request.size + record.size > self._max_size:
            sent = [self._take()]
            request = self._current
        request.records.append(record)
        request.size += record.size
        shard = record.predicted_shard
        shard_bytes = request.shard_bytes.get(shard, 0) + record.size
        request.shard_bytes[shard] = shard_bytes
        if len(request.records) >= self._max_count or (
            shard is not None and shard_bytes >= SHARD_FLUSH_BYTES
        ):
            return [*sent, self._take()]
        if record.deadline < request.deadline:
            request.deadline = record.deadline
            self._deadlines.call_at(record.deadline, request)
        return sent

    def due(self, request: _Request, now: float) -> list[KinesisRecord] | None:
        """A request's deadline came: the records to send, if it is still open and due."""
        if request.open and request.deadline <= now:
            return self._take()
        return None

    def flush(self) -> list[KinesisRecord] | None:
        """The open request's records, to send now; ``None`` if it holds nothing."""
        if not self._current.records:
            return None
        return self._take()

    def _take(self) -> list[KinesisRecord]:
        request = self._current
        request.open = False
        self._current = _Request()
        records, request.records = request.records, []  # the scheduler may still hold it
        return records

    def statistics(self) -> CollectorStatistics:
        """A snapshot: Kinesis records in the open request."""
        return CollectorStatistics(collecting=self.buffered_records)

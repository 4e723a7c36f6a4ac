"""Aggregator: packs user records bound for the same predicted shard into one Kinesis record.

Each predicted shard of a stream has at most one open batch. A record joins its shard's batch;
the batch closes, becoming a :class:`~aiokpl._core.records.KinesisRecord` that the method
which closed it returns (the stream's router hands it to the limiter), when

* the record would push the aggregate past ``aggregation_max_size`` (exact wire size): the
  batch closes *before* the record, which starts the next batch;
* it reaches ``aggregation_max_count`` records;
* the earliest deadline among its records arrives (one scheduler entry per batch, none per
  record).

A record with aggregation disabled becomes a Kinesis record of its own at once, and so does a
record with no predicted shard once the stream's first map load attempt has ended without a map
(failed; the next attempts run in the background). A lone record larger than
``aggregation_max_size`` is sent alone, raw (with tags, as an aggregate of one: see
``KinesisRecord.single``). A record's trace context (``Config.tracing``: ``trace_tags``) goes
into its aggregate beside its tags, and a batch closed with one traced record is an aggregate
of one, so that the context travels; a record sent alone (the cases above) goes without it.
The KPL's equivalent is ``aggregator.h`` with ``reducer.h``.

**Start-up hold** (better than the KPL, which sends everything put before its first map
unpredicted: unaggregated and not rate limited, a throttling storm when a producer starts with
a burst). A record put while the stream's *first* map load attempt runs (never loaded, no
attempt failed yet; and its first summary, the router says: ``distribution.py``) is held,
retried records included, *past its buffered deadline*: a cold start (DNS, TLS, then
``ListShards``) commonly takes longer than the buffered time, and every record sent before the
map goes alone. When the attempt ends, the held records are put again, in release-time then arrival
order: predicted and aggregated with the new map, or alone as above if it failed. The first
attempt is bounded (``request_timeout_ms``), and held records stay outstanding, so
``max_outstanding_*`` bound them. Invariants of the hold:

* a held record is never held past its *patience*: its buffered deadline, or halfway to its
  expiry if that is later (half its TTL left to be sent and retried alone), but at most
  ``HOLD_PAST_DEADLINE`` (2 s) past its deadline (a map call starved of connections by a
  hung stream must not keep the records from the sender, which gives one up for them). One scheduler
  entry for the whole hold, at its earliest release time, releases what is due then, to the
  router, which sends it without a prediction (alone; placed first, if it has no key). The
  release time is early by the collector's grace, so the record is sent at it. (The entry
  first arms the release and a second one, a microsecond later, does it: a map that answered
  while the event loop was busy past both times, with the very puts that filled the hold say,
  is installed first);
* ``flush`` does not release the held records: they go when the attempt ends (at most their
  patience), and the stream is flushed then. Sending them at once, unaggregated, would
  recreate the start-up storm in the commonest start-up flush of all: a short program that
  puts a burst and exits (exit flushes);
* holding costs nothing once the first attempt has ended: the check sits on the path of
  records without a prediction only.

The aggregator knows no other stage: the router predicts the shard (``put``'s ``shard``),
decides when to hold (the shard map is the router's), and routes what comes out.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Container
from typing import TYPE_CHECKING, cast

from .._core.encoder import AggregateBuilder
from .._core.records import AGGREGATE_PARTITION_KEY, KinesisRecord, UserRecordLike
from .._core.statistics import AggregatorStatistics

if TYPE_CHECKING:
    from .._record import UserRecord
    from .scheduler import Deadlines

__all__ = ("Aggregator",)


class _Batch:
    """The open aggregate of one predicted shard."""

    __slots__ = (
        "builder",
        "deadline",
        "expires_at",
        "first_hash_key",
        "open",
        "records",
        "shard",
    )

    def __init__(self, shard: str | None, first_hash_key: int) -> None:
        self.shard = shard
        # The aggregate's explicit hash key (KPL: its first record's); records keep none.
        self.first_hash_key = first_hash_key
        self.builder = AggregateBuilder()
        self.records: list[UserRecord] = []
        self.deadline = float("inf")
        self.expires_at = float("inf")
        self.open = True


# The longest a held record waits for the first map past its deadline: a cold start's first
# calls (DNS, TLS, ListShards) take well under it; a map call starved of connections (by a
# stream whose requests hang) must not keep a new stream's records from the sender, which
# frees a connection for them.
HOLD_PAST_DEADLINE = 2.0

# Seconds between noticing that held records are due and releasing them: one turn of the
# event loop, so that a map whose answer is already in (the loop was busy, with the very puts
# that filled the hold, say) is installed first and the records go aggregated.
_RELEASE_TURN = 1e-6


class _Hold:
    """Records waiting for the stream's first map: a heap by deadline, one scheduler entry.

    A record's release time is its deadline, or ``expires_at - patience`` if later. Release
    is in two steps, each a scheduler entry: at ``release - lead - _RELEASE_TURN`` (or later,
    if the loop was late) the hold is armed, and ``_RELEASE_TURN`` after the arming what was
    due at it is released. Under a virtual clock the records go exactly at
    ``release - lead``; on a loop that was busy past both times, the map's answer, if it has
    come, is installed in between.
    """

    __slots__ = ("armed_at", "count", "deadlines", "lead", "next_at", "patience", "records")

    def __init__(self, deadlines: Deadlines, lead: float, patience: float) -> None:
        self.deadlines = deadlines
        # How long before its expiry a record is released at the latest (half its TTL).
        self.patience = patience
        # (release time, arrival number, record, hash key): by release time, then arrival.
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
        release = record.expires_at - self.patience
        if release > deadline + HOLD_PAST_DEADLINE:
            release = deadline + HOLD_PAST_DEADLINE
        if release < deadline:
            release = deadline
        heapq.heappush(self.records, (release, self.count, record, hash_key))
        self.count += 1
        due = release - self.lead
        if due < self.next_at:
            self.next_at = due
            self.deadlines.call_at(due, self)

    def due(self, now: float) -> list[tuple[UserRecord, int]]:
        """The records to release now (with their hash keys), in deadline order."""
        if now < self.next_at:
            return []  # an entry superseded by an earlier one, or by the end of the hold
        armed_at = self.armed_at
        if armed_at is None:
            self.armed_at = now
            self.next_at = now + _RELEASE_TURN
            self.deadlines.call_at(self.next_at, self)
            return []
        self.armed_at = None
        self.next_at = math.inf
        records = self.records
        lead = self.lead
        released = []
        while records and records[0][0] - lead <= armed_at:
            _, _, record, hash_key = heapq.heappop(records)
            released.append((record, hash_key))
        if records:
            self.next_at = records[0][0] - lead
            self.deadlines.call_at(self.next_at, self)
        return released

    def take(self) -> list[tuple[float, int, UserRecord, int]]:
        """Every held record, in release-time then arrival order; the hold is left empty."""
        records, self.records = self.records, []
        self.next_at = math.inf
        self.armed_at = None
        records.sort()
        return records


class Aggregator:
    """The aggregator of one stream.

    Args:
        deadlines: serves batch deadlines and the hold's release times (each comes back as
            the router's call of ``due``).
        enabled: ``Config.aggregation_enabled``.
        max_size: ``Config.aggregation_max_size``.
        max_count: ``Config.aggregation_max_count``.
        release_data: let aggregated records drop their data while the encoded aggregate
            holds it (see ``KinesisRecord.seal``); off when failed records must keep
            their data for the caller.
        release_lead: how long before its release time a held record is released: the
            collector's grace, so that it is sent at it.
        hold_patience: a held record is released at the latest this long before its
            expiry, if that is after its deadline (half ``record_ttl_ms``); ``inf``: at its
            deadline.
    """

    def __init__(
        self,
        deadlines: Deadlines,
        *,
        enabled: bool,
        max_size: int,
        max_count: int,
        release_data: bool = True,
        release_lead: float = 0.0,
        hold_patience: float = math.inf,
    ) -> None:
        self._deadlines = deadlines
        self._enabled = enabled
        self._max_size = max_size
        self._max_count = max_count
        self._release_data = release_data
        # By predicted shard; None: a stream that places records itself, aggregated anyway.
        self._batches: dict[str | None, _Batch] = {}
        self.kinesis_records_out = 0
        self._hold = _Hold(deadlines, release_lead, hold_patience)
        # A flush came while records were held: the stream is flushed when they are released.
        self.flush_on_release = False

    @property
    def buffered_records(self) -> int:
        return sum(len(batch.records) for batch in self._batches.values())

    @property
    def held_records(self) -> int:
        """User records held until the first map load attempt ends."""
        return len(self._hold.records)

    def put(
        self, record: UserRecord, hash_key: int, shard: str | None
    ) -> KinesisRecord | list[KinesisRecord] | None:
        """Add one record (new, or back from the retrier) predicted for ``shard`` (``None``:
        none, the stream places records itself and ``aggregation_on_auto_streams``); returns
        the Kinesis record(s) it closed: mostly none, rarely two (the full batch, closed
        before the record, and the record alone, too large to aggregate)."""
        record.predicted_shard = shard
        if not self._enabled:
            self.kinesis_records_out += 1
            return KinesisRecord.single(record, hash_key)
        batch = self._batches.get(shard)
        if batch is None:
            batch = self._batches[shard] = _Batch(shard, hash_key)
        ehk = record.explicit_hash_key
        key = record.partition_key
        data = record.data
        tags = record.encoded_tags
        if record.trace_tags:  # its trace context (Config.tracing): only an aggregate has room
            tags += record.trace_tags
        max_size = self._max_size
        count = batch.builder.try_add(key, data, ehk, max_size, tags)
        closed = None
        if not count:  # it would not fit: this batch is done, the record starts the next
            closed = self._close(batch)
            batch = self._batches[shard] = _Batch(shard, hash_key)
            count = batch.builder.try_add(key, data, ehk, max_size, tags)
        batch.records.append(record)
        if record.expires_at < batch.expires_at:
            batch.expires_at = record.expires_at
        earlier = record.deadline < batch.deadline
        if earlier:
            batch.deadline = record.deadline
        if count >= self._max_count or (count == 1 and batch.builder.size > max_size):
            full = self._close(batch)  # full, or a lone record too large to aggregate
            return full if closed is None else [closed, full]
        if earlier:
            self._deadlines.call_at(record.deadline, batch)
        return closed

    def single(self, record: UserRecord, hash_key: int) -> KinesisRecord:
        """``record`` alone and unpredicted (no map, or a held record at its release time)."""
        record.predicted_shard = None
        self.kinesis_records_out += 1
        return KinesisRecord.single(record, hash_key)

    def hold(self, record: UserRecord, hash_key: int) -> None:
        """Hold ``record`` until the stream's first map load attempt ends (see the module)."""
        self._hold.add(record, hash_key)

    def take_held(self) -> list[tuple[UserRecord, int]]:
        """The first map load attempt ended: every held record, to put again, in deadline
        then arrival order."""
        return [(record, hash_key) for _, _, record, hash_key in self._hold.take()]

    def due(
        self, item: _Batch | _Hold, now: float
    ) -> tuple[list[KinesisRecord], list[tuple[UserRecord, int]]]:
        """A deadline of ``item`` came: a batch closes if it is still open and due (the
        Kinesis record it becomes, first); the hold releases what is due (second: the records
        with their hash keys, for the router to send without a prediction)."""
        if isinstance(item, _Batch):
            if item.open and item.deadline <= now:
                return [self._close(item)], []
            return [], []
        return [], item.due(now)

    def _close(self, batch: _Batch) -> KinesisRecord:
        """Turn ``batch`` into a Kinesis record."""
        batch.open = False
        if self._batches.get(batch.shard) is batch:
            del self._batches[batch.shard]
        records = batch.records
        # The scheduler may still hold this batch until its old deadline: keep nothing in it.
        batch.records = []
        self.kinesis_records_out += 1
        if len(records) == 1 and (
            # A lone record goes as it is, unless it carries a trace context (which only an
            # aggregate has room for) and fits one: then it is an aggregate of one.
            not records[0].trace_tags or batch.builder.size > self._max_size
        ):
            return KinesisRecord.single(records[0], batch.first_hash_key)
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
        return kinesis_record

    def close_batches_outside(self, shards: Container[str]) -> list[KinesisRecord]:
        """Close now the open batches of shards not in ``shards`` (a new map dropped them).

        With ``ordering="shard"``: their records were predicted with the old map, so they
        must reach their shard's lane before that lane retires and the lanes of the new
        shards open; see ``_pipeline/ordering.py``.
        """
        return [
            self._close(batch)
            for batch in [batch for shard, batch in self._batches.items() if shard not in shards]
        ]

    def take_open(self) -> list[UserRecord]:
        """Empty every open batch without closing it: its user records, oldest batch first,
        each in put order (the stream now places records itself: they go one by one)."""
        taken: list[UserRecord] = []
        for batch in self._batches.values():
            batch.open = False
            taken += batch.records
            batch.records = []
            batch.builder.clear()
        self._batches = {}
        return taken

    def open_size(self, shard: str) -> int:
        """The encoded size of ``shard``'s open aggregate (0 without one)."""
        batch = self._batches.get(shard)
        return batch.builder.size if batch is not None else 0

    def flush(self) -> list[KinesisRecord]:
        """Close every open batch now (``Producer.flush`` and shutdown).

        Held records stay held until the first map load attempt ends (at most until their
        deadlines), and the stream is flushed then (``flush_on_release``): see the module's
        start-up hold.
        """
        closed = [self._close(batch) for batch in list(self._batches.values())]
        if self._hold.records:
            self.flush_on_release = True
        return closed

    def statistics(self) -> AggregatorStatistics:
        """A snapshot: records in open aggregates, and held until the first map loads."""
        return AggregatorStatistics(
            aggregating=self.buffered_records, waiting_for_shard_map=self.held_records
        )

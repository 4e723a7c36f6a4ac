"""Lanes: the limiter of a stream with ``ordering="shard"``.

The rules and why are in ``_core/ordering.py``; the router's side of them (which stage a
retried record goes back to) is the policy in ``_pipeline/ordering.py``. This module holds the
limiter's side: :class:`OrderedLimiter` and its :class:`OrderedShardLimiter` lanes, which take
the place of ``limiter.Limiter`` and ``limiter.ShardLimiter`` in that mode, so the default mode
pays nothing. Invariants of a lane:

* its queue is a FIFO in put order (records come from the aggregator's one open batch per
  shard, so in put order; retries are pushed back at the head by :meth:`OrderedLimiter.settle`);
* at most one of its Kinesis records is *in flight* (admitted, not yet settled); the head is
  admitted only when none is, and not while the lane is *held* by an older overlapping lane
  (a retired shard's, or the lane of records without a prediction);
* the expiry rules are the default's: expired records fail first, at their TTL; records
  inside the send margin are never admitted, and the next record behind them may go (they
  are doomed: a gap, never a late record);
* a retired lane (its shard left the map) is kept until it is empty, then forgotten; lanes it
  held are drained at once.

Like every limiter, each call returns a :data:`~aiokpl._pipeline.limiter.Flow`: what it
admitted and what expired.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Container
from typing import TYPE_CHECKING

from .._core.ordering import overlaps
from .._core.records import KinesisRecord
from .limiter import Flow, Limiter, ShardLimiter

if TYPE_CHECKING:
    from .._core.shards import ShardRange
    from .scheduler import Deadlines

__all__ = ("OrderedLimiter", "OrderedShardLimiter")


class OrderedShardLimiter(ShardLimiter):
    """A shard's lane with ``ordering="shard"``: a FIFO queue, one Kinesis record in flight.

    Attributes:
        in_flight: the Kinesis record admitted and not yet settled, if any.
        held: an older overlapping lane has records: admit nothing (set by the limiter).
        span: the hash-key range of a retired lane's shard (``None``: unknown, or the lane
            of records without a prediction: it overlaps everything).
    """

    __slots__ = ("held", "in_flight", "span")

    def __init__(self, records_per_second: float, bytes_per_second: float) -> None:
        super().__init__(records_per_second, bytes_per_second)
        self.queue: deque[KinesisRecord] = deque()
        self.in_flight: KinesisRecord | None = None
        self.held = False
        self.span: ShardRange | None = None

    @property
    def empty(self) -> bool:
        """Nothing queued, nothing in flight."""
        return self.in_flight is None and not self.queue

    def drain(
        self,
        now: float,
        admit: Callable[[KinesisRecord], None],
        expire: Callable[[KinesisRecord], None],
        *,
        margin: float = 0.0,
        force: bool = False,
    ) -> None:
        """Expire what is past its TTL; then, if the lane is free, admit its next record."""
        queue = self.queue
        if not queue:
            return
        if self._records_rate.recovering:
            self._apply_rates(now)
        while queue and queue[0].expires_at <= now:
            expire(queue.popleft())
        if not queue:
            return
        if self.in_flight is not None or self.held:
            self.starved = True  # waiting for its turn is this mode's form of overload
            return
        # Records too close to their TTL to be sent in time stay queued until it passes: they
        # will fail, so the first record after them may go (a gap, not an overtake).
        limit = now + margin
        index = 0
        while index < len(queue) and queue[index].expires_at <= limit:
            index += 1
        if index == len(queue):
            return
        record = queue[index]
        if force:
            self.bucket.force_take((1, record.size), now)
        elif not self._take(record, now):
            self.starved = True
            return
        del queue[index]
        self.admitted += 1
        self.in_flight = record
        self.starved = False
        admit(record)

    def put(
        self,
        record: KinesisRecord,
        now: float,
        admit: Callable[[KinesisRecord], None],
        expire: Callable[[KinesisRecord], None],
        *,
        margin: float = 0.0,
    ) -> bool:
        """Queue at the tail, then drain. Returns whether anything stays queued."""
        self.queue.append(record)
        self.drain(now, admit, expire, margin=margin)
        return bool(self.queue)


class OrderedLimiter(Limiter[OrderedShardLimiter]):
    """The limiter of one stream with ``ordering="shard"``: one lane per predicted shard.

    Args:
        hash_range: the hash-key range of a shard id (open, or closed recently), from the
            shard map; it decides which lanes a retired lane holds.
        See :class:`Limiter` for the others.
    """

    def __init__(
        self,
        deadlines: Deadlines,
        clock: Callable[[], float],
        *,
        records_per_second: float,
        bytes_per_second: float,
        drain_interval: float,
        send_margin: float = 0.0,
        admit_batch: float = 0.0,
        hash_range: Callable[[str], ShardRange | None],
    ) -> None:
        super().__init__(
            deadlines,
            clock,
            lanes=OrderedShardLimiter,
            records_per_second=records_per_second,
            bytes_per_second=bytes_per_second,
            drain_interval=drain_interval,
            send_margin=send_margin,
            admit_batch=admit_batch,
        )
        self._hash_range = hash_range
        # Lanes of shards gone from the map that still hold records, oldest retired first.
        self.retired: dict[str, OrderedShardLimiter] = {}

    def shard_limiter(self, shard: str | None) -> OrderedShardLimiter:
        new = shard is not None and shard not in self.shards
        lane = super().shard_limiter(shard)
        if new:
            assert shard is not None
            lane.held = self._holds(self._hash_range(shard), None)
        return lane

    def _holds(self, span: ShardRange | None, lane: OrderedShardLimiter | None) -> bool:
        """Whether a lane of range ``span`` must wait: the lane of unpredicted records has
        records, or a lane retired before ``lane`` (all of them, for an open lane) overlaps."""
        unmapped = self.unmapped
        if unmapped is not None and unmapped is not lane and not unmapped.empty:
            return True
        for retired in self.retired.values():
            if retired is lane:
                return False  # the lanes retired after it are younger
            if overlaps(retired.span, span):
                return True
        return False

    def _update_holds(self, now: float) -> None:
        """Recompute every lane's hold (the set of older lanes changed); drain those freed."""
        freed = []
        for shard, lane in self.shards.items():
            span = lane.span if shard in self.retired else self._hash_range(shard)
            held = self._holds(span, lane)
            if lane.held and not held and lane.queue:
                freed.append(shard)
            lane.held = held
        for shard in freed:
            self._drain_lane(shard, self.shards[shard], now)

    def _drain_lane(
        self, shard: str | None, lane: OrderedShardLimiter, now: float, *, force: bool = False
    ) -> None:
        lane.drain(now, self._admitted.append, self._expire, margin=self.send_margin, force=force)
        if lane.queue:
            self._waiting.add(shard)
            self._schedule(now)
        else:
            self._waiting.discard(shard)
            if lane.in_flight is None:
                self._lane_emptied(shard, lane, now)

    def _schedule(self, now: float) -> None:
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self._deadlines.call_at(self._next_drain(now), None)

    def due(self, item: object, now: float) -> Flow:
        self._drain_scheduled = False
        flow = self.drain(now)
        if self._waiting:
            self._schedule(now)
        return flow

    def _lane_emptied(self, shard: str | None, lane: OrderedShardLimiter, now: float) -> None:
        """``lane`` has nothing left: if it held others (retired, or unpredicted), free them."""
        if shard is None:
            if any(other.held for other in self.shards.values()):
                self._update_holds(now)
        elif shard in self.retired:
            del self.retired[shard]
            del self.shards[shard]
            self._ceilings.pop(shard, None)
            self._update_holds(now)

    def put(self, record: KinesisRecord, now: float) -> Flow:
        shard = record.predicted_shard
        lane = self.shards.get(shard) if shard is not None else None
        if lane is None:
            lane = self.shard_limiter(shard)
        lane.queue.append(record)
        # Through _drain_lane, as every change of a lane: it keeps the set of waiting lanes,
        # the drain schedule and the holds up to date.
        self._drain_lane(shard, lane, now)
        return self._flow()

    def drain(self, now: float, *, force: bool = False) -> Flow:
        for shard in list(self._waiting):
            self._drain_lane(shard, self.shard_limiter(shard), now, force=force)
        return self._flow()

    def settle(self, record: KinesisRecord, again: KinesisRecord | None, now: float) -> Flow:
        """``record``, in flight, was answered and judged (or expired unsent): its lane is
        free. ``again`` (what of it is retried) goes back to the lane's head, before any
        later record; then the lane's next record is admitted if it can be."""
        shard = record.predicted_shard
        lane = self.shards.get(shard) if shard is not None else self.unmapped
        if lane is None or lane.in_flight is not record:
            # Not in flight here (cannot happen): resend it, last rather than never.
            return self.put(again, now) if again is not None else self._flow()
        lane.in_flight = None
        if again is not None:
            lane.queue.appendleft(again)
        self._drain_lane(shard, lane, now)
        return self._flow()

    def take_unmapped(self, now: float) -> tuple[list[KinesisRecord], Flow]:
        records, _ = super().take_unmapped(now)
        unmapped = self.unmapped
        if records and unmapped is not None and unmapped.empty:
            self._lane_emptied(None, unmapped, now)
        return records, self._flow()

    def prune(self, open_shards: Container[str], now: float) -> Flow:
        """A new map: lanes of shards gone from it retire (kept until empty, holding the
        lanes they overlap), or are forgotten if empty already."""
        changed = False
        for shard, lane in list(self.shards.items()):
            if shard in open_shards or shard in self.retired:
                continue
            if lane.empty:
                del self.shards[shard]
                self._ceilings.pop(shard, None)
                continue
            lane.span = self._hash_range(shard)
            self.retired[shard] = lane
            changed = True
        if changed:
            self._update_holds(now)
        return self._flow()

    @property
    def lanes_in_flight(self) -> int:
        """Lanes with a Kinesis record in flight."""
        lanes = list(self.shards.values())
        if self.unmapped is not None:
            lanes.append(self.unmapped)
        return sum(1 for lane in lanes if lane.in_flight is not None)

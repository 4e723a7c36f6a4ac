"""Limiter: keeps each shard under its records/s and bytes/s limits, before the wire.

One :class:`ShardLimiter` per predicted shard owns a two-stream token bucket (records, bytes)
and a queue of Kinesis records, oldest first (ordered by expiry, which is put order for new
records and puts a retried record ahead of those put after it). ``drain`` runs in two phases
(seed 000, KPL ``limiter.h``):

1. **expired first**: every queued record whose TTL has passed fails with ``"Expired"``
   without taking tokens, however many tokens there are;
2. **admit oldest first** while the bucket grants ``(1, size)``; stop at the first record
   that does not fit, so order is kept.

An aggregate costs one record token, whatever it holds: Kinesis counts it as one record.

Drains happen on ``put`` for the record's own shard (a record that fits goes straight
through, with no added latency), and every ``drain_interval_ms`` while anything is queued
(one scheduler entry for the whole limiter, no timers per shard). A *starved* shard (its
last drain left records waiting for tokens) admits in batches: nothing until ``admit_batch``
seconds (``record_max_buffered_time_ms``) after that drain, or until its bucket holds that
long's tokens (or enough for what waits) if sooner, then all the tokens gathered. Its
records are past their buffered time, so the collector sends what is admitted at once; a
trickle admitted every drain interval became one request per shard per 25 ms whatever the
rate (one or two records each at a producer's share of a shared shard), and a fleet of
producers spent its connections and the server on requests instead of records: four
coordinated producers with a 0.5 s round trip delivered 40% of their ceilings
(``tests/test_fleet_feedback.py``). ``flush`` admits everything
that can still be sent at once, debiting the bucket so later traffic still pays for it.

**Goodput under sustained overload** (where the KPL collapses). When more is offered than a
shard takes for longer than ``record_ttl_ms``, the oldest queued records are always about to
expire. The KPL admits them anyway, and spends the shard's budget on records that then expire
between the limiter and the wire. Here no token is spent on a record that cannot be sent in
time:

* a record is admitted only if it has more than ``send_margin`` seconds to live: the
  collector's grace plus one drain interval of slack (45 ms by default). A record inside its
  margin is never admitted; it stays queued (taking no tokens and holding back nobody) until
  its TTL passes, so its ``"Expired"`` result still comes at its TTL, not before;
* a record admitted but then found expired before it was sent (a stream backing off, say) has
  its tokens given back (:meth:`Limiter.refund`).

So under overload the limit is spent on records that are sent, and only the excess expires.
Why the oldest first, and not newest first (adaptive LIFO) or a CoDel-like early drop: the
order of a partition key's records is kept; a record that is admitted has its retries ahead of
later records; and once doomed records cost nothing, every order delivers the same amount. The
price is latency under overload: what is delivered has waited nearly its TTL. Callers who
prefer to wait rather than lose records lower ``max_outstanding_records``, so ``put_record``
waits on back-pressure before records can grow old (``docs/guarantees.md``).

**Without a shard map** (not loaded yet, or ``ListShards`` and ``DescribeStream`` denied)
records have no predicted shard. The KPL sends them unlimited; here they share one
stream-level :class:`ShardLimiter` at one shard's rates, with the same throttle feedback, so a
stream without a map is slower but never storms.

Better than the KPL as well:

* **throttle feedback** (the KPL's ``add_error`` is an empty TODO): when Kinesis throttles a
  shard, that shard's rates are cut (see ``AdaptiveRate``) and recover gradually, so several
  producers sharing a shard settle instead of storming;
* **no stall on large records**: a record larger than the bucket's byte capacity can never be
  granted normally; it is admitted when the bucket is full, and the debt is paid by waiting.

A shard's *ceiling* is the rate throttle feedback recovers to: the configured rate, unless
coordination (``aiokpl.coordination``) sets another with :meth:`Limiter.set_ceiling`; the
feedback keeps working under it, and shards first seen later start at the ceiling set for them,
if any.

**Strict order per shard** (``Config(ordering="shard")``; the rules and why are in
``_core/ordering.py``): :class:`OrderedLimiter` and its :class:`OrderedShardLimiter` lanes
replace the two classes above, which are left untouched so the default mode pays nothing.
Invariants of a lane:

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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Container
from typing import TYPE_CHECKING, cast

from sortedcontainers import SortedKeyList

from .._core.backoff import AdaptiveRate
from .._core.ordering import overlaps
from .._core.records import KinesisRecord
from .._core.statistics import LimiterStatistics
from .._core.token_bucket import TokenBucket

if TYPE_CHECKING:
    from .._core.shards import ShardRange
    from .scheduler import Scheduler

__all__ = ("Limiter", "OrderedLimiter", "OrderedShardLimiter", "ShardLimiter")


def _expiry(record: KinesisRecord) -> float:
    return record.expires_at


class ShardLimiter:
    """Rate limits and queue of one shard (or of a stream without a map)."""

    __slots__ = (
        "_bytes_rate",
        "_records_rate",
        "admitted",
        "batch",
        "bucket",
        "held_until",
        "queue",
        "refunded",
        "starved",
    )

    def __init__(self, records_per_second: float, bytes_per_second: float) -> None:
        self.bucket = TokenBucket(
            [(records_per_second, records_per_second), (bytes_per_second, bytes_per_second)]
        )
        # Oldest first; records of equal expiry keep their arrival order.
        self.queue: SortedKeyList = SortedKeyList(key=_expiry)
        self._records_rate = AdaptiveRate(records_per_second)
        self._bytes_rate = AdaptiveRate(bytes_per_second)
        self.admitted = 0  # Kinesis records that took tokens
        self.refunded = 0  # of those, records whose tokens came back (expired unsent)
        # The last drain left records that could still be sent waiting for tokens: the
        # shard is offered more than its rate (what expires now is overload, not bad luck).
        self.starved = False
        # A starved shard admits in batches: at most once every ``batch`` seconds (see drain).
        self.batch = 0.0
        self.held_until = -float("inf")

    def throttled(self, now: float, sent_at: float | None = None) -> None:
        """Kinesis throttled a request to this shard sent at ``sent_at``: lower its rates to
        a little below what it accepted lately (once per round trip: see ``AdaptiveRate``)."""
        if self._records_rate.cut(now, sent_at):
            self._bytes_rate.cut(now, sent_at)
            self._apply_rates(now)

    def accepted(self, records: int, size: int, now: float) -> None:
        """Kinesis stored ``records`` Kinesis records (``size`` bytes) of this shard's."""
        self._records_rate.accepted(records, now)
        self._bytes_rate.accepted(size, now)

    def set_ceiling(self, records_per_second: float, bytes_per_second: float, now: float) -> None:
        """Change the rates throttle feedback recovers to; a rate above the new ceiling drops to it.

        The bucket's capacities follow (one second of the ceiling, as at creation), so a
        shard idle for a while bursts at most its share, not the configured rate.
        """
        self._records_rate.configured = records_per_second
        self._bytes_rate.configured = bytes_per_second
        self.bucket.set_capacity(0, records_per_second, now)
        self.bucket.set_capacity(1, bytes_per_second, now)
        self._apply_rates(now)

    def current_rates(self, now: float) -> tuple[float, float]:
        """The (records/s, bytes/s) in force at ``now``: the ceiling, or less after throttling."""
        return self._records_rate.rate(now), self._bytes_rate.rate(now)

    @property
    def ceiling(self) -> tuple[float, float]:
        """The (records/s, bytes/s) throttle feedback recovers to."""
        return self._records_rate.configured, self._bytes_rate.configured

    def _apply_rates(self, now: float) -> None:
        self.bucket.set_rate(0, self._records_rate.rate(now), now)
        self.bucket.set_rate(1, self._bytes_rate.rate(now), now)

    @property
    def rates(self) -> tuple[float, float]:
        rates = self.bucket.rates
        return rates[0], rates[1]

    def refund(self, record: KinesisRecord, now: float) -> None:
        """``record`` took tokens but was never sent: give them back."""
        self.refunded += 1
        self.bucket.refund((1, record.size), now)

    def _take(self, record: KinesisRecord, now: float) -> bool:
        bucket = self.bucket
        if bucket.try_take((1, record.size), now):
            return True
        # A record larger than the byte capacity is admitted into a full bucket.
        capacity = bucket.capacities[1]
        if record.size <= capacity:
            return False
        tokens = bucket.tokens(now)
        if tokens[0] >= 1 and tokens[1] >= capacity:
            bucket.force_take((1, record.size), now)
            return True
        return False

    def _batch_wait(self, waiting: int, head: KinesisRecord, now: float) -> float:
        """How long a starved shard holds off: until its bucket holds a batch (``batch``
        seconds of its rates, or what is waiting if less; ``head``'s size per record), at
        most ``batch`` seconds. A shard short of tokens for a moment waits only that moment."""
        bucket = self.bucket
        rates, capacities = bucket.rates, bucket.capacities
        batch = self.batch
        records = min(float(waiting), rates[0] * batch, capacities[0])
        size = min(waiting * float(head.size), rates[1] * batch, capacities[1])
        return min(batch, bucket.time_until((records, size), now))

    def drain(
        self,
        now: float,
        admit: Callable[[KinesisRecord], None],
        expire: Callable[[KinesisRecord], None],
        *,
        margin: float = 0.0,
        force: bool = False,
    ) -> None:
        """Expire what is past its TTL, then admit oldest first what the bucket grants.

        Records with ``margin`` seconds or less to live are not admitted (they stay queued
        until their TTL passes); ``force`` admits the others whatever the bucket holds.
        """
        queue = self.queue
        if not queue:
            return
        if self._records_rate.recovering:
            self._apply_rates(now)
        while queue and queue[0].expires_at <= now:
            expire(queue.pop(0))
        if now < self.held_until and not force:
            return  # starved: the tokens gather into the next batch
        # The records too close to their TTL to be sent in time are the queue's head.
        first = queue.bisect_key_right(now + margin)
        while first < len(queue):
            record = queue[first]
            if force:
                self.bucket.force_take((1, record.size), now)
            elif not self._take(record, now):
                self.starved = True
                if self.batch:
                    self.held_until = now + self._batch_wait(len(queue) - first, record, now)
                return
            del queue[first]
            self.admitted += 1
            admit(record)
        self.starved = False

    def put(
        self,
        record: KinesisRecord,
        now: float,
        admit: Callable[[KinesisRecord], None],
        expire: Callable[[KinesisRecord], None],
        *,
        margin: float = 0.0,
    ) -> bool:
        """Admit at once if possible, else queue. Returns whether anything stays queued."""
        if not self.queue and record.expires_at > now + margin:
            if self._records_rate.recovering:
                self._apply_rates(now)
            if self._take(record, now):
                self.admitted += 1
                admit(record)
                return False
        self.queue.add(record)
        self.drain(now, admit, expire, margin=margin)
        return bool(self.queue)


class Limiter:
    """The limiter of one stream: a :class:`ShardLimiter` per predicted shard, and one for
    records without a prediction (no shard map)."""

    def __init__(
        self,
        scheduler: Scheduler,
        admit: Callable[[KinesisRecord], None],
        expire: Callable[[KinesisRecord], None],
        clock: Callable[[], float],
        *,
        records_per_second: float,
        bytes_per_second: float,
        drain_interval: float,
        send_margin: float = 0.0,
        admit_batch: float = 0.0,
    ) -> None:
        self._scheduler = scheduler
        self._admit = admit
        self._expire = expire
        self._clock = clock
        self._records_per_second = records_per_second
        self._bytes_per_second = bytes_per_second
        self._drain_interval = drain_interval
        self.send_margin = send_margin
        self.admit_batch = admit_batch
        self.shards: dict[str, ShardLimiter] = {}
        # Records with no predicted shard: limited per stream, at one shard's rates.
        self.unmapped: ShardLimiter | None = None
        self._ceilings: dict[str, tuple[float, float]] = {}
        self._waiting: set[str | None] = set()
        self._drain_scheduled = False

    # The per-shard state this limiter keeps (the ordered limiter keeps lanes).
    _shard_limiter: type[ShardLimiter] = ShardLimiter

    def _limiter_of(self, shard: str | None) -> ShardLimiter:
        if shard is None:
            limiter = self.unmapped
            if limiter is None:
                limiter = self.unmapped = self._shard_limiter(
                    self._records_per_second, self._bytes_per_second
                )
                limiter.batch = self.admit_batch
            return limiter
        limiter = self.shards.get(shard)
        if limiter is None:
            records, size = self._ceilings.get(
                shard, (self._records_per_second, self._bytes_per_second)
            )
            limiter = self.shards[shard] = self._shard_limiter(records, size)
            limiter.batch = self.admit_batch
        return limiter

    def put(self, record: KinesisRecord) -> None:
        shard = record.predicted_shard
        limiter = self.shards.get(shard) if shard is not None else None  # most puts
        if limiter is None:
            limiter = self._limiter_of(shard)
        now = self._clock()
        if limiter.put(record, now, self._admit, self._expire, margin=self.send_margin):
            self._waiting.add(shard)
            if not self._drain_scheduled:
                self._drain_scheduled = True
                self._scheduler.call_at(self._next_drain(now), self)

    def on_due(self, now: float) -> None:
        self._drain_scheduled = False
        self.drain(now)
        if self._waiting:
            self._drain_scheduled = True
            self._scheduler.call_at(self._next_drain(now), self)

    def _next_drain(self, now: float) -> float:
        """One drain interval on, or sooner if a queued record's TTL ends first, so that a
        record that can no longer be sent fails at its TTL exactly."""
        when = now + self._drain_interval
        for shard in self._waiting:
            limiter = self._limiter_of(shard)
            queue = limiter.queue
            if queue and queue[0].expires_at < when:
                when = queue[0].expires_at
            if now < limiter.held_until < when:
                when = limiter.held_until  # its batch is due: admit it on time
        return when

    def drain(self, now: float, *, force: bool = False) -> None:
        for shard in list(self._waiting):
            limiter = self._limiter_of(shard)
            limiter.drain(now, self._admit, self._expire, margin=self.send_margin, force=force)
            if not limiter.queue:
                self._waiting.discard(shard)

    def refund(self, record: KinesisRecord) -> None:
        """``record`` was admitted, then expired before it was sent: return its tokens."""
        limiter = self.limiter_of(record)
        if limiter is not None:
            limiter.refund(record, self._clock())

    def limiter_of(self, record: KinesisRecord) -> ShardLimiter | None:
        """The :class:`ShardLimiter` that limits ``record``, if there is one yet."""
        shard = record.predicted_shard
        return self.shards.get(shard) if shard is not None else self.unmapped

    def take_unmapped(self) -> list[KinesisRecord]:
        """Remove and return the records queued without a predicted shard (oldest first).

        Once a shard map has loaded they can be predicted, aggregated and limited per shard
        instead of trickling out at the stream-level limit.
        """
        unmapped = self.unmapped
        if unmapped is None or not unmapped.queue:
            return []
        records = list(unmapped.queue)
        unmapped.queue.clear()
        unmapped.starved = False
        self._waiting.discard(None)
        return records

    def prune(self, open_shards: Container[str]) -> None:
        """Forget the state of shards gone from the map (closed by resharding) whose queue is
        empty, so a stream resharded many times keeps no state for its dead shards."""
        for shard in [s for s, limiter in self.shards.items() if s not in open_shards]:
            if not self.shards[shard].queue:
                del self.shards[shard]
                self._ceilings.pop(shard, None)

    def set_ceiling(self, shard: str, records_per_second: float, bytes_per_second: float) -> None:
        """Set the ceiling of ``shard``, now if it is limited already, else when it first is."""
        self._ceilings[shard] = (records_per_second, bytes_per_second)
        limiter = self.shards.get(shard)
        if limiter is not None:
            limiter.set_ceiling(records_per_second, bytes_per_second, self._clock())

    def throttled(self, shard: str | None, now: float, sent_at: float | None = None) -> None:
        """Kinesis throttled records predicted for ``shard`` (``None``: without a map), in a
        request sent at ``sent_at``."""
        limiter = self.shards.get(shard) if shard is not None else self.unmapped
        if limiter is not None:
            limiter.throttled(now, sent_at)

    def accepted(self, shard: str | None, records: int, size: int, now: float) -> None:
        """Kinesis stored ``records`` (``size`` bytes) predicted for ``shard``."""
        limiter = self.shards.get(shard) if shard is not None else self.unmapped
        if limiter is not None:
            limiter.accepted(records, size, now)

    @property
    def queued(self) -> int:
        return sum(len(self._limiter_of(shard).queue) for shard in self._waiting)

    def statistics(self) -> LimiterStatistics:
        """A snapshot of the queues and rates, by shard (queues: the non-empty ones)."""
        shards = self.shards
        unmapped = self.unmapped
        return LimiterStatistics(
            queued=self.queued,
            queued_by_shard={s: len(sl.queue) for s, sl in shards.items() if sl.queue},
            rates_by_shard={s: sl.rates for s, sl in shards.items()},
            ceilings_by_shard={s: sl.ceiling for s, sl in shards.items()},
            unmapped_rate=unmapped.rates if unmapped is not None else None,
        )


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


class OrderedLimiter(Limiter):
    """The limiter of one stream with ``ordering="shard"``: one lane per predicted shard.

    Args:
        hash_range: the hash-key range of a shard id (open, or closed recently), from the
            shard map; it decides which lanes a retired lane holds.
        See :class:`Limiter` for the others.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        admit: Callable[[KinesisRecord], None],
        expire: Callable[[KinesisRecord], None],
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
            scheduler,
            admit,
            expire,
            clock,
            records_per_second=records_per_second,
            bytes_per_second=bytes_per_second,
            drain_interval=drain_interval,
            send_margin=send_margin,
            admit_batch=admit_batch,
        )
        self._hash_range = hash_range
        self.shards: dict[str, OrderedShardLimiter] = {}  # type: ignore[assignment]
        self.unmapped: OrderedShardLimiter | None = None
        # Lanes of shards gone from the map that still hold records, oldest retired first.
        self.retired: dict[str, OrderedShardLimiter] = {}

    _shard_limiter = OrderedShardLimiter

    def _limiter_of(self, shard: str | None) -> OrderedShardLimiter:
        new = shard is not None and shard not in self.shards
        lane = cast("OrderedShardLimiter", super()._limiter_of(shard))
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
        lane.drain(now, self._admit, self._expire, margin=self.send_margin, force=force)
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
            self._scheduler.call_at(self._next_drain(now), self)

    def on_due(self, now: float) -> None:
        self._drain_scheduled = False
        self.drain(now)
        if self._waiting:
            self._schedule(now)

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

    def put(self, record: KinesisRecord) -> None:
        shard = record.predicted_shard
        lane = self.shards.get(shard) if shard is not None else None
        if lane is None:
            lane = self._limiter_of(shard)
        lane.queue.append(record)
        # Through _drain_lane, as every change of a lane: it keeps the set of waiting lanes,
        # the drain schedule and the holds up to date.
        self._drain_lane(shard, lane, self._clock())

    def drain(self, now: float, *, force: bool = False) -> None:
        for shard in list(self._waiting):
            self._drain_lane(shard, self._limiter_of(shard), now, force=force)

    def settle(self, record: KinesisRecord, again: KinesisRecord | None) -> None:
        """``record``, in flight, was answered and judged (or expired unsent): its lane is
        free. ``again`` (what of it is retried) goes back to the lane's head, before any
        later record; then the lane's next record is admitted if it can be."""
        shard = record.predicted_shard
        lane = self.shards.get(shard) if shard is not None else self.unmapped
        if lane is None or lane.in_flight is not record:
            # Not in flight here (cannot happen): resend it, last rather than never.
            if again is not None:
                self.put(again)
            return
        lane.in_flight = None
        if again is not None:
            lane.queue.appendleft(again)
        self._drain_lane(shard, lane, self._clock())

    def take_unmapped(self) -> list[KinesisRecord]:
        records = super().take_unmapped()
        unmapped = self.unmapped
        if records and unmapped is not None and unmapped.empty:
            self._lane_emptied(None, unmapped, self._clock())
        return records

    def prune(self, open_shards: Container[str]) -> None:
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
            self._update_holds(self._clock())

    @property
    def lanes_in_flight(self) -> int:
        """Lanes with a Kinesis record in flight."""
        lanes = list(self.shards.values())
        if self.unmapped is not None:
            lanes.append(self.unmapped)
        return sum(1 for lane in lanes if lane.in_flight is not None)

"""A shard's state in the limiter: its token bucket, its rates and its queue.

:class:`ShardLimiter` keeps one predicted shard (or a stream without a map) under its rates:
a two-stream token bucket (records, bytes), the adaptive rates throttle feedback moves, and a
queue of Kinesis records, oldest first. With ``ordering="shard"`` its
:class:`OrderedShardLimiter` subclass is a *lane*: a FIFO queue with at most one Kinesis record
in flight, and :class:`OrderGate` decides which lanes an older lane holds. The rules, and why,
are in ``limiter.py``'s docstring (drains, send margin, batches of a starved shard) and
``_core/ordering.py`` (lanes).

Not a stage: no clock, no scheduler, no other stage; the :class:`~aiokpl._pipeline.limiter.
Limiter` calls it with ``now``, and each ``put`` or ``drain`` returns what it admitted and
what expired (a :data:`Flow`).
Until a shard's first answer (at most ``FIRST_ANSWER_WAIT`` after its bucket was first taken
from), its bucket gives only what it held then, no refill; at the answer, the refill of that
time is given up (``_first_answer``): the server's bucket refills from when it served the
first request, so this one never runs ahead of it.

Invariants of a lane:

* its queue is a FIFO in put order (records come from the aggregator's one open batch per
  shard, so in put order; retries are pushed back at the head by
  :meth:`OrderedShardLimiter.settle`);
* at most one of its Kinesis records is *in flight* (admitted, not yet settled); the head is
  admitted only when none is, and not while the lane is *held* by an older overlapping lane
  (a retired shard's, or the lane of records without a prediction);
* the expiry rules are the default's: expired records fail first, at their TTL; records
  inside the send margin are never admitted, and the next record behind them may go (they
  are doomed: a gap, never a late record).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias

from sortedcontainers import SortedKeyList

from .._core.backoff import AdaptiveRate
from .._core.ordering import overlaps
from .._core.records import KinesisRecord
from .._core.token_bucket import TokenBucket

if TYPE_CHECKING:
    from .._core.shards import ShardRange

__all__ = ("NO_FLOW", "Flow", "OrderGate", "OrderedShardLimiter", "ShardLimiter")

Flow: TypeAlias = tuple[Sequence[KinesisRecord], Sequence[KinesisRecord]]
"""What a drain returns: the Kinesis records it admitted (oldest first), and those whose TTL
passed while they were queued."""

NO_FLOW: Flow = ((), ())
"""Nothing admitted, nothing expired: no allocation."""


# How long a shard's bucket gives only what it held, waiting for the shard's first answer.
FIRST_ANSWER_WAIT = 1.0


def _expiry(record: KinesisRecord) -> float:
    return record.expires_at


def next_on_grid(now: float, step: float, phase: float = 0.0) -> float:
    """The first time after ``now`` that is ``phase`` plus a multiple of ``step`` (``now``
    itself on the grid, a microsecond's rounding aside, gives the next one).

    A shard with a backlog of a batch or more holds it until such a time, so all of a
    stream's starved shards admit at the same instants and the collector sends their records
    in one request, not one request per shard at phases of their own (see
    ``ShardLimiter.drain``). The phase is the stream's, drawn at random: processes on one host
    share the monotonic clock, and a fleet's batches on one grid would reach the shards
    together."""
    return (math.floor((now - phase) / step + 1e-6) + 1) * step + phase


class ShardLimiter:
    """Rate limits and queue of one shard (or of a stream without a map)."""

    __slots__ = (
        "_bytes_rate",
        "_first_take",
        "_heard",
        "_records_rate",
        "admitted",
        "batch",
        "bucket",
        "held_until",
        "phase",
        "queue",
        "refunded",
        "starved",
    )

    # Outside strict order nothing is in flight here (a lane's own field shadows this).
    in_flight: KinesisRecord | None = None

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
        self.phase = 0.0  # the batches' times are ``phase`` plus multiples of ``batch``
        self.held_until = -float("inf")
        # Until the shard's first answer: when the bucket was first taken from (see _take).
        self._first_take: float | None = None
        self._heard = False

    @property
    def empty(self) -> bool:
        """Nothing queued (nor, for a lane, in flight)."""
        return not self.queue

    def take(self) -> list[KinesisRecord]:
        """Remove and return what is queued, oldest first (the shard is not starved then)."""
        records = list(self.queue)
        self.queue.clear()
        self.starved = False
        return records

    def _first_answer(self, now: float) -> None:
        """The shard's first answer: the refill held back since the first take is given up.

        The server's bucket refills from when it served the first request, which lies
        between this producer's first take and this answer: counting from the answer keeps
        this bucket behind the server's, never ahead (ahead by that lag, a producer on quiet
        shards had its first second's records throttled: 112-214 of 3,000 over HTTP)."""
        self._heard = True
        if self._first_take is not None:
            bucket = self.bucket
            refill = self._refill_since_first_take(now)
            held = [min(r, max(0.0, b)) for r, b in zip(refill, bucket.tokens(now), strict=True)]
            bucket.force_take(held, now)

    def _refill_since_first_take(self, now: float) -> tuple[float, float]:
        """The (records, bytes) the bucket's rates gave since its first take."""
        assert self._first_take is not None
        elapsed = max(0.0, now - self._first_take)
        rates = self.bucket.rates
        return rates[0] * elapsed, rates[1] * elapsed

    def throttled(self, now: float, sent_at: float | None = None) -> None:
        """Kinesis throttled a request to this shard sent at ``sent_at``: lower its rates to
        a little below what it accepted lately (once per round trip: see ``AdaptiveRate``),
        and give up the tokens its bucket saved.

        Those tokens are credit saved while this producer sent less than its rates allowed: a
        producer that joins a busy shard sends its whole load under its allowance, its bucket
        stays full (one second of the ceiling), and after the cut it spent that second of
        credit at once on its retries and backlog, into the shard that had just refused it
        (34% of a fleet's attempts throttled in the second after a producer joined,
        ``tests/test_fleet_feedback.py``). After a cut the shard gets the new rate, not a
        burst: TCP's rule for a window it did not use (RFC 7661). A *starved* shard keeps up
        to one batch of the new rate: it spends its tokens at every batch, so what it holds
        is the batch it is gathering, not savings (emptied, every cut cost it up to a batch,
        2.6% of the capacity with a 0.2 s round trip in ``tests/fleet.py --latency 0.1``).
        """
        if not self._heard:
            self._first_answer(now)
        if self._records_rate.cut(now, sent_at):
            self._bytes_rate.cut(now, sent_at)
            self._apply_rates(now)
            self.bucket.empty(now, self.batch if self.starved else 0.0)

    def accepted(self, records: int, size: int, now: float) -> None:
        """Kinesis stored ``records`` Kinesis records (``size`` bytes) of this shard's."""
        if not self._heard:
            self._first_answer(now)
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
        since = self._first_take
        if not self._heard and since is not None and now - since < FIRST_ANSWER_WAIT:
            # Until the first answer (for at most FIRST_ANSWER_WAIT), only what the bucket
            # held at the first take: no refill (see _first_answer).
            records, size = bucket.tokens(now)
            refill_records, refill_size = self._refill_since_first_take(now)
            if records - refill_records < 1 or size - refill_size < min(
                record.size, bucket.capacities[1]
            ):
                return False
        if bucket.try_take((1, record.size), now):
            if since is None:
                self._first_take = now
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

    def _batch_due(self, waiting: int, head: KinesisRecord, now: float) -> float:
        """When a starved shard admits again. A backlog of a batch or more (``batch``
        seconds of its rates; ``head``'s size per record) waits for the stream's next batch
        time (:func:`next_on_grid`), then takes what the bucket gathered: all its starved
        shards admit together. A shard short of tokens for fewer records waits only until
        they fit, at most ``batch`` seconds."""
        bucket = self.bucket
        rates, capacities = bucket.rates, bucket.capacities
        batch = self.batch
        size = waiting * float(head.size)
        if waiting >= rates[0] * batch or size >= rates[1] * batch:
            return next_on_grid(now, batch, self.phase)
        wanted = (min(float(waiting), capacities[0]), min(size, capacities[1]))
        return now + min(batch, bucket.time_until(wanted, now))

    def drain(self, now: float, margin: float = 0.0, force: bool = False) -> Flow:
        """Expire what is past its TTL, then admit oldest first what the bucket grants; returns
        what it admitted and what expired.

        Records with ``margin`` seconds or less to live are not admitted (they stay queued
        until their TTL passes); ``force`` admits the others whatever the bucket holds.
        """
        queue = self.queue
        if not queue:
            return NO_FLOW
        if self._records_rate.recovering:
            self._apply_rates(now)
        expired: Sequence[KinesisRecord] = ()
        if queue[0].expires_at <= now:
            gone = [queue.pop(0)]
            while queue and queue[0].expires_at <= now:
                gone.append(queue.pop(0))
            expired = gone
        if now < self.held_until and not force:
            return (), expired  # starved: the tokens gather into the next batch
        admitted: list[KinesisRecord] = []
        # The records too close to their TTL to be sent in time are the queue's head.
        first = queue.bisect_key_right(now + margin)
        while first < len(queue):
            record = queue[first]
            if force:
                self.bucket.force_take((1, record.size), now)
            elif not self._take(record, now):
                self.starved = True
                if self.batch:
                    self.held_until = self._batch_due(len(queue) - first, record, now)
                return admitted, expired
            del queue[first]
            self.admitted += 1
            admitted.append(record)
        self.starved = False
        return admitted, expired

    def put(self, record: KinesisRecord, now: float, margin: float = 0.0) -> Flow:
        """Admit at once if possible, else queue (and drain); returns what it admitted and
        what expired."""
        if not self.queue and record.expires_at > now + margin:
            if self._records_rate.recovering:
                self._apply_rates(now)
            if self._take(record, now):
                self.admitted += 1
                return (record,), ()
        self.queue.add(record)
        return self.drain(now, margin)


class OrderedShardLimiter(ShardLimiter):
    """A shard's lane with ``ordering="shard"``: a FIFO queue, one Kinesis record in flight.

    Attributes:
        in_flight: the Kinesis record admitted and not yet settled, if any.
        held: an older overlapping lane has records: admit nothing (set by the
            :class:`OrderGate`).
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

    def drain(self, now: float, margin: float = 0.0, force: bool = False) -> Flow:
        """Expire what is past its TTL; then, if the lane is free, admit its next record.
        Returns what it admitted (one record at most) and what expired."""
        queue = self.queue
        if not queue:
            return NO_FLOW
        if self._records_rate.recovering:
            self._apply_rates(now)
        expired: Sequence[KinesisRecord] = ()
        if queue[0].expires_at <= now:
            gone = [queue.popleft()]
            while queue and queue[0].expires_at <= now:
                gone.append(queue.popleft())
            expired = gone
        if not queue:
            return (), expired
        if self.in_flight is not None or self.held:
            self.starved = True  # waiting for its turn is this mode's form of overload
            return (), expired
        # Records too close to their TTL to be sent in time stay queued until it passes: they
        # will fail, so the first record after them may go (a gap, not an overtake).
        limit = now + margin
        index = 0
        while index < len(queue) and queue[index].expires_at <= limit:
            index += 1
        if index == len(queue):
            return (), expired
        record = queue[index]
        if force:
            self.bucket.force_take((1, record.size), now)
        elif not self._take(record, now):
            self.starved = True
            return (), expired
        del queue[index]
        self.admitted += 1
        self.in_flight = record
        self.starved = False
        return (record,), expired

    def put(self, record: KinesisRecord, now: float, margin: float = 0.0) -> Flow:
        """Queue at the tail, then drain."""
        self.queue.append(record)
        return self.drain(now, margin)

    def settle(self, again: Sequence[KinesisRecord]) -> None:
        """Its record in flight was settled: the lane is free, and ``again`` (what of that
        record is retried, in order) goes back to its head, before any later record."""
        self.in_flight = None
        self.queue.extendleft(reversed(again))


class OrderGate:
    """Whether a lane may admit now, with ``ordering="shard"``: the lanes an older lane holds.

    A lane is *held* (admits nothing, see :meth:`OrderedShardLimiter.drain`) while the lane of
    records without a prediction has records, or while a lane retired before it (every
    retired lane, for an open lane) overlaps its hash-key range: a shard's records wait for
    those of its parents, and of the shards it merged from, still queued or in flight.

    The gate decides and the limiter acts: each method says what changed (lanes freed), and
    the limiter drains them. It keeps the retired lanes, oldest retired first, until they
    are empty.

    Args:
        hash_range: the hash-key range of a shard id (open, or closed recently), from the
            shard map.
    """

    __slots__ = ("_hash_range", "retired")

    def __init__(self, hash_range: Callable[[str], ShardRange | None]) -> None:
        self._hash_range = hash_range
        # Lanes of shards gone from the map that still hold records, oldest retired first.
        self.retired: dict[str, OrderedShardLimiter] = {}

    def holds(
        self,
        span: ShardRange | None,
        lane: OrderedShardLimiter | None,
        unmapped: OrderedShardLimiter | None,
    ) -> bool:
        """Whether a lane of range ``span`` must wait: the lane of unpredicted records
        (``unmapped``) has records, or a lane retired before ``lane`` (all of them, for an
        open lane) overlaps."""
        if unmapped is not None and unmapped is not lane and not unmapped.empty:
            return True
        for retired in self.retired.values():
            if retired is lane:
                return False  # the lanes retired after it are younger
            if overlaps(retired.span, span):
                return True
        return False

    def open(
        self, shard: str, lane: OrderedShardLimiter, unmapped: OrderedShardLimiter | None
    ) -> None:
        """``lane`` is new, for ``shard``: held if an older lane overlaps it."""
        lane.held = self.holds(self._hash_range(shard), None, unmapped)

    def retire(self, shard: str, lane: OrderedShardLimiter) -> None:
        """``shard`` left the map with records in ``lane``: it holds the lanes it overlaps
        until it is empty (then :meth:`emptied`)."""
        lane.span = self._hash_range(shard)
        self.retired[shard] = lane

    def emptied(self, shard: str | None, lanes: Mapping[str, OrderedShardLimiter]) -> bool:
        """The lane of ``shard`` (``None``: of unpredicted records) has nothing left: whether
        the holds may change (it may have held others). A retired lane is forgotten here."""
        if shard is None:
            return any(lane.held for lane in lanes.values())
        return self.retired.pop(shard, None) is not None

    def update(
        self, lanes: Mapping[str, OrderedShardLimiter], unmapped: OrderedShardLimiter | None
    ) -> list[str]:
        """Recompute the hold of every lane in ``lanes`` (the older lanes changed); returns
        the shards freed with records queued, in ``lanes``' order (to drain)."""
        freed = []
        retired = self.retired
        for shard, lane in lanes.items():
            span = lane.span if shard in retired else self._hash_range(shard)
            held = self.holds(span, lane, unmapped)
            if lane.held and not held and lane.queue:
                freed.append(shard)
            lane.held = held
        return freed

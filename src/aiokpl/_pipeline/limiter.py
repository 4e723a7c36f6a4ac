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
last drain left records waiting for tokens) admits in batches. A backlog of a batch or more
(``admit_batch`` seconds, ``record_max_buffered_time_ms``, of its rates) waits for the
stream's next batch time (a multiple of ``admit_batch`` plus the stream's phase), then
admits all the tokens gathered, so every starved shard of the stream admits at the same
instants and the collector puts their records in one request; fewer records wait only until
their tokens come (at most ``admit_batch``). Its
records are past their buffered time, so the collector sends what is admitted at once; a
trickle admitted every drain interval became one request per shard per 25 ms whatever the
rate (one or two records each at a producer's share of a shared shard), and a fleet of
producers spent its connections and the server on requests instead of records: four
coordinated producers with a 0.5 s round trip delivered 40% of their ceilings
(``tests/test_fleet_feedback.py``). Batches at phases of their own still made one request
per shard per batch; on one grid, a producer with a backlog on 2 shards sends half the
requests (``tests/fleet.py``: 8 producers, 141 → 75 calls a second, same delivery).
``flush`` admits everything that can still be sent at once, debiting the bucket so later
traffic still pays for it.

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
``_core/ordering.py``): :class:`OrderedLimiter` and its lanes
(``shard_limiter.OrderedShardLimiter``) take the place of :class:`Limiter` and its
``ShardLimiter``; the default mode runs those, untouched, so it pays nothing. Invariants of the
ordered limiter: a retired lane (its shard left the map) is kept until it is empty, then
forgotten, and lanes it held are drained at once; the lane of records without a prediction
holds every shard's lane while it has records.

A shard's own state (bucket, rates, queue, lane) is ``shard_limiter.py``.

The limiter knows no other stage: each call returns what it admitted (for the collector) and
what expired (to fail), a :data:`Flow`, and the stream's router routes them.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

from .._core.ordering import overlaps
from .._core.records import KinesisRecord
from .._core.statistics import LimiterStatistics
from .shard_limiter import OrderedShardLimiter, ShardLimiter

if TYPE_CHECKING:
    from .._core.config import Config
    from .._core.shards import ShardRange
    from .scheduler import Deadlines

__all__ = ("Flow", "Limiter", "OrderedLimiter", "ShardLimiter", "limits_of")

Flow: TypeAlias = tuple[Sequence[KinesisRecord], Sequence[KinesisRecord]]
"""What a limiter call returns: the Kinesis records it admitted (oldest first), and those
whose TTL passed while they were queued."""

# What a call returns when nothing was admitted nor expired: no allocation.
_NO_FLOW: Flow = ((), ())


L = TypeVar("L", bound=ShardLimiter)


def limits_of(config: Config, grace: float, phase: float) -> dict[str, Any]:
    """A stream's limiter settings from ``config``: ``grace`` is the collector's, ``phase``
    in [0, 1) places the batches' grid."""
    batch = config.record_max_buffered_time_ms / 1000
    return {
        "records_per_second": config.rate_limit_records_per_sec_per_shard,
        "bytes_per_second": config.rate_limit_bytes_per_sec_per_shard,
        "drain_interval": config.drain_interval_ms / 1000,
        # What a record needs to live on at admission to reach the wire in time: the
        # collector's grace, plus one drain interval of slack for the event loop.
        "send_margin": grace + config.drain_interval_ms / 1000,
        # A shard with a backlog admits a batch per buffered time, not a trickle per drain:
        # its records are past their deadline, so each trickle would be a request.
        "admit_batch": batch,
        # Every starved shard of the stream admits on one grid of those times (one request
        # for all of them), at a phase of the stream's own (see ``next_on_grid``).
        "batch_phase": phase * batch,
    }


class Limiter(Generic[L]):
    """The limiter of one stream: an ``L`` per predicted shard (a :class:`ShardLimiter`, or
    with ``ordering="shard"`` a lane), and one for records without a prediction (no map).

    Args:
        deadlines: serves the drains (each comes back as the router's call of ``due``).
        clock: the producer's clock, for :meth:`set_ceiling` only.
        lanes: the class of the per-shard state, ``L``.
        records_per_second: ``Config.rate_limit_records_per_sec_per_shard``.
        bytes_per_second: ``Config.rate_limit_bytes_per_sec_per_shard``.
        drain_interval: ``Config.drain_interval_ms``, in seconds.
        send_margin: what a record needs to live on at admission (see the module).
        admit_batch: how long a starved shard gathers tokens (see the module).
        batch_phase: where the starved shards' common batch times fall, in ``[0,
            admit_batch)``: ``batch_phase`` plus multiples of ``admit_batch``.
    """

    def __init__(
        self,
        deadlines: Deadlines,
        clock: Callable[[], float],
        *,
        lanes: type[L],
        records_per_second: float,
        bytes_per_second: float,
        drain_interval: float,
        send_margin: float = 0.0,
        admit_batch: float = 0.0,
        batch_phase: float = 0.0,
    ) -> None:
        self._deadlines = deadlines
        # Only for set_ceiling, which coordination calls: every other method is given ``now``.
        self._clock = clock
        # What the current call admitted and expired: returned by it (see _flow).
        self._admitted: list[KinesisRecord] = []
        self._expired: list[KinesisRecord] = []
        # User records expired from a starved shard's queue (overload), until taken.
        self._overloaded = 0
        self._records_per_second = records_per_second
        self._bytes_per_second = bytes_per_second
        self._drain_interval = drain_interval
        self.send_margin = send_margin
        self.admit_batch = admit_batch
        self.batch_phase = batch_phase
        self._lanes = lanes
        self.shards: dict[str, L] = {}
        # Records with no predicted shard: limited per stream, at one shard's rates (without a
        # map), or at the stream's (a stream that places records itself: set_stream_ceiling).
        self.unmapped: L | None = None
        self._stream_ceiling: tuple[float, float] | None = None
        self._ceilings: dict[str, tuple[float, float]] = {}
        self._waiting: set[str | None] = set()
        self._drain_scheduled = False

    def shard_limiter(self, shard: str | None) -> L:
        """The state of ``shard`` (``None``: of records without a prediction), created at
        its ceiling if it is new."""
        if shard is None:
            limiter = self.unmapped
            if limiter is None:
                records, size = self._stream_ceiling or (
                    self._records_per_second,
                    self._bytes_per_second,
                )
                limiter = self.unmapped = self._lanes(records, size)
                limiter.batch, limiter.phase = self.admit_batch, self.batch_phase
            return limiter
        limiter = self.shards.get(shard)
        if limiter is None:
            records, size = self._ceilings.get(
                shard, (self._records_per_second, self._bytes_per_second)
            )
            limiter = self.shards[shard] = self._lanes(records, size)
            limiter.batch, limiter.phase = self.admit_batch, self.batch_phase
        return limiter

    def _expire(self, record: KinesisRecord) -> None:
        """The expiry callback of the shard limiters (they expire before they admit, so a
        shard starved by its previous drain is starved still)."""
        self._expired.append(record)
        shard = record.predicted_shard
        limiter = self.shards.get(shard) if shard is not None else self.unmapped
        if limiter is not None and limiter.starved:
            self._overloaded += len(record.records)

    def take_overloaded(self) -> int:
        """User records expired from starved shards (offered more than they take) since the
        last call: what the stream's overload warning counts."""
        overloaded, self._overloaded = self._overloaded, 0
        return overloaded

    def _flow(self) -> Flow:
        """What the call admitted and expired; the outboxes start empty again."""
        admitted, expired = self._admitted, self._expired
        if not admitted and not expired:
            return _NO_FLOW
        self._admitted = []
        self._expired = []
        return admitted, expired

    def put(self, record: KinesisRecord, now: float) -> Flow:
        """Admit ``record`` at once if its shard's bucket allows, else queue it; returns what
        was admitted (to collect) and what expired (to fail)."""
        shard = record.predicted_shard
        limiter = self.shards.get(shard) if shard is not None else None  # most puts
        if limiter is None:
            limiter = self.shard_limiter(shard)
        admitted = self._admitted
        if limiter.put(record, now, admitted.append, self._expire, margin=self.send_margin):
            self._waiting.add(shard)
            if not self._drain_scheduled:
                self._drain_scheduled = True
                self._deadlines.call_at(self._next_drain(now), None)
        return self._flow()

    def due(self, item: object, now: float) -> Flow:
        """The drain interval came (``item`` is the limiter's one entry): drain."""
        self._drain_scheduled = False
        flow = self.drain(now)
        if self._waiting:
            self._drain_scheduled = True
            self._deadlines.call_at(self._next_drain(now), None)
        return flow

    def _next_drain(self, now: float) -> float:
        """One drain interval on, or sooner if a queued record's TTL ends first, so that a
        record that can no longer be sent fails at its TTL exactly."""
        when = now + self._drain_interval
        for shard in self._waiting:
            limiter = self.shard_limiter(shard)
            queue = limiter.queue
            if queue and queue[0].expires_at < when:
                when = queue[0].expires_at
            if now < limiter.held_until < when:
                when = limiter.held_until  # its batch is due: admit it on time
        return when

    def drain(self, now: float, *, force: bool = False) -> Flow:
        """Drain every shard with records waiting (``force``: whatever their tokens)."""
        admit, expire = self._admitted.append, self._expire
        for shard in list(self._waiting):
            limiter = self.shard_limiter(shard)
            limiter.drain(now, admit, expire, margin=self.send_margin, force=force)
            if not limiter.queue:
                self._waiting.discard(shard)
        return self._flow()

    def refund(self, record: KinesisRecord, now: float) -> None:
        """``record`` was admitted, then expired before it was sent: return its tokens."""
        limiter = self.limiter_of(record)
        if limiter is not None:
            limiter.refund(record, now)

    def limiter_of(self, record: KinesisRecord) -> L | None:
        """The :class:`ShardLimiter` that limits ``record``, if there is one yet."""
        shard = record.predicted_shard
        return self.shards.get(shard) if shard is not None else self.unmapped

    def settle(self, record: KinesisRecord, again: Sequence[KinesisRecord], now: float) -> Flow:
        """Outside strict order nothing is in flight to settle (:class:`OrderedLimiter`
        keeps lanes): what is retried is queued again, by its expiry."""
        if len(again) == 1:
            return self.put(again[0], now)  # the common case: no lists to join
        admitted: list[KinesisRecord] = []
        expired: list[KinesisRecord] = []
        for kinesis_record in again:
            flow = self.put(kinesis_record, now)
            admitted += flow[0]
            expired += flow[1]
        return (admitted, expired) if admitted or expired else _NO_FLOW

    def take_unmapped(self, now: float) -> tuple[list[KinesisRecord], Flow]:
        """Remove and return the records queued without a predicted shard (oldest first).

        Once a shard map has loaded they can be predicted, aggregated and limited per shard
        instead of trickling out at the stream-level limit.
        """
        unmapped = self.unmapped
        if unmapped is None or not unmapped.queue:
            return [], _NO_FLOW
        records = list(unmapped.queue)
        unmapped.queue.clear()
        unmapped.starved = False
        self._waiting.discard(None)
        return records, self._flow()

    def prune(self, open_shards: Container[str], now: float) -> Flow:
        """Forget the state of shards gone from the map (closed by resharding) whose queue is
        empty, so a stream resharded many times keeps no state for its dead shards."""
        for shard in [s for s, limiter in self.shards.items() if s not in open_shards]:
            if not self.shards[shard].queue:
                del self.shards[shard]
                self._ceilings.pop(shard, None)
        return _NO_FLOW

    def set_ceiling(self, shard: str, records_per_second: float, bytes_per_second: float) -> None:
        """Set the ceiling of ``shard``, now if it is limited already, else when it first is."""
        self._ceilings[shard] = (records_per_second, bytes_per_second)
        limiter = self.shards.get(shard)
        if limiter is not None:
            limiter.set_ceiling(records_per_second, bytes_per_second, self._clock())

    def set_stream_ceiling(self, shards: int | None, now: float) -> None:
        """Limit records without a predicted shard at ``shards`` shards' rates (a stream that
        places records itself: the service spreads them over its shards), or at one shard's
        (``None``: records go unpredicted only for want of a map)."""
        ceiling = None
        if shards is not None:
            ceiling = (self._records_per_second * shards, self._bytes_per_second * shards)
        if ceiling == self._stream_ceiling:
            return
        self._stream_ceiling = ceiling
        if self.unmapped is not None:
            records, size = ceiling or (self._records_per_second, self._bytes_per_second)
            self.unmapped.set_ceiling(records, size, now)

    def take_queued(self, now: float) -> list[KinesisRecord]:
        """Remove and return every record queued for a predicted shard, oldest first by
        shard, those in flight left alone (a stream that now places records itself: the
        router sends them again unpredicted, or with ``ordering="shard"`` fails them)."""
        taken: list[KinesisRecord] = []
        for shard, limiter in self.shards.items():
            if limiter.queue:
                taken += limiter.queue
                limiter.queue.clear()
                limiter.starved = False
                self._waiting.discard(shard)
        return taken

    def room(self, shard: str, now: float) -> float:
        """The bytes ``shard`` could take now: its bucket's balance less what waits in its
        queue (a full second of its ceiling for a shard not limited yet)."""
        limiter = self.shards.get(shard)
        if limiter is None:
            return self._ceilings.get(shard, (self._records_per_second, self._bytes_per_second))[1]
        queued: int = sum(record.size for record in limiter.queue)
        return limiter.bucket.tokens(now)[1] - queued

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
        return sum(len(self.shard_limiter(shard).queue) for shard in self._waiting)

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
        batch_phase: float = 0.0,
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
            batch_phase=batch_phase,
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

    def take_queued(self, now: float) -> list[KinesisRecord]:
        taken = super().take_queued(now)
        for shard, lane in list(self.shards.items()):
            if lane.in_flight is None:
                self._lane_emptied(shard, lane, now)  # a retired lane is done with
        return taken

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

    def settle(self, record: KinesisRecord, again: Sequence[KinesisRecord], now: float) -> Flow:
        """``record``, in flight, was answered and judged (or expired unsent): its lane is
        free. ``again`` (what of it is retried, in order) goes back to the lane's head, before
        any later record; then the lane's next record is admitted if it can be."""
        shard = record.predicted_shard
        lane = self.shards.get(shard) if shard is not None else self.unmapped
        if lane is None or lane.in_flight is not record:
            # Not in flight here (cannot happen): resend it, last rather than never.
            return super().settle(record, again, now)
        lane.in_flight = None
        lane.queue.extendleft(reversed(again))
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

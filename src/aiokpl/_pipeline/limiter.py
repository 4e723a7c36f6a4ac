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
``_core/ordering.py``): the same :class:`Limiter`, given a gate
(``shard_limiter.OrderGate``), keeps a lane per shard (``shard_limiter.OrderedShardLimiter``:
a FIFO queue, one record in flight) in place of a ``ShardLimiter``; the default mode has no
gate and its shards no lanes, so it pays nothing. The gate decides which lanes an older lane
holds; the limiter drains those it frees. Invariants with a gate: a retired lane (its shard
left the map) is kept until it is empty, then forgotten, and lanes it held are drained at
once; the lane of records without a prediction holds every shard's lane while it has
records; every change of a lane (a put, a drain, a settlement, a lane freed) goes through
``_drain_lane``, which keeps the set of waiting lanes, the drain schedule and the holds up
to date.

A shard's own state (bucket, rates, queue, lane) and the gate are ``shard_limiter.py``.

The limiter knows no other stage: each call builds and returns what it admitted (for the
collector) and what expired (to fail), a :data:`Flow`, from what its shards' drains return;
the stream's router routes them.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from .._core.records import KinesisRecord
from .._core.statistics import LimiterStatistics
from .shard_limiter import NO_FLOW, Flow, OrderedShardLimiter, OrderGate, ShardLimiter

if TYPE_CHECKING:
    from .._core.config import Config
    from .scheduler import Deadlines

__all__ = ("Flow", "Limiter", "Limits", "OrderGate", "ShardLimiter", "limits_of")


@dataclass(frozen=True, slots=True)
class Limits:
    """A stream's limiter settings (:func:`limits_of` reads them from a ``Config``).

    Attributes:
        records_per_second: ``Config.rate_limit_records_per_sec_per_shard``.
        bytes_per_second: ``Config.rate_limit_bytes_per_sec_per_shard``.
        drain_interval: ``Config.drain_interval_ms``, in seconds.
        send_margin: what a record needs to live on at admission (see the module).
        admit_batch: how long a starved shard gathers tokens (see the module).
        batch_phase: where the starved shards' common batch times fall, in ``[0,
            admit_batch)``: ``batch_phase`` plus multiples of ``admit_batch``.
    """

    records_per_second: float
    bytes_per_second: float
    drain_interval: float
    send_margin: float = 0.0
    admit_batch: float = 0.0
    batch_phase: float = 0.0


def limits_of(config: Config, grace: float, phase: float) -> Limits:
    """A stream's limiter settings from ``config``: ``grace`` is the collector's, ``phase``
    in [0, 1) places the batches' grid."""
    batch = config.record_max_buffered_time_ms / 1000
    return Limits(
        records_per_second=config.rate_limit_records_per_sec_per_shard,
        bytes_per_second=config.rate_limit_bytes_per_sec_per_shard,
        drain_interval=config.drain_interval_ms / 1000,
        # What a record needs to live on at admission to reach the wire in time: the
        # collector's grace, plus one drain interval of slack for the event loop.
        send_margin=grace + config.drain_interval_ms / 1000,
        # A shard with a backlog admits a batch per buffered time, not a trickle per drain:
        # its records are past their deadline, so each trickle would be a request.
        admit_batch=batch,
        # Every starved shard of the stream admits on one grid of those times (one request
        # for all of them), at a phase of the stream's own (see ``next_on_grid``).
        batch_phase=phase * batch,
    )


def _expiry(record: KinesisRecord) -> float:
    return record.expires_at


def _joined(first: Flow, then: Flow) -> Flow:
    """``first``, then ``then``: one flow, in that order."""
    if not then[0] and not then[1]:
        return first
    if not first[0] and not first[1]:
        return then
    return [*first[0], *then[0]], [*first[1], *then[1]]


class Limiter:
    """The limiter of one stream: a :class:`ShardLimiter` per predicted shard (with a
    ``gate``, a lane: ``ordering="shard"``), and one for records without a prediction.

    Args:
        deadlines: serves the drains (each comes back as the router's call of ``due``).
        clock: the producer's clock, for :meth:`set_ceiling` only.
        limits: the stream's settings.
        gate: strict order per shard: the shards' states are lanes, and the gate holds a
            lane while an older one overlapping it has records (``None``: the default).
    """

    def __init__(
        self,
        deadlines: Deadlines,
        clock: Callable[[], float],
        limits: Limits,
        gate: OrderGate | None = None,
    ) -> None:
        self._deadlines = deadlines
        # Only for set_ceiling, which coordination calls: every other method is given ``now``.
        self._clock = clock
        # User records expired from a starved shard's queue (overload), until taken.
        self._overloaded = 0
        self.limits = limits
        self.gate = gate
        self._lanes: type[ShardLimiter] = ShardLimiter if gate is None else OrderedShardLimiter
        self.shards: dict[str, ShardLimiter] = {}
        # Records with no predicted shard: limited per stream, at one shard's rates (without a
        # map), or at the stream's (a stream that places records itself: set_stream_ceiling).
        self.unmapped: ShardLimiter | None = None
        self._stream_ceiling: tuple[float, float] | None = None
        self._ceilings: dict[str, tuple[float, float]] = {}
        self._waiting: set[str | None] = set()
        self._drain_scheduled = False

    def _rates(self) -> tuple[float, float]:
        limits = self.limits
        return limits.records_per_second, limits.bytes_per_second

    def _new_shard(self, records_per_second: float, bytes_per_second: float) -> ShardLimiter:
        shard = self._lanes(records_per_second, bytes_per_second)
        shard.batch, shard.phase = self.limits.admit_batch, self.limits.batch_phase
        return shard

    def shard_limiter(self, shard: str | None) -> ShardLimiter:
        """The state of ``shard`` (``None``: of records without a prediction), created at
        its ceiling if it is new (a new lane held if an older one overlaps it)."""
        if shard is None:
            limiter = self.unmapped
            if limiter is None:
                records, size = self._stream_ceiling or self._rates()
                limiter = self.unmapped = self._new_shard(records, size)
            return limiter
        limiter = self.shards.get(shard)
        if limiter is None:
            records, size = self._ceilings.get(shard, self._rates())
            limiter = self.shards[shard] = self._new_shard(records, size)
            if self.gate is not None:
                lanes, unmapped = self._lanes_seen()
                self.gate.open(shard, lanes[shard], unmapped)
        return limiter

    def _lanes_seen(self) -> tuple[dict[str, OrderedShardLimiter], OrderedShardLimiter | None]:
        """The shards' states as the gate sees them: with a gate, each is a lane."""
        return (
            cast("dict[str, OrderedShardLimiter]", self.shards),
            cast("OrderedShardLimiter | None", self.unmapped),
        )

    def _count_overload(self, expired: Sequence[KinesisRecord]) -> None:
        """``expired`` came out of a starved shard's queue (checked before its drain: a shard
        starved by its previous drain is starved still): overload, not bad luck."""
        self._overloaded += sum(len(record.records) for record in expired)

    def take_overloaded(self) -> int:
        """User records expired from starved shards (offered more than they take) since the
        last call: what the stream's overload warning counts."""
        overloaded, self._overloaded = self._overloaded, 0
        return overloaded

    def put(self, record: KinesisRecord, now: float) -> Flow:
        """Admit ``record`` at once if its shard's bucket allows (and, for a lane, nothing
        holds it), else queue it; returns what was admitted (to collect) and what expired (to
        fail)."""
        shard = record.predicted_shard
        limiter = self.shards.get(shard) if shard is not None else None  # most puts
        if limiter is None:
            limiter = self.shard_limiter(shard)
        starved = limiter.starved
        flow = limiter.put(record, now, self.limits.send_margin)
        if starved and flow[1]:
            self._count_overload(flow[1])
        if limiter.queue:
            self._waiting.add(shard)
            self._schedule(now)
        elif self.gate is not None:
            self._waiting.discard(shard)
            if limiter.in_flight is None:
                return _joined(flow, self._emptied(shard, now))
        return flow

    def _drain_lane(
        self, shard: str | None, limiter: ShardLimiter, now: float, force: bool = False
    ) -> Flow:
        """Drain one shard, and keep the set of those waiting up to date (with a gate, as
        every change of a lane: the drain schedule and the holds too)."""
        starved = limiter.starved
        flow = limiter.drain(now, self.limits.send_margin, force)
        if starved and flow[1]:
            self._count_overload(flow[1])
        if limiter.queue:
            if self.gate is not None:  # (a lane freed, or settled, may not be waiting yet)
                self._waiting.add(shard)
                self._schedule(now)
            return flow
        self._waiting.discard(shard)
        if self.gate is not None and limiter.in_flight is None:
            return _joined(flow, self._emptied(shard, now))
        return flow

    def _emptied(self, shard: str | None, now: float) -> Flow:
        """A lane has nothing left: if it held others (retired, or unpredicted), free them;
        a retired lane is forgotten."""
        assert self.gate is not None
        lanes, _ = self._lanes_seen()
        if not self.gate.emptied(shard, lanes):
            return NO_FLOW
        if shard is not None:
            del self.shards[shard]
            self._ceilings.pop(shard, None)
        return self._update_holds(now)

    def _update_holds(self, now: float) -> Flow:
        """Recompute every lane's hold (the set of older lanes changed); drain those freed."""
        assert self.gate is not None
        freed = self.gate.update(*self._lanes_seen())
        if len(freed) == 1:
            return self._drain_lane(freed[0], self.shards[freed[0]], now)
        admitted: list[KinesisRecord] = []
        expired: list[KinesisRecord] = []
        for shard in freed:
            more, gone = self._drain_lane(shard, self.shards[shard], now)
            admitted += more
            expired += gone
        return (admitted, expired) if admitted or expired else NO_FLOW

    def _schedule(self, now: float) -> None:
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self._deadlines.call_at(self._next_drain(now), None)

    def due(self, item: object, now: float) -> Flow:
        """The drain interval came (``item`` is the limiter's one entry): drain."""
        self._drain_scheduled = False
        flow = self.drain(now)
        if self._waiting:
            self._schedule(now)
        return flow

    def _next_drain(self, now: float) -> float:
        """One drain interval on, or sooner if a queued record's TTL ends first, so that a
        record that can no longer be sent fails at its TTL exactly."""
        when = now + self.limits.drain_interval
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
        admitted: list[KinesisRecord] = []
        expired: list[KinesisRecord] = []
        for shard in list(self._waiting):
            more, gone = self._drain_lane(shard, self.shard_limiter(shard), now, force)
            admitted += more
            expired += gone
        return (admitted, expired) if admitted or expired else NO_FLOW

    def refund(self, record: KinesisRecord, now: float) -> None:
        """``record`` was admitted, then expired before it was sent: return its tokens."""
        limiter = self.limiter_of(record)
        if limiter is not None:
            limiter.refund(record, now)

    def limiter_of(self, record: KinesisRecord) -> ShardLimiter | None:
        """The :class:`ShardLimiter` that limits ``record``, if there is one yet."""
        shard = record.predicted_shard
        return self.shards.get(shard) if shard is not None else self.unmapped

    def settle(self, record: KinesisRecord, again: Sequence[KinesisRecord], now: float) -> Flow:
        """``record``, in flight in its lane, was answered and judged (or expired unsent): the
        lane is free. ``again`` (what of it is retried, in order) goes back to the lane's head,
        before any later record; then the lane's next record is admitted if it can be.

        Without a gate nothing is in flight to settle: what is retried is queued again, by
        its expiry."""
        if self.gate is not None:
            shard = record.predicted_shard
            lane = self.limiter_of(record)
            if lane is not None and lane.in_flight is record:
                cast("OrderedShardLimiter", lane).settle(again)
                return self._drain_lane(shard, lane, now)
            # Not in flight here (cannot happen): resend it, last rather than never.
        if len(again) == 1:
            return self.put(again[0], now)  # the common case: no lists to join
        admitted: list[KinesisRecord] = []
        expired: list[KinesisRecord] = []
        for kinesis_record in again:
            more, gone = self.put(kinesis_record, now)
            admitted += more
            expired += gone
        return (admitted, expired) if admitted or expired else NO_FLOW

    def take_unmapped(self, now: float) -> tuple[list[KinesisRecord], Flow]:
        """Remove and return the records queued without a predicted shard (oldest first), and
        what the lanes they held admit once free.

        Once a shard map has loaded they can be predicted, aggregated and limited per shard
        instead of trickling out at the stream-level limit.
        """
        unmapped = self.unmapped
        if unmapped is None or not unmapped.queue:
            return [], NO_FLOW
        records = unmapped.take()
        self._waiting.discard(None)
        if self.gate is not None and unmapped.empty:
            return records, self._emptied(None, now)
        return records, NO_FLOW

    def prune(self, open_shards: Container[str], now: float) -> Flow:
        """Forget the state of shards gone from the map (closed by resharding) whose queue is
        empty, so a stream resharded many times keeps no state for its dead shards. With a
        gate, a lane gone from the map with records retires instead (kept until empty,
        holding the lanes it overlaps): returns what the lanes it frees admit."""
        gate = self.gate
        retired = False
        for shard, limiter in list(self.shards.items()):
            if shard in open_shards or (gate is not None and shard in gate.retired):
                continue
            if limiter.empty:
                del self.shards[shard]
                self._ceilings.pop(shard, None)
            elif gate is not None:
                gate.retire(shard, self._lanes_seen()[0][shard])
                retired = True
        return self._update_holds(now) if retired else NO_FLOW

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
        records, size = self._rates()
        if shards is not None:
            ceiling = (records * shards, size * shards)
        if ceiling == self._stream_ceiling:
            return
        self._stream_ceiling = ceiling
        if self.unmapped is not None:
            records, size = ceiling or (records, size)
            self.unmapped.set_ceiling(records, size, now)

    def take_queued(self, now: float) -> list[KinesisRecord]:
        """Remove and return every record queued for a predicted shard, those in flight left
        alone (a stream that now places records itself: the router sends them again
        unpredicted, or with ``ordering="shard"`` fails them): oldest first (by expiry, across
        shards; records of equal expiry by shard), or with a gate lane by lane, in put order."""
        taken: list[KinesisRecord] = []
        for shard, limiter in self.shards.items():
            if limiter.queue:
                taken += limiter.take()
                self._waiting.discard(shard)
        if self.gate is None:
            taken.sort(key=_expiry)
        else:
            for shard, limiter in list(self.shards.items()):
                if limiter.in_flight is None:
                    # A retired lane is done with; no lane has records left to admit.
                    self._emptied(shard, now)
        return taken

    def room(self, shard: str, now: float) -> float:
        """The bytes ``shard`` could take now: its bucket's balance less what waits in its
        queue (a full second of its ceiling for a shard not limited yet)."""
        limiter = self.shards.get(shard)
        if limiter is None:
            return self._ceilings.get(shard, self._rates())[1]
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

"""Limiter: keeps each shard under its records/s and bytes/s limits, before the wire.

One :class:`ShardLimiter` per predicted shard owns a two-stream token bucket (records, bytes)
and a queue of Kinesis records ordered by deadline. ``drain`` runs in two phases (seed 000):

1. **expired first**: every queued record whose TTL has passed fails with ``"Expired"``
   without taking tokens, however many tokens there are;
2. **admit in deadline order** while the bucket grants ``(1, size)``; stop at the first
   record that does not fit, so order is kept.

An aggregate costs one record token, whatever it holds: Kinesis counts it as one record.

Drains happen on ``put`` for the record's own shard (a record that fits goes straight
through, with no added latency), and every ``drain_interval_ms`` while anything is queued
(one scheduler entry for the whole limiter, no timers per shard). ``flush`` admits everything
not expired at once, debiting the bucket so later traffic still pays for it.

Mirrors the KPL's ``limiter.h`` (25 ms drain) and ``token_bucket.h``. Better than the KPL:

* **throttle feedback** (the KPL's ``add_error`` is an empty TODO): when Kinesis throttles a
  shard, that shard's rates are cut (a lone throttle by 15%, repeated ones by half: see
  ``AdaptiveRate``) and recover linearly (10% of the configured
  rate per second), so several producers sharing a shard settle instead of storming;
* **no stall on large records**: a record larger than the bucket's byte capacity can never be
  granted normally; it is admitted when the bucket is full, and the debt is paid by waiting.

A shard's *ceiling* is the rate AIMD recovers to: the configured rate, unless coordination
(``aiokpl.coordination``) sets another with :meth:`Limiter.set_ceiling`; AIMD keeps working
under it, and shards first seen later start at the ceiling set for them, if any.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sortedcontainers import SortedKeyList

from .._core.backoff import AdaptiveRate
from .._core.records import KinesisRecord
from .._core.token_bucket import TokenBucket

if TYPE_CHECKING:
    from .scheduler import Scheduler

__all__ = ("Limiter", "ShardLimiter")


def _deadline(record: KinesisRecord) -> float:
    return record.deadline


class ShardLimiter:
    """Rate limits and queue of one shard."""

    __slots__ = ("_bytes_rate", "_next_expiry", "_records_rate", "bucket", "queue", "throttles")

    def __init__(self, records_per_second: float, bytes_per_second: float) -> None:
        self.bucket = TokenBucket(
            [(records_per_second, records_per_second), (bytes_per_second, bytes_per_second)]
        )
        self.queue: SortedKeyList = SortedKeyList(key=_deadline)
        # No queued record expires before this (it may be earlier than the true minimum
        # after admissions; then the next check recomputes it).
        self._next_expiry = float("inf")
        self._records_rate = AdaptiveRate(records_per_second)
        self._bytes_rate = AdaptiveRate(bytes_per_second)
        self.throttles = 0

    def throttled(self, now: float) -> None:
        """Kinesis throttled this shard: lower its rates (at most once per cooldown)."""
        self.throttles += 1
        if self._records_rate.cut(now):
            self._bytes_rate.cut(now)
            self._apply_rates(now)

    def set_ceiling(self, records_per_second: float, bytes_per_second: float, now: float) -> None:
        """Change the rates AIMD recovers to; a rate above the new ceiling drops to it.

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
        """The (records/s, bytes/s) AIMD recovers to."""
        return self._records_rate.configured, self._bytes_rate.configured

    def _apply_rates(self, now: float) -> None:
        self.bucket.set_rate(0, self._records_rate.rate(now), now)
        self.bucket.set_rate(1, self._bytes_rate.rate(now), now)

    @property
    def rates(self) -> tuple[float, float]:
        rates = self.bucket.rates
        return rates[0], rates[1]

    def _admit_oversized(self, record: KinesisRecord, now: float) -> bool:
        capacity = self.bucket.capacities[1]
        if record.size <= capacity:
            return False
        tokens = self.bucket.tokens(now)
        if tokens[0] >= 1 and tokens[1] >= capacity:
            self.bucket.force_take((1, record.size), now)
            return True
        return False

    def drain(
        self,
        now: float,
        admit: Callable[[KinesisRecord], None],
        expire: Callable[[KinesisRecord], None],
        *,
        force: bool = False,
    ) -> None:
        queue = self.queue
        if not queue:
            return
        if self._records_rate.recovering:
            self._apply_rates(now)
        if self._next_expiry <= now:
            live = [r for r in queue if r.expires_at > now]
            if len(live) != len(queue):
                for record in queue:
                    if record.expires_at <= now:
                        expire(record)
                queue.clear()
                queue.update(live)
            self._next_expiry = min((r.expires_at for r in live), default=float("inf"))
        bucket = self.bucket
        while queue:
            record = queue[0]
            if force:
                bucket.force_take((1, record.size), now)
            elif not (bucket.try_take((1, record.size), now) or self._admit_oversized(record, now)):
                break
            queue.pop(0)
            admit(record)

    def put(
        self,
        record: KinesisRecord,
        now: float,
        admit: Callable[[KinesisRecord], None],
        expire: Callable[[KinesisRecord], None],
    ) -> bool:
        """Admit at once if possible, else queue. Returns whether anything stays queued."""
        if not self.queue:
            if self._records_rate.recovering:
                self._apply_rates(now)
            if self.bucket.try_take((1, record.size), now) or self._admit_oversized(record, now):
                admit(record)
                return False
        self.queue.add(record)
        if record.expires_at < self._next_expiry:
            self._next_expiry = record.expires_at
        self.drain(now, admit, expire)
        return bool(self.queue)


class Limiter:
    """The limiter of one stream: a :class:`ShardLimiter` per predicted shard."""

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
    ) -> None:
        self._scheduler = scheduler
        self._admit = admit
        self._expire = expire
        self._clock = clock
        self._records_per_second = records_per_second
        self._bytes_per_second = bytes_per_second
        self._drain_interval = drain_interval
        self.shards: dict[str, ShardLimiter] = {}
        self._ceilings: dict[str, tuple[float, float]] = {}
        self._waiting: set[str] = set()
        self._drain_scheduled = False

    def put(self, record: KinesisRecord) -> None:
        shard = record.predicted_shard
        if shard is None:
            # No prediction: nothing to limit against (KPL limiter.h does the same).
            self._admit(record)
            return
        limiter = self.shards.get(shard)
        if limiter is None:
            records, size = self._ceilings.get(
                shard, (self._records_per_second, self._bytes_per_second)
            )
            limiter = self.shards[shard] = ShardLimiter(records, size)
        if limiter.put(record, self._clock(), self._admit, self._expire):
            self._waiting.add(shard)
            if not self._drain_scheduled:
                self._drain_scheduled = True
                self._scheduler.call_at(self._clock() + self._drain_interval, self)

    def on_due(self, now: float) -> None:
        self._drain_scheduled = False
        self.drain(now)
        if self._waiting:
            self._drain_scheduled = True
            self._scheduler.call_at(now + self._drain_interval, self)

    def drain(self, now: float, *, force: bool = False) -> None:
        for shard in list(self._waiting):
            limiter = self.shards[shard]
            limiter.drain(now, self._admit, self._expire, force=force)
            if not limiter.queue:
                self._waiting.discard(shard)

    def set_ceiling(self, shard: str, records_per_second: float, bytes_per_second: float) -> None:
        """Set the ceiling of ``shard``, now if it is limited already, else when it first is."""
        self._ceilings[shard] = (records_per_second, bytes_per_second)
        limiter = self.shards.get(shard)
        if limiter is not None:
            limiter.set_ceiling(records_per_second, bytes_per_second, self._clock())

    def throttled(self, shard: str, now: float) -> None:
        limiter = self.shards.get(shard)
        if limiter is not None:
            limiter.throttled(now)

    @property
    def queued(self) -> int:
        return sum(len(self.shards[shard].queue) for shard in self._waiting)

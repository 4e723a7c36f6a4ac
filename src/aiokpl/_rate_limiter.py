"""An async rate limiter for any awaitable call, built on the pure :class:`TokenBucket`.

``await limiter.acquire()`` returns once the call it guards may go ahead: immediately while the
bucket has tokens, otherwise after one sleep of exactly the computed length. Typical use is
keeping an HTTP client under a server's requests-per-second quota.

Guarantees:

* **one exact sleep**: the waiter asks the bucket how long until its amounts are available
  (:meth:`TokenBucket.time_until`, exact in floating point) and sleeps that long once. There is
  no polling loop and no fixed tick, so a wait never overshoots and never burns wake-ups;
* **first come, first served**: waiters queue on an :class:`anyio.Lock`, which hands over in
  arrival order on both asyncio and trio. The head of the queue holds the lock while it sleeps,
  and the uncontended fast path is taken only when nobody waits, so a later small request never
  overtakes an earlier large one;
* **cancellation-safe**: tokens are taken in one synchronous step after the last await. A waiter
  cancelled while queued or asleep has taken nothing, and the waiters behind it move up;
* **trio checkpoint rules**: every ``acquire`` checks for cancellation before taking anything
  and yields to the scheduler at least once.

Only anyio is used for time: ``anyio.current_time()`` to read the clock and ``anyio.sleep()`` to
wait, so the same code runs on asyncio and trio, and under their fake clocks in tests.

The KPL has no counterpart: its ``Limiter`` (``aws/kinesis/core/limiter.h``) drains per-shard
queues on a timer, which suits a pipeline stage that owns its queue (aiokpl's own limiter stage
does the same). A caller awaiting one permission is better served by sleeping until the instant
its tokens exist.

Event loops may fire a timer up to their clock resolution early (asyncio does, by design). A
waiter woken before its deadline takes at the deadline instead of sleeping again for a
sub-resolution moment; the bucket's clock then runs ahead of the loop's by less than one
resolution step, and never by more, because the bucket ignores instants earlier than its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

import anyio
import anyio.lowlevel

from ._core.token_bucket import TokenBucket

__all__ = ("RateLimiter", "RateLimiterStatistics")


@dataclass(frozen=True)
class RateLimiterStatistics:
    """A snapshot of a limiter's queue and balances.

    Returned by [`RateLimiter.statistics`][aiokpl.RateLimiter.statistics].

    Attributes:
        waiting: Tasks inside [`acquire`][aiokpl.RateLimiter.acquire] that have not been
            granted yet (the one sleeping at the head of the queue included).
        tokens: Each stream's balance at the time of the snapshot.
        rates: Each stream's refill rate, in tokens per second.
        capacities: Each stream's capacity (the largest burst).
    """

    waiting: int
    tokens: tuple[float, ...]
    rates: tuple[float, ...]
    capacities: tuple[float, ...]


class RateLimiter:
    """Limit how fast something happens, by making callers wait for tokens.

    With one stream, each [`acquire`][aiokpl.RateLimiter.acquire] takes one token (or the
    amount you pass); tokens come back at ``rate`` per second, and at most ``capacity``
    accumulate while the limiter is idle. Use [`from_bucket`][aiokpl.RateLimiter.from_bucket]
    to pay in several currencies at once, e.g. requests and bytes.

    Example:
        At most 10 calls per second, bursting to 10:

        ```python
        from aiokpl import RateLimiter

        limiter = RateLimiter(10)
        for _ in range(12):  # the last two wait 0.1 s each
            async with limiter:
                ...  # e.g. response = await client.get(url)
        ```

    Args:
        rate: Tokens added per second; positive and finite.
        capacity: The most tokens the limiter holds, i.e. the largest burst. Defaults to
            ``rate`` (one second's worth), but never less than 1, so that a plain ``acquire()``
            can always be granted.

    Raises:
        ValueError: If ``rate`` or ``capacity`` is not a positive finite number.
    """

    __slots__ = ("_bucket", "_lock", "_ones", "_waiting")

    def __init__(self, rate: float, capacity: float | None = None) -> None:
        rate = float(rate)
        if not 0.0 < rate < math.inf:
            raise ValueError(f"rate must be a positive finite number per second, got {rate!r}")
        if capacity is None:
            capacity = max(rate, 1.0)
        capacity = float(capacity)
        if not 0.0 < capacity < math.inf:
            raise ValueError(f"capacity must be a positive finite number, got {capacity!r}")
        self._setup(TokenBucket([(rate, capacity)]))

    @classmethod
    def from_bucket(cls, bucket: TokenBucket) -> RateLimiter:
        """Build a limiter over an existing bucket, typically one with several streams.

        The limiter assumes it is the only one taking from ``bucket``. If other code takes too,
        a waiter may find its tokens gone on waking; it then waits again, still in order.

        Example:
            At most 100 requests and 1 MiB per second:

            ```python
            from aiokpl import RateLimiter, TokenBucket

            limiter = RateLimiter.from_bucket(
                TokenBucket([(100, 100), (1_048_576, 1_048_576)])
            )
            body = b"x" * 1_000
            await limiter.acquire(1, len(body))  # one request, 1,000 bytes
            ```

        Args:
            bucket: The bucket to take from. The limiter takes ownership of its clock: pass
                ``anyio.current_time()`` to any other call you make on it.
        """
        limiter = cls.__new__(cls)
        limiter._setup(bucket)
        return limiter

    def _setup(self, bucket: TokenBucket) -> None:
        self._bucket = bucket
        self._lock = anyio.Lock()
        self._ones: tuple[float, ...] = (1.0,) * len(bucket.capacities)
        # Tasks in the slow path of ``acquire``. While it is non-zero nobody takes the fast
        # path, which is what keeps the queue first come, first served.
        self._waiting = 0

    def __repr__(self) -> str:
        return f"<RateLimiter waiting={self._waiting} bucket={self._bucket!r}>"

    async def __aenter__(self) -> None:
        """Acquire one token from every stream (same as ``await acquire()``)."""
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        """Do nothing: tokens are spent, not returned."""

    async def acquire(self, *amounts: float) -> None:
        """Wait until the given amounts are available, then take them.

        With no arguments, takes 1 from every stream. Otherwise pass one amount per stream, in
        the order the streams were given to the bucket. Requests are served in arrival order:
        a later request waits behind an earlier one even if it is smaller.

        This is a checkpoint. It is cancellation-safe: if the calling task is cancelled while
        waiting, nothing has been taken and the tasks queued behind it are not delayed.

        Args:
            *amounts: One non-negative amount per stream; all 1 if omitted.

        Raises:
            ValueError: If the number of amounts differs from the number of streams, an amount
                is negative or not finite, or an amount exceeds its stream's capacity (it could
                never be granted). Raised at once, before any waiting.
        """
        needed = self._validate(amounts) if amounts else self._check_ones()
        bucket = self._bucket
        await anyio.lowlevel.checkpoint_if_cancelled()
        if self._waiting == 0 and bucket.try_take(needed, anyio.current_time()):
            await anyio.lowlevel.cancel_shielded_checkpoint()
            return
        self._waiting += 1
        try:
            async with self._lock:
                now = anyio.current_time()
                # Normally one pass: the sleep is exact and nobody else takes while we hold
                # the lock. Another pass happens only if other code takes from a shared bucket.
                while not bucket.try_take(needed, now):
                    wait = bucket.time_until(needed, now)
                    deadline = now + wait
                    await anyio.sleep(wait)
                    # Woken a hair early by the loop's clock resolution: take at the deadline.
                    now = max(anyio.current_time(), deadline)
        finally:
            self._waiting -= 1

    def statistics(self) -> RateLimiterStatistics:
        """Return a snapshot of the queue and the balances.

        Must be called from inside an event loop (it reads ``anyio.current_time()``).
        """
        bucket = self._bucket
        return RateLimiterStatistics(
            waiting=self._waiting,
            tokens=bucket.tokens(anyio.current_time()),
            rates=bucket.rates,
            capacities=bucket.capacities,
        )

    def _check_ones(self) -> tuple[float, ...]:
        ones = self._ones
        for index, capacity in enumerate(self._bucket.capacities):
            if capacity < 1.0:
                raise ValueError(
                    f"acquire() takes 1 from every stream, but stream {index} holds at most "
                    f"{capacity!r}; pass explicit amounts"
                )
        return ones

    def _validate(self, amounts: Sequence[float]) -> Sequence[float]:
        capacities = self._bucket.capacities
        if len(amounts) != len(capacities):
            raise ValueError(
                f"expected {len(capacities)} amount(s), one per stream, got {len(amounts)}"
            )
        for index, amount in enumerate(amounts):
            if not 0.0 <= amount < math.inf:
                raise ValueError(
                    f"stream {index}: amount must be a non-negative finite number, got {amount!r}"
                )
            if amount > capacities[index]:
                raise ValueError(
                    f"stream {index}: amount {amount!r} exceeds the capacity {capacities[index]!r}"
                    ", so it could never be granted"
                )
        return amounts

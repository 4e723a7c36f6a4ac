"""A token bucket with several streams that refill on demand, driven by an explicit clock.

Each stream has a rate (tokens per second) and a capacity. A stream's balance grows by
``rate * elapsed`` whenever the bucket is asked something at a later time, never beyond the
capacity; there is no refill task and no timer. The caller supplies the time as ``now`` (seconds
on any monotonic scale): this module never reads a clock, so it is ordinary synchronous code that
tests can drive to the exact float.

Invariants:

* **bounded grants**: between two instants ``t0 <= t1``, a stream never hands out more than
  ``rate * (t1 - t0) + capacity`` tokens through :meth:`TokenBucket.try_take` (up to float
  rounding, a relative error near 1e-16 per operation);
* **all or nothing**: :meth:`TokenBucket.try_take` debits every stream or none of them, so a
  caller paying in two currencies at once (records and bytes) is never charged half;
* **time only moves forward**: growth is committed only when ``now`` is strictly later than the
  last committed instant; an equal or earlier ``now`` changes nothing and never rewinds the
  bucket's clock;
* **exact waits**: :meth:`TokenBucket.time_until` returns a float ``w`` such that
  ``try_take(amounts, now + w)`` succeeds when nothing else has changed the bucket in between,
  rounding included, so an async caller sleeps once instead of polling.

Mirrors the KPL's ``TokenBucket`` (``aws/utils/token_bucket.h``): per-stream growth on every
query, capped at the stream's maximum, and ``try_take`` built from "can every stream pay?"
followed by "debit every stream". Differences:

* time is a parameter instead of ``std::chrono::steady_clock::now()``, and one call uses one
  instant (the KPL reads the clock once for the growth and again for the new "last" instant, so
  every query drops the sliver of time in between);
* the bucket starts full by definition, and its clock starts at the first call that passes a
  ``now``, so constructing one needs no time at all (the KPL never initialises the balance; it
  ends up full because the first query counts growth since the clock's epoch and the cap clips
  it);
* all streams share one "last updated" instant. The KPL keeps one per stream and its
  ``can_take`` stops at the first short stream, leaving later ones behind; growth is additive
  and capped, so catching up later gives the same balance, but one instant is simpler;
* the read-only queries (:meth:`TokenBucket.tokens`, :meth:`TokenBucket.time_until`) project the
  balance to ``now`` without committing it. Float growth in two steps can differ by an ulp from
  growth in one step, so a query made while someone sleeps must not shift the instant that
  person was promised;
* additions: :meth:`TokenBucket.time_until` (how long to wait),
  :meth:`TokenBucket.force_take` (debit past zero: a forced flush, or a record larger than the
  capacity admitted into a full bucket, is paid back by later traffic),
  :meth:`TokenBucket.refund` (give back what was taken for something never sent) and
  :meth:`TokenBucket.set_rate` (change a stream's rate without losing the growth earned so far)
  and :meth:`TokenBucket.set_capacity`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ("TokenBucket",)

_INF = math.inf


class TokenBucket:
    """A multi-stream token bucket whose balances grow when queried.

    Every method that takes ``now`` first brings the balances up to date: each stream gains
    ``rate * (now - last)`` tokens, capped at its capacity. The bucket starts full.

    Example:
        A bucket paying for records and bytes, as the per-shard limiter uses it:

        >>> bucket = TokenBucket([(1_000.0, 1_000.0), (1_048_576.0, 1_048_576.0)])
        >>> bucket.try_take([1, 500_000], now=0.0)
        True
        >>> bucket.try_take([1, 600_000], now=0.0)
        False
        >>> bucket.time_until([1, 600_000], now=0.0)
        0.0490...

    Args:
        streams: One ``(rate_per_second, capacity)`` pair per stream. Both numbers must be
            positive and finite.

    Raises:
        ValueError: If there are no streams, or a rate or capacity is not a positive finite
            number (the message names the stream).
    """

    __slots__ = ("_capacities", "_count", "_last", "_rates", "_tokens")

    def __init__(self, streams: Sequence[tuple[float, float]]) -> None:
        rates: list[float] = []
        capacities: list[float] = []
        for index, (rate, capacity) in enumerate(streams):
            rate = float(rate)
            capacity = float(capacity)
            if not 0.0 < rate < _INF:
                raise ValueError(
                    f"stream {index}: rate must be a positive finite number of tokens per "
                    f"second, got {rate!r}"
                )
            if not 0.0 < capacity < _INF:
                raise ValueError(
                    f"stream {index}: capacity must be a positive finite number of tokens, "
                    f"got {capacity!r}"
                )
            rates.append(rate)
            capacities.append(capacity)
        if not rates:
            raise ValueError("a TokenBucket needs at least one (rate, capacity) stream")
        self._rates: tuple[float, ...] = tuple(rates)
        self._capacities: tuple[float, ...] = tuple(capacities)
        self._tokens: list[float] = capacities
        self._count = len(rates)
        # None until the first call that passes a ``now``: the bucket is full until then.
        self._last: float | None = None

    @property
    def rates(self) -> tuple[float, ...]:
        """Each stream's refill rate, in tokens per second."""
        return self._rates

    @property
    def capacities(self) -> tuple[float, ...]:
        """Each stream's capacity: the most tokens it can hold."""
        return self._capacities

    def __repr__(self) -> str:
        tokens = ", ".join(f"{t:g}" for t in self._tokens)
        rates = ", ".join(f"{r:g}" for r in self._rates)
        capacities = ", ".join(f"{c:g}" for c in self._capacities)
        return (
            f"<TokenBucket tokens=({tokens}) rates=({rates}) capacities=({capacities}) "
            f"last={self._last!r}>"
        )

    # -- queries (never change the bucket) ---------------------------------------------------

    def tokens(self, now: float) -> tuple[float, ...]:
        """Return each stream's balance at ``now``.

        A balance is negative after [`force_take`][aiokpl.TokenBucket.force_take] overdrew it.
        The answer is projected from the last committed state; the bucket itself is not
        changed.

        Args:
            now: The current time in seconds.
        """
        last = self._last
        if last is None:
            return tuple(self._tokens)
        elapsed = now - last
        if not elapsed > 0.0:
            return tuple(self._tokens)
        return tuple(self._grown(index, elapsed) for index in range(self._count))

    def time_until(self, amounts: Sequence[float], now: float) -> float:
        """Return how many seconds to wait before ``try_take(amounts, ...)`` can succeed.

        The answer assumes nothing else takes tokens or changes a rate in the meantime. It is
        exact in floating point: ``try_take(amounts, now + wait)`` succeeds, and so does any
        later instant. The bucket itself is not changed.

        Args:
            amounts: One non-negative amount per stream.
            now: The current time in seconds.

        Returns:
            ``0.0`` if ``try_take(amounts, now)`` would succeed now; ``math.inf`` if some amount
            exceeds its stream's capacity, so no wait is long enough; otherwise the wait.

        Raises:
            ValueError: If the number of amounts differs from the number of streams, or an
                amount is negative or not finite.
        """
        self._check(amounts)
        capacities = self._capacities
        for index in range(self._count):
            if amounts[index] > capacities[index]:
                return _INF
        last = self._last
        if last is None:
            # Never touched: the bucket is full and every amount fits its capacity.
            return 0.0
        if self._enough_at(amounts, now, last):
            return 0.0
        # Estimate the instant from the stored state, then step it up one ulp at a time
        # until the growth formula, rounding included, agrees. A step or two at most.
        tokens = self._tokens
        rates = self._rates
        longest = 0.0
        for index in range(self._count):
            needed = (amounts[index] - tokens[index]) / rates[index]
            if needed > longest:
                longest = needed
        target = max(last + longest, now)
        while not self._enough_at(amounts, target, last):
            target = math.nextafter(target, _INF)
        # ``target - now`` is rounded too: make sure ``now + wait`` lands on or after it.
        wait = target - now
        while not self._enough_at(amounts, now + wait, last):
            wait = math.nextafter(wait, _INF)
        return wait

    # -- operations (commit growth up to ``now``) --------------------------------------------

    def try_take(self, amounts: Sequence[float], now: float) -> bool:
        """Take ``amounts`` if every stream has enough; otherwise take nothing.

        Args:
            amounts: One non-negative amount per stream (``[1, size]`` for one record of
                ``size`` bytes, with streams (records, bytes)).
            now: The current time in seconds.

        Returns:
            ``True`` if every stream was debited, ``False`` if none was.

        Raises:
            ValueError: If the number of amounts differs from the number of streams, or an
                amount is negative or not finite.
        """
        self._check(amounts)
        self._grow(now)
        tokens = self._tokens
        count = self._count
        # Indexing beats zip()/enumerate() here: no iterator objects for two streams.
        for index in range(count):
            if tokens[index] < amounts[index]:
                return False
        for index in range(count):
            tokens[index] -= amounts[index]
        return True

    def force_take(self, amounts: Sequence[float], now: float) -> None:
        """Take ``amounts`` unconditionally; balances may go negative.

        The debt is repaid by growth before anything else can be taken, so traffic admitted
        this way still counts against the rate.

        Args:
            amounts: One non-negative amount per stream.
            now: The current time in seconds.

        Raises:
            ValueError: If the number of amounts differs from the number of streams, or an
                amount is negative or not finite.
        """
        self._check(amounts)
        self._grow(now)
        tokens = self._tokens
        for index in range(self._count):
            tokens[index] -= amounts[index]

    def refund(self, amounts: Sequence[float], now: float) -> None:
        """Give back ``amounts`` taken earlier for something that was never used.

        Balances grow by ``amounts`` but never beyond their capacities: a refund restores
        budget, it never creates a burst larger than the bucket allows.

        Args:
            amounts: One non-negative amount per stream.
            now: The current time in seconds.

        Raises:
            ValueError: If the number of amounts differs from the number of streams, or an
                amount is negative or not finite.
        """
        self._check(amounts)
        self._grow(now)
        tokens = self._tokens
        capacities = self._capacities
        for index in range(self._count):
            refunded = tokens[index] + amounts[index]
            capacity = capacities[index]
            tokens[index] = refunded if refunded < capacity else capacity

    def empty(self, now: float, keep: float = 0.0) -> None:
        """Give up the tokens saved up to ``now`` beyond ``keep`` seconds of each stream's
        rate: larger balances drop to that (zero by default; a debt stays as it is). Tokens
        keep coming at the rates from ``now`` on.

        Args:
            now: The current time in seconds.
            keep: Seconds of tokens, at each stream's rate, a balance may keep; 0 or more.

        Raises:
            ValueError: If ``keep`` is negative (it would turn savings into a debt).
        """
        if not keep >= 0.0:
            raise ValueError(f"keep must be 0 or more seconds, got {keep!r}")
        self._grow(now)
        tokens, rates = self._tokens, self._rates
        for index in range(self._count):
            kept = rates[index] * keep
            if tokens[index] > kept:
                tokens[index] = kept

    def set_rate(self, index: int, rate: float, now: float) -> None:
        """Change one stream's rate from ``now`` on.

        Growth up to ``now`` is committed at the old rate first, so the balance is continuous.

        Args:
            index: Which stream, counting from 0 in the order given to the constructor.
            rate: The new rate in tokens per second; positive and finite.
            now: The current time in seconds.

        Raises:
            IndexError: If there is no stream ``index``.
            ValueError: If ``rate`` is not a positive finite number.
        """
        rate = self._checked(index, rate, "rate", "tokens per second")
        self._grow(now)
        rates = self._rates
        self._rates = (*rates[:index], rate, *rates[index + 1 :])

    def set_capacity(self, index: int, capacity: float, now: float) -> None:
        """Change one stream's capacity from ``now`` on.

        Growth up to ``now`` is committed first; a balance above the new capacity is cut down
        to it (a debt stays as it is).

        Args:
            index: Which stream, counting from 0 in the order given to the constructor.
            capacity: The new capacity in tokens; positive and finite.
            now: The current time in seconds.

        Raises:
            IndexError: If there is no stream ``index``.
            ValueError: If ``capacity`` is not a positive finite number.
        """
        capacity = self._checked(index, capacity, "capacity", "tokens")
        self._grow(now)
        capacities = self._capacities
        self._capacities = (*capacities[:index], capacity, *capacities[index + 1 :])
        if self._tokens[index] > capacity:
            self._tokens[index] = capacity

    # -- internals ---------------------------------------------------------------------------
    def _checked(self, index: int, value: float, what: str, unit: str) -> float:
        """``value`` as a float, for stream ``index``'s ``what`` (``set_rate``, ``set_capacity``).

        Raises:
            IndexError: If there is no stream ``index``.
            ValueError: If ``value`` is not a positive finite number.
        """
        if not 0 <= index < self._count:
            raise IndexError(f"stream index {index} out of range for {self._count} stream(s)")
        value = float(value)
        if not 0.0 < value < _INF:
            raise ValueError(
                f"stream {index}: {what} must be a positive finite number of {unit}, got {value!r}"
            )
        return value

    def _check(self, amounts: Sequence[float]) -> None:
        if len(amounts) != self._count:
            raise ValueError(
                f"expected {self._count} amount(s), one per stream, got {len(amounts)}"
            )
        for amount in amounts:
            if not 0.0 <= amount < _INF:  # also rejects NaN
                raise _bad_amount(amounts)

    def _grown(self, index: int, elapsed: float) -> float:
        # The one growth formula. ``_grow`` inlines the same expression for speed; the two
        # must stay identical or ``time_until`` stops being exact.
        grown = self._tokens[index] + self._rates[index] * elapsed
        capacity = self._capacities[index]
        return grown if grown < capacity else capacity

    def _grow(self, now: float) -> None:
        last = self._last
        if last is None:
            self._last = now
            return
        elapsed = now - last
        if elapsed > 0.0:
            tokens = self._tokens
            rates = self._rates
            capacities = self._capacities
            for index in range(self._count):
                grown = tokens[index] + rates[index] * elapsed
                capacity = capacities[index]
                tokens[index] = grown if grown < capacity else capacity
            self._last = now

    def _enough_at(self, amounts: Sequence[float], now: float, last: float) -> bool:
        # Would ``try_take(amounts, now)`` succeed? ``last`` is the committed instant: growth
        # from there to ``now`` happens in one step, exactly as ``_grow`` would do it.
        elapsed = now - last
        if elapsed > 0.0:
            for index in range(self._count):
                if self._grown(index, elapsed) < amounts[index]:
                    return False
            return True
        tokens = self._tokens
        return all(tokens[index] >= amounts[index] for index in range(self._count))


def _bad_amount(amounts: Sequence[float]) -> ValueError:
    index, amount = next((i, a) for i, a in enumerate(amounts) if not 0.0 <= a < _INF)
    return ValueError(
        f"stream {index}: amount must be a non-negative finite number, got {amount!r}"
    )

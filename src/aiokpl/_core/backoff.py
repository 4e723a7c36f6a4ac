"""Exponential backoff with jitter, and additive-increase / multiplicative-decrease rates.

Two small pieces of timing policy, pure (the caller passes ``now`` and the random draw):

* :class:`Backoff` spaces out retries of something that keeps failing: a shard-map refresh
  (KPL ``shard_map.cc``: 1 s, ×1.5, at most 30 s) or requests to an endpoint that is down.
  Unlike the KPL we add jitter, so many producers that failed together do not retry together.
* :class:`AdaptiveRate` is the per-shard throttle feedback the KPL leaves as a TODO
  (``limiter.h``, ``add_error``): on throttling the rate is cut by a factor, then it grows back
  with time up to the configured rate.

Recovery is scaled to the rate at the last cut, not to the configured rate. Invariant: the
slope of the recovery, summed over N producers sharing a shard, is about
``recovery_per_second`` × what the shard took when it throttled them, *whatever N is* (each
producer's rate at the cut is near its share). A slope in units of the configured rate (what
this module did first) adds N × 10% of the shard per second: four producers each configured
for the whole shard came back at 40% of its capacity per second, overshot it soon after every
cut, and Kinesis throttled at every probe. ``tests/test_many_producers.py`` simulates it
(four producers, a 0.5 s round trip: 8% of attempts throttled then, 4.3% now).

Three refinements, each measured in that simulation:

* **memory**: the scale is the highest rate at a *recent* cut, counted at half every
  ``memory_half_life`` (5 s) since, not the last cut's alone. A start-up burst cuts a shard
  three or four times in a row (throttled answers keep coming while the burst drains); scaled
  to the last of those cuts, recovery took many seconds and the shard delivered 87% of its
  capacity in the seconds after; remembering the rate before the burst, it delivers all of it.
  Under steady throttling the memory fades to the rates at the cuts, near each share;
* **probe**: past the rate at the last cut the slope doubles every ``probe_doubling`` (10) s,
  a convex probe as TCP CUBIC's beyond ``W_max``: a producer whose co-writers left takes the
  freed capacity back in about 13 s, where a linear climb at a share's slope took 20-odd.
  A 3 s doubling reclaims faster but with slow feedback (1-2 s round trips) lets producers
  that were cut deep probe together and throttle as much as before;
* **ceilings**: assigning ``configured`` (coordination's per-shard share) makes it the scale,
  as a share set from outside is a better estimate than any cut.

Where we stop: with slow feedback, throttled answers keep arriving for a round trip after a
cut and each ``cooldown`` (0.5 s) of them cuts again, so rates go deeper than the shard needs.
A longer cooldown (1 s) trades that for more throttling while a lone producer far above a
shard's rate comes down (2.5 throttled answers per record instead of 1.6 in
``tests/test_retrier_rows.py``); one cut per round trip needs the request's send time, which
:meth:`AdaptiveRate.cut` does not get.
"""

from __future__ import annotations

import math

__all__ = ("AdaptiveRate", "Backoff")

_LN2 = math.log(2.0)


class Backoff:
    """Growing delays: ``initial``, then ×``factor`` per failure, capped at ``maximum``.

    Each delay is drawn in ``[(1 - jitter) × d, d]`` from the nominal delay ``d``.

    Args:
        initial: the first nominal delay, in seconds.
        factor: growth per consecutive failure.
        maximum: the largest nominal delay.
        jitter: the fraction of the nominal delay that is random, 0 … 1.
    """

    __slots__ = ("_nominal", "factor", "failures", "initial", "jitter", "maximum")

    def __init__(self, initial: float, factor: float, maximum: float, jitter: float = 0.5) -> None:
        if not 0 < initial <= maximum or factor < 1 or not 0 <= jitter <= 1:
            raise ValueError("need 0 < initial <= maximum, factor >= 1 and 0 <= jitter <= 1")
        self.initial = initial
        self.factor = factor
        self.maximum = maximum
        self.jitter = jitter
        self._nominal = initial
        self.failures = 0

    def next_delay(self, random_value: float) -> float:
        """Record one more failure and return how long to wait before trying again.

        Args:
            random_value: a uniform draw in [0, 1), e.g. ``random.random()``.
        """
        nominal = self._nominal
        self.failures += 1
        self._nominal = min(self.maximum, nominal * self.factor)
        return nominal * (1.0 - self.jitter * random_value)

    def reset(self) -> None:
        """Forget past failures: the next delay is ``initial`` again."""
        self._nominal = self.initial
        self.failures = 0


class AdaptiveRate:
    """A rate that drops on congestion and recovers in proportion to where it was cut (AIMD).

    ``rate(now)`` is the configured rate until the first :meth:`cut`. A cut multiplies the
    current rate by ``decrease`` (never below ``floor`` × configured) and remembers the rate it
    cut from, the *peak*, and the recovery's *reference*: the highest rate at a cut, each
    counted at half every ``memory_half_life`` seconds since (so, after a while of steady
    throttling, the peak itself). Afterwards the rate grows linearly by
    ``recovery_per_second`` × reference per second until it is back at the peak; beyond it,
    the growth per second doubles every ``probe_doubling`` seconds, up to the configured rate.
    Cuts closer together than ``cooldown`` seconds count once: one burst of throttling (many
    records of one response) is one signal, not many.

    An isolated cut, the first one or the first after ``quiet`` seconds without any, only
    multiplies by ``first_decrease``: a lone throttle is usually a burst meeting a server
    bucket that had not refilled yet (at start-up, say), not a shard shared beyond its
    capacity, and halving the rate for it would waste seconds of capacity. A second cut within
    ``quiet`` seconds is congestion, and cuts by ``decrease``.

    ``configured`` may be changed at any time (coordination sets per-shard ceilings through
    it): the rate never exceeds it, and recovery ends when it reaches it. A rate assigned that
    way is also the new peak and reference of the recovery: a share set from outside is a better
    estimate of this producer's share than the rate of its last cut, which a burst of throttling
    at start-up may have driven far below it.
    """

    __slots__ = (
        "_base",
        "_configured",
        "_cut_at",
        "_last_cut",
        "_peak",
        "_reference",
        "_reference_at",
        "cooldown",
        "decrease",
        "first_decrease",
        "floor",
        "memory_half_life",
        "probe_doubling",
        "quiet",
        "recovery_per_second",
    )

    def __init__(
        self,
        configured: float,
        *,
        decrease: float = 0.5,
        first_decrease: float = 0.85,
        quiet: float = 10.0,
        recovery_per_second: float = 0.1,
        probe_doubling: float = 10.0,
        memory_half_life: float = 5.0,
        floor: float = 0.05,
        cooldown: float = 0.5,
    ) -> None:
        if not probe_doubling > 0:
            raise ValueError("probe_doubling must be greater than 0")
        if not memory_half_life > 0:
            raise ValueError("memory_half_life must be greater than 0")
        self._configured = configured
        self.decrease = decrease
        self.first_decrease = first_decrease
        self.quiet = quiet
        self.recovery_per_second = recovery_per_second
        self.probe_doubling = probe_doubling
        self.memory_half_life = memory_half_life
        self.floor = floor
        self.cooldown = cooldown
        self._base = configured  # the rate right after the last cut
        self._peak = configured  # the rate the last cut cut from
        # The recovery's scale: the highest rate at a recent cut, halving every
        # memory_half_life seconds since (at the first cut: the configured rate).
        self._reference = configured
        self._reference_at: float | None = None
        self._cut_at: float | None = None  # while recovering: when the last cut was
        self._last_cut: float | None = None  # the last cut ever, recovered or not

    @property
    def configured(self) -> float:
        """The rate recovered to: the rate allowed until the first cut, and the highest."""
        return self._configured

    @configured.setter
    def configured(self, value: float) -> None:
        self._configured = value
        self._peak = self._reference = value
        self._reference_at = None

    def rate(self, now: float) -> float:
        """The rate allowed at ``now``."""
        if self._cut_at is None:
            return self._configured
        slope = self.recovery_per_second * self._reference
        elapsed = now - self._cut_at
        grown = self._base + slope * elapsed
        if grown > self._peak and slope > 0.0:
            # Past the peak: the slope doubles every probe_doubling seconds.
            doubling = self.probe_doubling
            beyond = elapsed - (self._peak - self._base) / slope
            grown = self._peak + slope * doubling / _LN2 * (2.0 ** (beyond / doubling) - 1.0)
        if grown >= self._configured:
            self._cut_at = None
            return self._configured
        return grown

    @property
    def recovering(self) -> bool:
        """Whether the rate is below the configured rate (it was cut and has not recovered)."""
        return self._cut_at is not None

    def cut(self, now: float) -> bool:
        """Register congestion at ``now``; returns whether the rate was actually lowered."""
        last = self._last_cut
        if last is not None and now - last < self.cooldown:
            return False
        isolated = last is None or now - last >= self.quiet
        current = self.rate(now)
        factor = self.first_decrease if isolated else self.decrease
        reference = self._reference
        if self._reference_at is not None:
            reference *= 2.0 ** ((self._reference_at - now) / self.memory_half_life)
        self._reference = max(current, reference)
        self._reference_at = now
        self._peak = current
        self._base = max(self._configured * self.floor, current * factor)
        self._cut_at = self._last_cut = now
        return True

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
cut, and Kinesis throttled at every probe (``tests/test_many_producers.py`` simulates it:
8% of attempts throttled with four producers and a 0.5 s round trip, 3.5% now).

Past the rate at the last cut the slope doubles every ``probe_doubling`` seconds (10: a
convex probe, as TCP CUBIC's beyond ``W_max``), so a producer whose co-writers left takes the
freed capacity back in about 15 s rather than the 20-odd of a linear climb, while producers
that share a shard spend their time below the rate that was throttled. A shorter doubling
(3 s) reclaims in 11 s but, when feedback is slow (1-2 s round trips on a loaded machine),
lets producers that were cut deep probe together and throttle as much as before.

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
    cut from, the *peak*. Afterwards the rate grows linearly by ``recovery_per_second`` × peak
    per second until it is back at the peak; beyond it, the growth per second doubles every
    ``probe_doubling`` seconds, up to the configured rate. Cuts closer together than
    ``cooldown`` seconds count once: one burst of throttling (many records of one response) is
    one signal, not many.

    An isolated cut, the first one or the first after ``quiet`` seconds without any, only
    multiplies by ``first_decrease``: a lone throttle is usually a burst meeting a server
    bucket that had not refilled yet (at start-up, say), not a shard shared beyond its
    capacity, and halving the rate for it would waste seconds of capacity. A second cut within
    ``quiet`` seconds is congestion, and cuts by ``decrease``.

    ``configured`` may be changed at any time (coordination sets per-shard ceilings through
    it): the rate never exceeds it, and recovery ends when it reaches it.
    """

    __slots__ = (
        "_base",
        "_cut_at",
        "_last_cut",
        "_peak",
        "configured",
        "cooldown",
        "decrease",
        "first_decrease",
        "floor",
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
        floor: float = 0.05,
        cooldown: float = 0.5,
    ) -> None:
        if not probe_doubling > 0:
            raise ValueError("probe_doubling must be greater than 0")
        self.configured = configured
        self.decrease = decrease
        self.first_decrease = first_decrease
        self.quiet = quiet
        self.recovery_per_second = recovery_per_second
        self.probe_doubling = probe_doubling
        self.floor = floor
        self.cooldown = cooldown
        self._base = configured  # the rate right after the last cut
        self._peak = configured  # the rate the last cut cut from
        self._cut_at: float | None = None  # while recovering: when the last cut was
        self._last_cut: float | None = None  # the last cut ever, recovered or not

    def rate(self, now: float) -> float:
        """The rate allowed at ``now``."""
        if self._cut_at is None:
            return self.configured
        slope = self.recovery_per_second * self._peak
        elapsed = now - self._cut_at
        grown = self._base + slope * elapsed
        if grown > self._peak and slope > 0.0:
            # Past the peak: the slope doubles every probe_doubling seconds.
            doubling = self.probe_doubling
            beyond = elapsed - (self._peak - self._base) / slope
            grown = self._peak + slope * doubling / _LN2 * (2.0 ** (beyond / doubling) - 1.0)
        if grown >= self.configured:
            self._cut_at = None
            return self.configured
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
        self._peak = current
        self._base = max(self.configured * self.floor, current * factor)
        self._cut_at = self._last_cut = now
        return True

"""Exponential backoff with jitter, and throttle feedback that cuts to a measured rate.

Two small pieces of timing policy, pure (the caller passes ``now`` and the random draw):

* :class:`Backoff` spaces out retries of something that keeps failing: a shard-map refresh
  (KPL ``shard_map.cc``: 1 s, ×1.5, at most 30 s) or requests to an endpoint that is down.
  Unlike the KPL we add jitter, so many producers that failed together do not retry together.
* :class:`AdaptiveRate` is the per-shard throttle feedback the KPL leaves as a TODO
  (``limiter.h``, ``add_error``): when Kinesis throttles a shard, the rate allowed there drops
  to 90% of what the shard *accepted* from this producer over the last second, at most once a
  second and only for requests sent after the last cut; it climbs back to that rate along a
  cubic in a few seconds, then probes beyond it gently (2% of it per second, the pace doubling
  every 10 s), up to the configured rate.

Why (the AIMD this replaced, simulated with four producers sharing two shards in
``tests/test_fleet_feedback.py``, the mechanism of the sawtooth measured over HTTP):

* **cuts compounded.** A throttled answer describes a request sent a round trip ago; AIMD cut
  by half at every throttled answer half a second apart, so the answers still in flight after
  a cut cut again: 250 → 120 → 55 → 27 records/s within 5 s, when each producer's share was
  62. Here an answer whose request was sent before the last cut is ignored (its rate has been
  dealt with), and cuts are a measuring window (1 s) apart;
* **a factor lands anywhere; the shard's acceptance does not.** Whatever the number of
  producers on a shard, the rates the shard accepted from each add up to its capacity, so each
  cutting to 90% of its own accepted rate brings the total to 90% of the capacity in one step,
  without knowing how many they are. (A cut never more than halves the rate: a window with
  little accepted, or none, says little.) TCP's congestion-window validation for
  application-limited senders (RFC 7661) reduces to what was in flight for the same reason;
* **recovery overshot, and the server's burst hid it.** AIMD recovered to the configured
  rate, which for a producer that cannot see its co-writers is the whole shard, at 10% per
  second of the rate at the cut with the pace doubling every 10 s. Below capacity the shard's
  bucket refills (one second of burst), so a probe beyond the capacity goes unthrottled until
  that burst is spent: the faster the probe, the further beyond the capacity every producer is
  when throttling starts (16 s of 60-90% delivered with nothing throttled, then thousands of
  throttled attempts a second). The cubic spends its time near the rate of the cut, where the
  shard is full, and the probe beyond it is slow enough that the burst it uncovers is small.
  A cubic probe as TCP CUBIC's (tried first) accelerates while the burst hides it, and had
  seconds over 50% throttled in the simulation.

botocore's adaptive retry mode (``botocore/retries/adaptive.py``, ``throttling.py``) was the
other model: a CUBIC rate over a token bucket, cut to 0.7 × the rate it *sends* at every
throttled response, growth with an absolute scale (0.4 requests/s per s³), capped at twice the
measured send rate. Taken: the cubic return to the rate of the cut. Not taken: a cut per
throttled response (late answers compound, as AIMD's did), a cut from the sending rate (it
says nothing about the shard's capacity), a cubic probe beyond (see above), and an absolute
scale (the time back would depend on the rate).

Without coordination, producers sharing a shard are not made fair: each cuts to its own part,
and parts keep their ratios. ``aiokpl.coordination`` sets per-shard ceilings (``configured``)
that share each shard among them.
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
    """A rate cut to what a shard accepted when it throttles, grown back along a cubic.

    ``rate(now)`` is the configured rate until the first :meth:`cut`. The caller reports what
    the shard accepted (:meth:`accepted`, from each response) and each throttled answer
    (:meth:`cut`, with the time its request was sent). A cut:

    * is ignored if that request was sent before the last cut (it measured the rate before
      it), or if the last cut is less than ``window`` seconds old;
    * sets the *peak* ``w`` to the rate the shard accepted over the last ``window`` seconds,
      but at most the rate in force ``r`` and at least ``deepest × r``; the rate drops to
      ``beta × w`` (never below ``floor`` × configured).

    The floor is a thousandth of the configured rate: low enough for a producer's share of a
    shard that hundreds of writers share, or whose real limit is far under the configured one
    (at a hundredth, 8 producers with aggregation on shards a sixteenth of their configured
    bytes stopped at a floor whose sum was above the shard's rate: 26% of their attempts
    throttled, ``python tests/fleet.py --aggregation --producers 8 --limit 1000``).

    Within ``window`` seconds of the first answer heard (accepted or throttled) the shard's
    bucket still speaks for the writers before this producer: spent by a producer just
    replaced, or partly spent, or saved by quiet shards; what this producer's first answers
    took is that bucket's leftover, not a rate. So a cut there (*early*) ignores the
    measurement: ``w = r``, the rate drops by ``beta`` only (following a first window's
    measurement, a restarted producer ran at 50-80% of its shards' rate for 15 s). Until the
    next cut, what the shard accepts is counted from the early cut: a request sent after it
    and throttled too, within that first window, cuts again at once (no ``window`` to wait),
    to what came through since the early cut (a producer joining busy shards, whose share is
    that, or one whose limit is above the shard's), unless that is ``beta × r`` or more (the
    shard takes the rate: a leftover of the burst).

    After the cut the rate climbs back to ``w`` along a cubic, flattening as it gets there:
    in ``settle`` seconds from a peak at the configured rate, sooner from a lower one (by the
    cube root of their ratio, so a producer cut deep catches up faster). Beyond ``w`` it grows
    by ``probe × w`` per second, the pace doubling every ``probe_doubling`` seconds, until it
    reaches the configured rate (recovered).

    ``configured`` may be changed at any time (coordination sets per-shard ceilings through
    it): the rate never exceeds it, recovery ends when it reaches it, and an assigned value
    is also the new peak (the rate is back at it ``settle`` seconds after the cut at most).
    """

    __slots__ = (
        "_configured",
        "_counts",
        "_cut_at",
        "_early_amount",
        "_last_cut",
        "_peak",
        "_since",
        "_slot",
        "beta",
        "deepest",
        "floor",
        "probe",
        "probe_doubling",
        "settle",
        "window",
    )

    _SLOTS = 4  # the measuring window, in slots; one more holds the slot in progress

    def __init__(
        self,
        configured: float,
        *,
        beta: float = 0.9,
        deepest: float = 0.5,
        settle: float = 4.0,
        probe: float = 0.02,
        probe_doubling: float = 10.0,
        window: float = 1.0,
        floor: float = 0.001,
    ) -> None:
        if not 0.0 < beta < 1.0 or not 0.0 < deepest <= 1.0:
            raise ValueError("beta must be in (0, 1) and deepest in (0, 1]")
        if not (settle > 0 and probe > 0 and probe_doubling > 0 and window > 0):
            raise ValueError("settle, probe, probe_doubling and window must be greater than 0")
        self._configured = configured
        self.beta = beta
        self.deepest = deepest
        self.settle = settle
        self.probe = probe
        self.probe_doubling = probe_doubling
        self.window = window
        self.floor = floor
        self._peak = configured  # the rate the last cut set out from (w)
        self._cut_at: float | None = None  # while recovering: when the last cut was
        self._last_cut: float | None = None  # the last cut ever, recovered or not
        self._since: float | None = None  # when the first answer (accepted or cut) came
        # After a cut in the first window, until the next cut: what was accepted since it.
        self._early_amount: float | None = None
        # What the shard accepted, in slots of window / _SLOTS seconds: the _SLOTS slots
        # before the one in progress, then the one in progress (index _slot).
        self._counts = [0.0] * (self._SLOTS + 1)
        self._slot: int | None = None

    @property
    def configured(self) -> float:
        """The rate recovered to: the rate allowed until the first cut, and the highest."""
        return self._configured

    @configured.setter
    def configured(self, value: float) -> None:
        # A rate assigned from outside (coordination's share of the shard) is also the peak
        # the rate climbs back to: a better estimate of this producer's share than what a
        # burst of throttling let it measure, so a cut holds it under its share for at most
        # ``settle`` seconds (the measurement alone left coordinated producers under their
        # ceilings for seconds after a co-writer left).
        self._configured = self._peak = value

    def rate(self, now: float) -> float:
        """The rate allowed at ``now``."""
        if self._cut_at is None:
            return self._configured
        configured = self._configured
        peak = self._peak
        # The climb back: peak - scale × (back - t)³, at beta × peak when t = 0. Its scale is
        # the configured rate's, so ``back`` is ``settle`` from the configured rate.
        scale = (1.0 - self.beta) * configured / self.settle**3
        back = math.pow(peak * (1.0 - self.beta) / scale, 1.0 / 3.0)
        elapsed = now - self._cut_at
        if elapsed < back:
            left = back - elapsed
            grown = peak - scale * left * left * left
        else:
            doubling = self.probe_doubling
            doublings = (elapsed - back) / doubling
            grown = peak * (1.0 + self.probe * doubling / _LN2 * (math.pow(2.0, doublings) - 1.0))
        if grown >= configured:
            self._cut_at = None
            return configured
        return max(grown, configured * self.floor)

    @property
    def recovering(self) -> bool:
        """Whether the rate is below the configured rate (it was cut and has not recovered)."""
        return self._cut_at is not None

    def accepted(self, amount: float, now: float) -> None:
        """The shard accepted ``amount`` (records or bytes) from this producer at ``now``."""
        if self._since is None:
            self._since = now
        if self._early_amount is not None:
            self._early_amount += amount
        self._advance(now)
        self._counts[-1] += amount

    def measured(self, now: float) -> float:
        """The rate the shard accepted over the last ``window`` seconds (0: nothing counted).

        Counted in slots of ``window / 4`` seconds: the window is the four slots before the
        one in progress, and that one. Right after start-up too (what was accepted in the
        first moments, over a whole window): a start-up burst the server's bucket granted
        is not a rate it can sustain.
        """
        if self._slot is None:
            return 0.0
        slot = self._advance(now)
        start = (slot - self._SLOTS) * self.window / self._SLOTS
        return sum(self._counts) / (now - start)

    def cut(self, now: float, sent_at: float | None = None) -> bool:
        """The shard throttled a request sent at ``sent_at`` (``None``: unknown); returns
        whether the rate was lowered (see the class for when it is not)."""
        since = self._since
        if since is None:
            since = self._since = now
        first_window = now - since < self.window
        last = self._last_cut
        since_early = self._early_amount if first_window else None
        if last is not None:
            if sent_at is not None and sent_at < last:
                return False
            if now - last < self.window and since_early is None:
                return False
        current = self.rate(now)
        floor = self.deepest * current
        if since_early is not None and last is not None:
            # Throttled again after a cut in the first window: what came through since it.
            elapsed = now - last
            seen = since_early / elapsed if elapsed > 0 else 0.0
            if seen >= self.beta * current:
                return False  # it took nearly all of the rate: a leftover of the burst
            measured = seen
            self._early_amount = None
        else:
            # The first window's measurement is the bucket's leftover: it says nothing.
            measured = current if first_window else self.measured(now)
            # An early cut counts what comes through after it, until the next cut.
            self._early_amount = 0.0 if first_window else None
        self._peak = min(current, max(measured, floor))
        self._cut_at = self._last_cut = now
        return True

    def _advance(self, now: float) -> int:
        """Move the slot in progress to ``now``'s, dropping counts that left the window;
        returns that slot."""
        slot = math.floor(now * self._SLOTS / self.window)
        last = self._slot
        if last is None or slot > last:
            counts = self._counts
            steps = len(counts) if last is None else min(slot - last, len(counts))
            if last is not None:
                del counts[:steps]
                counts.extend([0.0] * steps)
            self._slot = slot
            return slot
        return last  # the same slot (or a clock that did not move forward)

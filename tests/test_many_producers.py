"""N uncoordinated producers' throttle feedback sharing one shard: a pure simulation.

SPEC §4.10 "many producers": N producers, each limiting itself to the whole shard's rate and
offered 2× the shard's capacity in total, must settle near their shares with at most 5% of
attempts throttled and at least 90% of the capacity delivered. The simulation is
deterministic: explicit time in steps of the limiter's drain interval, no clock, no random.

Each producer is what ``ShardLimiter`` makes of :class:`AdaptiveRate`: a token bucket holding
one second of the configured rate, its rate set from ``AdaptiveRate.rate(now)`` at every
drain while recovering, ``accepted(n, now)`` for the records a response reports stored, and
``cut(now, sent_at)`` (then the new rate) when it reports a throttle. Its application offers
``2 × capacity / N`` records/s into a backlog of one second of that (it waits beyond, as
back-pressure makes it). Every drain interval each producer sends what its bucket grants from
its backlog; the shard is an exact token bucket (the capacity per
second, one second of burst, full at the start) that takes the producers' records
interleaved, one at a time, rotating who goes first. Each response arrives ``round_trip``
seconds later; throttled records then go back to the front of the backlog (retries pay their
tokens again, as in the pipeline).

The round trip is 0.5 s: the feedback of a loaded machine (the coordination experiment runs
four producer processes and the server on two cores). With it, recovery in units of the
configured rate (what ``AdaptiveRate`` did first) throttles 8.1% of attempts with four
producers (5.0% with two); AIMD with recovery in units of the rate at recent cuts (what it did
next) 4.3% with two and with four; the cut to 90% of what the shard accepted, once per window
and round trip, with a cubic climb back, 0.7% with two and 0.8% with four, all of the capacity
delivered. (The fleet of real producers is ``tests/test_fleet_feedback.py``.)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Protocol

import pytest

from aiokpl._core.backoff import AdaptiveRate
from aiokpl._core.token_bucket import TokenBucket

CAPACITY = 500.0  # records/s the shard takes (the coordination experiment's shard rate)
STEP = 0.025  # the limiter's drain interval
ROUND_TRIP = 0.5
SECONDS = 80.0
SETTLED = 20.0  # measure from here on


class Rate(Protocol):
    configured: float

    def rate(self, now: float) -> float: ...

    def cut(self, now: float, sent_at: float | None = None) -> bool: ...

    def accepted(self, amount: float, now: float) -> None: ...

    @property
    def recovering(self) -> bool: ...


class ConfiguredRateRecovery:
    """``AdaptiveRate`` as it was: recovery of 10% of the *configured* rate per second."""

    def __init__(self, configured: float) -> None:
        self.configured = configured
        self._base = configured
        self._cut_at: float | None = None
        self._last_cut: float | None = None

    def rate(self, now: float) -> float:
        if self._cut_at is None:
            return self.configured
        grown = self._base + self.configured * 0.1 * (now - self._cut_at)
        if grown >= self.configured:
            self._cut_at = None
            return self.configured
        return grown

    @property
    def recovering(self) -> bool:
        return self._cut_at is not None

    def accepted(self, amount: float, now: float) -> None:
        pass  # it never looked at what the shard accepted

    def cut(self, now: float, sent_at: float | None = None) -> bool:
        last = self._last_cut
        if last is not None and now - last < 0.5:
            return False
        factor = 0.85 if last is None or now - last >= 10.0 else 0.5
        self._base = max(self.configured * 0.05, self.rate(now) * factor)
        self._cut_at = self._last_cut = now
        return True


@dataclass
class Figures:
    delivered: float  # records stored over the shard's capacity, after settling
    throttled: float  # throttled attempts over all attempts, after settling


def simulate(rates: list[Rate]) -> Figures:
    """Run the producers of ``rates`` (each configured for the whole shard) on one shard."""
    producers = len(rates)
    shard = TokenBucket([(CAPACITY, CAPACITY)])
    buckets = [TokenBucket([(rate.configured, rate.configured)]) for rate in rates]
    offered = 2.0 * CAPACITY / producers * STEP  # records per step, per producer
    backlog = [0] * producers
    owed = [0.0] * producers
    # (step due, producer, step sent, stored, throttled)
    responses: deque[tuple[int, int, int, int, int]] = deque()
    latency = round(ROUND_TRIP / STEP)
    stored = throttled = 0
    for step in range(round(SECONDS / STEP)):
        now = step * STEP
        while responses and responses[0][0] <= step:
            _, index, sent_step, took, refused = responses.popleft()
            if took:
                rates[index].accepted(took, now)
            if refused:
                if rates[index].cut(now, sent_at=sent_step * STEP):
                    buckets[index].set_rate(0, rates[index].rate(now), now)
                backlog[index] += refused
        batches = []
        for index, rate in enumerate(rates):
            owed[index] += offered
            room = round(offered / STEP) - backlog[index]  # one second of the offer
            arrived = min(int(owed[index]), max(0, room))
            owed[index] -= int(owed[index])
            backlog[index] += arrived
            if rate.recovering:
                buckets[index].set_rate(0, rate.rate(now), now)
            sent = 0
            while sent < backlog[index] and buckets[index].try_take((1,), now):
                sent += 1
            backlog[index] -= sent
            batches.append(sent)
        refused_by = [0] * producers
        took_by = [0] * producers
        left = list(batches)
        order = [(step + offset) % producers for offset in range(producers)]
        while any(left):
            for index in order:
                if left[index]:
                    left[index] -= 1
                    if shard.try_take((1,), now):
                        took_by[index] += 1
                        stored += now >= SETTLED
                    else:
                        refused_by[index] += 1
                        throttled += now >= SETTLED
        for index, sent in enumerate(batches):
            if sent:
                responses.append((step + latency, index, step, took_by[index], refused_by[index]))
    attempts = stored + throttled
    return Figures(stored / (CAPACITY * (SECONDS - SETTLED)), throttled / attempts)


@pytest.mark.parametrize("producers", [1, 2, 4])
def test_uncoordinated_producers_settle_near_their_shares(producers: int) -> None:
    figures = simulate([AdaptiveRate(CAPACITY) for _ in range(producers)])
    assert figures.throttled <= 0.05, figures
    assert figures.delivered >= 0.90, figures


@pytest.mark.parametrize("producers", [2, 4])
def test_a_cut_to_what_the_shard_accepted_throttles_under_two_percent(producers: int) -> None:
    """One cut per window to 90% of what the shard accepted, a cubic climb back and a gentle
    probe: under 2% throttled with all of the capacity delivered, whatever the number of
    producers (AIMD, with recovery in units of the rate at recent cuts: 4.3%)."""
    figures = simulate([AdaptiveRate(CAPACITY) for _ in range(producers)])
    assert figures.throttled <= 0.02, figures
    assert figures.delivered >= 0.97, figures


def test_recovery_in_units_of_the_configured_rate_throttles_too_much() -> None:
    """The scheme the recovery replaced, under the same conditions: above 5% with four."""
    figures = simulate([ConfiguredRateRecovery(CAPACITY) for _ in range(4)])
    assert figures.throttled > 0.05, figures
    assert figures.delivered >= 0.90, figures  # it delivers: the waste is in the throttling

"""Backoff and AdaptiveRate (pure, explicit time)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokpl._core.backoff import AdaptiveRate, Backoff


def test_shard_map_backoff_sequence_without_jitter() -> None:
    backoff = Backoff(1.0, 1.5, 30.0, jitter=0.0)
    delays = [backoff.next_delay(0.3) for _ in range(12)]
    assert delays[:5] == [1.0, 1.5, 2.25, 3.375, 5.0625]
    assert delays[-1] == 30.0
    assert max(delays) == 30.0
    assert backoff.failures == 12
    backoff.reset()
    assert backoff.failures == 0
    assert backoff.next_delay(0.0) == 1.0


@given(st.lists(st.floats(min_value=0.0, max_value=0.999999), min_size=1, max_size=30))
def test_jittered_delays_stay_within_band(draws: list[float]) -> None:
    backoff = Backoff(1.0, 1.5, 30.0, jitter=0.5)
    nominal = 1.0
    for draw in draws:
        delay = backoff.next_delay(draw)
        assert nominal * 0.5 <= delay <= nominal
        nominal = min(30.0, nominal * 1.5)


def test_jitter_spreads_delays() -> None:
    low = Backoff(1.0, 2.0, 8.0, jitter=0.5).next_delay(0.99)
    high = Backoff(1.0, 2.0, 8.0, jitter=0.5).next_delay(0.0)
    assert low == pytest.approx(0.505)
    assert high == 1.0


@pytest.mark.parametrize(
    ("initial", "factor", "maximum", "jitter"),
    [(0, 2, 1, 0), (2, 2, 1, 0), (1, 0.5, 2, 0), (1, 2, 2, 1.5)],
)
def test_backoff_validation(initial: float, factor: float, maximum: float, jitter: float) -> None:
    with pytest.raises(ValueError, match="initial"):
        Backoff(initial, factor, maximum, jitter)


def test_adaptive_rate_cuts_and_recovers() -> None:
    rate = AdaptiveRate(
        1000.0, decrease=0.5, first_decrease=0.5, recovery_per_second=0.1, floor=0.05, cooldown=0.5
    )
    assert rate.rate(0.0) == 1000.0
    # bool(): mypy would otherwise keep the property narrowed to False across cut().
    assert not bool(rate.recovering)
    assert rate.cut(10.0)
    assert rate.recovering
    assert rate.rate(10.0) == 500.0
    assert rate.rate(12.0) == pytest.approx(700.0)  # +100/s
    assert not rate.cut(10.4)  # within the cooldown: the same burst
    assert rate.cut(12.0)  # 700 -> 350, and 700 is the new peak
    assert rate.rate(12.0) == pytest.approx(350.0)
    # +75.8/s: 10% of the highest recent rate at a cut (1000, 2 s ago: counted 1000 / 2**0.4)
    slope = 0.1 * 1000.0 * 2.0 ** (-2.0 / 5.0)
    assert rate.rate(14.0) == pytest.approx(350.0 + 2.0 * slope)
    assert rate.rate(16.6) < 700.0 < rate.rate(16.7)  # back at the peak after 350 / 75.8 s
    assert rate.rate(20.0) < 1000.0  # the probe beyond it
    assert rate.rate(20.2) == 1000.0  # 700 + 75.8 * 10 / ln 2 * (2 ** 0.35 - 1) >= 1000
    assert not rate.recovering


def test_an_isolated_cut_is_mild_and_repeated_cuts_halve() -> None:
    rate = AdaptiveRate(1000.0)  # defaults: first 0.85, then 0.5 within 10 s, cooldown 0.5 s
    assert rate.cut(5.0)
    assert rate.rate(5.0) == pytest.approx(850.0)  # first ever: a small correction
    assert not rate.cut(5.3)  # the same burst
    assert rate.cut(6.0)  # again within 10 s: congestion
    assert rate.rate(6.0) == pytest.approx(475.0)  # 850 grew by 100 in 1 s, then halved
    assert rate.rate(11.7) == 1000.0  # 475 + 5.7 s * 100/s: recovered
    assert rate.cut(15.0)  # 9 s after the last cut: still congestion, though recovered
    assert rate.rate(15.0) == pytest.approx(500.0)
    assert rate.cut(30.0)  # 15 s of quiet: isolated again
    assert rate.rate(30.0) == pytest.approx(850.0)


def test_adaptive_rate_floor() -> None:
    rate = AdaptiveRate(1000.0, decrease=0.5, recovery_per_second=0.0001, floor=0.05, cooldown=0.0)
    for step in range(20):
        rate.cut(float(step))
    assert rate.rate(20.0) == pytest.approx(50.0, rel=0.01)


def _cut_down_to(configured: float, cuts: int) -> AdaptiveRate:
    """A rate halved ``cuts`` times up to t = 0: peak = configured / 2**(cuts-1).

    The cuts are 1e-7 s apart and its memory's half-life 1e-10 s, so earlier cuts are
    forgotten: recovery is scaled to the last cut's rate.
    """
    rate = AdaptiveRate(
        configured,
        decrease=0.5,
        first_decrease=0.5,
        cooldown=0.0,
        probe_doubling=3.0,
        memory_half_life=1e-10,
    )
    for index in range(cuts):
        assert rate.cut((index + 1 - cuts) * 1e-7)
    return rate


def test_recovery_is_scaled_to_the_rate_at_the_last_cut() -> None:
    rate = _cut_down_to(1000.0, 3)  # 1000 -> 500 -> 250 -> 125; the last cut was from 250
    assert rate.rate(0.0) == pytest.approx(125.0)
    assert rate.rate(1.0) == pytest.approx(150.0)  # +25/s (10% of 250), not +100/s
    assert rate.rate(5.0) == pytest.approx(250.0)  # back at the peak after (1 - 0.5) / 0.1 s
    # Beyond the peak the slope doubles every probe_doubling (3) seconds.
    probe = 25.0 * 3.0 / math.log(2.0)
    assert rate.rate(8.0) == pytest.approx(250.0 + probe)
    assert rate.rate(11.0) == pytest.approx(250.0 + 3.0 * probe)
    assert rate.recovering
    assert rate.rate(20.0) == 1000.0
    assert not rate.recovering


def test_the_probe_slope_doubles_every_probe_doubling_seconds() -> None:
    rate = _cut_down_to(1e6, 3)  # 1e6 -> 5e5 -> 2.5e5 -> 1.25e5: peak 2.5e5, 25,000/s
    epsilon = 1e-4

    def slope(at: float) -> float:
        return (rate.rate(at + epsilon) - rate.rate(at)) / epsilon

    assert slope(2.0) == pytest.approx(25_000.0, rel=1e-3)  # linear up to the peak (at 5 s)
    assert slope(5.0) == pytest.approx(25_000.0, rel=1e-3)
    assert slope(8.0) == pytest.approx(50_000.0, rel=1e-3)
    assert slope(11.0) == pytest.approx(100_000.0, rel=1e-3)


@pytest.mark.parametrize("producers", [1, 2, 4, 8])
def test_n_producers_cut_at_their_shares_recover_together_at_one_slope(producers: int) -> None:
    """The sum of the recovery slopes does not grow with the number of producers."""
    shard = 1000.0
    # Each configured for the whole shard, cut from its share down to half of it.
    rates = [_cut_down_to(shard, producers.bit_length()) for _ in range(producers)]
    total = [sum(rate.rate(t) for rate in rates) for t in (0.0, 1.0)]
    assert total[0] == pytest.approx(shard / 2)
    assert total[1] - total[0] == pytest.approx(0.1 * shard)


def test_an_assigned_configured_rate_is_the_new_scale_of_recovery() -> None:
    rate = _cut_down_to(1000.0, 4)  # a storm: 1000 -> 500 -> 250 -> 125 -> 62.5
    assert rate.rate(1.0) == pytest.approx(62.5 + 12.5)  # 10% of 125 per second
    rate.configured = 250.0  # coordination: this producer's share is 250
    assert rate.rate(1.0) == pytest.approx(62.5 + 25.0)  # 10% of the share per second
    assert rate.rate(8.0) == 250.0
    assert not rate.recovering


@given(
    cuts=st.lists(st.floats(min_value=0.0, max_value=30.0), min_size=1, max_size=6),
    probes=st.lists(st.floats(min_value=0.0, max_value=60.0), min_size=2, max_size=20),
)
def test_rate_between_cuts_grows_monotonically_and_stays_in_bounds(
    cuts: list[float], probes: list[float]
) -> None:
    rate = AdaptiveRate(1000.0)
    for at in sorted(cuts):
        rate.cut(at)
    start = max(cuts)
    previous = rate.rate(start)
    for at in sorted(start + p for p in probes):
        now = rate.rate(at)
        assert 50.0 - 1e-9 <= now <= 1000.0
        assert now >= previous - 1e-9
        previous = now


def test_the_rate_follows_a_changed_configured_rate() -> None:
    rate = _cut_down_to(1000.0, 2)  # 1000 -> 500 -> 250
    rate.configured = 200.0  # a coordinated ceiling below the rate in force
    assert rate.rate(0.1) == 200.0
    assert not rate.recovering
    assert rate.cut(1.0)  # congestion again: 100 (the first cut was 1 s ago)
    rate.configured = 2000.0  # a ceiling raised: recovery at 10% of it, up to it
    assert rate.rate(1.0) == pytest.approx(100.0)
    assert rate.rate(2.0) == pytest.approx(300.0)
    assert rate.rate(11.0) == 2000.0


def test_probe_doubling_must_be_positive() -> None:
    with pytest.raises(ValueError, match="probe_doubling"):
        AdaptiveRate(1000.0, probe_doubling=0.0)
    with pytest.raises(ValueError, match="memory_half_life"):
        AdaptiveRate(1000.0, memory_half_life=0.0)


def test_recovery_remembers_a_recent_higher_cut_at_half_every_half_life() -> None:
    rate = AdaptiveRate(1000.0, decrease=0.5, first_decrease=0.5, memory_half_life=5.0)
    assert rate.cut(0.0)  # from 1000 (the first cut's scale: the configured rate)
    assert rate.rate(1.0) == pytest.approx(600.0)  # +100/s
    assert rate.cut(1.0)  # from 600 -> 300; the cut from 1000 counts 1000 / 2**(1/5)
    remembered = 1000.0 * 2.0 ** (-1.0 / 5.0)
    assert rate.rate(2.0) == pytest.approx(300.0 + 0.1 * remembered)
    # Throttled again much later, from lower down: the old cut is forgotten.
    assert rate.cut(4.0)  # rate(4) = 300 + 3 * 87.1 = 561.2 -> 280.6
    at_cut = 300.0 + 3.0 * 0.1 * remembered
    assert rate.rate(4.0) == pytest.approx(at_cut / 2)
    # Its scale: the cut from 1000 counts 1000 / 2**(4/5) = 574.4 by now, more than 561.2.
    assert rate.rate(5.0) - rate.rate(4.0) == pytest.approx(0.1 * 1000.0 * 2.0 ** (-4.0 / 5.0))
    assert rate.cut(40.0)  # recovered meanwhile: cut from 1000 again
    assert rate.cut(41.0)  # rate(41) = 500 + 100 = 600
    assert rate.cut(80.0)  # recovered: from 1000 -> 500; scale 1000 (the max)
    assert rate.rate(81.0) == pytest.approx(600.0)


def test_a_burst_of_cuts_recovers_at_the_slope_of_the_rate_before_it() -> None:
    """Four cuts within two seconds (a start-up burst): recovery as from the first one."""
    rate = AdaptiveRate(1000.0)  # first cut x0.85, then x0.5, cooldown 0.5 s, half-life 5 s
    for at in (1.0, 1.5, 2.0, 2.5):
        assert rate.cut(at)
    low = rate.rate(2.5)
    assert low < 150.0
    slope = rate.rate(3.5) - low
    assert slope > 0.1 * 1000.0 * 2.0 ** (-1.5 / 5.0) - 1e-9  # about 81/s, not 10% of low

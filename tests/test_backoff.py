"""Backoff and AdaptiveRate (pure, explicit time)."""

from __future__ import annotations

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


def test_adaptive_rate_cuts_and_recovers_linearly() -> None:
    rate = AdaptiveRate(
        1000.0, decrease=0.5, first_decrease=0.5, recovery_per_second=0.1, floor=0.05, cooldown=0.5
    )
    assert rate.rate(0.0) == 1000.0
    assert not rate.recovering
    assert rate.cut(10.0)
    assert rate.recovering
    assert rate.rate(10.0) == 500.0
    assert rate.rate(12.0) == pytest.approx(700.0)  # +100/s
    assert not rate.cut(10.4)  # within the cooldown: the same burst
    assert rate.cut(12.0)  # 700 -> 350
    assert rate.rate(12.0) == pytest.approx(350.0)
    assert rate.rate(18.5) == 1000.0  # 350 + 6.5 * 100 >= 1000: recovered
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

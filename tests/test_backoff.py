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


# -- AdaptiveRate: the throttle feedback -----------------------------------------------------


def accepting(rate: AdaptiveRate, per_second: float, start: float, end: float) -> None:
    """The shard accepts ``per_second`` from ``start`` to ``end``, in tenths of a second."""
    steps = round((end - start) * 10)
    for step in range(steps):
        rate.accepted(per_second / 10, start + step / 10)


def test_the_configured_rate_holds_until_the_first_cut() -> None:
    rate = AdaptiveRate(1000.0)
    assert rate.rate(0.0) == 1000.0
    assert not rate.recovering
    assert rate.measured(5.0) == 0.0  # nothing counted yet


def test_a_cut_lands_at_ninety_percent_of_what_the_shard_accepted() -> None:
    """Four producers sharing a 1000/s shard, each allowed 400/s, each had 250/s accepted:
    each cuts to 225/s, so together they offer 90% of the shard, in one step."""
    rate = AdaptiveRate(400.0)
    accepting(rate, 250.0, 0.0, 2.0)
    assert rate.measured(2.0) == pytest.approx(250.0)
    assert rate.cut(2.0, sent_at=1.5)
    assert rate.rate(2.0) == pytest.approx(225.0)
    assert rate.recovering


def test_a_cut_never_more_than_halves_nor_raises_the_rate() -> None:
    little = AdaptiveRate(1000.0)
    accepting(little, 10.0, 0.0, 2.0)  # a window with little accepted says little
    little.cut(2.0)
    assert little.rate(2.0) == pytest.approx(0.9 * 500.0)
    nothing = AdaptiveRate(1000.0)
    nothing.accepted(0.0, -1.0)  # answered a window ago, nothing accepted since: the same
    nothing.cut(0.0)
    assert nothing.rate(0.0) == pytest.approx(450.0)
    burst = AdaptiveRate(100.0)
    accepting(burst, 400.0, 0.0, 1.0)  # accepted more than its rate (a start-up burst)
    burst.cut(1.0)
    assert burst.rate(1.0) == pytest.approx(90.0)  # from the rate in force


def test_one_cut_per_window_and_none_for_requests_sent_before_the_last_cut() -> None:
    """Throttled answers keep coming for a round trip after a cut: they describe the rate
    before it, and must not cut again (AIMD's 250 → 120 → 55 → 27 in 5 s)."""
    rate = AdaptiveRate(1000.0)
    accepting(rate, 250.0, 0.0, 5.0)
    assert rate.cut(5.0, sent_at=4.5)
    after = rate.rate(5.0)
    assert not rate.cut(5.5, sent_at=4.9)  # within the window
    assert not rate.cut(6.5, sent_at=4.9)  # sent before the cut: the old rate's answer
    assert not rate.cut(5.9)  # no send time: the window alone decides
    assert rate.rate(5.0) == after
    assert rate.cut(6.5, sent_at=5.2)  # a request sent at the new rate, a window later
    assert rate.rate(6.5) < after


def test_a_throttle_in_the_first_window_ignores_a_measurement_that_says_little() -> None:
    """A restart on spent shards: the first answers are throttled because another writer just
    emptied the shard's bucket, not because the shard cannot take this producer's rate. What
    the first window measured (a few records let through) is not a rate: the cut takes only
    ``beta`` off, and the rate is back within ``settle`` seconds."""
    rate = AdaptiveRate(1000.0)
    rate.accepted(3.0, 0.05)  # the first answer: 3 records let through
    assert rate.cut(0.05, sent_at=0.0)
    assert rate.rate(0.05) == pytest.approx(900.0)
    rate.accepted(90.0, 0.15)  # the spent shard takes the 900/s since: no writer before now
    assert not rate.cut(0.15, sent_at=0.1)  # a throttle then is a leftover
    assert rate.rate(0.05 + 4.0) == pytest.approx(1000.0)  # peak: the rate in force
    assert not rate.recovering
    # A window after the first answer, the same throttle is believed: at most halved.
    later = AdaptiveRate(1000.0)
    later.accepted(3.0, 0.05)
    assert later.cut(1.05, sent_at=1.0)
    assert later.rate(1.05) == pytest.approx(450.0)


def test_a_throttle_heard_before_any_acceptance_starts_the_first_window() -> None:
    """Every record of the first answer throttled (a shard spent to the last token): that
    answer starts the first window, so the cut is an early one (``beta`` off, nothing
    measured), and a second throttle within the window, of a request sent after it, cuts to
    what came through since: nothing, so at most halved."""
    rate = AdaptiveRate(1000.0)
    assert rate.cut(0.05, sent_at=0.0)
    assert rate.rate(0.05) == pytest.approx(900.0)
    climbed = rate.rate(0.5)  # back along the cubic, toward 1000
    assert 900.0 < climbed < 1000.0
    assert rate.cut(0.5, sent_at=0.1)
    assert rate.rate(0.5) == pytest.approx(0.9 * 0.5 * climbed)


def test_a_burst_measured_in_the_first_window_is_a_leftover_not_a_rate() -> None:
    """A restart on shards partly spent: the first answers took what the shard's bucket had
    left (here 600 records in 20 ms), then throttled. That says what the bucket held, not
    what the shard takes: the cut takes only ``beta`` off (following it, a restarted
    producer over HTTP ran at 80% of its shards for 15 s). A shard that cannot take the rate
    throttles again the requests sent after the cut: the next test."""
    rate = AdaptiveRate(1000.0)
    rate.accepted(600.0, 0.02)
    assert rate.cut(0.02, sent_at=0.0)
    assert rate.rate(0.02) == pytest.approx(900.0)
    assert rate.rate(0.02 + 4.0) == pytest.approx(1000.0)  # back within ``settle``


def test_throttled_again_after_an_early_cut_cuts_at_once_to_what_came_through_since() -> None:
    """A producer joining shards other writers keep busy: its first answers let a trickle
    through, which an early cut ignores; throttled again, a round trip later, it cuts at once
    (no window to wait) to what the shard accepted since the early cut, its share."""
    rate = AdaptiveRate(250.0)
    rate.accepted(2.0, 0.05)
    assert rate.cut(0.05, sent_at=0.0)  # early: the trickle ignored
    assert rate.rate(0.05) == pytest.approx(225.0)
    assert not rate.cut(0.07, sent_at=0.04)  # sent before the early cut: its rate's answer
    rate.accepted(6.0, 0.15)  # 60/s since the early cut
    before = rate.rate(0.15)
    assert rate.cut(0.15, sent_at=0.1)
    assert rate.rate(0.15) == pytest.approx(0.9 * max(60.0, 0.5 * before))
    assert not rate.cut(0.3, sent_at=0.2)  # then one cut a window, as always


def test_a_throttle_after_an_early_cut_that_let_the_rate_through_is_a_leftover() -> None:
    """Throttled after an early cut while the shard took nearly all of the rate since: the
    answer is a leftover of the first burst (a batch gathered before the cut), not a rate
    the shard cannot take, and cuts nothing; a window after the first answer, throttles
    are judged as always."""
    rate = AdaptiveRate(250.0)
    rate.accepted(250.0, 0.1)  # quiet shards: the first answer took the saved second
    assert rate.cut(0.1, sent_at=0.05)  # early: beta off
    cut = rate.rate(0.1)
    assert cut == pytest.approx(0.9 * 250.0)
    rate.accepted(24.0, 0.2)  # 240/s since: the rate and more
    assert not rate.cut(0.2, sent_at=0.15)
    assert rate.rate(0.2) >= cut
    assert rate.cut(1.2, sent_at=1.15)  # a window later: judged by the window


def test_the_rate_climbs_back_to_the_peak_then_probes_gently() -> None:
    """Back at the peak after ``settle`` seconds (from the configured rate; sooner from a lower
    peak, by the cube root), flat around it; beyond, 2% of it per second, doubling every 10 s."""
    rate = AdaptiveRate(1000.0)
    rate.accepted(0.0, -1.0)  # the first answer, a window before the cut
    rate.cut(0.0, sent_at=None)  # nothing accepted: peak 500 (at most halved), rate 450
    assert rate.rate(0.0) == pytest.approx(450.0)
    back = 4.0 * 0.5 ** (1 / 3)  # 3.17 s
    assert rate.rate(back / 2) == pytest.approx(500.0 - 50.0 / 8)  # concave: most of the way
    assert rate.rate(back) == pytest.approx(500.0)
    probed = 500.0 * (1 + 0.02 * 10 / math.log(2) * (2**0.1 - 1))
    assert rate.rate(back + 1.0) == pytest.approx(probed)
    assert rate.rate(back + 10.0) == pytest.approx(500.0 * (1 + 0.2 / math.log(2)))
    # Up to the configured rate, then recovered.
    assert rate.rate(back + 60.0) == 1000.0
    assert not rate.recovering
    assert rate.rate(back + 61.0) == 1000.0


def test_a_producer_cut_deep_climbs_back_sooner() -> None:
    deep, shallow = AdaptiveRate(1000.0), AdaptiveRate(1000.0)
    accepting(deep, 40.0, 0.0, 1.0)
    accepting(shallow, 800.0, 0.0, 1.0)
    deep.cut(1.0)
    shallow.cut(1.0)
    # Peaks 500 (halved at most) and 800: back at them in 4 × cbrt(peak / 1000) seconds.
    assert deep.rate(1.0 + 4.0 * 0.5 ** (1 / 3)) == pytest.approx(500.0)
    assert shallow.rate(1.0 + 4.0 * 0.5 ** (1 / 3)) < 800.0
    assert shallow.rate(1.0 + 4.0 * 0.8 ** (1 / 3)) == pytest.approx(800.0)


def test_the_rate_never_exceeds_a_lowered_configured_rate_nor_drops_under_the_floor() -> None:
    rate = AdaptiveRate(1000.0, floor=0.5, deepest=0.1)
    accepting(rate, 100.0, 0.0, 1.0)
    rate.cut(1.0)
    assert rate.rate(1.0) == 500.0  # 90 by the measurement, floored at half the configured
    # A coordinated ceiling below the rate: it is also the new peak, climbed back to within
    # ``settle`` (4 s) of the cut, never exceeded.
    rate.configured = 80.0
    assert rate.configured == 80.0
    assert rate.rate(1.5) == pytest.approx(80.0 - 0.1 * 80.0 / 64 * 3.5**3)
    assert rate.rate(5.0) == 80.0
    assert not rate.recovering


def test_the_measuring_window_slides_in_quarter_windows() -> None:
    rate = AdaptiveRate(1000.0, window=1.0)
    rate.accepted(10.0, 0.1)
    # Over the four slots before the one in progress, and that one: right after the first
    # acceptance too (a burst in the first moments is not a rate).
    assert rate.measured(0.2) == pytest.approx(10.0 / 1.2)
    assert rate.measured(0.6) == pytest.approx(10.0 / 1.1)
    rate.accepted(30.0, 1.1)
    assert rate.measured(1.2) == pytest.approx(40.0 / 1.2)
    # The first count leaves the window once its slot is more than four slots old.
    assert rate.measured(1.3) == pytest.approx(30.0 / 1.05)
    assert rate.measured(1.3) == rate.measured(1.3)  # the same slot: nothing moves
    rate.accepted(5.0, 1.2)  # an earlier instant than the last query: same slot
    assert rate.measured(9.0) == 0.0  # long after: everything has left the window
    rate.accepted(8.0, 9.0)
    assert rate.measured(9.0) == pytest.approx(8.0)  # over the window: 9.0 is a slot start


@pytest.mark.parametrize(
    "changes",
    [
        {"beta": 1.0},
        {"beta": 0.0},
        {"deepest": 0.0},
        {"settle": 0.0},
        {"probe": 0.0},
        {"probe_doubling": 0.0},
        {"window": 0.0},
    ],
)
def test_adaptive_rate_validation(changes: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        AdaptiveRate(1000.0, **changes)


def test_the_floor_lets_hundreds_of_writers_each_take_their_share() -> None:
    """Cut after cut, the rate goes down to the share the shard gives (a two-hundredth of the
    configured rate here), not to a floor above it: at a hundredth, eight producers whose
    shards took a sixteenth of their configured bytes held a floor whose sum was more than the
    shards' rate, and a quarter of their attempts were throttled."""
    rate = AdaptiveRate(1_000_000.0)
    now = 0.0
    for _ in range(12):  # each second the shard takes 5,000 of this producer's, then throttles
        accepting(rate, 5_000.0, now, now + 1.0)
        now += 1.0
        rate.cut(now)
    assert rate.rate(now) == pytest.approx(0.9 * 5_000.0)  # beta × the share, not 10,000

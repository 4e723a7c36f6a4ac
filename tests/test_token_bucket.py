"""The pure multi-stream token bucket, driven synchronously with explicit ``now``."""

from __future__ import annotations

import doctest
import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aiokpl._core.token_bucket as token_bucket_module
from aiokpl._core.token_bucket import TokenBucket

# -- strategies -------------------------------------------------------------------------------

positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)
streams_strategy = st.lists(st.tuples(positive, positive), min_size=1, max_size=3)
# One operation: a clock step (negative now and then: the bucket must ignore rewinds) and, per
# stream, an amount expressed as a fraction of that stream's capacity (above 1 now and then).
step = st.one_of(
    st.floats(min_value=0.0, max_value=5.0),
    st.just(0.0),
    st.floats(min_value=-1.0, max_value=0.0),
)
fraction = st.floats(min_value=0.0, max_value=1.2)
fractions = st.lists(fraction, min_size=3, max_size=3)
operations = st.lists(st.tuples(step, fractions), max_size=60)
# The same, where some debits are forced (balances may go negative).
mixed_operations = st.lists(st.tuples(step, fractions, st.booleans()), max_size=60)


def amounts_for(bucket: TokenBucket, fractions: Sequence[float]) -> list[float]:
    return [f * c for f, c in zip(fractions, bucket.capacities, strict=False)]


def replay(
    streams: list[tuple[float, float]],
    ops: list[tuple[float, list[float], bool]],
    start: float,
) -> tuple[TokenBucket, float]:
    """Build a bucket and apply ``ops`` (forced or not); deterministic, so twice gives twins."""
    bucket = TokenBucket(streams)
    now = start
    for dt, fractions, forced in ops:
        now += dt
        amounts = amounts_for(bucket, fractions)
        if forced:
            bucket.force_take(amounts, now)
        else:
            bucket.try_take(amounts, now)
    return bucket, now


# -- properties -------------------------------------------------------------------------------


@given(streams=streams_strategy, ops=operations, start=st.floats(-1e3, 1e6))
def test_never_grants_more_than_rate_times_elapsed_plus_capacity(
    streams: list[tuple[float, float]],
    ops: list[tuple[float, list[float]]],
    start: float,
) -> None:
    bucket = TokenBucket(streams)
    granted = [0.0] * len(streams)
    now = start
    first: float | None = None
    latest = -math.inf
    for dt, fractions in ops:
        now += dt
        first = now if first is None else first
        latest = max(latest, now)
        amounts = amounts_for(bucket, fractions)
        if bucket.try_take(amounts, now):
            granted = [g + a for g, a in zip(granted, amounts, strict=True)]
        for given_out, (rate, capacity) in zip(granted, streams, strict=True):
            bound = rate * (latest - first) + capacity
            assert given_out <= bound * (1 + 1e-9) + 1e-9


@given(streams=streams_strategy, ops=mixed_operations, start=st.floats(-1e3, 1e6))
def test_try_take_is_all_or_nothing(
    streams: list[tuple[float, float]],
    ops: list[tuple[float, list[float], bool]],
    start: float,
) -> None:
    bucket = TokenBucket(streams)
    now = start
    for dt, fractions, forced in ops:
        now += dt
        amounts = amounts_for(bucket, fractions)
        if forced:
            bucket.force_take(amounts, now)
            continue
        before = bucket.tokens(now)
        taken = bucket.try_take(amounts, now)
        after = bucket.tokens(now)
        assert taken == all(b >= a for b, a in zip(before, amounts, strict=True))
        if taken:
            assert after == tuple(b - a for b, a in zip(before, amounts, strict=True))
        else:
            assert after == before


@settings(max_examples=300)
@given(
    streams=streams_strategy,
    ops=mixed_operations,
    start=st.floats(-1e3, 1e6),
    wanted=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=3, max_size=3),
    later=st.floats(min_value=-1.0, max_value=5.0),
)
def test_time_until_is_exact(
    streams: list[tuple[float, float]],
    ops: list[tuple[float, list[float], bool]],
    start: float,
    wanted: list[float],
    later: float,
) -> None:
    bucket, now = replay(streams, ops, start)
    twin, _ = replay(streams, ops, start)
    now += later
    amounts = amounts_for(bucket, wanted)
    wait = bucket.time_until(amounts, now)
    assert 0.0 <= wait < math.inf
    # The promised instant works, in floating point, with no margin added by the caller.
    assert bucket.try_take(amounts, now + wait)
    if wait > 0.0:
        assert not twin.try_take(amounts, now)
        # Clearly earlier instants do not (when the float grid can tell them apart).
        if wait * 1e-3 > 1e-9 * max(1.0, abs(now)):
            assert not twin.try_take(amounts, now + wait * 0.999)


@given(streams=streams_strategy, ops=mixed_operations, start=st.floats(-1e3, 1e6))
def test_queries_do_not_change_the_bucket(
    streams: list[tuple[float, float]],
    ops: list[tuple[float, list[float], bool]],
    start: float,
) -> None:
    bucket, now = replay(streams, ops, start)
    twin, _ = replay(streams, ops, start)
    full = list(bucket.capacities)
    for probe in (now - 1.0, now, now + 0.5, now + 1e6):
        bucket.tokens(probe)
        bucket.time_until(full, probe)
    assert bucket.tokens(now + 2.0) == twin.tokens(now + 2.0)
    assert repr(bucket) == repr(twin)


# -- growth -----------------------------------------------------------------------------------


def test_starts_full_and_needs_no_clock_to_construct() -> None:
    bucket = TokenBucket([(10.0, 10.0), (1_000.0, 500.0)])
    assert bucket.tokens(12_345.0) == (10.0, 500.0)
    assert bucket.time_until([10.0, 500.0], 12_345.0) == 0.0
    # The clock starts at the first call that passes a ``now``, whatever its value.
    assert bucket.try_take([10.0, 500.0], 1_000.0)
    assert bucket.tokens(1_000.0) == (0.0, 0.0)
    assert bucket.tokens(1_000.25) == (2.5, 250.0)


def test_growth_saturates_at_capacity() -> None:
    bucket = TokenBucket([(10.0, 10.0)])
    assert bucket.try_take([7.0], 0.0)
    assert bucket.tokens(0.2) == (5.0,)
    assert bucket.tokens(100.0) == (10.0,)
    assert bucket.try_take([0.0], 100.0)
    assert bucket.tokens(100.5) == (10.0,)
    assert not bucket.try_take([10.5], 1e9)


def test_equal_or_earlier_now_changes_nothing() -> None:
    bucket = TokenBucket([(10.0, 10.0)])
    twin = TokenBucket([(10.0, 10.0)])
    assert bucket.try_take([10.0], 1.0)
    assert twin.try_take([10.0], 1.0)
    # Same instant: no growth. Earlier instant: no growth, and the clock is not rewound.
    assert not bucket.try_take([0.5], 1.0)
    assert not bucket.try_take([0.5], 0.5)
    assert bucket.tokens(0.0) == (0.0,)
    bucket.force_take([0.0], 0.25)
    bucket.set_rate(0, 10.0, 0.75)
    assert bucket.tokens(1.5) == twin.tokens(1.5) == (5.0,)
    assert bucket.try_take([5.0], 1.5)


def test_kpl_numbers_one_thousand_per_second() -> None:
    bucket = TokenBucket([(1_000.0, 1_000.0)])
    for _ in range(1_000):
        assert bucket.try_take([1], 0.0)
    assert not bucket.try_take([1], 0.0)
    assert bucket.time_until([1], 0.0) == 0.001
    assert bucket.try_take([1], 0.001)
    assert not bucket.try_take([1], 0.001)


def test_time_until_covers_clock_values_where_adding_the_naive_wait_falls_short() -> None:
    # At 1.0, 1.001 - 1.0 is a little under 0.001: the naive instant is one rounding short.
    bucket = TokenBucket([(1_000.0, 1_000.0)])
    assert bucket.try_take([1_000], 1.0)
    assert bucket.tokens(1.0 + 0.001) < (1.0,)
    wait = bucket.time_until([1], 1.0)
    assert wait == pytest.approx(0.001, rel=1e-12)
    assert wait > 0.001
    assert bucket.try_take([1], 1.0 + wait)


@pytest.mark.parametrize(
    ("rate", "taken_at", "taken", "now", "wanted"),
    [
        # The first estimate of the instant is one ulp short and is stepped up.
        (7.0, 1.0, 7.0, 1.0, 7.0),
        # The instant is right, but ``now + (instant - now)`` rounds below it.
        (7.0, 0.0, 10.0, 0.1, 3.0),
        # ``now`` earlier than the bucket's clock: the wait counts from the later instant.
        (7.0, 0.2, 10.0, 0.1, 2.0),
    ],
)
def test_time_until_rounding_cases(
    rate: float, taken_at: float, taken: float, now: float, wanted: float
) -> None:
    bucket = TokenBucket([(rate, 10.0)])
    assert bucket.try_take([taken], taken_at)
    wait = bucket.time_until([wanted], now)
    naive = taken_at + (wanted - (10.0 - taken)) / rate - now
    assert wait == pytest.approx(naive, rel=1e-12)
    assert bucket.try_take([wanted], now + wait)


def test_time_until_is_the_slowest_stream() -> None:
    bucket = TokenBucket([(10.0, 10.0), (1_000.0, 1_000.0)])
    assert bucket.try_take([10.0, 1_000.0], 0.0)
    assert bucket.time_until([1.0, 500.0], 0.0) == 0.5
    assert bucket.time_until([5.0, 100.0], 0.0) == 0.5
    assert bucket.time_until([8.0, 100.0], 0.0) == 0.8
    assert bucket.time_until([0.0, 0.0], 0.0) == 0.0


def test_time_until_is_infinite_above_capacity() -> None:
    bucket = TokenBucket([(10.0, 10.0), (1_000.0, 1_000.0)])
    assert bucket.time_until([1.0, 1_000.5], 0.0) == math.inf
    assert bucket.time_until([10.5, 0.0], 0.0) == math.inf
    assert bucket.try_take([1.0, 1.0], 0.0)
    assert bucket.time_until([11.0, 1.0], 0.0) == math.inf


# -- force_take and set_rate ------------------------------------------------------------------


def test_force_take_goes_negative_and_the_debt_is_paid_by_waiting() -> None:
    bucket = TokenBucket([(10.0, 10.0), (100.0, 100.0)])
    bucket.force_take([25.0, 50.0], 0.0)
    assert bucket.tokens(0.0) == (-15.0, 50.0)
    assert not bucket.try_take([1.0, 1.0], 1.0)
    assert bucket.time_until([1.0, 1.0], 0.0) == 1.6
    assert bucket.try_take([1.0, 1.0], 1.6)
    assert bucket.tokens(1.6) == pytest.approx((0.0, 99.0), abs=1e-12)


def test_force_take_larger_than_capacity_into_a_full_bucket() -> None:
    bucket = TokenBucket([(1_000.0, 1_000.0)])
    bucket.force_take([2_500.0], 3.0)
    assert bucket.time_until([1_000.0], 3.0) == 2.5
    assert not bucket.try_take([1.0], 4.5)


def test_refund_gives_back_what_was_taken_never_beyond_the_capacity() -> None:
    bucket = TokenBucket([(10.0, 10.0), (100.0, 100.0)])
    assert bucket.try_take([4.0, 70.0], 0.0)
    bucket.refund([3.0, 20.0], 0.5)  # grown by 5 and 50 first, then given back
    assert bucket.tokens(0.5) == (10.0, 100.0)
    assert bucket.try_take([8.0, 90.0], 0.5)
    bucket.refund([1.0, 5.0], 0.5)
    assert bucket.tokens(0.5) == (3.0, 15.0)
    # A debt is paid back by a refund too.
    bucket.force_take([20.0, 0.0], 0.5)
    bucket.refund([5.0, 0.0], 0.5)
    assert bucket.tokens(0.5) == (-12.0, 15.0)


def test_set_rate_is_continuous() -> None:
    bucket = TokenBucket([(10.0, 100.0), (5.0, 5.0)])
    assert bucket.try_take([100.0, 0.0], 0.0)
    bucket.set_rate(0, 20.0, 1.0)  # 10 tokens earned at the old rate so far
    assert bucket.rates == (20.0, 5.0)
    assert bucket.tokens(1.0) == (10.0, 5.0)
    assert bucket.tokens(2.0) == (30.0, 5.0)
    assert bucket.time_until([50.0, 0.0], 1.0) == 2.0
    bucket.set_rate(0, 5.0, 2.0)
    assert bucket.tokens(4.0) == (40.0, 5.0)


def test_set_rate_before_the_clock_starts() -> None:
    bucket = TokenBucket([(10.0, 10.0)])
    bucket.set_rate(0, 1.0, 5.0)
    assert bucket.try_take([10.0], 5.0)
    assert bucket.time_until([1.0], 5.0) == 1.0


def test_set_capacity_cuts_the_balance_and_keeps_a_debt() -> None:
    bucket = TokenBucket([(10.0, 100.0), (5.0, 5.0)])
    bucket.set_capacity(0, 30.0, 0.0)  # before the clock starts: full means the new capacity
    assert bucket.capacities == (30.0, 5.0)
    assert bucket.tokens(0.0) == (30.0, 5.0)
    bucket.force_take([50.0, 0.0], 0.0)
    bucket.set_capacity(0, 10.0, 1.0)  # -20 + 10 grown = -10: a debt is not forgiven
    assert bucket.tokens(1.0) == (-10.0, 5.0)
    assert bucket.tokens(5.0) == (10.0, 5.0)  # growth stops at the new capacity
    bucket.set_capacity(0, 50.0, 5.0)
    assert bucket.tokens(9.0) == (50.0, 5.0)
    assert bucket.time_until([51.0, 0.0], 9.0) == math.inf
    with pytest.raises(IndexError, match="stream index 2"):
        bucket.set_capacity(2, 1.0, 9.0)
    with pytest.raises(ValueError, match="stream 1: capacity"):
        bucket.set_capacity(1, math.inf, 9.0)


def test_empty_gives_up_the_saved_tokens_and_keeps_a_debt() -> None:
    bucket = TokenBucket([(10.0, 100.0), (5.0, 5.0)])
    bucket.force_take([0.0, 8.0], 0.0)  # stream 1 in debt: -3
    bucket.empty(0.2)  # stream 0 full (100): to 0; stream 1 at -2: stays
    assert bucket.tokens(0.2) == pytest.approx((0.0, -2.0))
    assert bucket.tokens(1.2) == pytest.approx((10.0, 3.0))  # the rates go on from there
    assert not bucket.try_take([11.0, 0.0], 1.2)


def test_empty_keeping_some_seconds_caps_each_balance_at_that_much_of_its_rate() -> None:
    bucket = TokenBucket([(10.0, 100.0), (1000.0, 5000.0)])
    bucket.force_take([99.5, 0.0], 0.0)  # stream 0 at 0.5, stream 1 full (5000)
    bucket.empty(0.0, keep=0.1)  # at most 0.1 s of each rate: 1 and 100
    assert bucket.tokens(0.0) == pytest.approx((0.5, 100.0))  # under the cap: kept whole
    bucket.empty(0.0, keep=0.0)
    assert bucket.tokens(0.0) == (0.0, 0.0)
    with pytest.raises(ValueError, match="keep"):
        bucket.empty(0.0, keep=-0.1)


# -- validation and introspection -------------------------------------------------------------


@pytest.mark.parametrize(
    ("streams", "message"),
    [
        ([], "at least one"),
        ([(0.0, 1.0)], "stream 0: rate"),
        ([(10.0, 10.0), (-1.0, 1.0)], "stream 1: rate"),
        ([(math.inf, 1.0)], "stream 0: rate"),
        ([(math.nan, 1.0)], "stream 0: rate"),
        ([(1.0, 0.0)], "stream 0: capacity"),
        ([(1.0, 1.0), (1.0, math.inf)], "stream 1: capacity"),
        ([(1.0, math.nan)], "stream 0: capacity"),
    ],
)
def test_constructor_validation(streams: list[tuple[float, float]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TokenBucket(streams)


@pytest.mark.parametrize(
    ("amounts", "message"),
    [
        ([1.0], "expected 2 amount"),
        ([1.0, 1.0, 1.0], "expected 2 amount"),
        ([-1.0, 1.0], "stream 0: amount"),
        ([1.0, math.nan], "stream 1: amount"),
        ([1.0, math.inf], "stream 1: amount"),
    ],
)
def test_amount_validation(amounts: list[float], message: str) -> None:
    bucket = TokenBucket([(10.0, 10.0), (10.0, 10.0)])
    with pytest.raises(ValueError, match=message):
        bucket.try_take(amounts, 0.0)
    with pytest.raises(ValueError, match=message):
        bucket.force_take(amounts, 0.0)
    with pytest.raises(ValueError, match=message):
        bucket.time_until(amounts, 0.0)
    with pytest.raises(ValueError, match=message):
        bucket.refund(amounts, 0.0)
    # Nothing was taken, and the clock did not start.
    assert bucket.tokens(0.0) == (10.0, 10.0)


def test_set_rate_validation() -> None:
    bucket = TokenBucket([(10.0, 10.0)])
    with pytest.raises(IndexError, match="stream index 1"):
        bucket.set_rate(1, 5.0, 0.0)
    with pytest.raises(IndexError, match="stream index -1"):
        bucket.set_rate(-1, 5.0, 0.0)
    for rate in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="stream 0: rate"):
            bucket.set_rate(0, rate, 0.0)
    assert bucket.rates == (10.0,)


def test_introspection() -> None:
    bucket = TokenBucket([(10, 20), (1_048_576, 1_048_576)])
    assert bucket.rates == (10.0, 1_048_576.0)
    assert bucket.capacities == (20.0, 1_048_576.0)
    assert repr(bucket) == (
        "<TokenBucket tokens=(20, 1.04858e+06) rates=(10, 1.04858e+06) "
        "capacities=(20, 1.04858e+06) last=None>"
    )
    assert bucket.try_take([5, 48_576], 2.5)
    assert repr(bucket) == (
        "<TokenBucket tokens=(15, 1e+06) rates=(10, 1.04858e+06) "
        "capacities=(20, 1.04858e+06) last=2.5>"
    )
    with pytest.raises(AttributeError):
        bucket.extra = 1  # type: ignore[attr-defined]


def test_module_doctests() -> None:
    # TokenBucket names aiokpl as its module (aiokpl._public), and doctest's search of a module
    # keeps only what names that module: the class is searched on its own too.
    finder = doctest.DocTestFinder()
    globs = vars(token_bucket_module).copy()
    tests = [
        *finder.find(token_bucket_module),
        *finder.find(token_bucket_module.TokenBucket, module=False, globs=globs),
    ]
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test)
    assert sum(len(test.examples) for test in tests) >= 4
    assert runner.failures == 0

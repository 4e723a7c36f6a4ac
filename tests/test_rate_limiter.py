"""The async rate limiter, on asyncio and trio under virtual time.

Time moves only when every task is blocked, so ``anyio.current_time()`` tells exactly when a
waiter was let through. The asyncio fake clock counts whole microseconds and fires timers up to
one resolution step early, hence ``approx(abs=1e-9)`` rather than ``==`` for waits. For the
same reason the cancellation tests cancel scopes explicitly instead of using ``move_on_after``:
anyio re-arms a deadline timer that fires a hair early, and the fake loop warns (an error here)
about a sub-microsecond sleep.
"""

from __future__ import annotations

import math

import anyio
import pytest

from aiokpl._core.token_bucket import TokenBucket
from aiokpl._rate_limiter import RateLimiter, RateLimiterStatistics

pytestmark = pytest.mark.anyio


def at(t: float) -> object:
    return pytest.approx(t, abs=1e-9)


def times_at(ts: list[float]) -> object:
    return pytest.approx(ts, abs=1e-9)


async def test_burst_then_one_exact_wait() -> None:
    limiter = RateLimiter(10, capacity=10)
    t0 = anyio.current_time()
    for _ in range(10):
        await limiter.acquire()
    assert anyio.current_time() == t0
    await limiter.acquire()
    assert anyio.current_time() == at(t0 + 0.1)


async def test_a_stream_of_calls_runs_at_the_rate() -> None:
    limiter = RateLimiter(10, capacity=10)
    t0 = anyio.current_time()
    done: list[float] = []
    for _ in range(30):
        await limiter.acquire()
        done.append(anyio.current_time() - t0)
    assert done == times_at([0.0] * 10 + [0.1 * k for k in range(1, 21)])
    assert anyio.current_time() == at(t0 + 2.0)


async def test_async_with_takes_one_token() -> None:
    limiter = RateLimiter(2, capacity=1)
    t0 = anyio.current_time()
    async with limiter:
        assert anyio.current_time() == t0
    async with limiter:
        assert anyio.current_time() == at(t0 + 0.5)


async def test_default_capacity_is_one_second_of_rate_but_at_least_one() -> None:
    assert RateLimiter(5).statistics().capacities == (5.0,)
    slow = RateLimiter(0.5)
    assert slow.statistics().capacities == (1.0,)
    t0 = anyio.current_time()
    await slow.acquire()
    await slow.acquire()
    assert anyio.current_time() == at(t0 + 2.0)


async def test_first_come_first_served() -> None:
    limiter = RateLimiter(10, capacity=10)
    t0 = anyio.current_time()
    await limiter.acquire(5)  # 5 tokens left
    served: list[tuple[str, float]] = []

    async def call(name: str, amount: float) -> None:
        await limiter.acquire(amount)
        served.append((name, anyio.current_time() - t0))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "large", 8)  # needs 3 more tokens: 0.3 s
        await anyio.sleep(0.1)
        # There are 6 tokens now, plenty for these, but "large" came first.
        tg.start_soon(call, "small", 1)
        await anyio.sleep(0.05)
        tg.start_soon(call, "medium", 3)
        await anyio.sleep(0.05)
        tg.start_soon(call, "tiny", 0.5)

    assert [name for name, _ in served] == ["large", "small", "medium", "tiny"]
    assert [when for _, when in served] == times_at([0.3, 0.4, 0.7, 0.75])


async def test_cancelled_head_waiter_takes_nothing() -> None:
    limiter = RateLimiter(10, capacity=10)
    t0 = anyio.current_time()
    await limiter.acquire(10)
    served: dict[str, float] = {}
    scopes: dict[str, anyio.CancelScope] = {}

    async def call(name: str, amount: float) -> None:
        with anyio.CancelScope() as scopes[name]:
            await limiter.acquire(amount)
            served[name] = anyio.current_time() - t0

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "gives up", 5)  # would be served at 0.5
        await anyio.sleep(0.01)
        tg.start_soon(call, "patient", 1)
        await anyio.sleep(0.04)
        scopes["gives up"].cancel()

    # Served when it would have been had the other never asked: one token after 0.1 s.
    assert scopes["gives up"].cancelled_caught
    assert served == {"patient": at(0.1)}
    stats = limiter.statistics()
    assert stats.waiting == 0
    assert stats.tokens == pytest.approx((0.0,), abs=1e-9)


async def test_cancelled_queued_waiter_takes_nothing() -> None:
    limiter = RateLimiter(10, capacity=10)
    t0 = anyio.current_time()
    await limiter.acquire(10)
    served: dict[str, float] = {}
    scopes: dict[str, anyio.CancelScope] = {}

    async def call(name: str, amount: float) -> None:
        with anyio.CancelScope() as scopes[name]:
            await limiter.acquire(amount)
            served[name] = anyio.current_time() - t0

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "head", 5)
        await anyio.sleep(0.01)
        tg.start_soon(call, "quitter", 1)  # queued behind "head"
        await anyio.sleep(0.01)
        tg.start_soon(call, "last", 2)
        await anyio.sleep(0.18)
        scopes["quitter"].cancel()

    assert scopes["quitter"].cancelled_caught
    assert served == {"head": at(0.5), "last": at(0.7)}


async def test_already_cancelled_caller_takes_nothing() -> None:
    limiter = RateLimiter(10, capacity=10)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await limiter.acquire(3)
    assert scope.cancelled_caught
    assert limiter.statistics().tokens == (10.0,)


async def test_the_slower_stream_decides() -> None:
    # 10 requests/s and 1000 bytes/s.
    limiter = RateLimiter.from_bucket(TokenBucket([(10, 10), (1_000, 1_000)]))
    t0 = anyio.current_time()
    await limiter.acquire(1, 1_000)
    assert anyio.current_time() == t0
    await limiter.acquire(1, 500)  # bytes decide: 0.5 s
    assert anyio.current_time() == at(t0 + 0.5)
    await limiter.acquire(9, 0)  # requests refilled to 9 + 1 meanwhile, minus the 1 just taken
    assert anyio.current_time() == at(t0 + 0.5)
    await limiter.acquire(5, 100)  # requests decide: 0.5 s (bytes would need 0.1 s)
    assert anyio.current_time() == at(t0 + 1.0)
    await limiter.acquire()  # one of each: requests decide again
    assert anyio.current_time() == at(t0 + 1.1)


async def test_many_concurrent_callers_are_spaced_exactly() -> None:
    limiter = RateLimiter(10, capacity=10)
    t0 = anyio.current_time()
    done: list[float] = []

    async def call() -> None:
        await limiter.acquire()
        done.append(anyio.current_time() - t0)

    async with anyio.create_task_group() as tg:
        for _ in range(100):
            tg.start_soon(call)

    assert done == times_at([0.0] * 10 + [0.1 * k for k in range(1, 91)])


async def test_waiter_waits_again_if_a_shared_bucket_was_drained() -> None:
    bucket = TokenBucket([(10, 10)])
    limiter = RateLimiter.from_bucket(bucket)
    t0 = anyio.current_time()
    await limiter.acquire(10)
    done: list[float] = []

    async def call() -> None:
        await limiter.acquire(1)
        done.append(anyio.current_time() - t0)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)  # promised 0.1
        await anyio.sleep(0.05)
        bucket.force_take([1], anyio.current_time())  # someone else spends a token

    assert done == times_at([0.2])


async def test_statistics_and_repr() -> None:
    limiter = RateLimiter(10, capacity=10)
    await limiter.acquire(10)

    async def call() -> None:
        await limiter.acquire(2)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        tg.start_soon(call)
        await anyio.sleep(0.05)
        stats = limiter.statistics()
        assert stats == RateLimiterStatistics(
            waiting=2, tokens=stats.tokens, rates=(10.0,), capacities=(10.0,)
        )
        assert stats.tokens == pytest.approx((0.5,), abs=1e-9)
        assert repr(limiter).startswith("<RateLimiter waiting=2 bucket=<TokenBucket tokens=(")

    assert limiter.statistics().waiting == 0
    with pytest.raises(AttributeError):
        stats.waiting = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("amounts", "message"),
    [
        ((11,), r"stream 0: amount 11 exceeds the capacity 10\.0, so it could never be granted"),
        ((1, 1), "expected 1 amount"),
        ((-1,), "stream 0: amount must be a non-negative finite number"),
        ((math.nan,), "non-negative finite"),
        ((math.inf,), "non-negative finite"),
    ],
)
async def test_impossible_requests_fail_at_once(amounts: tuple[float, ...], message: str) -> None:
    limiter = RateLimiter(10, capacity=10)
    t0 = anyio.current_time()
    with pytest.raises(ValueError, match=message):
        await limiter.acquire(*amounts)
    assert anyio.current_time() == t0
    assert limiter.statistics().tokens == (10.0,)


async def test_default_amount_above_a_small_capacity() -> None:
    limiter = RateLimiter.from_bucket(TokenBucket([(10, 10), (0.5, 0.5)]))
    with pytest.raises(ValueError, match=r"stream 1 holds at most 0\.5"):
        await limiter.acquire()
    await limiter.acquire(1, 0.5)


@pytest.mark.parametrize(
    ("rate", "capacity", "message"),
    [
        (0, None, "rate must be"),
        (-1, None, "rate must be"),
        (math.inf, None, "rate must be"),
        (math.nan, None, "rate must be"),
        (10, 0, "capacity must be"),
        (10, math.inf, "capacity must be"),
        (10, math.nan, "capacity must be"),
    ],
)
def test_constructor_validation(rate: float, capacity: float | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RateLimiter(rate, capacity)

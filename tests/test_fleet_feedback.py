"""Several producers sharing shards, in one process under the virtual clock (asyncio, trio).

The fleet of ``tests/fleet.py``: four ``Producer``s on one throttling ``FakeKinesis`` (2 shards
at 250 records/s), each offered 250 records/s (2× the capacity in all), each reaching the fake
over a link of its own that delays requests and responses (``latency`` each way). With a 0.25 s
latency the fleet reproduces what four processes over HTTP on a loaded machine showed
(``/work/shared/measurements/fleet-2026-11-25.md``): coordinated ceilings that sum to the
capacity while the shards take 40% of it, and, without coordination, a sawtooth.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from aiokpl._core.records import KinesisRecord
from aiokpl._pipeline.limiter import Limiter, Limits, ShardLimiter
from aiokpl._pipeline.scheduler import RoutedDeadlines, Scheduler
from aiokpl.coordination import Coordination
from fleet import Fleet, Member, Series, run
from stages import collect
from test_coordination import MemoryStore

SHARD = "shardId-000000000000"
CAPACITY = 2 * 250.0  # records/s of the fleet's two shards
# The fleets below (marked `scenario`) run tens of virtual seconds of several producers (20-170 s
# of real time each, most of it the event loops' scheduling of every put): `make scenarios` runs
# them, beside the suite under coverage, with a hang guard of their own (conftest).


def record(expires_at: float = 100.0) -> KinesisRecord:
    return KinesisRecord([], b"x" * 99, "k", "0", SHARD, 0.0, expires_at, 1)


# -- admission in batches (synchronous, explicit times) -------------------------------------


def test_a_starved_shard_admits_a_batch_per_batch_interval_not_a_trickle_per_drain() -> None:
    """A shard with a backlog admits what its tokens allow once per ``batch`` seconds.

    Its records are past their buffered time, so the collector sends each admission at once:
    admitting every drain interval sent a request per 25 ms per shard whatever the rate (at
    62 records/s, one or two records a request), and a fleet of producers spent its
    connections and the server's time on requests, not records.
    """
    limiter = ShardLimiter(100.0, 1_000_000.0)
    limiter.batch = 0.1
    limiter.accepted(0, 0, -1.0)  # heard from for a second: the cut below is not an early one
    admitted: list[KinesisRecord] = []
    for _ in range(300):  # 3 s of backlog: 100 go at once (the bucket's burst), 200 wait
        collect(limiter.put(record(), 0.0), admitted, admitted)
    assert len(admitted) == 100
    assert limiter.starved
    waves = []
    for tick in range(1, 41):  # a drain every 25 ms for a second
        before = len(admitted)
        collect(limiter.drain(tick * 0.025), admitted, admitted)
        if len(admitted) > before:
            waves.append((tick * 0.025, len(admitted) - before))
    # The first starvation had one record waiting: held only until a token came (10 ms).
    # Since, a backlog of whole batches: one wave per 0.1 s, on the multiples of 0.1 s (the
    # stream's grid), each of what the bucket gathered since the last (10 records after the
    # first), not 2-3 every 25 ms.
    assert waves[:2] == [(0.025, 2), (0.1, 8)]
    assert [at for at, _ in waves[2:]] == pytest.approx([0.1 * n for n in range(2, 11)])
    assert all(count == 10 for _, count in waves[2:]), waves
    # A forced drain (flush) ignores the hold.
    collect(limiter.drain(1.01, force=True), admitted, admitted)
    assert not limiter.queue


def stream_limiter(now: list[float], *, records_per_second: float, admit_batch: float) -> Limiter:
    """A stream's limiter on the clock ``now[0]``, draining every 25 ms; no scheduler runs
    (the tests call ``_next_drain`` and ``drain`` themselves)."""
    return Limiter(
        RoutedDeadlines(Scheduler(), lambda item, now: None),
        lambda: now[0],
        Limits(
            records_per_second=records_per_second,
            bytes_per_second=1_000_000.0,
            drain_interval=0.025,
            admit_batch=admit_batch,
        ),
    )


def test_the_limiter_wakes_up_when_a_held_batch_is_due() -> None:
    """The next drain is at the batch's time if that comes before the next drain interval."""
    now = [0.0]
    admitted: list[KinesisRecord] = []
    limiter = stream_limiter(now, records_per_second=10.0, admit_batch=0.01)
    for _ in range(11):
        admitted.extend(limiter.put(record(), now[0])[0])
    assert len(admitted) == 10
    assert limiter.shards[SHARD].held_until == 0.01
    assert limiter._next_drain(0.0) == 0.01


def test_starved_shards_of_a_stream_admit_at_the_same_instants() -> None:
    """Two shards starved at different moments hold their batches until the same multiple of
    ``admit_batch``, so one drain admits both and the collector sends them in one request
    (each at a phase of its own: a request per shard per batch)."""
    now = [0.0]
    admitted: list[KinesisRecord] = []
    limiter = stream_limiter(now, records_per_second=100.0, admit_batch=0.1)
    other = "shardId-000000000001"

    def backlog(shard: str, at: float) -> None:
        for _ in range(120):  # 100 go at once (the burst), 20 wait
            admitted.extend(
                limiter.put(KinesisRecord([], b"x" * 99, "k", "0", shard, at, 100.0, 1), at)[0]
            )
        limiter.accepted(shard, 0, 0, at)  # its first answer at once: its bucket refills

    backlog(SHARD, 0.013)
    backlog(other, 0.058)
    assert len(admitted) == 200
    waves = []
    for _ in range(20):  # drains at the times the limiter asks for, for half a second
        now[0] = limiter._next_drain(now[0])
        before = {SHARD: 0, other: 0}
        for record in limiter.drain(now[0])[0]:
            before[record.predicted_shard] += 1  # type: ignore[index]
        if any(before.values()):
            waves.append((round(now[0], 6), before[SHARD], before[other]))
    # Each shard first waits for one token (its 101st record), alone; then its backlog of
    # whole batches waits for the grid: both shards' batches at 0.1 s and 0.2 s, each what
    # it gathered; what is left, less than a batch, goes when its tokens come.
    assert waves == [
        (0.023, 1, 0),
        (0.068, 0, 1),
        (0.1, 7, 3),
        (0.2, 10, 10),
        (0.213, 2, 0),
        (0.258, 0, 6),
    ]


def test_a_cut_keeps_a_starved_shard_s_batch_and_no_more() -> None:
    """A starved shard spends its tokens at every batch: what its bucket holds when a cut
    comes is the batch it is gathering, kept up to a batch of the new rate (given up, every
    cut cost a batch of the shard)."""
    limiter = ShardLimiter(100.0, 1_000_000.0)
    limiter.batch = 0.1
    limiter.accepted(0, 0, -1.0)  # heard from for a second: the cut below is not an early one
    admitted: list[KinesisRecord] = []
    for _ in range(300):
        collect(limiter.put(record(), 0.0), admitted, admitted)
    collect(limiter.drain(0.1), admitted, admitted)  # a batch: the bucket is spent
    assert limiter.starved
    assert limiter.held_until == pytest.approx(0.2)
    limiter.accepted(100, 100 * 100, 0.15)
    limiter.throttled(0.15, sent_at=0.1)
    rate = limiter.current_rates(0.15)[0]
    # 50 ms of tokens at 100/s gathered since the batch: 5, under a batch of the new rate.
    assert limiter.bucket.tokens(0.15)[0] == pytest.approx(5.0)
    collect(limiter.drain(0.2), admitted, admitted)
    # The 5 kept and 50 ms at the cut rate (about 78/s): 8 (emptied: 3).
    assert len(admitted) - 110 == int(5.0 + rate * 0.05) == 8


def test_a_cut_gives_up_the_tokens_saved_under_the_allowance() -> None:
    """A producer that sent half its allowance has a full bucket; when the shard throttles
    it, what it admits next comes at the cut rate, not as one burst of the saved second."""
    limiter = ShardLimiter(250.0, 1_000_000.0)
    admitted: list[KinesisRecord] = []
    limiter.accepted(0, 0, 0.0)  # heard from since the start: the cut below is not early
    for tick in range(125):  # a second at 125 records/s: the bucket stays full
        collect(limiter.put(record(), tick / 125), admitted, admitted)
    assert len(admitted) == 125
    limiter.accepted(100, 100 * 100, 1.0)
    limiter.throttled(1.0, sent_at=0.9)
    rate = limiter.current_rates(1.0)[0]
    assert rate < 125.0
    for _ in range(200):  # the throttled records and the backlog, at once
        collect(limiter.put(record(), 1.0), admitted, admitted)
    assert len(admitted) == 125  # nothing saved to spend
    collect(limiter.drain(1.5), admitted, admitted)
    # Half a second at the cut rate (a little more as it climbs back), not 250 at once.
    assert len(admitted) - 125 == pytest.approx(rate * 0.5, abs=2)


# -- the fleet (virtual time) ---------------------------------------------------------------


def coordinated(store: MemoryStore, index: int) -> Callable[[], Coordination]:
    return lambda: Coordination(
        store=store, interval=1.0, shard_max_records_per_sec=250.0, summarize=index == 0
    )


def shares(series: Series, start: int, end: int) -> tuple[float, float, float]:
    """(delivered over capacity, throttled over attempts, worst second's throttled share)."""
    stored, throttled = series.window(start, end)
    worst = max(
        t / max(1, s + t)
        for s, t in zip(series.stored[start:end], series.throttled[start:end], strict=True)
    )
    return stored / (CAPACITY * (end - start)), throttled / max(1, stored + throttled), worst


LIMITS = pytest.mark.parametrize("limit", [250.0, 1000.0], ids=["limit=server", "limit=default"])


@pytest.mark.anyio
@pytest.mark.scenario
@LIMITS
async def test_uncoordinated_producers_converge_without_a_sawtooth(
    limit: float, seed_trio_scheduler: Callable[[int], None]
) -> None:
    """Four producers that cannot see each other, a 0.2 s round trip, each allowed the whole
    shard (or the default 1000/s, 4× it): after warm-up ≥ 90% of the capacity delivered,
    ≤ 5% of attempts throttled, and no second over 20% throttled (AIMD: a sawtooth of
    seconds at 60-90% with nothing throttled, then seconds mostly throttled)."""
    seed_trio_scheduler(0)
    fleet = Fleet([Member(250.0) for _ in range(4)], producer_limit=limit, latency=0.1)
    series = await run(fleet)
    delivered, throttled, worst = shares(series, 12, 40)
    assert delivered >= 0.90, (delivered, series)
    assert throttled <= 0.05, (throttled, series)
    assert worst <= 0.20, (worst, series)


@pytest.mark.anyio
@pytest.mark.scenario
@LIMITS
async def test_coordinated_producers_with_slow_feedback_deliver_their_ceilings(
    limit: float, seed_trio_scheduler: Callable[[int], None]
) -> None:
    """Four coordinated producers, a 0.5 s round trip: ≥ 97% delivered, ≤ 1% throttled."""
    seed_trio_scheduler(0)
    store = MemoryStore()
    fleet = Fleet(
        [Member(125.0 * 2, coordination=coordinated(store, i)) for i in range(4)],
        producer_limit=limit,
        latency=0.25,
        seconds=30.0,
    )
    series = await run(fleet)
    delivered, throttled, _ = shares(series, 12, 30)
    assert delivered >= 0.97, (delivered, series)
    assert throttled <= 0.01, (throttled, series)


@pytest.mark.anyio
@pytest.mark.scenario
async def test_coordinated_producers_recover_within_10_s_when_one_leaves_and_one_joins(
    seed_trio_scheduler: Callable[[int], None],
) -> None:
    """One of four coordinated producers leaves at 15 s, another joins at 30 s: from 10 s
    after each, ≥ 97% of the capacity delivered and ≤ 1% throttled again."""
    seed_trio_scheduler(0)
    store = MemoryStore()
    members = [Member(250.0, coordination=coordinated(store, i)) for i in range(3)]
    members.append(Member(250.0, stop=15.0, coordination=coordinated(store, 3)))
    members.append(Member(250.0, start=30.0, coordination=coordinated(store, 4)))
    series = await run(Fleet(members, latency=0.1, seconds=45.0))
    for start, end in ((25, 30), (40, 45)):
        delivered, throttled, _ = shares(series, start, end)
        assert delivered >= 0.97, (start, delivered, series)
        assert throttled <= 0.01, (start, throttled, series)


@pytest.mark.anyio
@pytest.mark.scenario
async def test_a_producer_joining_uncoordinated_producers_stays_within_the_targets(
    seed_trio_scheduler: Callable[[int], None],
) -> None:
    """Four producers that cannot see each other, a 0.1 s round trip with jitter; one leaves
    at 20 s and a new one joins, sending its whole load (half a shard's rate per shard) under
    its allowance: the seconds after it joins stay under 20% throttled, the window under 5%
    (its bucket's saved second, spent at once after its first cut, made 34%)."""
    seed_trio_scheduler(0)
    members = [Member(250.0) for _ in range(3)]
    members.append(Member(250.0, stop=20.0))
    members.append(Member(250.0, start=20.0))
    series = await run(Fleet(members, latency=0.05, jitter=0.025, seconds=40.0))
    delivered, throttled, worst = shares(series, 12, 40)
    assert delivered >= 0.90, (delivered, series)
    assert throttled <= 0.05, (throttled, series)
    assert worst <= 0.20, (worst, series)
    # Back within the targets within 10 s of the join.
    delivered, throttled, _ = shares(series, 30, 40)
    assert delivered >= 0.90, (delivered, series)
    assert throttled <= 0.05, (throttled, series)


@pytest.mark.anyio
@pytest.mark.scenario
async def test_many_producers_on_a_serialising_server_send_few_calls_and_converge(
    seed_trio_scheduler: Callable[[int], None],
) -> None:
    """Eight producers offered 5× the capacity, aggregation off, to a server that answers one
    call at a time in 10 ms: their small requests queue behind busy connections and go merged,
    so the server's queue drains and throttle feedback comes in time (sent one by one, ~160
    calls a second queued for seconds: 30% of attempts throttled, a worst second of 72%)."""
    seed_trio_scheduler(0)
    fleet = Fleet(
        [Member(5 * CAPACITY / 8) for _ in range(8)],
        latency=0.01,
        jitter=0.02,
        service=0.010,
        seconds=40.0,
    )
    series = await run(fleet)
    delivered, throttled, worst = shares(series, 12, 40)
    assert delivered >= 0.90, (delivered, series)
    assert throttled <= 0.05, (throttled, series)
    assert worst <= 0.20, (worst, series)


@pytest.mark.anyio
@pytest.mark.scenario
async def test_aggregating_producers_at_the_default_limits_converge_to_their_share(
    seed_trio_scheduler: Callable[[int], None],
) -> None:
    """Eight producers at the ``Config`` defaults but aggregates of 3,200 bytes, on shards
    that take 64 KiB/s (``bench/fleet.py``'s aggregated cells: AWS's bytes scaled by 16),
    offered twice that: ≥ 90% of the shards' bytes delivered, ≤ 5% of attempts throttled, no
    second over 20%. Each producer's share, 8 KiB/s a shard, is under a hundredth of its
    configured 1 MiB/s: with the rate's floor at a hundredth, the eight floors summed to more
    than the shard took, and 26% of attempts were throttled (a worst second of 31%)."""
    seed_trio_scheduler(0)
    shard_bytes = 65_536.0
    # A user record's share of an aggregate is about 124 bytes (bench/fleet.py).
    offered = 2 * 2 * shard_bytes / 124
    fleet = Fleet(
        [Member(offered / 8) for _ in range(8)],
        producer_limit=1000.0,
        shard_bytes=shard_bytes,
        seconds=30.0,
        config={"aggregation_enabled": True, "aggregation_max_size": 3200},
    )
    series = await run(fleet)
    _, throttled, worst = shares(series, 12, 30)
    delivered = sum(series.stored_bytes[12:30]) / (2 * shard_bytes * 18)
    assert delivered >= 0.90, (delivered, series)
    assert throttled <= 0.05, (throttled, series)
    assert worst <= 0.20, (worst, series)


@pytest.mark.anyio
@pytest.mark.scenario
async def test_a_producer_with_a_backlog_on_two_shards_sends_one_request_per_batch(
    seed_trio_scheduler: Callable[[int], None],
) -> None:
    """One producer offered twice what its two shards take: both shards are starved, their
    batches fall on the same multiples of the buffered time (0.1 s), so the producer sends
    one request a batch holding both shards' records, 10 a second (batches at phases of
    their own: one request per shard per batch, 20 a second), and the shards stay full."""
    seed_trio_scheduler(0)
    series = await run(Fleet([Member(2 * CAPACITY)], seconds=12.0))
    calls = series.calls[4:12]
    assert all(9 <= n <= 11 for n in calls), series.calls
    delivered, throttled, _ = shares(series, 4, 12)
    assert delivered >= 0.99, (delivered, series)
    assert throttled <= 0.01, (throttled, series)

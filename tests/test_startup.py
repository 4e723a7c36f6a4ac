"""The start-up hold (SPEC §4.10, "Start-up"): records put before a stream's first shard map
wait for it, within their deadlines, and are aggregated with it.

Through a real ``Producer`` and ``FakeKinesis``, on asyncio and trio under virtual clocks (see
conftest), so every timestamp is exact.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest
import sniffio
import trio

from aiokpl import Config, Outcome, Producer, RecordResult
from aiokpl._core.decoder import decode, is_aggregated
from aiokpl.testing import FakeKinesis

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1")
EPS = 1e-6
BUFFERED = 0.1
GRACE = 0.02  # the collector's grace with aggregation on: min(50 ms, 20% of 100 ms)
THROTTLED = "ProvisionedThroughputExceededException"


class SlowFirstListShards(FakeKinesis):
    """The first ``ListShards`` call takes ``delay`` seconds; every other call is prompt."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.started = 0  # calls begun
        self.listed_at: list[float] = []

    async def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        self.started += 1
        if not self.listed_at:
            await anyio.sleep(self.delay)
        self.listed_at.append(anyio.current_time())
        return await super().list_shards(**kwargs)


def user_records_per_kinesis_record(fake: FakeKinesis, stream: str) -> float:
    stored = fake.stored_records(stream)
    users = sum(len(decode(r.data)) if is_aggregated(r.data) else 1 for r in stored)
    return users / len(stored)


def throttled(result: RecordResult) -> bool:
    return any(attempt.error_code == THROTTLED for attempt in result.attempts)


def waiting(producer: Producer) -> int:
    return producer.statistics().streams[0].waiting_for_shard_map


async def put_many(producer: Producer, stream: str, count: int) -> list[Outcome[RecordResult]]:
    return [
        await producer.put_record(
            stream=stream, partition_key=f"key-{i % 4096}", data=b"%08d" % i + b"x" * 92
        )
        for i in range(count)
    ]


async def test_records_put_during_a_slow_first_load_are_aggregated_as_with_a_warm_map() -> None:
    cold = SlowFirstListShards(0.05)  # within the buffered time
    cold.add_stream("s", shard_count=4)
    async with Producer(CONFIG, client=cold) as producer:
        t0 = anyio.current_time()
        outcomes = await put_many(producer, "s", 3000)
        assert waiting(producer) == 3000
        assert producer.outstanding_records == 3000  # held records stay outstanding
        await anyio.sleep(0.06)
        assert waiting(producer) == 0  # the map arrived at t0 + 0.05: all were put again
        results = [await outcome for outcome in outcomes]
    assert cold.listed_at == [pytest.approx(t0 + 0.05, abs=EPS)]
    assert all(result.success and len(result.attempts) == 1 for result in results)
    cold_delays = sorted({round(result.attempts[0].delay, 9) for result in results})

    warm = FakeKinesis()
    warm.add_stream("s", shard_count=4)
    async with Producer(CONFIG, client=warm) as producer:
        await (await producer.put_record(stream="s", partition_key="warm-up", data=b""))
        start = len(warm.stored_records("s"))
        outcomes = await put_many(producer, "s", 3000)
        warm_results = [await outcome for outcome in outcomes]
    assert start == 1
    assert all(result.success and len(result.attempts) == 1 for result in warm_results)
    # Sent when their aggregates' deadlines came (and the collector's), exactly as when warm.
    assert cold_delays == sorted({round(r.attempts[0].delay, 9) for r in warm_results})
    assert cold_delays == [pytest.approx(BUFFERED), pytest.approx(BUFFERED + GRACE)]
    cold_ratio = user_records_per_kinesis_record(cold, "s")
    warm_stored = warm.stored_records("s")[1:]  # without the warm-up record
    warm_ratio = sum(len(decode(r.data)) for r in warm_stored) / len(warm_stored)
    assert cold_ratio == warm_ratio
    assert cold_ratio > 100


async def test_a_burst_at_start_on_a_throttled_stream_sees_no_throttle() -> None:
    fake = SlowFirstListShards(0.05)
    fake.add_stream("s", shard_count=4, throttle=True)  # the real per-shard limits
    async with Producer(CONFIG, client=fake) as producer:
        outcomes = await put_many(producer, "s", 20_000)
        results = [await outcome for outcome in outcomes]
    assert all(result.success for result in results)
    assert sum(throttled(result) for result in results) == 0
    assert user_records_per_kinesis_record(fake, "s") > 400


async def test_put_records_to_a_new_stream_starts_its_map_before_enqueuing() -> None:
    fake = SlowFirstListShards(0.05)
    fake.add_stream("s", shard_count=4)
    async with Producer(CONFIG, client=fake) as producer:
        records = [(f"key-{i}", b"%d" % i) for i in range(1000)]
        outcomes = await producer.put_records(stream="s", records=records)
        # The map load was under way before the group was enqueued: a large group takes real
        # time to validate and enqueue, and its deadline runs meanwhile.
        assert fake.started == 1
        assert waiting(producer) == 1000
        results = [await outcome for outcome in outcomes]
    assert all(result.success for result in results)
    assert user_records_per_kinesis_record(fake, "s") >= 250


def keep_the_loop_busy(seconds: float) -> None:
    """Advance the virtual clock without yielding, as a task computing for that long does."""
    if sniffio.current_async_library() == "trio":
        clock = trio.lowlevel.current_clock()
        assert isinstance(clock, trio.testing.MockClock)
        clock.jump(seconds)
    else:
        asyncio.get_running_loop()._selector.clock.advance(seconds)  # type: ignore[attr-defined]


async def test_a_map_that_answered_while_the_loop_was_busy_is_used_first() -> None:
    fake = SlowFirstListShards(0.05)
    fake.add_stream("s", shard_count=4)
    async with Producer(CONFIG, client=fake) as producer:
        records = [(f"key-{i}", b"%d" % i) for i in range(1000)]
        outcomes = await producer.put_records(stream="s", records=records)
        # The caller keeps the loop for 0.2 s (a large group takes real time to enqueue): by
        # the next turn the map has answered (at 0.05) and the records are due (at 0.08).
        keep_the_loop_busy(0.2)
        results = [await outcome for outcome in outcomes]
    assert all(result.success for result in results)
    assert user_records_per_kinesis_record(fake, "s") >= 250  # the map came first


async def test_records_wait_for_a_first_map_slower_than_their_deadline_and_aggregate() -> None:
    """A cold start: the first map answers 0.5 s after the first put, five buffered times
    late; every record waits for it and goes aggregated, at once when it comes."""
    fake = SlowFirstListShards(0.5)
    fake.add_stream("s", shard_count=4)
    async with Producer(CONFIG, client=fake) as producer:
        t0 = anyio.current_time()
        first = await put_many(producer, "s", 1000)
        await anyio.sleep(0.3)
        second = await put_many(producer, "s", 1000)
        await anyio.sleep(0.2 - EPS)
        assert waiting(producer) == 2000  # past their deadlines, held for the map
        await anyio.sleep(2 * EPS)
        assert waiting(producer) == 0
        results = [await outcome for outcome in first + second]
    assert fake.listed_at == [pytest.approx(t0 + 0.5, abs=EPS)]
    for result in results:
        assert result.success
        (attempt,) = result.attempts
        # Put again when the map came, their deadlines past: sent after the collector's grace.
        assert attempt.started_at == pytest.approx(t0 + 0.5 + GRACE, abs=EPS)
    stored = fake.stored_records("s")
    assert all(is_aggregated(record.data) for record in stored)
    assert len(stored) <= 8  # ~55 KB a shard: two full aggregates of at most 50 KiB each


async def test_records_wait_for_the_first_map_until_half_their_ttl_is_left() -> None:
    """A first map slower than half the records' TTL: each goes alone when half its TTL is
    left (so that it can still be sent and retried), and once the map loads, records are
    aggregated again."""
    fake = SlowFirstListShards(0.8)
    fake.add_stream("s", shard_count=4)
    config = CONFIG.replace(record_ttl_ms=1000)  # patience: 0.5 s
    async with Producer(config, client=fake) as producer:
        t0 = anyio.current_time()
        first = await put_many(producer, "s", 10)
        await anyio.sleep(0.05)
        second = await put_many(producer, "s", 10)
        # Released GRACE before their release time, so that the collector sends them at it.
        await anyio.sleep(0.5 - GRACE - 0.05 - EPS)
        assert waiting(producer) == 20
        await anyio.sleep(2 * EPS)
        assert waiting(producer) == 10
        results = [await outcome for outcome in first + second]
        assert waiting(producer) == 0
        stored = fake.stored_records("s")
        assert len(stored) == 20
        assert not any(is_aggregated(record.data) for record in stored)  # sent alone
        await anyio.sleep(0.5)
        # Once the map has loaded, records are aggregated again.
        after = await put_many(producer, "s", 10)
        after_results = [await outcome for outcome in after]
    for results_of, put_at in ((results[:10], t0), (results[10:], t0 + 0.05)):
        for result in results_of:
            assert result.success
            (attempt,) = result.attempts
            assert attempt.started_at == pytest.approx(put_at + 0.5, abs=EPS)
    assert len({result.sequence_number for result in after_results}) < 10


async def test_a_failed_first_load_releases_the_held_records_at_once() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    fake.latency = 0.03
    fake.deny("ListShards")
    fake.deny("DescribeStream")
    async with Producer(CONFIG, client=fake) as producer:
        t0 = anyio.current_time()
        outcomes = await put_many(producer, "s", 5)
        assert waiting(producer) == 5
        await anyio.sleep(0.06 + EPS)  # both calls answered: the attempt has failed
        assert waiting(producer) == 0
        assert producer.statistics().streams[0].collecting == 5
        results = [await outcome for outcome in outcomes]
    for result in results:
        assert result.success
        (attempt,) = result.attempts
        assert attempt.started_at == pytest.approx(t0 + BUFFERED, abs=EPS)
    assert len(fake.stored_records("s")) == 5


async def test_flush_during_the_first_load_waits_for_the_map_and_aggregates() -> None:
    fake = SlowFirstListShards(0.05)
    fake.add_stream("s", shard_count=2)
    async with Producer(CONFIG, client=fake) as producer:
        t0 = anyio.current_time()
        outcomes = await put_many(producer, "s", 1000)
        await producer.flush()
        flushed_at = anyio.current_time()
        assert all(outcome.done() for outcome in outcomes)
    assert flushed_at == pytest.approx(t0 + 0.05, abs=EPS)
    for outcome in outcomes:
        (attempt,) = outcome.result().attempts
        assert attempt.started_at == pytest.approx(t0 + 0.05, abs=EPS)  # when the map came
    assert len(fake.stored_records("s")) <= 4  # aggregated: about 440 records an aggregate


async def test_exit_right_after_a_burst_aggregates_it() -> None:
    fake = SlowFirstListShards(0.05)
    fake.add_stream("s", shard_count=4, throttle=True)
    async with Producer(CONFIG, client=fake) as producer:
        outcomes = await put_many(producer, "s", 5000)
    results = [outcome.result() for outcome in outcomes]
    assert all(result.success and len(result.attempts) == 1 for result in results)
    assert user_records_per_kinesis_record(fake, "s") > 400


async def test_retried_records_during_the_first_load_wait_for_it_too() -> None:
    # TTL 0.3 s: records wait for the map until t0 + 0.15 (half their TTL left). The map
    # comes at t0 + 0.17: after the retries are back (t0 + 0.15), before their release time
    # (their new deadline t0 + 0.2, less the grace).
    fake = SlowFirstListShards(0.17)
    fake.add_stream("s", shard_count=2)
    # The first request (the records released alone) fails record by record.
    fake.script_records([("InternalFailure", "Internal service failure.")] * 10)
    async with Producer(CONFIG.replace(record_ttl_ms=300), client=fake) as producer:
        t0 = anyio.current_time()
        outcomes = await put_many(producer, "s", 10)
        await anyio.sleep(0.16)
        # Sent alone at t0 + 0.15, failed, retried: held again, the first load still running.
        assert waiting(producer) == 10
        results = [await outcome for outcome in outcomes]
    retried_at = t0 + 0.15  # the answer came at once
    for result in results:
        assert result.success
        failed, delivered = result.attempts
        assert failed.error_code == "InternalFailure"
        assert failed.started_at == pytest.approx(retried_at, abs=EPS)
        # Put again when the map came (t0 + 0.17), aggregated, sent at the retry deadline
        # (half the buffered time) plus the grace.
        assert delivered.started_at == pytest.approx(retried_at + BUFFERED / 2 + GRACE, abs=EPS)
    assert len({result.sequence_number for result in results}) <= 2  # one aggregate per shard


async def test_held_records_count_against_the_outstanding_bounds() -> None:
    fake = SlowFirstListShards(0.05)
    fake.add_stream("s", shard_count=2)
    config = CONFIG.replace(max_outstanding_records=100)
    async with Producer(config, client=fake) as producer:
        await put_many(producer, "s", 100)
        assert waiting(producer) == 100
        with pytest.raises(Exception, match="max_outstanding_records=100"):
            producer.put_record_nowait(stream="s", partition_key="k", data=b"d")
        t0 = anyio.current_time()
        more = await producer.put_record(stream="s", partition_key="k", data=b"d")
        # Room came when the first records were delivered: after the map, at their deadline.
        assert anyio.current_time() == pytest.approx(t0 + BUFFERED + GRACE, abs=EPS)
        assert (await more).success


async def test_records_queued_at_the_stream_level_limit_are_aggregated_once_the_map_loads() -> None:
    """The first map takes longer than half the records' TTL (3 s here): records go out
    alone at 1.5 s, at one shard's rate, until it loads at 2 s; then those still waiting at
    the stream-level limit go back to the aggregator and leave aggregated, not one by one."""
    fake = SlowFirstListShards(delay=2.0)
    fake.add_stream("s", shard_count=4)
    async with Producer(CONFIG.replace(record_ttl_ms=3000), client=fake) as producer:
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"d" * 100)
            for i in range(5000)
        ]
        results = [await outcome for outcome in outcomes]
        statistics = producer.statistics().streams[0]
    assert all(result.success for result in results)
    # Before the map: the bucket's second of records, then 1000/s for 0.5 s; the rest aggregated.
    singles = sum(1 for r in fake.stored_records("s") if not is_aggregated(r.data))
    assert 1000 <= singles <= 1600
    assert fake.calls("PutRecords") < 30
    assert len(fake.stored_records("s")) <= singles + 20  # the other 3,400 in a few aggregates
    assert max(r.attempts[-1].ended_at for r in results) < 2.5  # not 5 s at 1000 records/s
    assert statistics.rate_limited == 0


async def test_a_restart_on_spent_shards_runs_at_their_capacity_from_the_second_second() -> None:
    """A producer replaced by another (a rolling restart): the new one starts on shards whose
    buckets the old one has just emptied. Its first answers are throttled; it is back at the
    shards' capacity within a second (cut to what the spent shards let through, it ran at
    half of it for 15 s: 17.2 s for what takes 9)."""
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2, throttle=True)  # 2 × 1000 records/s
    fake.latency = 0.02
    for hash_key in ("0", str(2**127 + 1)):  # the old producer's last second, both shards
        for _ in range(2):
            await fake.put_records(
                StreamName="s",
                Records=[{"Data": b"o", "PartitionKey": "old", "ExplicitHashKey": hash_key}] * 500,
            )
    t0 = anyio.current_time()
    async with Producer(CONFIG.replace(aggregation_enabled=False), client=fake) as producer:
        outcomes = await put_many(producer, "s", 20_000)
        results = [await outcome for outcome in outcomes]
        seconds = anyio.current_time() - t0
    assert all(result.success for result in results)
    assert any(throttled(result) for result in results)  # the shards were spent
    mine = [r for r in fake.stored_records("s") if r.partition_key != "old"]
    per_second = [0] * (int(seconds) + 1)
    for record in mine:
        per_second[int(record.arrival_time - t0)] += 1
    # Every whole second from the second one on: at least 90% of the 2,000 records/s.
    assert min(per_second[1 : int(seconds)]) >= 1800, per_second
    assert seconds <= 11.0, per_second


async def test_records_wait_for_the_first_map_at_most_two_seconds_past_their_deadline() -> None:
    """A first map that takes 5 s (its calls starved of connections by a stream whose requests
    hang, say): records go alone 2 s past their deadline, where the sender can free a
    connection for them, not when half their TTL (15 s) is left."""
    fake = SlowFirstListShards(5.0)
    fake.add_stream("s", shard_count=2)
    async with Producer(CONFIG, client=fake) as producer:
        t0 = anyio.current_time()
        outcomes = await put_many(producer, "s", 10)
        results = [await outcome for outcome in outcomes]
    for result in results:
        (attempt,) = result.attempts
        assert attempt.started_at == pytest.approx(t0 + BUFFERED + 2.0, abs=EPS)
    assert not any(is_aggregated(record.data) for record in fake.stored_records("s"))

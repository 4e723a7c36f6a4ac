"""Flow control under overload, on asyncio and trio under a virtual clock.

A shard offered more than it takes, for longer than the TTL, must deliver its full capacity in
every second (only the excess expires, and it expires without taking rate-limit tokens); a
stream without a shard map is still rate-limited, with throttle feedback, so it never storms.
"""

from __future__ import annotations

import logging
from collections import Counter

import anyio
import pytest

from aiokpl import Config, Outcome, Producer, RecordResult
from aiokpl._core.records import KinesisRecord
from aiokpl._pipeline.limiter import ShardLimiter
from aiokpl.aggregation import decode, is_aggregated
from aiokpl.testing import FakeKinesis
from stages import collect

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1")
THROTTLED = "ProvisionedThroughputExceededException"
DATA = b"x" * 1000


async def offer(
    producer: Producer, stream: str, per_second: int, seconds: int, *, tick: float = 0.01
) -> list[Outcome[RecordResult]]:
    """Put ``per_second`` records a second, paced in ticks of ``tick`` seconds."""
    per_tick = round(per_second * tick)
    outcomes = []
    for i in range(round(seconds / tick)):
        for j in range(per_tick):
            key = f"k{(i * per_tick + j) % 4096}"
            outcomes.append(await producer.put_record(stream=stream, partition_key=key, data=DATA))
        await anyio.sleep(tick)
    return outcomes


def stored_per_second(fake: FakeKinesis, stream: str, start: float) -> Counter[int]:
    """Partition key plus data bytes the fake stored in each whole second since ``start``."""
    seconds: Counter[int] = Counter()
    for record in fake.stored_records(stream):
        key = record.partition_key or ""  # every record here has one
        seconds[int(record.arrival_time - start)] += len(key) + len(record.data)
    return seconds


@pytest.mark.parametrize("aggregation", [False, True], ids=["raw", "aggregated"])
async def test_a_shard_overloaded_past_the_ttl_delivers_its_capacity_every_second(
    aggregation: bool,
) -> None:
    """2x a shard's capacity for 4 TTLs: every second after the first TTL takes >= 95% of the
    shard's capacity, and what expires, expires queued in the limiter, never after taking
    tokens (KPL-style expired-first alone collapses to a third of that)."""
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1, throttle=True)
    ttl = 2.0
    seconds = 8
    config = CONFIG.replace(aggregation_enabled=aggregation, record_ttl_ms=int(ttl * 1000))
    async with Producer(config, client=fake) as producer:
        warm = await producer.put_record(stream="s", partition_key="warm", data=b"")
        assert (await warm).success
        await anyio.sleep(1.5)  # the shard's bucket is full again
        start = anyio.current_time()
        # Records: 1000/s binds without aggregation (1,004 B a record); bytes with it.
        outcomes = await offer(producer, "s", 2000, seconds)
        results = [await outcome for outcome in outcomes]
        statistics = producer.statistics()
    per_second = stored_per_second(fake, "s", start)
    capacity = 1000 * 1004 if not aggregation else 1_048_576
    steady = [per_second[second] / capacity for second in range(int(ttl) + 1, seconds)]
    assert min(steady) >= 0.95, steady
    delivered = [r for r in results if r.success]
    expired = [r for r in results if not r.success]
    assert 0.4 < len(delivered) / len(results) < 0.7
    assert all(r.error_code == "Expired" for r in expired)
    # Every expiry was in the limiter's queue, with no request ever sent for the record.
    assert {r.error_message for r in expired} == {
        "record_ttl_ms elapsed while waiting in the rate limiter"
    }
    assert all(len(r.attempts) == 1 for r in expired)
    assert statistics.records_expired_unsent == len(expired)
    assert statistics.streams[0].expired_unsent == len(expired)
    # The shard's budget went to records that were sent. The only throttles are in the
    # first second: a record reaches Kinesis up to its buffered time after it took the local
    # bucket's tokens, so the two full buckets' first second differs by that much.
    throttled = [
        a.started_at - start for r in results for a in r.attempts if a.error_code == THROTTLED
    ]
    assert all(at < 1.2 for at in throttled), sorted(throttled)[-5:]
    assert len(throttled) < 0.01 * len(results)
    # Nothing lost or doubled: the stream holds the delivered records and the warm-up one.
    stored = [
        user.data
        for record in fake.stored_records("s")
        for user in (decode(record.data) if is_aggregated(record.data) else [record])
    ]
    assert len(stored) == len(delivered) + 1


async def test_overload_is_logged_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(
        aggregation_enabled=False, rate_limit_records_per_sec_per_shard=100.0, record_ttl_ms=1000
    )
    with caplog.at_level(logging.WARNING, logger="aiokpl"):
        async with Producer(config, client=fake) as producer:
            await offer(producer, "s", 300, 90)
    warnings = [r.getMessage() for r in caplog.records if "is offered more" in r.getMessage()]
    # The first expiry, then one a minute: at about 1 s and 61 s.
    assert len(warnings) == 2, warnings
    assert "since it started" in warnings[0]
    assert "since the last warning" in warnings[1]
    assert "record_ttl_ms=1000" in warnings[1]


async def test_without_a_shard_map_records_are_limited_per_stream() -> None:
    """ListShards and DescribeStream denied for good: records go unaggregated, but at one
    shard's rates, not all at once; throttling cuts that rate, and nothing storms."""
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1, throttle=True, records_per_second=500.0)
    fake.deny("ListShards", message="not allowed")
    fake.deny("DescribeStream", message="not allowed")
    config = CONFIG.replace(record_ttl_ms=60_000)
    async with Producer(config, client=fake) as producer:
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"d" * 100)
            for i in range(5000)
        ]
        results = [await outcome for outcome in outcomes]
        statistics = producer.statistics().streams[0]
    assert all(r.success for r in results)
    assert statistics.shard_map_state != "READY"
    assert statistics.unmapped_rate is not None
    assert statistics.unmapped_rate[0] < 1000.0  # throttle feedback cut it
    attempts = sum(len(r.attempts) for r in results)
    throttled = sum(1 for r in results for a in r.attempts if a.error_code == THROTTLED)
    # At 1000/s against a 500/s shard some are throttled until the rate is cut; unlimited,
    # 4,500 of the first 5,000 would be, and again on every retry.
    assert throttled / attempts < 0.2, (throttled, attempts)
    # Each drain admits a few dozen records into one request: no request per record.
    requests = fake.calls("PutRecords")
    assert requests < len(results) / 10, requests


def kinesis_record(size: int, expires_at: float) -> KinesisRecord:
    return KinesisRecord([], b"x" * size, "k", "1", "shard", expires_at, expires_at, 1)


def test_a_record_too_close_to_its_ttl_takes_no_tokens_and_expires_at_its_ttl() -> None:
    limiter = ShardLimiter(10.0, 1_000_000.0)
    admitted: list[KinesisRecord] = []
    expired: list[KinesisRecord] = []
    doomed = kinesis_record(10, expires_at=1.04)
    fresh = kinesis_record(10, expires_at=5.0)
    # 40 ms to live, margin 45 ms: not admitted, though the bucket is full.
    collect(limiter.put(doomed, 1.0, margin=0.045), admitted, expired)
    assert limiter.queue
    assert not admitted
    assert limiter.bucket.tokens(1.0)[0] == 10.0
    # It holds back nobody: a record with time to live goes past it.
    collect(limiter.put(fresh, 1.0, margin=0.045), admitted, expired)
    assert admitted == [fresh]
    assert limiter.admitted == 1
    # It fails at its TTL, not before.
    collect(limiter.drain(1.039, margin=0.045), admitted, expired)
    assert not expired
    collect(limiter.drain(1.04, margin=0.045), admitted, expired)
    assert expired == [doomed]
    assert not limiter.queue


def test_the_oldest_record_is_admitted_first_a_retry_before_later_puts() -> None:
    limiter = ShardLimiter(1.0, 1_000_000.0)
    admitted: list[KinesisRecord] = []
    limiter.bucket.try_take((1, 0), 0.0)  # empty: everything queues
    later = kinesis_record(10, expires_at=30.5)
    retry = kinesis_record(10, expires_at=30.2)  # put earlier, back from a failed attempt
    collect(limiter.put(later, 0.5), admitted, admitted)
    collect(limiter.put(retry, 0.6), admitted, admitted)
    collect(limiter.drain(1.0), admitted, admitted)
    assert admitted == [retry]
    collect(limiter.drain(2.0), admitted, admitted)
    assert admitted == [retry, later]


def test_a_refund_gives_the_tokens_back_up_to_the_capacity() -> None:
    limiter = ShardLimiter(10.0, 1000.0)
    admitted: list[KinesisRecord] = []
    record = kinesis_record(600, expires_at=10.0)
    collect(limiter.put(record, 0.0), admitted, admitted)
    assert limiter.bucket.tokens(0.0) == (9.0, 399.0)  # 1 key byte + 600 data bytes
    limiter.refund(record, 0.0)
    assert limiter.bucket.tokens(0.0) == (10.0, 1000.0)
    limiter.refund(record, 0.0)  # never above the capacity
    assert limiter.bucket.tokens(0.0) == (10.0, 1000.0)
    assert limiter.refunded == 2


def test_a_shard_is_starved_only_while_sendable_records_wait_for_tokens() -> None:
    limiter = ShardLimiter(1.0, 1_000_000.0)
    admitted: list[KinesisRecord] = []
    expired: list[KinesisRecord] = []

    def put(record: KinesisRecord, now: float) -> None:
        collect(limiter.put(record, now, margin=0.045), admitted, expired)

    # A record back from a retry, too close to its TTL to be sent: it waits, nobody starves.
    doomed = kinesis_record(10, expires_at=0.01)
    put(doomed, 0.0)
    # bool(): mypy would otherwise keep the property narrowed across put() and drain().
    assert not bool(limiter.starved)
    put(kinesis_record(10, expires_at=9.0), 0.0)
    assert len(admitted) == 1  # the bucket's one token, not for the doomed record
    put(kinesis_record(10, expires_at=9.5), 0.0)
    assert bool(limiter.starved)  # a sendable record waits for a token
    collect(limiter.drain(1.0, margin=0.045), admitted, expired)
    assert len(admitted) == 2
    assert not limiter.starved
    assert expired == [doomed]

"""The producer end to end against the in-process FakeKinesis, on asyncio and trio.

Everything runs under a virtual clock (see conftest), so the times asserted here are exact:
a deadline of 100 ms means the request starts at exactly t + 0.1 (+ the collector's grace).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import anyio
import pytest

from aiokpl import (
    BufferFullError,
    Config,
    InvalidRecordError,
    InvalidRecordTypeError,
    ProducerClosedError,
    RecordResult,
)
from aiokpl._core.decoder import decode, is_aggregated
from aiokpl._core.hashing import hash_key_of
from aiokpl._outcome import Outcome
from aiokpl._producer.producer import Producer
from aiokpl.testing import FakeKinesis, read_stream

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1")
EPS = 1e-6


def user_records(fake: FakeKinesis, stream: str) -> list[tuple[str, str | None, bytes]]:
    """(shard, partition key, data) of every user record stored, deaggregated."""
    found: list[tuple[str, str | None, bytes]] = []
    for stored in fake.stored_records(stream):
        if is_aggregated(stored.data):
            found.extend((stored.shard_id, r.partition_key, r.data) for r in decode(stored.data))
        else:
            found.append((stored.shard_id, stored.partition_key, stored.data))
    return found


async def warm_up(producer: Producer, stream: str) -> None:
    """Load the stream's shard map, so later records are aggregated."""
    outcome = await producer.put_record(stream=stream, partition_key="warm-up", data=b"")
    await producer.flush()
    assert (await outcome).success
    with anyio.fail_after(5):  # a map of several pages may still be loading
        while producer.statistics().streams[0].shard_map_state != "READY":  # noqa: ASYNC110
            await anyio.sleep(0.001)  # polling a snapshot: there is no event to wait on


async def test_records_land_intact_aggregated_and_where_the_result_says() -> None:
    fake = FakeKinesis()
    fake.add_stream("events", shard_count=4)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "events")
        outcomes = [
            await producer.put_record(
                stream="events", partition_key=f"user-{i % 50}", data=f"payload {i}".encode()
            )
            for i in range(2000)
        ]
    results = [outcome.result() for outcome in outcomes]
    assert all(result.success for result in results)
    stored = user_records(fake, "events")
    expected = {(f"user-{i % 50}", f"payload {i}".encode()) for i in range(2000)}
    assert {(key, data) for _, key, data in stored} >= expected
    assert len(stored) == 2001  # the warm-up record too, nothing twice
    by_identity = {(key, data): shard for shard, key, data in stored}
    shards = {s.shard_id: s for s in fake.shards("events")}
    for i, result in enumerate(results):
        key = f"user-{i % 50}"
        assert by_identity[(key, f"payload {i}".encode())] == result.shard_id
        assert hash_key_of(key.encode()) in shards[result.shard_id]
        assert len(result.attempts) == 1
    # Aggregation did its job: far fewer Kinesis records than user records.
    assert len(fake.stored_records("events")) < 2000 / 10


async def test_aggregate_is_sent_at_the_deadline_plus_collector_grace() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        calls_before = fake.calls("PutRecords")
        t0 = anyio.current_time()
        outcomes = [
            await producer.put_record(stream="s", partition_key="same-key", data=bytes([i]))
            for i in range(3)
        ]
        results = [await outcome for outcome in outcomes]
    assert fake.calls("PutRecords") == calls_before + 1
    # Deadline 100 ms; entering the collector adds min(50 ms, 20% of 100 ms) = 20 ms of grace.
    for result in results:
        assert result.attempts[0].started_at == pytest.approx(t0 + 0.12, abs=EPS)
        assert result.attempts[0].delay == pytest.approx(0.12, abs=EPS)
    assert len({result.sequence_number for result in results}) == 1  # one aggregate


async def test_records_put_within_a_millisecond_share_its_first_puts_timestamps() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        await anyio.sleep(1)  # a fresh millisecond, whatever warm_up left behind
        t0 = anyio.current_time()
        first = await producer.put_record(stream="s", partition_key="k", data=b"1")
        await anyio.sleep(0.0009)
        same_ms = await producer.put_record(stream="s", partition_key="k", data=b"2")
        await anyio.sleep(0.0002)  # 1.1 ms after the first put: a new millisecond
        next_ms = await producer.put_record(stream="s", partition_key="k", data=b"3")
        results = [await outcome for outcome in (first, same_ms, next_ms)]
    # One aggregate, sent at the first record's deadline plus the collector's 20 ms grace.
    assert len({result.sequence_number for result in results}) == 1
    started = results[0].attempts[0].started_at
    assert started == pytest.approx(t0 + 0.12, abs=EPS)
    # The second record counts as put when the first was: its wait errs long by 0.9 ms, and
    # its deadline came early, never late. The third starts a new millisecond.
    assert [r.attempts[0].delay for r in results] == pytest.approx([0.12, 0.12, 0.1189], abs=EPS)


async def test_full_aggregate_closes_before_its_deadline() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(aggregation_max_size=1000, record_max_buffered_time_ms=5000)
    async with Producer(config, client=fake) as producer:
        await warm_up(producer, "s")
        t0 = anyio.current_time()
        for _ in range(30):
            await producer.put_record(stream="s", partition_key="k", data=b"x" * 100)
        (stream,) = producer.statistics().streams
        # Each 100-byte record takes 106 bytes in the body; with the key table (3) and the
        # framing (20), 9 fit in 1000 bytes. Three aggregates closed at once, by size; only
        # the last, partial one waits in the aggregator.
        assert stream.collecting == 3
        assert stream.aggregating == 3
        assert anyio.current_time() == t0
    stored = fake.stored_records("s")[1:]  # after the warm-up record
    assert [len(decode(s.data)) for s in stored] == [9, 9, 9, 3]
    assert all(len(s.data) <= 1000 for s in stored)


async def test_limiter_admits_exactly_rate_times_t_after_the_initial_capacity() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(
        aggregation_enabled=False,
        rate_limit_records_per_sec_per_shard=10.0,
        record_max_buffered_time_ms=0,
        record_ttl_ms=60_000,
    )
    async with Producer(config, client=fake) as producer:
        await warm_up(producer, "s")
        await anyio.sleep(2)  # the bucket refills after the warm-up
        t0 = anyio.current_time()
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"d")
            for i in range(40)
        ]
        results = [await outcome for outcome in outcomes]
    sent_at = sorted(result.attempts[-1].started_at - t0 for result in results)
    # 10 at once (the bucket's capacity), then 10 per second, released by 25 ms drains.
    assert sent_at[9] == pytest.approx(0.0, abs=EPS)
    for n in range(10, 40):
        earliest = (n - 9) / 10
        assert earliest - EPS <= sent_at[n] <= earliest + 0.025 + EPS
    for t in (0.5, 1.0, 2.0, 3.0):
        assert sum(s <= t + EPS for s in sent_at) <= 10 + 10 * t + EPS


async def test_retry_goes_back_with_deadline_now_plus_half_the_buffered_time() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG.replace(record_max_buffered_time_ms=200), client=fake) as producer:
        await warm_up(producer, "s")
        fake.script_records([("InternalFailure", "try again")])
        result = await (await producer.put_record(stream="s", partition_key="k", data=b"d"))
    assert result.success
    first, second = result.attempts
    assert (first.success, first.error_code, first.error_message) == (
        False,
        "InternalFailure",
        "try again",
    )
    # Back to the aggregator with deadline now + 100 ms (half the buffered time); when that
    # aggregate closes, the collector adds its grace of 40 ms (20% of 200 ms) from then.
    assert second.started_at == pytest.approx(first.ended_at + 0.1 + 0.04, abs=EPS)
    assert second.delay == pytest.approx(0.14, abs=EPS)
    assert second.success


async def test_record_expires_at_its_ttl() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(record_ttl_ms=1000)
    async with Producer(config, client=fake) as producer:
        await warm_up(producer, "s")
        fake.fail_requests(1000, code="InternalFailure", message="down", http_status=500)
        t0 = anyio.current_time()
        result = await (await producer.put_record(stream="s", partition_key="k", data=b"d"))
    assert not result.success
    assert result.error_code == "Expired"
    assert all(a.error_code == "InternalFailure" for a in result.attempts[:-1])
    assert len(result.attempts) >= 3
    # It fails at its TTL exactly, even while the stream is backing off.
    assert result.attempts[-1].ended_at == pytest.approx(t0 + 1.0, abs=EPS)
    # Waiting out the backoff in the sender, or back in the rate limiter with too little
    # time left to be sent (the backoff's jitter decides which); and why it was not delivered.
    message = result.attempts[-1].error_message or ""
    assert message.startswith(
        (
            "record_ttl_ms elapsed while waiting in the sender queue; ",
            "record_ttl_ms elapsed while waiting in the rate limiter; ",
        )
    )
    assert message.endswith(
        f"; after {len(result.attempts) - 1} attempts, the last failed with InternalFailure: down"
    )


async def test_requests_back_off_while_the_endpoint_fails() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG.replace(record_ttl_ms=10_000), client=fake) as producer:
        await warm_up(producer, "s")
        fake.fail_requests(6, code="ServiceUnavailable", message="down", http_status=503)
        result = await (await producer.put_record(stream="s", partition_key="k", data=b"d"))
    assert result.success
    starts = [a.started_at for a in result.attempts]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(gaps) == 6
    # Exponential: 100 ms doubling, each jittered down by at most half.
    for n, gap in enumerate(gaps[:-1]):
        assert gap >= 0.1 * 2**n * 0.5 - EPS
    assert gaps[-1] > gaps[0]


async def test_missing_stream_fails_promptly_with_resource_not_found() -> None:
    fake = FakeKinesis()
    async with Producer(CONFIG, client=fake) as producer:
        t0 = anyio.current_time()
        outcomes = [
            await producer.put_record(stream="missing", partition_key=f"k{i}", data=b"d")
            for i in range(5)
        ]
        results = [await outcome for outcome in outcomes]
        elapsed = anyio.current_time() - t0
    assert elapsed < 0.5
    for result in results:
        assert not result.success
        assert result.error_code == "ResourceNotFoundException"
        assert len(result.attempts) == 1


async def test_many_concurrent_tasks_first_put_from_a_child_task() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=4)
    outcomes: list[Outcome[RecordResult]] = []

    async def put(i: int) -> None:
        outcomes.append(
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"%d" % i)
        )

    async with Producer(CONFIG, client=fake) as producer, anyio.create_task_group() as tg:
        for i in range(1000):
            tg.start_soon(put, i)
    assert len(outcomes) == 1000
    assert all(outcome.result().success for outcome in outcomes)
    assert sorted(data for _, _, data in user_records(fake, "s")) == sorted(
        b"%d" % i for i in range(1000)
    )


async def test_exit_resolves_outcomes_nobody_awaited() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    fake.latency = 0.2
    async with Producer(CONFIG, client=fake) as producer:
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"d")
            for i in range(300)
        ]
        assert not all(outcome.done() for outcome in outcomes)
    assert all(outcome.done() and outcome.result().success for outcome in outcomes)
    assert producer.outstanding_records == 0
    assert producer.outstanding_bytes == 0


async def test_cancellation_resolves_every_outcome_as_cancelled() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    fake.latency = 30.0  # requests never answer before the cancellation
    outcomes: list[Outcome[RecordResult]] = []
    with anyio.move_on_after(1.0) as scope:
        async with Producer(CONFIG, client=fake) as producer:
            for i in range(10):
                outcomes.append(
                    await producer.put_record(stream="s", partition_key=f"k{i}", data=b"d")
                )
            await anyio.sleep(math.inf)
    assert scope.cancelled_caught
    for outcome in outcomes:
        result = outcome.result()
        assert not result.success
        assert result.error_code == "Cancelled"


class StoredButUnanswered(FakeKinesis):
    """Stores a request's records, then never answers (the answer is lost in flight)."""

    async def put_records(self, **kwargs: Any) -> dict[str, Any]:
        answer = await super().put_records(**kwargs)
        await anyio.sleep(math.inf)
        return answer


async def test_records_in_flight_when_cancelled_say_their_outcome_is_unknown() -> None:
    fake = StoredButUnanswered()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(request_timeout_ms=60_000)
    with anyio.move_on_after(1.0) as scope:
        async with Producer(config, client=fake) as producer:
            sent = [
                await producer.put_record(stream="s", partition_key=f"k{i}", data=b"d")
                for i in range(10)
            ]
            await anyio.sleep(0.95)  # sent at 0.12 s, stored, never answered
            waiting = [
                await producer.put_record(stream="s", partition_key=f"w{i}", data=b"d")
                for i in range(5)
            ]
            await anyio.sleep(math.inf)
    assert scope.cancelled_caught
    # In the stream, though the request never answered: the result must not say "not there".
    stored = [
        user
        for record in fake.stored_records("s")
        for user in (decode(record.data) if is_aggregated(record.data) else [record])
    ]
    assert len(stored) == 10
    for outcome in sent:
        result = outcome.result()
        assert (result.success, result.error_code) == (False, "Cancelled")
        assert result.outcome_unknown
        assert result.attempts[-1].outcome_unknown
        assert "may be in the stream" in (result.error_message or "")
    # Never sent: known not to be in the stream.
    for outcome in waiting:
        result = outcome.result()
        assert (result.success, result.error_code) == (False, "Cancelled")
        assert not result.outcome_unknown
        assert "may be in the stream" not in (result.error_message or "")


async def test_a_timed_out_request_leaves_its_records_outcome_unknown() -> None:
    fake = StoredButUnanswered()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(request_timeout_ms=1000, record_ttl_ms=2500)
    async with Producer(config, client=fake) as producer:
        result = await (await producer.put_record(stream="s", partition_key="k", data=b"d"))
    assert not result.success
    assert result.outcome_unknown
    assert [a.error_code for a in result.attempts][:2] == ["Internal", "Internal"]
    assert all(a.outcome_unknown for a in result.attempts[:-1])
    assert len(fake.stored_records("s")) >= 2  # stored by every attempt: replaying duplicates


async def test_put_after_exit_raises() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    async with Producer(CONFIG, client=fake) as producer:
        pass
    with pytest.raises(ProducerClosedError):
        await producer.put_record(stream="s", partition_key="k", data=b"d")
    with pytest.raises(ProducerClosedError):
        producer.put_record_nowait(stream="s", partition_key="k", data=b"d")
    # aiokpl 0.2.0 raised a plain RuntimeError here: code catching that keeps working.
    with pytest.raises(RuntimeError, match="closed"):
        await producer.put_record(stream="s", partition_key="k", data=b"d")


async def test_put_before_enter_is_an_error() -> None:
    producer = Producer(CONFIG, client=FakeKinesis())
    with pytest.raises(RuntimeError, match="async with"):
        await producer.put_record(stream="s", partition_key="k", data=b"d")


async def test_back_pressure_holds_the_bounds() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    fake.latency = 0.05
    config = CONFIG.replace(max_outstanding_records=10, max_outstanding_bytes=1024 * 1024)
    peak = 0
    async with Producer(config, client=fake) as producer:
        for i in range(100):
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"d")
            peak = max(peak, producer.outstanding_records)
        assert producer.outstanding_records == 10
        with pytest.raises(BufferFullError, match="max_outstanding_records=10"):
            producer.put_record_nowait(stream="s", partition_key="k", data=b"d")
    assert peak == 10
    assert len(user_records(fake, "s")) == 100


async def test_back_pressure_by_bytes() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    fake.latency = 0.05
    config = CONFIG.replace(max_outstanding_bytes=10_000, max_record_size=5_000)
    async with Producer(config, client=fake) as producer:
        for _ in range(30):
            await producer.put_record(stream="s", partition_key="k", data=b"x" * 2_999)
            assert producer.outstanding_bytes <= 10_000
        assert producer.outstanding_bytes == 9_000
    assert len(user_records(fake, "s")) == 30


async def test_oversized_record_rejected_and_a_1_mib_record_does_not_delay_others() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        with pytest.raises(InvalidRecordError, match="max_record_size"):
            await producer.put_record(stream="s", partition_key="k", data=b"x" * (1024 * 1024))
        big = await producer.put_record(
            stream="s", partition_key="k", data=b"x" * (1024 * 1024 - 1)
        )
        t0 = anyio.current_time()
        small = [
            await producer.put_record(stream="s", partition_key="k", data=b"y") for _ in range(20)
        ]
        results = [await outcome for outcome in small]
        assert (await big).success
    for result in results:
        assert result.success
        # deadline + grace + at most one drain interval
        assert result.attempts[-1].started_at - t0 <= 0.12 + 0.025 + EPS


async def test_bad_input_leaves_the_producer_working() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    async with Producer(CONFIG, client=fake) as producer:
        bad: list[tuple[dict[str, Any], type[Exception]]] = [
            ({"partition_key": "", "data": b"d"}, InvalidRecordError),
            ({"partition_key": "k" * 257, "data": b"d"}, InvalidRecordError),
            ({"partition_key": 5, "data": b"d"}, InvalidRecordTypeError),
            ({"partition_key": "k", "data": "text"}, InvalidRecordTypeError),
            ({"partition_key": "k", "data": b"d", "explicit_hash_key": "-1"}, InvalidRecordError),
            (
                {"partition_key": "k", "data": b"d", "explicit_hash_key": str(2**128)},
                InvalidRecordError,
            ),
        ]
        for kwargs, error in bad:
            with pytest.raises(error):
                await producer.put_record(stream="s", **kwargs)
        with pytest.raises(InvalidRecordError, match="stream"):
            await producer.put_record(stream="bad name!", partition_key="k", data=b"d")
        assert producer.outstanding_records == 0
        result = await (await producer.put_record(stream="s", partition_key="k", data=b"fine"))
    assert result.success
    assert user_records(fake, "s") == [(result.shard_id, "k", b"fine")]


async def test_explicit_hash_key_decides_the_shard() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=4)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        top = await producer.put_record(
            stream="s", partition_key="k", data=b"d", explicit_hash_key=2**128 - 1
        )
        bottom = await producer.put_record(
            stream="s", partition_key="k", data=b"e", explicit_hash_key="0"
        )
    assert top.result().shard_id == "shardId-000000000003"
    assert bottom.result().shard_id == "shardId-000000000000"


async def test_flush_returns_when_earlier_records_have_results() -> None:
    fake = FakeKinesis()
    fake.add_stream("a")
    fake.add_stream("b")
    config = CONFIG.replace(record_max_buffered_time_ms=60_000, record_ttl_ms=120_000)
    async with Producer(config, client=fake) as producer:
        t0 = anyio.current_time()
        in_a = [
            await producer.put_record(stream="a", partition_key=f"k{i}", data=b"d")
            for i in range(50)
        ]
        in_b = await producer.put_record(stream="b", partition_key="k", data=b"d")
        await producer.flush("a")
        assert all(outcome.done() for outcome in in_a)
        assert not in_b.done()
        await producer.flush()
        assert in_b.done()
        assert anyio.current_time() - t0 < 1  # not the 60 s deadline
        await producer.flush()  # nothing outstanding: returns at once


async def test_statistics_and_repr() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        await producer.put_record(stream="s", partition_key="k", data=b"abc")
        stats = producer.statistics()
        assert stats.outstanding_records == 1
        assert stats.outstanding_bytes == 4
        assert stats.records_put == 2
        assert stats.records_succeeded == 1
        (stream,) = stats.streams
        assert (stream.stream, stream.shard_map_state, stream.open_shards) == ("s", "READY", 2)
        assert stream.aggregating == 1
        assert "outstanding_records=1" in repr(producer)
    assert producer.statistics().records_succeeded == 2
    assert "closed" in repr(producer)


async def test_outcome_callbacks_and_result() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    seen: list[bool] = []
    async with Producer(CONFIG, client=fake) as producer:
        outcome = await producer.put_record(stream="s", partition_key="k", data=b"d")
        with pytest.raises(RuntimeError, match="no result yet"):
            outcome.result()
        outcome.add_done_callback(lambda o: seen.append(o.result().success))
        assert (await outcome.wait()).success
        outcome.add_done_callback(lambda o: seen.append(o.done()))
        assert await outcome is outcome.result()
    assert seen == [True, True]
    assert "done" in repr(outcome)


async def test_record_larger_than_the_byte_budget_is_admitted_when_the_bucket_is_full() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(
        rate_limit_bytes_per_sec_per_shard=100_000.0,
        aggregation_enabled=False,
        record_max_buffered_time_ms=0,
    )
    async with Producer(config, client=fake) as producer:
        await warm_up(producer, "s")
        await anyio.sleep(1)  # the bucket is full again
        t0 = anyio.current_time()
        big = await producer.put_record(stream="s", partition_key="k", data=b"x" * 299_999)
        small = await producer.put_record(stream="s", partition_key="k", data=b"y" * 999)
        big_result, small_result = await big, await small
    # 300,000 bytes against a 100,000-byte bucket: admitted at once, since the bucket was full
    # (it would otherwise never fit), leaving a debt of 200,000 bytes.
    assert big_result.attempts[-1].started_at == pytest.approx(t0, abs=EPS)
    # The next record waits for the debt plus its own 1,000 bytes at 100,000 bytes/s: 2.01 s,
    # released by the next 25 ms drain.
    waited = small_result.attempts[-1].started_at - t0
    assert 2.01 - EPS <= waited <= 2.01 + 0.025 + EPS


async def test_read_stream_returns_every_record_with_its_shard() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=3)
    async with Producer(CONFIG.replace(aggregation_enabled=False), client=fake) as producer:
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"%d" % i)
            for i in range(30)
        ]
    records = await read_stream(fake, "s", limit=7)  # pages of 7: several per shard
    assert sorted(record["Data"] for _, record in records) == sorted(b"%d" % i for i in range(30))
    by_data = {record["Data"]: shard for shard, record in records}
    for i, outcome in enumerate(outcomes):
        assert by_data[b"%d" % i] == outcome.result().shard_id

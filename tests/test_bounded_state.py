"""State that must not grow with time: per-shard state of shards closed by resharding, the
pipelines of streams that do not exist.

On asyncio and trio under virtual clocks, through a real ``Producer`` and ``FakeKinesis``.
"""

from __future__ import annotations

import anyio
import pytest

import aiokpl._producer.streams as streams_module
from aiokpl import Config, Producer, RecordResult
from aiokpl._producer.streams import IDLE_SWEEP_SECONDS, MISSING_KEPT, MISSING_LOOK_SECONDS
from aiokpl.testing import FakeKinesis
from running import running

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1")
HALF = 2**127


async def test_resharding_a_hundred_times_keeps_the_per_shard_state_bounded() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(metrics_level="detailed", metrics_granularity="shard")
    async with Producer(config, client=fake) as producer:
        open_shard = "shardId-000000000000"
        for cycle in range(50):
            low, high = fake.split("s", open_shard, HALF)
            # Records on both halves: they land on shards the map does not know, which
            # refreshes it.
            outcomes = [
                await producer.put_record(
                    stream="s", partition_key="k", data=b"d", explicit_hash_key=key
                )
                for key in (1, HALF + 1)
            ]
            for outcome in outcomes:
                assert (await outcome).success, cycle
            open_shard = fake.merge("s", low, high)
            outcome = await producer.put_record(
                stream="s", partition_key="k", data=b"d", explicit_hash_key=7
            )
            assert (await outcome).success
            await anyio.sleep(1)
        pipeline = running(producer).streams.pipelines["s"]
        shards = set(pipeline.limiter.shards)
        statistics = producer.statistics().streams[0]
        # Metric series of closed shards go once the window no longer holds their values.
        outcome = await producer.put_record(
            stream="s", partition_key="k", data=b"d", explicit_hash_key=7
        )
        await anyio.sleep(70)
        outcome = await producer.put_record(
            stream="s", partition_key="k", data=b"d", explicit_hash_key=7
        )
        assert (await outcome).success
        await anyio.sleep(60)
        assert producer._arguments.metrics is not None
        metric_shards = {key[3] for key in producer._arguments.metrics.table._leaves if key[3]}
    # 100 reshardings made 150 shards; the limiter keeps those of the current map at most,
    # and one shard whose queue was not empty when it closed.
    assert len(fake.shards("s")) == 151
    assert len(shards) <= 3, shards
    assert len(statistics.rates_by_shard) <= 3
    assert len(metric_shards) <= 2, metric_shards


async def test_a_missing_stream_with_nothing_pending_makes_no_more_calls() -> None:
    fake = FakeKinesis()
    fake.add_stream("real")
    async with Producer(CONFIG, client=fake) as producer:
        outcomes = [
            await producer.put_record(stream=f"misspelt-{i}", partition_key="k", data=b"d")
            for i in range(20)
        ]
        for outcome in outcomes:
            assert (await outcome).error_code == "ResourceNotFoundException"
        calls = fake.calls("ListShards")
        assert calls == 20  # one first attempt each
        await anyio.sleep(600)  # ten idle minutes: no refresh in the background
        assert fake.calls("ListShards") == calls
        # A record put again tries the map again (once, not per record).
        again = [
            await producer.put_record(stream="misspelt-0", partition_key="k", data=b"d")
            for _ in range(50)
        ]
        for outcome in again:
            assert (await outcome).error_code == "ResourceNotFoundException"
        assert fake.calls("ListShards") == calls + 1


async def test_an_idle_streams_pipeline_is_released_and_built_again_when_used() -> None:
    fake = FakeKinesis()
    for i in range(30):
        fake.add_stream(f"s{i}")
    async with Producer(CONFIG, client=fake) as producer:
        for i in range(30):
            assert (
                await (await producer.put_record(stream=f"s{i}", partition_key="k", data=b"d"))
            ).success
        assert len(producer.statistics().streams) == 30
        # One stream keeps working; the others fall idle.
        for _ in range(4):
            outcome = await producer.put_record(stream="s0", partition_key="k", data=b"d")
            assert (await outcome).success
            await anyio.sleep(40)
        assert [s.stream for s in producer.statistics().streams] == ["s0"]
        calls = fake.calls("ListShards")
        await anyio.sleep(600)
        assert fake.calls("ListShards") == calls  # released maps make no calls
        assert producer.statistics().streams == ()
        # Used again: built again, and it works.
        outcome = await producer.put_record(stream="s7", partition_key="k", data=b"d")
        assert (await outcome).success
        assert [s.stream for s in producer.statistics().streams] == ["s7"]


# --- streams found missing ------------------------------------------------------------------


def _streams_held(producer: Producer) -> set[str]:
    return {statistics.stream for statistics in producer.statistics().streams}


async def _a_look() -> None:
    """Until the producer has looked at the streams it found missing: a look is due at most
    MISSING_LOOK_SECONDS after a finding (twice that: not at the same instant as this wakes)."""
    await anyio.sleep(2 * MISSING_LOOK_SECONDS)


async def test_streams_found_missing_are_released_past_the_kept_ones() -> None:
    # Names built from input can name any number of missing streams: before, each kept its
    # pipeline and connection lane for the idle sweep's minute or more.
    fake = FakeKinesis()
    async with Producer(CONFIG, client=fake) as producer:
        outcomes = [
            await producer.put_record(stream=f"missing-{i}", partition_key="k", data=b"d")
            for i in range(3 * MISSING_KEPT)
        ]
        for outcome in outcomes:
            assert (await outcome).error_code == "ResourceNotFoundException"
        await _a_look()
        assert anyio.current_time() < IDLE_SWEEP_SECONDS  # not the idle sweep's doing
        held = _streams_held(producer)
        assert len(held) == MISSING_KEPT
        assert f"missing-{3 * MISSING_KEPT - 1}" in held  # the most recently found are kept
        assert running(producer).sender is not None
        assert len(running(producer).sender._lanes) <= MISSING_KEPT
        # The kept ones go with the idle sweep, as any idle pipeline.
        await anyio.sleep(2 * IDLE_SWEEP_SECONDS)
        assert _streams_held(producer) == set()


async def test_a_misspelt_name_put_to_again_and_again_keeps_its_map_and_its_backoff() -> None:
    # Released at once, its pipeline would be built again for each record: ListShards and
    # DescribeStreamSummary (20 calls a second per account) each time.
    fake = FakeKinesis()
    async with Producer(CONFIG, client=fake) as producer:
        for _ in range(20):
            outcome = await producer.put_record(stream="misspelt", partition_key="k", data=b"d")
            assert (await outcome).error_code == "ResourceNotFoundException"
            await anyio.sleep(2)
        assert _streams_held(producer) == {"misspelt"}
    assert fake.calls("DescribeStreamSummary") == 1
    # Tried again by records, at most once per backoff (1 s, ×1.5 up to 30 s, jitter making it
    # up to half shorter): with the shortest waits, records every 2 s try at 0, 2, 4, 6, 8,
    # 12, 16, 22 and 32 s, 9 times in 40 s, where one try per record would be 20.
    assert 2 <= fake.calls("ListShards") <= 9
    assert fake.calls("PutRecords") == 20


async def test_a_missing_stream_with_records_outstanding_is_not_released(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams_module, "MISSING_KEPT", 1)
    callbacks_may_return = anyio.Event()

    async def slow_dead_letter(result: RecordResult) -> None:
        await callbacks_may_return.wait()  # its record is outstanding until this returns

    config = CONFIG.replace(on_record_failure=slow_dead_letter)
    fake = FakeKinesis()
    async with Producer(config, client=fake) as producer:
        for name in ("held", "other-1"):
            outcome = await producer.put_record(stream=name, partition_key="k", data=b"d")
            assert (await outcome).error_code == "ResourceNotFoundException"
        await _a_look()
        # One kept; "held", the least recent, holds its record still: not released.
        assert _streams_held(producer) == {"held", "other-1"}
        callbacks_may_return.set()
        await _a_look()
        assert producer.outstanding_records == 0
        outcome = await producer.put_record(stream="other-2", partition_key="k", data=b"d")
        assert (await outcome).error_code == "ResourceNotFoundException"
        await _a_look()
        # Both hold nothing now: the next look releases them, the least recent first.
        assert _streams_held(producer) == {"other-2"}


async def test_a_kept_missing_stream_created_meanwhile_is_kept_and_delivers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams_module, "MISSING_KEPT", 1)
    fake = FakeKinesis()
    async with Producer(CONFIG, client=fake) as producer:
        outcome = await producer.put_record(stream="late", partition_key="k", data=b"d")
        assert (await outcome).error_code == "ResourceNotFoundException"
        fake.add_stream("late")
        await anyio.sleep(5)  # past the map's backoff: the next record loads it
        outcome = await producer.put_record(stream="late", partition_key="k", data=b"d")
        assert (await outcome).success
        for name in ("gone-1", "gone-2"):
            outcome = await producer.put_record(stream=name, partition_key="k", data=b"d")
            assert (await outcome).error_code == "ResourceNotFoundException"
            await _a_look()
        assert _streams_held(producer) == {"late", "gone-2"}

"""State that must not grow with time: per-shard state of shards closed by resharding.

On asyncio and trio under virtual clocks, through a real ``Producer`` and ``FakeKinesis``.
"""

from __future__ import annotations

import anyio
import pytest

from aiokpl import Config, Producer
from aiokpl.testing import FakeKinesis

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
        pipeline = producer._streams["s"]
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
        assert producer._metrics is not None
        metric_shards = {key[3] for key in producer._metrics.table._leaves if key[3]}
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

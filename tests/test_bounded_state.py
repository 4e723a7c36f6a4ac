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
    async with Producer(CONFIG, client=fake) as producer:
        pipeline = producer._streams.get("s")
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
    # 100 reshardings made 150 shards; the limiter keeps those of the current map at most,
    # and one shard whose queue was not empty when it closed.
    assert len(fake.shards("s")) == 151
    assert len(shards) <= 3, shards
    assert len(statistics.rates_by_shard) <= 3

"""Each stage's own ``statistics()`` snapshot, and the stream's and producer's composed of them."""

from __future__ import annotations

import dataclasses

import pytest

from aiokpl import Config
from aiokpl._core.statistics import (
    AggregatorStatistics,
    CollectorStatistics,
    RetrierStatistics,
    SenderStatistics,
    ShardMapStatistics,
)
from aiokpl._producer import Producer
from aiokpl.testing import FakeKinesis
from test_producer import warm_up

pytestmark = pytest.mark.anyio

# Long deadlines: records put after the warm-up stay in their aggregates until the flush.
CONFIG = Config(region="us-east-1", record_max_buffered_time_ms=10_000, record_ttl_ms=30_000)


async def test_each_stage_reports_its_own_snapshot_and_the_stream_composes_them() -> None:
    fake = FakeKinesis()
    fake.add_stream("events", shard_count=2)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "events")
        for i in range(3):
            await producer.put_record(stream="events", partition_key=f"k{i}", data=b"x")
        pipeline = producer._streams["events"]
        shard_map = pipeline.shard_map.statistics()
        assert isinstance(shard_map, ShardMapStatistics)
        assert (shard_map.state, shard_map.open_shards, shard_map.refreshes) == ("READY", 2, 1)
        assert (shard_map.source, shard_map.last_error) == ("ListShards", None)
        assert pipeline.aggregator.statistics() == AggregatorStatistics(
            aggregating=3, waiting_for_shard_map=0
        )
        assert pipeline.collector.statistics() == CollectorStatistics(collecting=0)
        # The warm-up record, stored: 1 KiB on demand, one 25 KiB unit provisioned.
        assert pipeline.retrier.statistics() == RetrierStatistics(
            retries=0, expired_unsent=0, billed_kib=1, put_payload_units=1
        )
        limiter = pipeline.limiter.statistics()
        assert (limiter.queued, limiter.queued_by_shard, limiter.unmapped_rate) == (0, {}, None)
        assert len(limiter.rates_by_shard) == 1  # the warm-up record's shard
        assert limiter.ceilings_by_shard == dict.fromkeys(
            limiter.rates_by_shard, (1000.0, 1048576.0)
        )
        assert producer._sender is not None
        assert producer._sender.statistics() == SenderStatistics(
            requests_sent=1, requests_failed=0, in_flight=0, queued=0, backing_off=0
        )
        stream = producer.statistics().streams[0]
        assert stream.shard_map_state == shard_map.state
        assert stream.shard_map_refreshes == shard_map.refreshes
        assert stream.capacity_mode == pipeline.distribution.capacity_mode == "PROVISIONED"
        assert stream.record_distribution == pipeline.distribution.strategy
        assert stream.record_distribution == "USER_PARTITION_KEY"
        assert not stream.placed_by_service
        assert stream.aggregating == 3
        assert stream.rates_by_shard == limiter.rates_by_shard
        assert stream.ceilings_by_shard == limiter.ceilings_by_shard
        await producer.flush()
        assert pipeline.aggregator.statistics().aggregating == 0
        assert producer._sender.statistics().requests_sent == 2
        assert producer.statistics().requests_sent == 2


def test_stage_snapshots_are_frozen() -> None:
    snapshot = CollectorStatistics(collecting=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        snapshot.collecting = 2  # type: ignore[misc]


def test_a_producer_not_started_reports_no_requests() -> None:
    statistics = Producer(Config(region="us-east-1")).statistics()
    assert (statistics.requests_sent, statistics.requests_queued, statistics.streams) == (0, 0, ())

"""Each stage's own ``statistics()`` snapshot, and the stream's and producer's composed of them."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from aiokpl import Config, ProducerStatistics, SpoolStatistics, StreamStatistics
from aiokpl._core.statistics import (
    AggregatorStatistics,
    CollectorStatistics,
    RetrierStatistics,
    SenderStatistics,
    ShardMapStatistics,
)
from aiokpl._producer.producer import Producer
from aiokpl.testing import FakeKinesis
from running import running
from test_producer import warm_up

pytestmark = pytest.mark.anyio

# Long deadlines: records put after the warm-up stay in their aggregates until the flush.
CONFIG = Config(region="us-east-1", record_max_buffered_time_ms=10_000, record_ttl_ms=30_000)


@contextlib.asynccontextmanager
async def three_aggregating() -> AsyncIterator[Producer]:
    """A producer on stream ``events`` of 2 shards, its map loaded and one record delivered
    (:func:`warm_up`), then 3 records put that wait in their aggregates."""
    fake = FakeKinesis()
    fake.add_stream("events", shard_count=2)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "events")
        for i in range(3):
            await producer.put_record(stream="events", partition_key=f"k{i}", data=b"x")
        yield producer


async def test_each_stage_reports_its_own_snapshot_and_the_stream_composes_them() -> None:
    async with three_aggregating() as producer:
        pipeline = running(producer).streams.pipelines["events"]
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
        assert running(producer).sender.statistics() == SenderStatistics(
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
        assert running(producer).sender.statistics().requests_sent == 2
        assert producer.statistics().requests_sent == 2


def test_stage_snapshots_are_frozen() -> None:
    snapshot = CollectorStatistics(collecting=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        snapshot.collecting = 2  # type: ignore[misc]


def test_a_producer_not_started_reports_no_requests() -> None:
    statistics = Producer(Config(region="us-east-1")).statistics()
    assert (statistics.requests_sent, statistics.requests_queued, statistics.streams) == (0, 0, ())


async def test_str_of_the_statistics_is_a_few_lines_an_operator_reads_and_repr_is_unchanged() -> (
    None
):
    async with three_aggregating() as producer:
        statistics = producer.statistics()
        outstanding = statistics.outstanding_bytes
        assert str(statistics).splitlines() == [
            f"records: 4 put, 1 succeeded, 0 failed, 3 outstanding ({outstanding} bytes)",
            "requests: 1 sent, 0 failed, 0 in flight, 0 queued, 0 backing off",
            "  stream events: map READY (2 open shards, 1 load), 3 aggregating, 0 rate limited, "
            "0 collecting, 0 retries, distribution USER_PARTITION_KEY",
        ]
        assert repr(statistics).startswith("ProducerStatistics(outstanding_records=3, ")
        assert "streams=(StreamStatistics(stream='events', " in repr(statistics)


def test_str_of_the_statistics_names_what_went_wrong_only_when_something_did() -> None:
    stream = StreamStatistics(
        stream="audit",
        shard_map_state="INVALID",
        open_shards=0,
        shard_map_refreshes=0,
        aggregating=0,
        rate_limited=0,
        queued_by_shard={},
        rates_by_shard={},
        collecting=0,
        retries=7,
        expired_unsent=2,
        waiting_for_shard_map=5,
        placed_by_service=True,
        shard_map_last_error=("ListShards", "AccessDeniedException", "not authorized: a secret"),
    )
    assert str(stream) == (
        "stream audit: map INVALID (0 open shards, 0 loads), 0 aggregating, 0 rate limited, "
        "0 collecting, 7 retries, 5 waiting for the map, 2 expired unsent, "
        "distribution unknown (placed by the service), map error ListShards AccessDeniedException"
    )
    counts: dict[str, Any] = dict.fromkeys(SpoolStatistics.__dataclass_fields__, 0)
    spool = SpoolStatistics(**counts)
    assert str(spool) == "spool: 0 unresolved, 0 segments, 0 bytes, 0 fsyncs"
    spool = dataclasses.replace(
        spool, records_recovered=4, records_replayed=1, full=True, write_errors=3, frames_lost=1
    )
    assert str(spool) == (
        "spool: 0 unresolved, 0 segments, 0 bytes, 0 fsyncs, 1/4 recovered replayed, FULL, "
        "3 write errors, 1 damaged entries (0 bytes lost)"
    )
    statistics = ProducerStatistics(
        outstanding_records=0,
        outstanding_bytes=0,
        records_put=9,
        records_succeeded=2,
        records_failed=7,
        requests_sent=3,
        requests_failed=1,
        requests_in_flight=0,
        requests_queued=0,
        streams=(stream,),
        failure_callback_errors=1,
        records_expired_unsent=2,
        spool=spool,
    )
    assert str(statistics).splitlines() == [
        "records: 9 put, 2 succeeded, 7 failed (2 expired unsent), 0 outstanding (0 bytes)",
        "requests: 3 sent, 1 failed, 0 in flight, 0 queued, 0 backing off",
        "on_record_failure: 0 pending, 1 errors",
        f"  {stream}",
        f"  {spool}",
    ]

"""Streams named by ARN, through aiobotocore over real HTTP, against the servers that can.

moto 5.2 takes ``StreamARN`` in every call the producer makes (``ListShards``, ``PutRecords``,
``DescribeStreamSummary``), keeps one namespace per region (a stream ARN of another region sent
to a client of this one is not found, as on the service), and creates on-demand streams. Records
put by ARN are read back by ARN and deaggregated by ``aiokpl.aggregation`` and by AWS's own
``aws_kinesis_agg``. kinesalite 3.3.3 predates ``StreamARN``: it takes no ARN at all and knows no
capacity modes; the last test pins what a producer sees there.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from aiokpl import Config, Producer
from aiokpl._kinesis import create_client
from aiokpl.testing import read_stream
from aiokpl.testing._servers import DUMMY_CREDENTIALS

from .helpers import admin_client, config, stream_name, user_records, wait_until_active

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

COUNT = 500


async def stream_arn(admin: Any, stream: str) -> str:
    summary = await admin.describe_stream_summary(StreamName=stream)
    arn: str = summary["StreamDescriptionSummary"]["StreamARN"]
    return arn


async def put_and_read_back(producer_config: Config, admin: Any, arn: str) -> tuple[Any, Any]:
    """Put COUNT records to ``arn``; the producer's statistics and the user records read back.

    Checks that every record succeeded and was read back once, intact, at the shard and
    sequence number its result names.
    """
    rng = random.Random(7)
    sent: dict[tuple[str | None, bytes], Any] = {}
    async with Producer(producer_config) as producer:
        first = await producer.put_record(stream=arn, partition_key="first", data=b"0")
        await first  # the map loads: the rest is aggregated
        sent[("first", b"0")] = first
        for i in range(COUNT):
            key, data = f"user-{i % 50}", f"{i}:".encode() + rng.randbytes(rng.randrange(200))
            sent[(key, data)] = await producer.put_record(stream=arn, partition_key=key, data=data)
        await producer.flush()
        statistics = producer.statistics()
    delivered = user_records(await read_stream(admin, arn))
    assert Counter((r.partition_key, r.data) for r in delivered) == Counter(list(sent))
    for record in delivered:
        result = sent[(record.partition_key, record.data)].result()
        assert result.success, result
        assert (record.shard_id, record.sequence_number) == (
            result.shard_id,
            result.sequence_number,
        )
    return statistics, delivered


async def test_records_put_by_arn_land_intact_on_moto(moto_endpoint: str) -> None:
    stream = stream_name("arn")
    async with admin_client(moto_endpoint) as admin:
        await admin.create_stream(StreamName=stream, ShardCount=3)
        await wait_until_active(admin, stream)
        arn = await stream_arn(admin, stream)
        statistics, delivered = await put_and_read_back(config(moto_endpoint), admin, arn)
    (stream_statistics,) = statistics.streams
    assert stream_statistics.stream == arn
    assert stream_statistics.open_shards == 3
    assert stream_statistics.capacity_mode == "PROVISIONED"
    # Aggregated: far fewer Kinesis records than user records.
    assert sum(1 for r in delivered if r.aggregated) > COUNT / 2


async def test_an_on_demand_stream_is_seen_as_one_on_moto(moto_endpoint: str) -> None:
    stream = stream_name("on-demand")
    async with admin_client(moto_endpoint) as admin:
        await admin.create_stream(StreamName=stream, StreamModeDetails={"StreamMode": "ON_DEMAND"})
        await wait_until_active(admin, stream)
        arn = await stream_arn(admin, stream)
        statistics, _ = await put_and_read_back(config(moto_endpoint), admin, arn)
    (stream_statistics,) = statistics.streams
    assert stream_statistics.capacity_mode == "ON_DEMAND"
    assert stream_statistics.open_shards == 4  # what moto gives a new on-demand stream


async def test_without_config_region_an_arn_is_written_in_its_own_region_on_moto(
    moto_endpoint: str,
) -> None:
    # A stream of eu-west-1, named by ARN to a producer whose own region is us-east-1 (the
    # placeholder for a local endpoint): the producer opens a eu-west-1 client for it. moto
    # keeps regions apart, so the records could not land through the us-east-1 client.
    stream = stream_name("elsewhere")
    eu = config(moto_endpoint).replace(region="eu-west-1")
    async with create_client(eu) as admin:
        await admin.create_stream(StreamName=stream, ShardCount=2)
        await wait_until_active(admin, stream)
        arn = await stream_arn(admin, stream)
        assert ":eu-west-1:" in arn
        regionless = Config(
            endpoint_url=moto_endpoint,
            aws_access_key_id=DUMMY_CREDENTIALS["aws_access_key_id"],
            aws_secret_access_key=DUMMY_CREDENTIALS["aws_secret_access_key"],
        )
        statistics, _ = await put_and_read_back(regionless, admin, arn)
    assert statistics.streams[0].open_shards == 2


async def test_kinesalite_takes_no_stream_arn_and_records_put_by_arn_fail_at_once(
    kinesalite_endpoint: str,
) -> None:
    stream = stream_name("arn")
    async with admin_client(kinesalite_endpoint) as admin:
        await admin.create_stream(StreamName=stream, ShardCount=1)
        await wait_until_active(admin, stream)
        arn = await stream_arn(admin, stream)
        async with Producer(config(kinesalite_endpoint)) as producer:
            outcome = await producer.put_record(stream=arn, partition_key="k", data=b"x")
            result = await outcome
            statistics = producer.statistics().streams[0]
    # It answers a StreamARN without StreamName as a missing stream name: nothing retries that.
    assert not result.success
    assert result.error_code == "ValidationException"
    assert "streamName" in (result.error_message or "")
    assert len(result.attempts) == 1
    assert statistics.capacity_mode is None

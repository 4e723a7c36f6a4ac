"""The producer on streams that place records themselves, over HTTP through aiobotocore, against
moto's server as ``aiokpl local`` serves it (it plays ``AUTO``: random placement, keyless
records, the strategy in ``DescribeStreamSummary``), on asyncio and trio. What lands is read back
as a KCL consumer reads it (``aiokpl.testing.read_as_kcl``) and, every copy, with AWS's own
deaggregator (``helpers.user_records`` checks ``aws_kinesis_agg`` against ours).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import pytest

from aiokpl import Outcome, Producer, RecordResult
from aiokpl.testing import read_as_kcl, read_stream

from .helpers import admin_client, config, stream_name, user_records

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SHARDS = 4


async def create_on_demand(admin: Any, strategy: str) -> tuple[str, str]:
    """An on-demand stream of ``SHARDS`` shards with ``strategy``: its name and ARN."""
    stream = stream_name("auto-producer")
    await admin.create_stream(
        StreamName=stream,
        ShardCount=SHARDS,
        StreamModeDetails={"StreamMode": "ON_DEMAND"},
        RecordDistributionStrategy=strategy,
    )
    summary = (await admin.describe_stream_summary(StreamName=stream))["StreamDescriptionSummary"]
    return stream, summary["StreamARN"]


async def offer(
    producer: Producer, stream: str, start: int, count: int, keyless: bool = False
) -> list[Outcome[RecordResult]]:
    """Put ``count`` records, 100 every 20 ms (5,000 a second)."""
    outcomes = []
    for i in range(start, start + count):
        key = None if keyless and i % 2 else f"key-{i % 997}"
        outcomes.append(await producer.put_record(stream=stream, partition_key=key, data=b"%d" % i))
        if i % 100 == 99:
            await anyio.sleep(0.02)
    return outcomes


async def test_an_auto_stream_gets_each_record_once_and_a_kcl_consumer_reads_them_all(
    moto_endpoint: str,
) -> None:
    async with admin_client(moto_endpoint) as admin:
        stream, _ = await create_on_demand(admin, "AUTO")
        async with Producer(config(moto_endpoint)) as producer:
            outcomes = await offer(producer, stream, 0, 2_000, keyless=True)
            results = [await outcome for outcome in outcomes]
            stats = producer.statistics().streams[0]
        stored = await read_stream(admin, stream)
        kcl = await read_as_kcl(admin, stream)
    assert all(result.success and len(result.attempts) == 1 for result in results)
    assert (stats.record_distribution, stats.placed_by_service) == ("AUTO", True)
    expected = Counter(b"%d" % i for i in range(2_000))
    # One Kinesis record each, no copies; half of them without a key, read back without one.
    delivered = user_records(stored)
    assert Counter(record.data for record in delivered) == expected
    assert not any(record.aggregated for record in delivered)
    # Put without a key: stored without one, but those sent before the first summary said
    # AUTO (released alone at their deadline, at start-up), which were given "-" and a key.
    put_keyless = {b"%d" % i for i in range(1, 2_000, 2)}
    keys = Counter(record.partition_key for record in delivered if record.data in put_keyless)
    assert set(keys) <= {None, "-"}
    assert keys[None] >= 900
    assert Counter(record.data for _, record in kcl) == expected
    # Placed by the server over every shard, whatever the keys.
    assert len({shard_id for shard_id, _ in stored}) == SHARDS


async def test_a_live_switch_to_auto_loses_nothing_for_a_kcl_consumer(moto_endpoint: str) -> None:
    async with admin_client(moto_endpoint) as admin:
        stream, arn = await create_on_demand(admin, "USER_PARTITION_KEY")
        async with Producer(config(moto_endpoint)) as producer:
            # A producer in its stride (its map and summary loaded, not holding its first
            # records for them) when the switch comes.
            warm = await producer.put_record(stream=stream, partition_key="warm", data=b"warm")
            assert (await warm).success
            outcomes = await offer(producer, stream, 0, 2_000)
            await admin.update_stream_record_distribution_strategy(
                StreamARN=arn, RecordDistributionStrategy="AUTO"
            )
            outcomes += await offer(producer, stream, 2_000, 2_000)
            results = [await outcome for outcome in outcomes]
            stats = producer.statistics().streams[0]
        stored = await read_stream(admin, stream)
        kcl = await read_as_kcl(admin, stream)
    assert all(result.success for result in results)
    assert stats.placed_by_service
    expected = {b"%d" % i for i in range(4_000)} | {b"warm"}
    assert {record.data for _, record in kcl} == expected  # every record, for a KCL consumer
    copies = sum(Counter(record.data for record in user_records(stored)).values()) - 4_001
    # Only the aggregates sent after the switch and before an answer showed it are sent again
    # (each on the shard the service picked, three times in four another than the predicted):
    # one request's, a buffered time of records at 5,000 a second, its four shards' aggregates
    # of about 125 records each. (The bound was 400, under what one request carries: this
    # test failed one run in four with 500 copies, every aggregate of that request misplaced.)
    assert copies <= 5_000 * 0.1, copies
    # Before the switch, aggregated.
    assert len(stored) < 4_000


async def test_records_without_a_key_aggregate_on_a_stream_placed_by_key(
    moto_endpoint: str,
) -> None:
    async with admin_client(moto_endpoint) as admin:
        stream, _ = await create_on_demand(admin, "USER_PARTITION_KEY")
        async with Producer(config(moto_endpoint)) as producer:
            # A warm producer: records put before the first map and summary are another
            # matter (a cold start), and so are the first calls of a new client.
            assert (await (await producer.put_record(stream=stream, data=b"warm"))).success
            outcomes = [
                await producer.put_record(stream=stream, data=b"%d" % i) for i in range(2_000)
            ]
            results = [await outcome for outcome in outcomes]
        stored = await read_stream(admin, stream)
        kcl = await read_as_kcl(admin, stream)
    assert all(result.success and len(result.attempts) == 1 for result in results)
    assert len(stored) < 200  # aggregated
    assert {record.data for _, record in kcl} == {b"warm"} | {b"%d" % i for i in range(2_000)}
    assert {record.partition_key for record in user_records(stored)} == {"-"}

"""The producer through aiobotocore over real HTTP to moto's server, on asyncio and trio.

Records are read back with GetRecords and deaggregated with AWS's own ``aws_kinesis_agg`` to
prove they landed intact, once each, on the shard their results name.
"""

from __future__ import annotations

import base64
import itertools
import random
import sys
from collections import Counter
from typing import Any

import anyio
import pytest

from aiokpl import Config, Producer
from aiokpl._core.hashing import hash_key_of
from aiokpl._kinesis import create_client
from aiokpl._local_kinesis import DUMMY_CREDENTIALS
from aiokpl.testing import read_stream

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

_names = itertools.count()


def config(endpoint: str, **changes: Any) -> Config:
    return Config(
        endpoint_url=endpoint,
        region=DUMMY_CREDENTIALS["region"],
        aws_access_key_id=DUMMY_CREDENTIALS["aws_access_key_id"],
        aws_secret_access_key=DUMMY_CREDENTIALS["aws_secret_access_key"],
        **changes,
    )


def aws_deaggregate(record: dict[str, Any]) -> list[tuple[str, bytes]]:
    """(partition key, data) of each user record, as AWS's deaggregator sees them.

    It answers in the Lambda shape: aggregated user records carry base64 data and
    ``"aggregated": True``; a record that is not an aggregate comes back with its raw bytes.
    (It also rewrites sys.path on import; put it back.)
    """
    saved = list(sys.path)
    try:
        from aws_kinesis_agg.deaggregator import iter_deaggregate_records
    finally:
        sys.path[:] = saved
    found = []
    for user_record in iter_deaggregate_records([record], data_format="Boto3"):
        kinesis = user_record["kinesis"]
        data = kinesis["data"]
        found.append(
            (kinesis["partitionKey"], base64.b64decode(data) if kinesis.get("aggregated") else data)
        )
    return found


def admin_client(endpoint: str) -> Any:
    """A plain client for setting up and reading back, on whichever loop runs the test."""
    return create_client(config(endpoint))


async def test_thousands_of_records_land_intact_where_predicted(moto_endpoint: str) -> None:
    stream = f"integration-{next(_names)}"
    rng = random.Random(3)
    async with admin_client(moto_endpoint) as admin:
        await admin.create_stream(StreamName=stream, ShardCount=4)
        shards = {
            s["ShardId"]: (
                int(s["HashKeyRange"]["StartingHashKey"]),
                int(s["HashKeyRange"]["EndingHashKey"]),
            )
            for s in (await admin.list_shards(StreamName=stream))["Shards"]
        }
        sent: dict[tuple[str, bytes], Any] = {}
        async with Producer(config(moto_endpoint)) as producer:
            # Let the shard map load, so most records are aggregated.
            await (await producer.put_record(stream=stream, partition_key="first", data=b"0"))
            outcomes = []
            for i in range(3000):
                key = f"user-{rng.randrange(300)}"
                data = f"{i}:".encode() + rng.randbytes(rng.randrange(0, 300))
                outcomes.append(
                    (
                        key,
                        data,
                        await producer.put_record(stream=stream, partition_key=key, data=data),
                    )
                )
        for key, data, outcome in outcomes:
            result = outcome.result()
            assert result.success, result
            sent[(key, data)] = result
        stored = await read_stream(admin, stream)

    # Aggregation happened: fewer Kinesis records than user records.
    assert len(stored) < 3000 / 5
    seen: Counter[tuple[str, bytes]] = Counter()
    for shard_id, kinesis_record in stored:
        for identity in aws_deaggregate(kinesis_record):
            seen[identity] += 1
            if identity in sent:
                assert sent[identity].shard_id == shard_id
                low, high = shards[shard_id]
                assert low <= hash_key_of(identity[0].encode()) <= high
    for identity in sent:
        assert seen[identity] == 1, identity
    assert sum(seen.values()) == 3001  # the first record too; nothing else, nothing twice


async def test_explicit_hash_keys_and_single_records(moto_endpoint: str) -> None:
    stream = f"integration-{next(_names)}"
    async with admin_client(moto_endpoint) as admin:
        await admin.create_stream(StreamName=stream, ShardCount=2)
        async with Producer(config(moto_endpoint, aggregation_enabled=False)) as producer:
            low = await producer.put_record(
                stream=stream, partition_key="k", data=b"low", explicit_hash_key=0
            )
            # Not 2**128 - 1: moto treats a shard's ending hash key as exclusive and answers
            # 500 for the very last key (test_producer covers it against FakeKinesis).
            high = await producer.put_record(
                stream=stream, partition_key="k", data=b"high", explicit_hash_key=2**128 - 2
            )
        stored = await read_stream(admin, stream)
    assert low.result().success, low.result().attempts
    assert low.result().shard_id == "shardId-000000000000"
    assert high.result().shard_id == "shardId-000000000001"
    assert sorted((shard, record["Data"]) for shard, record in stored) == [
        ("shardId-000000000000", b"low"),
        ("shardId-000000000001", b"high"),
    ]


async def test_missing_stream_fails_promptly(moto_endpoint: str) -> None:
    async with Producer(config(moto_endpoint)) as producer:
        outcome = await producer.put_record(stream="does-not-exist", partition_key="k", data=b"d")
        with anyio.fail_after(10):
            result = await outcome
    assert not result.success
    assert result.error_code == "ResourceNotFoundException"
    assert len(result.attempts) == 1

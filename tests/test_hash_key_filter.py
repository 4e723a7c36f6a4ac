"""``deaggregate(..., shard=...)`` against a real reshard: a split leaves a stale aggregate on
the wrong child; the producer sends both of its records again (a KCL consumer drops the
aggregate whole), so a KCL consumer reads each record once, and the per-record filter reads the
one inside the child's range twice (asyncio and trio)."""

from __future__ import annotations

import base64
from collections import Counter
from typing import Any

import anyio
import pytest

from aiokpl import Config
from aiokpl._producer.producer import Producer
from aiokpl.aggregation import deaggregate, deaggregate_records
from aiokpl.testing import FakeKinesis, read_as_kcl, read_stream
from test_producer import warm_up

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1")
HALF = 2**127
SHARD_0 = "shardId-000000000000"


def lambda_shaped(record: dict[str, Any]) -> dict[str, Any]:
    """The record as a Lambda Kinesis event delivers it (base64 data)."""
    return {
        "eventSource": "aws:kinesis",
        "kinesis": {
            "partitionKey": record["PartitionKey"],
            "sequenceNumber": record["SequenceNumber"],
            "data": base64.b64encode(record["Data"]).decode(),
        },
    }


async def test_after_a_split_the_filter_reads_each_record_once() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        lower, upper = fake.split("s", SHARD_0, HALF)
        # Predicted for shard 0 with the stale map, aggregated together: the aggregate's
        # explicit hash key (the first record's) takes it to the lower child, where the
        # second does not belong. The producer resends both, each where its key routes it.
        first = await producer.put_record(
            stream="s", partition_key="k", data=b"first", explicit_hash_key=HALF // 2
        )
        second = await producer.put_record(
            stream="s", partition_key="k", data=b"second", explicit_hash_key=HALF + 1
        )
        first_result, second_result = await first, await second
        await anyio.sleep(1)
    assert (first_result.shard_id, second_result.shard_id) == (lower, upper)
    assert [a.error_code for a in second_result.attempts] == ["Wrong Shard", None]
    assert [a.error_code for a in first_result.attempts] == ["Wrong Shard", None]

    shards = {
        shard["ShardId"]: shard for shard in (await fake.list_shards(StreamName="s"))["Shards"]
    }
    assert set(shards) == {SHARD_0, lower, upper}  # the closed parent is listed too
    by_shard: dict[str, list[dict[str, Any]]] = {}
    for shard_id, record in await read_stream(fake, "s"):
        by_shard.setdefault(shard_id, []).append(record)

    # Without the filter, the stale aggregate makes both appear twice.
    unfiltered = Counter(
        user.data
        for records in by_shard.values()
        for record in records
        for user in deaggregate(record)
    )
    assert unfiltered == Counter({b"": 1, b"first": 2, b"second": 2})

    # With each record's shard entry (boto3 records) or its range as a pair (Lambda records):
    # each on the shard its result names, "first" twice (the aggregate's copy is in range).
    boto3 = Counter(
        (shard_id, user.data)
        for shard_id, records in by_shard.items()
        for record in records
        for user in deaggregate(record, shard=shards[shard_id])
    )
    assert boto3 == Counter({(SHARD_0, b""): 1, (lower, b"first"): 2, (upper, b"second"): 1})
    lambda_ = Counter(
        (shard_id, user.data)
        for shard_id, records in by_shard.items()
        for user in deaggregate_records(
            {"Records": [lambda_shaped(record) for record in records]},
            shard=(
                shards[shard_id]["HashKeyRange"]["StartingHashKey"],
                shards[shard_id]["HashKeyRange"]["EndingHashKey"],
            ),
        )
    )
    assert lambda_ == boto3
    # The one the filter dropped is the copy whose result says "Wrong Shard".
    (stale,) = [
        user
        for record in by_shard[lower]
        for user in deaggregate(record)
        if user not in deaggregate(record, shard=shards[lower])
    ]
    assert (stale.data, stale.explicit_hash_key) == (b"second", str(HALF + 1))
    # A KCL consumer drops the straddling aggregate whole: each record once.
    kcl = Counter((shard_id, user.data) for shard_id, user in await read_as_kcl(fake, "s"))
    assert kcl == Counter({(SHARD_0, b""): 1, (lower, b"first"): 1, (upper, b"second"): 1})

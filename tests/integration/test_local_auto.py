"""``AUTO`` streams over real HTTP, through aiobotocore: moto's server as ``aiokpl local`` runs
it, and ``LoopbackKinesis`` (the fake over HTTP).

No other local Kinesis plays ``RecordDistributionStrategy`` = ``AUTO``; these two do, and must
agree with each other: records placed at random whatever their keys, records without a
partition key stored and read back without one, ``UpdateStreamRecordDistributionStrategy``,
the strategy in ``DescribeStreamSummary``, ``SequenceNumberForOrdering`` refused, ``DryRun``.
Every test runs on both servers and both backends.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest
from botocore.exceptions import ClientError

from aiokpl._cli.local import (
    AutoStreamSpec,
    StreamSpec,
    _create_streams,
    stream_spec,
    usage_lines,
)
from aiokpl._core.hashing import MAX_HASH_KEY, hash_key_of
from aiokpl._kinesis import error_of
from aiokpl.aggregation import encode
from aiokpl.testing import LoopbackKinesis, read_as_kcl, read_stream

from .helpers import admin_client, stream_name

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SHARDS = 4
WIDTH = (MAX_HASH_KEY + 1) // SHARDS
DRY_RUN = "DryRunOperationException"
FIRST_SHARD_KEY = next(
    key for key in (f"key-{n}" for n in range(1000)) if hash_key_of(key.encode()) < WIDTH
)


@pytest.fixture(params=["moto", "loopback"])
async def endpoint(request: pytest.FixtureRequest, moto_endpoint: str) -> AsyncIterator[str]:
    """The endpoint of each server in turn: moto's (session-wide) or a loopback fake."""
    if request.param == "moto":
        yield moto_endpoint
        return
    async with LoopbackKinesis() as server:
        yield server.endpoint_url


async def fails(awaitable: Awaitable[object], code: str) -> str:
    with pytest.raises(ClientError) as info:
        await awaitable
    found, message = error_of(info.value)
    assert found == code, (found, message)
    return message


async def create_auto(admin: Any, shards: int = SHARDS, strategy: str | None = "AUTO") -> str:
    stream = stream_name("auto")
    await admin.create_stream(
        StreamName=stream,
        ShardCount=shards,
        StreamModeDetails={"StreamMode": "ON_DEMAND"},
        **({} if strategy is None else {"RecordDistributionStrategy": strategy}),
    )
    return stream


async def strategy_of(admin: Any, stream: str) -> str | None:
    summary = (await admin.describe_stream_summary(StreamName=stream))["StreamDescriptionSummary"]
    found: str | None = summary.get("RecordDistributionStrategy")
    return found


async def test_auto_places_records_anywhere_and_keeps_them_without_keys(endpoint: str) -> None:
    async with admin_client(endpoint) as admin:
        stream = await create_auto(admin)
        assert await strategy_of(admin, stream) == "AUTO"
        assert len((await admin.list_shards(StreamName=stream))["Shards"]) == SHARDS
        keyed: list[dict[str, Any]] = [
            {"PartitionKey": FIRST_SHARD_KEY, "Data": b"k%d" % i} for i in range(100)
        ]
        keyless: list[dict[str, Any]] = [{"Data": b"n%d" % i} for i in range(100)]
        answer = await admin.put_records(StreamName=stream, Records=keyed + keyless)
        assert answer["FailedRecordCount"] == 0
        single = await admin.put_record(StreamName=stream, Data=b"single")
        stored = await read_stream(admin, stream)
    entries = answer["Records"]
    # Every key hashes to shard 0, yet every shard got records of both kinds.
    assert len({entry["ShardId"] for entry in entries[:100]}) == SHARDS
    assert len({entry["ShardId"] for entry in entries[100:]}) == SHARDS
    where = {record["Data"]: (shard, record) for shard, record in stored}
    assert len(stored) == 201
    for entry, sent in zip(entries, keyed + keyless, strict=True):
        shard, record = where[sent["Data"]]
        assert (shard, record["SequenceNumber"]) == (entry["ShardId"], entry["SequenceNumber"])
        assert record.get("PartitionKey") == sent.get("PartitionKey")
    assert where[b"single"][0] == single["ShardId"]
    assert "PartitionKey" not in where[b"single"][1]


async def test_only_on_demand_streams_take_the_strategy(endpoint: str) -> None:
    async with admin_client(endpoint) as admin:
        provisioned = stream_name("provisioned")
        await admin.create_stream(StreamName=provisioned, ShardCount=2)
        assert await strategy_of(admin, provisioned) is None
        arn = (await admin.describe_stream_summary(StreamName=provisioned))[
            "StreamDescriptionSummary"
        ]["StreamARN"]
        await fails(
            admin.update_stream_record_distribution_strategy(
                StreamARN=arn, RecordDistributionStrategy="AUTO"
            ),
            "InvalidArgumentException",
        )
        await fails(
            admin.create_stream(
                StreamName=stream_name("refused"), ShardCount=1, RecordDistributionStrategy="AUTO"
            ),
            "InvalidArgumentException",
        )
        keyed = await create_auto(admin, strategy=None)
        assert await strategy_of(admin, keyed) == "USER_PARTITION_KEY"


async def test_switching_strategies_and_what_each_refuses(endpoint: str) -> None:
    async with admin_client(endpoint) as admin:
        stream = await create_auto(admin, strategy=None)
        arn = (await admin.describe_stream_summary(StreamName=stream))["StreamDescriptionSummary"][
            "StreamARN"
        ]
        await fails(
            admin.put_records(StreamName=stream, Records=[{"Data": b"x"}]), "ValidationException"
        )
        await fails(admin.put_record(StreamName=stream, Data=b"x"), "ValidationException")
        first = await admin.put_record(StreamName=stream, PartitionKey="k", Data=b"1")
        ordering = {"PartitionKey": "k", "SequenceNumberForOrdering": first["SequenceNumber"]}
        await admin.put_record(StreamName=stream, Data=b"2", **ordering)
        await admin.update_stream_record_distribution_strategy(
            StreamARN=arn, RecordDistributionStrategy="AUTO"
        )
        assert await strategy_of(admin, stream) == "AUTO"
        await fails(
            admin.put_record(StreamName=stream, Data=b"3", **ordering), "InvalidArgumentException"
        )
        answer = await admin.put_records(
            StreamName=stream, Records=[{"PartitionKey": FIRST_SHARD_KEY, "Data": b"a"}] * 60
        )
        assert len({entry["ShardId"] for entry in answer["Records"]}) > 1
        await admin.update_stream_record_distribution_strategy(
            StreamARN=arn, RecordDistributionStrategy="USER_PARTITION_KEY"
        )
        answer = await admin.put_records(
            StreamName=stream, Records=[{"PartitionKey": FIRST_SHARD_KEY, "Data": b"u"}] * 60
        )
        assert {entry["ShardId"] for entry in answer["Records"]} == {"shardId-000000000000"}
        stored = await read_stream(admin, stream)
    assert Counter(record["Data"] for _, record in stored) == {b"1": 1, b"2": 1, b"a": 60, b"u": 60}


async def test_a_dry_run_is_refused_and_stores_nothing(endpoint: str) -> None:
    async with admin_client(endpoint) as admin:
        auto = await create_auto(admin)
        keyed = await create_auto(admin, strategy=None)
        for stream in (auto, keyed):
            await fails(
                admin.put_records(
                    StreamName=stream, Records=[{"PartitionKey": "k", "Data": b"x"}], DryRun=True
                ),
                DRY_RUN,
            )
            await fails(
                admin.put_record(StreamName=stream, PartitionKey="k", Data=b"x", DryRun=True),
                DRY_RUN,
            )
            iterator = await admin.get_shard_iterator(
                StreamName=stream, ShardId="shardId-000000000000", ShardIteratorType="LATEST"
            )
            await fails(
                admin.get_records(ShardIterator=iterator["ShardIterator"], DryRun=True), DRY_RUN
            )
            assert await read_stream(admin, stream) == []
        await fails(
            admin.put_records(StreamName=keyed, Records=[{"Data": b"x"}], DryRun=True),
            "ValidationException",
        )
        # A StreamId botocore does not route to a stream's own AWS endpoint reaches the server:
        # accepted and ignored (a well-formed one sends the request to AWS whatever the
        # endpoint_url, by botocore's endpoint rules).
        await admin.put_records(
            StreamName=auto, Records=[{"Data": b"id"}], StreamId="local", DryRun=False
        )
        assert [record["Data"] for _, record in await read_stream(admin, auto)] == [b"id"]


async def test_a_kcl_consumer_keeps_an_aggregate_only_where_all_its_keys_belong(
    endpoint: str,
) -> None:
    """Aggregates on an AUTO stream land anywhere: read as the KCL reads, each is kept whole
    on the shard all its keys hash into, and dropped whole elsewhere."""
    keys = {
        index: [
            key
            for key in (f"user-{n}" for n in range(400))
            if hash_key_of(key.encode()) // WIDTH == index
        ][:3]
        for index in range(SHARDS)
    }
    aggregates = [
        encode([(key, f"{index}/{n}/{key}".encode()) for key in keys[index]])
        for n in range(15)
        for index in range(SHARDS)
    ]
    async with admin_client(endpoint) as admin:
        stream = await create_auto(admin)
        answer = await admin.put_records(
            StreamName=stream,
            Records=[{"Data": data} for data in aggregates] + [{"Data": b"plain"}],
        )
        found = await read_as_kcl(admin, stream)
    expected = []
    for position, entry in enumerate(answer["Records"][:-1]):
        index = position % SHARDS  # the shard all of this aggregate's keys hash into
        if entry["ShardId"] == f"shardId-00000000000{index}":
            expected += [(entry["ShardId"], key) for key in keys[index]]
    kept = [(shard, record.partition_key) for shard, record in found if record.aggregated]
    assert Counter(kept) == Counter(expected)
    assert 0 < len(expected) < len(aggregates) * 3  # some kept, some dropped
    assert [record.data for _, record in found if not record.aggregated] == [b"plain"]


# -- aiokpl local's --stream NAME:SHARDS:auto ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "spec", "auto"),
    [
        ("events", ("events", 1), False),
        ("events:3", ("events", 3), False),
        ("clicks:3:auto", ("clicks", 3), True),
    ],
)
def test_stream_specs_with_and_without_auto(text: str, spec: tuple[str, int], auto: bool) -> None:
    parsed = stream_spec(text)
    assert parsed == spec
    assert isinstance(parsed, AutoStreamSpec) is auto
    assert (parsed.name, parsed.shards) == spec


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("clicks:3:AUTO", "only ':auto' may follow"),
        ("clicks:3:", "only ':auto' may follow"),
        ("clicks::auto", "not a shard count: ''"),
        ("clicks:0:auto", "at least 1 shard"),
    ],
)
def test_bad_auto_stream_specs_are_refused(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        stream_spec(text)


def test_the_banner_says_which_streams_are_auto() -> None:
    lines = usage_lines(
        "http://127.0.0.1:1", "us-east-1", [AutoStreamSpec("clicks", 4), StreamSpec("events", 1)]
    )
    assert lines[1] == (
        "streams: clicks (4 shards, on-demand, AUTO: records placed by the server), "
        "events (1 shard)"
    )


async def test_the_command_creates_an_auto_stream_as_a_client_would(moto_endpoint: str) -> None:
    auto, keyed = stream_name("cli-auto"), stream_name("cli-keyed")
    await _create_streams(
        moto_endpoint, "us-east-1", [AutoStreamSpec(auto, 3), StreamSpec(keyed, 2)]
    )
    async with admin_client(moto_endpoint) as admin:
        assert await strategy_of(admin, auto) == "AUTO"
        assert await strategy_of(admin, keyed) is None
        assert len((await admin.list_shards(StreamName=auto))["Shards"]) == 3
        assert len((await admin.list_shards(StreamName=keyed))["Shards"]) == 2

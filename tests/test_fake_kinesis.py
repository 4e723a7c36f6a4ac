"""``aiokpl.testing.FakeKinesis``: faithful where the producer and its tests rely on it.

Async tests run on asyncio and trio under virtual clocks, so throttling and expiry are checked
to the exact record at exact instants.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Awaitable, Sequence
from datetime import datetime, timezone
from typing import Any

import anyio
import pytest
from botocore.exceptions import ClientError

from aiokpl._core.hashing import MAX_HASH_KEY, hash_key_of
from aiokpl._kinesis import error_of
from aiokpl.testing import FakeKinesis, FakeShard, FaultPlan, Request, StoredRecord

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024


def records(count: int, *, size: int = 1, prefix: str = "k") -> list[dict[str, Any]]:
    return [{"PartitionKey": f"{prefix}{i}", "Data": b"x" * size} for i in range(count)]


async def fails(awaitable: Awaitable[object], code: str, *, http_status: int = 400) -> ClientError:
    with pytest.raises(ClientError) as info:
        await awaitable
    assert error_of(info.value)[0] == code, error_of(info.value)
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == http_status
    return info.value


def shard_of(fake: FakeKinesis, stream: str, shard_id: str) -> FakeShard:
    return next(shard for shard in fake.shards(stream) if shard.shard_id == shard_id)


async def all_shards(fake: FakeKinesis, **first: Any) -> list[dict[str, Any]]:
    response = await fake.list_shards(**first)
    shards = list(response["Shards"])
    while "NextToken" in response:
        response = await fake.list_shards(NextToken=response["NextToken"])
        shards += response["Shards"]
    return shards


# -- streams and shards -------------------------------------------------------------------


def test_new_stream_splits_the_key_space_like_create_stream() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 3)
    shards = fake.shards("s")
    assert [s.shard_id for s in shards] == [
        "shardId-000000000000",
        "shardId-000000000001",
        "shardId-000000000002",
    ]
    # The service's own ranges for a three-shard stream.
    assert shards[0].starting_hash_key == 0
    assert shards[0].ending_hash_key == 113427455640312821154458202477256070484
    assert shards[1].starting_hash_key == 113427455640312821154458202477256070485
    assert shards[2].ending_hash_key == MAX_HASH_KEY
    for before, after in itertools.pairwise(shards):
        assert after.starting_hash_key == before.ending_hash_key + 1
    assert all(s.is_open and s.parent_shard_id is None and s.record_count == 0 for s in shards)
    assert 0 in shards[0]
    assert MAX_HASH_KEY in shards[2]
    assert "0" not in shards[0]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("bad name",), {}, "stream name"),
        (("s", 0), {}, "shard_count"),
        (("s",), {"records_per_second": 0.0}, "records_per_second"),
        (("s",), {"burst_seconds": float("inf")}, "burst_seconds"),
        (("s",), {"max_record_size": 10 * MIB + 1}, "max_record_size"),
    ],
)
def test_add_stream_rejects_bad_setup(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        FakeKinesis().add_stream(*args, **kwargs)


def test_setup_helpers_reject_unknown_names() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    with pytest.raises(ValueError, match="already exists"):
        fake.add_stream("s")
    for call in (
        lambda: fake.remove_stream("nope"),
        lambda: fake.shards("nope"),
        lambda: fake.stored_records("nope"),
        lambda: fake.split("nope", "shardId-000000000000", 1),
    ):
        with pytest.raises(ValueError, match="no stream named 'nope'"):
            call()
    with pytest.raises(ValueError, match="does not exist"):
        fake.stored_records("s", "shardId-000000000009")
    with pytest.raises(ValueError, match="does not exist"):
        fake.merge("s", "shardId-000000000000", "shardId-000000000009")


# -- routing, sequence numbers, read-back ---------------------------------------------------


async def test_records_route_by_md5_or_explicit_hash_key() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 4)
    ranges = {s.shard_id: s for s in fake.shards("s")}
    batch = records(200)
    explicit = [0, 1, 2**126, 2**127 - 1, 2**127, MAX_HASH_KEY]
    batch += [{"PartitionKey": "same", "Data": b"e", "ExplicitHashKey": str(k)} for k in explicit]
    response = await fake.put_records(StreamName="s", Records=batch)
    assert response["FailedRecordCount"] == 0
    assert response["EncryptionType"] == "NONE"
    assert len(response["Records"]) == len(batch)
    for entry, result in zip(batch, response["Records"], strict=True):
        if "ExplicitHashKey" in entry:
            key = int(entry["ExplicitHashKey"])
        else:
            key = hash_key_of(entry["PartitionKey"].encode())
        assert key in ranges[result["ShardId"]]
    assert [r["ShardId"][-1] for r in response["Records"][-6:]] == ["0", "0", "1", "1", "2", "3"]
    stored = fake.stored_records("s")
    assert [r.sequence_number for r in stored] == [r["SequenceNumber"] for r in response["Records"]]
    assert stored[-1] == StoredRecord(
        "s",
        "shardId-000000000003",
        stored[-1].sequence_number,
        "same",
        str(MAX_HASH_KEY),
        b"e",
        0.0,
    )


async def test_sequence_numbers_strictly_increase_as_strings_and_numbers() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 2)
    numbers: list[str] = []
    for _ in range(3):
        response = await fake.put_records(StreamName="s", Records=records(50))
        numbers += [r["SequenceNumber"] for r in response["Records"]]
    single = await fake.put_record(StreamName="s", PartitionKey="p", Data=b"d")
    numbers.append(single["SequenceNumber"])
    assert all(len(n) == 56 and n.isdigit() and n[0] != "0" for n in numbers)
    assert numbers == sorted(numbers)
    assert [int(n) for n in numbers] == sorted({int(n) for n in numbers})
    for shard in fake.shards("s"):
        assert int(shard.starting_sequence_number) < int(numbers[0])


async def test_get_records_returns_exactly_what_was_put_in_pages() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    put = [{"PartitionKey": f"p{i}", "Data": bytes([i]) * i} for i in range(25)]
    response = await fake.put_records(StreamName="s", Records=put)
    iterator = (
        await fake.get_shard_iterator(
            StreamName="s", ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
        )
    )["ShardIterator"]
    pages: list[list[dict[str, Any]]] = []
    while True:
        page = await fake.get_records(ShardIterator=iterator, Limit=10)
        iterator = page["NextShardIterator"]
        assert page["MillisBehindLatest"] == 0
        if not page["Records"]:
            break
        pages.append(page["Records"])
    assert [len(p) for p in pages] == [10, 10, 5]
    got = [r for p in pages for r in p]
    assert [(r["PartitionKey"], r["Data"]) for r in got] == [
        (e["PartitionKey"], e["Data"]) for e in put
    ]
    assert [r["SequenceNumber"] for r in got] == [r["SequenceNumber"] for r in response["Records"]]
    assert got[0]["ApproximateArrivalTimestamp"] == datetime.fromtimestamp(0, tz=timezone.utc)
    assert set(got[0]) == {"SequenceNumber", "ApproximateArrivalTimestamp", "Data", "PartitionKey"}
    # The open shard's iterator keeps working for records put later.
    await fake.put_record(StreamName="s", PartitionKey="late", Data=b"!")
    page = await fake.get_records(ShardIterator=iterator)
    assert [r["Data"] for r in page["Records"]] == [b"!"]


async def test_iterator_types() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    shard = "shardId-000000000000"
    first = await fake.put_records(StreamName="s", Records=records(3))
    await anyio.sleep(10)
    second = await fake.put_records(StreamName="s", Records=records(2, prefix="later"))
    sequences = [r["SequenceNumber"] for r in first["Records"] + second["Records"]]

    async def read(kind: str, **extra: Any) -> list[str]:
        iterator = await fake.get_shard_iterator(
            StreamName="s", ShardId=shard, ShardIteratorType=kind, **extra
        )
        page = await fake.get_records(ShardIterator=iterator["ShardIterator"])
        return [r["SequenceNumber"] for r in page["Records"]]

    latest = await fake.get_shard_iterator(
        StreamName="s", ShardId=shard, ShardIteratorType="LATEST"
    )
    assert await read("TRIM_HORIZON") == sequences
    assert await read("AT_SEQUENCE_NUMBER", StartingSequenceNumber=sequences[2]) == sequences[2:]
    assert await read("AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=sequences[2]) == sequences[3:]
    at_ten = datetime.fromtimestamp(10, tz=timezone.utc)
    assert await read("AT_TIMESTAMP", Timestamp=at_ten) == sequences[3:]
    assert await read("AT_TIMESTAMP", Timestamp=at_ten.replace(tzinfo=None)) == sequences[3:]
    assert await read("AT_TIMESTAMP", Timestamp=5) == sequences[3:]
    assert await read("AT_TIMESTAMP", Timestamp=0.0) == sequences
    await fake.put_record(StreamName="s", PartitionKey="newest", Data=b"n")
    page = await fake.get_records(ShardIterator=latest["ShardIterator"])
    assert [r["PartitionKey"] for r in page["Records"]] == ["newest"]


async def test_get_shard_iterator_errors() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    shard = "shardId-000000000000"
    base: dict[str, Any] = {"StreamName": "s", "ShardId": shard}
    await fails(fake.get_shard_iterator(**base, ShardIteratorType="OLDEST"), "ValidationException")
    await fails(
        fake.get_shard_iterator(**base, ShardIteratorType="AT_SEQUENCE_NUMBER"),
        "InvalidArgumentException",
    )
    await fails(
        fake.get_shard_iterator(
            **base, ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber="12x"
        ),
        "ValidationException",
    )
    await fails(
        fake.get_shard_iterator(
            **base, ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber="7"
        ),
        "InvalidArgumentException",
    )
    await fails(
        fake.get_shard_iterator(**base, ShardIteratorType="AT_TIMESTAMP"),
        "InvalidArgumentException",
    )
    with pytest.raises(TypeError, match="Timestamp"):
        await fake.get_shard_iterator(**base, ShardIteratorType="AT_TIMESTAMP", Timestamp="now")  # type: ignore[arg-type]
    error = await fails(
        fake.get_shard_iterator(
            StreamName="s", ShardId="shardId-000000000005", ShardIteratorType="LATEST"
        ),
        "ResourceNotFoundException",
    )
    assert "shardId-000000000005" in error_of(error)[1]
    await fails(
        fake.get_shard_iterator(StreamName="t", ShardId=shard, ShardIteratorType="LATEST"),
        "ResourceNotFoundException",
    )


async def test_get_records_errors_expiry_and_lag() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    await fake.put_records(StreamName="s", Records=records(3))
    iterator = (
        await fake.get_shard_iterator(
            StreamName="s", ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
        )
    )["ShardIterator"]
    await fails(fake.get_records(ShardIterator=iterator, Limit=0), "ValidationException")
    await fails(fake.get_records(ShardIterator=iterator, Limit=10_001), "ValidationException")
    await fails(fake.get_records(ShardIterator="not-an-iterator"), "InvalidArgumentException")
    await fails(fake.get_records(ShardIterator="W10="), "InvalidArgumentException")
    await fails(fake.get_records(ShardIterator=12), "InvalidArgumentException")  # type: ignore[arg-type]
    await fails(
        fake.get_records(ShardIterator=iterator, StreamARN=fake.stream_arn("other")),
        "InvalidArgumentException",
    )
    await anyio.sleep(2)
    page = await fake.get_records(ShardIterator=iterator, Limit=1, StreamARN=fake.stream_arn("s"))
    assert len(page["Records"]) == 1
    assert page["MillisBehindLatest"] == 2000
    await anyio.sleep(300.5)
    error = await fails(
        fake.get_records(ShardIterator=page["NextShardIterator"]), "ExpiredIteratorException"
    )
    assert "300000 milliseconds" in error_of(error)[1]
    fresh = (
        await fake.get_shard_iterator(
            StreamName="s", ShardId="shardId-000000000000", ShardIteratorType="LATEST"
        )
    )["ShardIterator"]
    fake.remove_stream("s")
    fake.add_stream("s")
    # Same name, new stream: the old iterator does not read it.
    await fails(fake.get_records(ShardIterator=fresh), "ResourceNotFoundException")


async def test_get_records_stops_at_ten_mebibytes() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    big = {"PartitionKey": "p", "Data": b"x" * (MIB - 1)}
    for _ in range(3):
        response = await fake.put_records(StreamName="s", Records=[big] * 4)
        assert response["FailedRecordCount"] == 0
    iterator = (
        await fake.get_shard_iterator(
            StreamName="s", ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
        )
    )["ShardIterator"]
    page = await fake.get_records(ShardIterator=iterator)
    assert len(page["Records"]) == 10
    page = await fake.get_records(ShardIterator=page["NextShardIterator"])
    assert len(page["Records"]) == 2


# -- ListShards -------------------------------------------------------------------------


async def test_list_shards_paginates_with_next_token_alone() -> None:
    fake = FakeKinesis()
    fake.add_stream("big", 2500)
    first = await fake.list_shards(
        StreamName="big", ShardFilter={"Type": "AT_LATEST"}, MaxResults=1000
    )
    pages = [first]
    while "NextToken" in pages[-1]:
        pages.append(await fake.list_shards(NextToken=pages[-1]["NextToken"], MaxResults=1000))
    assert [len(p["Shards"]) for p in pages] == [1000, 1000, 500]
    ids = [s["ShardId"] for p in pages for s in p["Shards"]]
    assert ids == [f"shardId-{i:012d}" for i in range(2500)]
    assert fake.calls("ListShards") == 3
    later = [r.kwargs for r in fake.requests if r.operation == "ListShards"][1:]
    assert [set(kwargs) for kwargs in later] == [{"NextToken", "MaxResults"}] * 2
    # The default page is 1000 shards too.
    assert len(await all_shards(fake, StreamName="big")) == 2500
    assert len((await fake.list_shards(StreamName="big"))["Shards"]) == 1000
    assert len((await fake.list_shards(StreamName="big", MaxResults=10_000))["Shards"]) == 2500


@pytest.mark.parametrize(
    "extra",
    [
        {"StreamName": "s"},
        {"StreamARN": "arn:aws:kinesis:us-east-1:123456789012:stream/s"},
        {"ShardFilter": {"Type": "AT_LATEST"}},
        {"ExclusiveStartShardId": "shardId-000000000000"},
        {"StreamCreationTimestamp": 0.0},
    ],
)
async def test_next_token_must_come_alone(extra: dict[str, Any]) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 3)
    token = (await fake.list_shards(StreamName="s", MaxResults=1))["NextToken"]
    error = await fails(fake.list_shards(NextToken=token, **extra), "InvalidArgumentException")
    assert error_of(error)[1] == f"NextToken and {next(iter(extra))} cannot be provided together."


async def test_next_token_expires_and_must_be_a_token() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 3)
    token = (await fake.list_shards(StreamName="s", MaxResults=1))["NextToken"]
    await fails(fake.list_shards(NextToken="garbage"), "InvalidArgumentException")
    iterator = (
        await fake.get_shard_iterator(
            StreamName="s", ShardId="shardId-000000000000", ShardIteratorType="LATEST"
        )
    )["ShardIterator"]
    await fails(fake.list_shards(NextToken=iterator), "InvalidArgumentException")
    await anyio.sleep(299)
    # MaxResults does not carry over: a later page has the default size unless given.
    assert len((await fake.list_shards(NextToken=token))["Shards"]) == 2
    await anyio.sleep(2)
    await fails(fake.list_shards(NextToken=token), "ExpiredNextTokenException")
    token = (await fake.list_shards(StreamName="s", MaxResults=1))["NextToken"]
    fake.remove_stream("s")
    await fails(fake.list_shards(NextToken=token), "ResourceNotFoundException")


async def test_list_shards_unknown_stream_and_bad_arguments() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 2)
    error = await fails(fake.list_shards(StreamName="missing"), "ResourceNotFoundException")
    assert error_of(error) == (
        "ResourceNotFoundException",
        "Stream missing under account 123456789012 not found.",
    )
    await fails(fake.list_shards(), "InvalidArgumentException")
    await fails(fake.list_shards(StreamName="s", MaxResults=0), "ValidationException")
    await fails(fake.list_shards(StreamName="s", MaxResults=10_001), "ValidationException")
    await fails(
        fake.list_shards(StreamName="s", ShardFilter={"Type": "LATEST"}), "ValidationException"
    )
    await fails(
        fake.list_shards(StreamName="s", ShardFilter={"Type": "AFTER_SHARD_ID"}),
        "InvalidArgumentException",
    )
    await fails(
        fake.list_shards(StreamName="s", ShardFilter={"Type": "FROM_TIMESTAMP"}),
        "InvalidArgumentException",
    )
    await fails(fake.list_shards(StreamName="bad name"), "ValidationException")


async def test_list_shards_filters_after_split_and_merge() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 3)
    await anyio.sleep(10)
    low, high = fake.split("s", "shardId-000000000000", 2**64)
    assert (low, high) == ("shardId-000000000003", "shardId-000000000004")
    await anyio.sleep(10)
    merged = fake.merge("s", "shardId-000000000001", "shardId-000000000002")
    assert merged == "shardId-000000000005"

    async def ids(**kwargs: Any) -> list[str]:
        return [s["ShardId"][-1] for s in await all_shards(fake, StreamName="s", **kwargs)]

    assert await ids() == ["0", "1", "2", "3", "4", "5"]
    assert await ids(ShardFilter={"Type": "AT_LATEST"}) == ["3", "4", "5"]
    assert await ids(ShardFilter={"Type": "AT_TRIM_HORIZON"}) == ["0", "1", "2", "3", "4", "5"]
    assert await ids(ShardFilter={"Type": "FROM_TRIM_HORIZON"}) == ["0", "1", "2", "3", "4", "5"]
    assert await ids(ShardFilter={"Type": "AFTER_SHARD_ID", "ShardId": "shardId-000000000002"}) == [
        "3",
        "4",
        "5",
    ]
    assert await ids(ExclusiveStartShardId="shardId-000000000004") == ["5"]
    assert await ids(
        ExclusiveStartShardId="shardId-000000000001",
        ShardFilter={"Type": "AFTER_SHARD_ID", "ShardId": "shardId-000000000003"},
    ) == ["4", "5"]
    # At t=5 the originals were open; at t=15 the split children and shards 1, 2.
    assert await ids(ShardFilter={"Type": "AT_TIMESTAMP", "Timestamp": 5}) == ["0", "1", "2"]
    at_15 = datetime.fromtimestamp(15, tz=timezone.utc)
    assert await ids(ShardFilter={"Type": "AT_TIMESTAMP", "Timestamp": at_15}) == [
        "1",
        "2",
        "3",
        "4",
    ]
    assert await ids(ShardFilter={"Type": "FROM_TIMESTAMP", "Timestamp": 15}) == [
        "1",
        "2",
        "3",
        "4",
        "5",
    ]
    # Closed shards carry an ending sequence number, children their parents.
    described = {s["ShardId"][-1]: s for s in await all_shards(fake, StreamName="s")}
    assert "EndingSequenceNumber" in described["0"]["SequenceNumberRange"]
    assert "EndingSequenceNumber" not in described["3"]["SequenceNumberRange"]
    assert described["3"]["ParentShardId"] == "shardId-000000000000"
    assert "AdjacentParentShardId" not in described["3"]
    assert described["5"]["ParentShardId"] == "shardId-000000000001"
    assert described["5"]["AdjacentParentShardId"] == "shardId-000000000002"
    assert described["3"]["HashKeyRange"] == {
        "StartingHashKey": "0",
        "EndingHashKey": str(2**64 - 1),
    }


# -- DescribeStream ------------------------------------------------------------------------


async def all_described(fake: FakeKinesis, **first: Any) -> list[dict[str, Any]]:
    description = (await fake.describe_stream(**first))["StreamDescription"]
    shards = list(description["Shards"])
    while description["HasMoreShards"]:
        description = (
            await fake.describe_stream(
                **first, ExclusiveStartShardId=description["Shards"][-1]["ShardId"]
            )
        )["StreamDescription"]
        shards += description["Shards"]
    return shards


async def test_describe_stream_pages_of_at_most_one_hundred_shards() -> None:
    fake = FakeKinesis()
    fake.add_stream("big", 250)
    first = (await fake.describe_stream(StreamName="big"))["StreamDescription"]
    assert len(first["Shards"]) == 100  # the default Limit
    assert first["HasMoreShards"] is True
    # A Limit above 100 is accepted (up to 10000) but a page still holds 100 shards.
    assert (
        len(
            (await fake.describe_stream(StreamName="big", Limit=10_000))["StreamDescription"][
                "Shards"
            ]
        )
        == 100
    )
    small = (await fake.describe_stream(StreamName="big", Limit=7))["StreamDescription"]
    assert [s["ShardId"] for s in small["Shards"]] == [f"shardId-{i:012d}" for i in range(7)]
    last = (
        await fake.describe_stream(StreamName="big", ExclusiveStartShardId="shardId-000000000199")
    )["StreamDescription"]
    assert [s["ShardId"] for s in last["Shards"]] == [f"shardId-{i:012d}" for i in range(200, 250)]
    assert last["HasMoreShards"] is False
    ids = [s["ShardId"] for s in await all_described(fake, StreamName="big", Limit=100)]
    assert ids == [f"shardId-{i:012d}" for i in range(250)]
    assert fake.calls("DescribeStream") == 7
    # Exactly 100 shards: one full page, and nothing more.
    fake.add_stream("hundred", 100)
    page = (await fake.describe_stream(StreamName="hundred"))["StreamDescription"]
    assert (len(page["Shards"]), page["HasMoreShards"]) == (100, False)


async def test_describe_stream_describes_the_stream_and_its_closed_shards() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 2)
    await anyio.sleep(10)
    low, high = fake.split("s", "shardId-000000000000", 2**64)
    description = (await fake.describe_stream(StreamARN=fake.stream_arn("s")))["StreamDescription"]
    assert description["StreamName"] == "s"
    assert description["StreamARN"] == "arn:aws:kinesis:us-east-1:123456789012:stream/s"
    assert description["StreamStatus"] == "ACTIVE"
    assert description["StreamModeDetails"] == {"StreamMode": "PROVISIONED"}
    assert description["RetentionPeriodHours"] == 24
    assert description["StreamCreationTimestamp"] == datetime.fromtimestamp(0, tz=timezone.utc)
    assert description["EncryptionType"] == "NONE"
    shards = {s["ShardId"]: s for s in description["Shards"]}
    # The closed parent is listed, as the service lists it: it has an ending sequence number.
    assert list(shards) == ["shardId-000000000000", "shardId-000000000001", low, high]
    assert "EndingSequenceNumber" in shards["shardId-000000000000"]["SequenceNumberRange"]
    assert "EndingSequenceNumber" not in shards[low]["SequenceNumberRange"]
    assert shards[low]["ParentShardId"] == "shardId-000000000000"
    # The same shard objects as ListShards gives.
    listed = await all_shards(fake, StreamName="s")
    assert list(shards.values()) == listed


async def test_describe_stream_errors() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 2)
    error = await fails(fake.describe_stream(StreamName="missing"), "ResourceNotFoundException")
    assert error_of(error)[1] == "Stream missing under account 123456789012 not found."
    await fails(fake.describe_stream(), "InvalidArgumentException")
    await fails(fake.describe_stream(StreamName="s", Limit=0), "ValidationException")
    await fails(fake.describe_stream(StreamName="s", Limit=10_001), "ValidationException")
    await fails(fake.describe_stream(StreamName="bad name"), "ValidationException")
    await fails(
        fake.describe_stream(StreamName="s", StreamARN=fake.stream_arn("other")),
        "InvalidArgumentException",
    )
    fake.fail_requests(code="LimitExceededException", http_status=400, operation="DescribeStream")
    await fails(fake.describe_stream(StreamName="s"), "LimitExceededException")
    assert len((await fake.describe_stream(StreamName="s"))["StreamDescription"]["Shards"]) == 2


# -- resharding ----------------------------------------------------------------------------


async def test_split_and_merge_close_parents_and_route_to_children() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 2)
    before = await fake.put_records(StreamName="s", Records=records(100))
    parent0, parent1 = fake.shards("s")
    low, high = fake.split("s", parent0.shard_id, 2**126)
    shards = {s.shard_id: s for s in fake.shards("s")}
    assert not shards[parent0.shard_id].is_open
    assert shards[parent0.shard_id].record_count == parent0.record_count
    assert shards[parent0.shard_id].record_count > 0
    assert (shards[low].starting_hash_key, shards[low].ending_hash_key) == (0, 2**126 - 1)
    assert (shards[high].starting_hash_key, shards[high].ending_hash_key) == (
        2**126,
        parent0.ending_hash_key,
    )
    assert shards[low].parent_shard_id == shards[high].parent_shard_id == parent0.shard_id
    ending = int(shards[parent0.shard_id].ending_sequence_number or "0")
    assert ending >= max(int(r["SequenceNumber"]) for r in before["Records"])

    await fake.merge_shards(
        StreamName="s", ShardToMerge=high, AdjacentShardToMerge=parent1.shard_id
    )
    child = fake.shards("s")[-1]
    assert child.shard_id == "shardId-000000000004"
    assert (child.starting_hash_key, child.ending_hash_key) == (2**126, MAX_HASH_KEY)
    assert (child.parent_shard_id, child.adjacent_parent_shard_id) == (high, parent1.shard_id)
    assert [s.shard_id for s in fake.shards("s") if s.is_open] == [low, child.shard_id]

    after = await fake.put_records(StreamName="s", Records=records(100))
    for entry, result in zip(records(100), after["Records"], strict=True):
        key = hash_key_of(entry["PartitionKey"].encode())
        assert result["ShardId"] == (low if key < 2**126 else child.shard_id)
    assert len(fake.stored_records("s")) == 200
    assert [r.shard_id for r in fake.stored_records("s", parent0.shard_id)] == [
        parent0.shard_id
    ] * parent0.record_count

    await fake.split_shard(StreamName="s", ShardToSplit=low, NewStartingHashKey=str(2**100))
    assert [s.shard_id for s in fake.shards("s") if s.is_open][-2:] == [
        "shardId-000000000005",
        "shardId-000000000006",
    ]


async def test_reading_a_closed_shard_to_its_end_lists_the_children() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    await fake.put_records(StreamName="s", Records=records(3))
    fake.split("s", "shardId-000000000000", 2**127)
    iterator = (
        await fake.get_shard_iterator(
            StreamName="s", ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
        )
    )["ShardIterator"]
    page = await fake.get_records(ShardIterator=iterator, Limit=2)
    assert "NextShardIterator" in page
    page = await fake.get_records(ShardIterator=page["NextShardIterator"])
    assert len(page["Records"]) == 1
    assert "NextShardIterator" not in page
    assert page["ChildShards"] == [
        {
            "ShardId": "shardId-000000000001",
            "ParentShards": ["shardId-000000000000"],
            "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": str(2**127 - 1)},
        },
        {
            "ShardId": "shardId-000000000002",
            "ParentShards": ["shardId-000000000000"],
            "HashKeyRange": {"StartingHashKey": str(2**127), "EndingHashKey": str(MAX_HASH_KEY)},
        },
    ]
    # A sequence number of the parent is accepted for it, not past its end.
    last = fake.stored_records("s")[-1].sequence_number
    await fake.get_shard_iterator(
        StreamName="s",
        ShardId="shardId-000000000000",
        ShardIteratorType="AT_SEQUENCE_NUMBER",
        StartingSequenceNumber=last,
    )
    await fails(
        fake.get_shard_iterator(
            StreamName="s",
            ShardId="shardId-000000000000",
            ShardIteratorType="AT_SEQUENCE_NUMBER",
            StartingSequenceNumber=str(int(last) + 1),
        ),
        "InvalidArgumentException",
    )


async def test_resharding_errors() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 3)
    zero = fake.shards("s")[0]
    for key in (zero.starting_hash_key, zero.ending_hash_key + 1):
        with pytest.raises(ValueError, match="NewStartingHashKey"):
            fake.split("s", zero.shard_id, key)
    with pytest.raises(ValueError, match="not an adjacent pair"):
        fake.merge("s", "shardId-000000000000", "shardId-000000000002")
    fake.split("s", zero.shard_id, zero.ending_hash_key)
    with pytest.raises(ValueError, match="already been merged or split"):
        fake.split("s", zero.shard_id, 5)
    await fails(
        fake.split_shard(StreamName="s", ShardToSplit=zero.shard_id, NewStartingHashKey="5"),
        "InvalidArgumentException",
    )
    await fails(
        fake.split_shard(
            StreamName="s", ShardToSplit="shardId-000000000001", NewStartingHashKey="-5"
        ),
        "ValidationException",
    )
    await fails(
        fake.merge_shards(
            StreamName="s",
            ShardToMerge="shardId-000000000001",
            AdjacentShardToMerge="shardId-000000000000",
        ),
        "InvalidArgumentException",
    )
    await fails(
        fake.merge_shards(
            StreamName="s",
            ShardToMerge="shardId-000000000001",
            AdjacentShardToMerge="shardId-000000000077",
        ),
        "ResourceNotFoundException",
    )
    # The merge may name the upper shard first.
    child = fake.merge("s", "shardId-000000000002", "shardId-000000000001")
    assert shard_of(fake, "s", child).starting_hash_key == fake.shards("s")[1].starting_hash_key


# -- validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("batch", "code", "fragment"),
    [
        ([], "ValidationException", "length greater than or equal to 1"),
        (records(501), "ValidationException", "length less than or equal to 500"),
        (
            [{"PartitionKey": "", "Data": b""}],
            "ValidationException",
            "records.1.member.partitionKey",
        ),
        (
            [{"PartitionKey": "k", "Data": b""}, {"PartitionKey": "k" * 257, "Data": b""}],
            "ValidationException",
            "records.2.member.partitionKey",
        ),
        (
            # 129 emoji: 258 UTF-16 code units, as the service counts (kinesalite too).
            [{"PartitionKey": "k", "Data": b""}, {"PartitionKey": "\U0001f600" * 129, "Data": b""}],
            "ValidationException",
            "records.2.member.partitionKey",
        ),
        (
            [{"PartitionKey": "k", "Data": b"", "ExplicitHashKey": "01"}],
            "ValidationException",
            "explicitHashKey",
        ),
        (
            [{"PartitionKey": "k", "Data": b"", "ExplicitHashKey": "-1"}],
            "ValidationException",
            "explicitHashKey",
        ),
        (
            [{"PartitionKey": "\ud800", "Data": b""}],
            "ValidationException",
            "partitionKey",
        ),
        (
            [{"PartitionKey": "k", "Data": b"", "ExplicitHashKey": str(2**128)}],
            "InvalidArgumentException",
            "Invalid ExplicitHashKey",
        ),
        (
            [{"PartitionKey": "k", "Data": b"x" * MIB}],
            "InvalidArgumentException",
            "Record 0 is 1048577 bytes",
        ),
        (
            [{"PartitionKey": "k", "Data": b"x" * (MIB - 1)}] * 6,
            "InvalidArgumentException",
            "Records size exceeds 5 MB limit",
        ),
    ],
)
async def test_put_records_validates_like_the_service(
    batch: list[dict[str, Any]], code: str, fragment: str
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    error = await fails(fake.put_records(StreamName="s", Records=batch), code)
    assert fragment in error_of(error)[1]
    assert fake.stored_records("s") == []


async def test_record_size_limits() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    exact = {"PartitionKey": "k", "Data": b"x" * (MIB - 1)}
    assert (await fake.put_records(StreamName="s", Records=[exact]))["FailedRecordCount"] == 0
    error = await fails(
        fake.put_records(
            StreamName="s", Records=[{"PartitionKey": "k", "Data": b"x" * (10 * MIB + 1)}]
        ),
        "ValidationException",
    )
    assert "10485760" in error_of(error)[1]
    await fails(
        fake.put_record(StreamName="s", PartitionKey="kk", Data=b"x" * MIB),
        "InvalidArgumentException",
    )
    # A stream may raise its limit; a request may then carry one such record.
    await fake.update_max_record_size(StreamARN=fake.stream_arn("s"), MaxRecordSizeInKiB=8192)
    large = {"PartitionKey": "k", "Data": b"x" * (7 * MIB)}
    assert (await fake.put_records(StreamName="s", Records=[large]))["FailedRecordCount"] == 0
    await fails(
        fake.update_max_record_size(StreamARN=fake.stream_arn("s"), MaxRecordSizeInKiB=1023),
        "ValidationException",
    )
    fake.add_stream("wide", max_record_size=2 * MIB)
    summary = await fake.describe_stream_summary(StreamName="wide")
    assert summary["StreamDescriptionSummary"]["MaxRecordSizeInKiB"] == 2048


async def test_validation_comes_before_the_stream_lookup() -> None:
    fake = FakeKinesis()
    await fails(fake.put_records(StreamName="missing", Records=[]), "ValidationException")
    await fails(
        fake.put_records(StreamName="missing", Records=records(1)), "ResourceNotFoundException"
    )
    await fails(
        fake.put_record(StreamName="missing", PartitionKey="k", Data=b""),
        "ResourceNotFoundException",
    )


@pytest.mark.parametrize(
    ("batch", "fragment"),
    [
        ("not a list", "Invalid type for parameter Records"),
        (["not a dict"], "Invalid type for parameter Records[0]"),
        ([{"PartitionKey": "k"}], 'Missing required parameter in Records[0]: "Data"'),
        (
            [{"PartitionKey": "k", "Data": b"", "Extra": 1}],
            'Unknown parameter in Records[0]: "Extra"',
        ),
        ([{"PartitionKey": 5, "Data": b""}], "Records[0].PartitionKey"),
        ([{"PartitionKey": "k", "Data": memoryview(b"x")}], "Records[0].Data"),
        ([{"PartitionKey": "k", "Data": b"", "ExplicitHashKey": None}], "ExplicitHashKey"),
    ],
)
async def test_parameters_botocore_refuses_raise_type_error(batch: Any, fragment: str) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    with pytest.raises(TypeError) as info:
        await fake.put_records(StreamName="s", Records=batch)
    assert fragment in str(info.value)


async def test_data_may_be_bytes_bytearray_str_or_a_file() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    batch: list[dict[str, Any]] = [
        {"PartitionKey": "a", "Data": b"bytes"},
        {"PartitionKey": "b", "Data": bytearray(b"array")},
        {"PartitionKey": "c", "Data": "text é"},
        {"PartitionKey": "d", "Data": io.BytesIO(b"file")},
        {"PartitionKey": "e", "Data": io.StringIO("text file")},
    ]
    await fake.put_records(StreamName="s", Records=batch)
    stored = fake.stored_records("s")
    assert [r.data for r in stored] == [
        b"bytes",
        b"array",
        "text é".encode(),
        b"file",
        b"text file",
    ]
    assert all(type(r.data) is bytes for r in stored)


async def test_put_record() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 2)
    response = await fake.put_record(
        StreamName="s", PartitionKey="k", Data=b"d", ExplicitHashKey=str(MAX_HASH_KEY)
    )
    assert response["ShardId"] == "shardId-000000000001"
    assert response["EncryptionType"] == "NONE"
    ordered = await fake.put_record(
        StreamARN=fake.stream_arn("s"),
        PartitionKey="k",
        Data=b"d",
        SequenceNumberForOrdering=response["SequenceNumber"],
    )
    assert ordered["SequenceNumber"] > response["SequenceNumber"]
    await fails(
        fake.put_record(StreamName="s", PartitionKey="k", Data=b"", SequenceNumberForOrdering="x"),
        "ValidationException",
    )
    await fails(fake.put_record(StreamName="s", PartitionKey="", Data=b""), "ValidationException")
    with pytest.raises(TypeError, match=r"Data"):
        await fake.put_record(StreamName="s", PartitionKey="k", Data=memoryview(b""))  # type: ignore[arg-type]


# -- throttling -----------------------------------------------------------------------------


async def test_records_per_second_throttling_is_exact() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", throttle=True)
    results: list[dict[str, str]] = []
    for call in range(3):
        response = await fake.put_records(StreamName="s", Records=records(500, prefix=f"{call}-"))
        results += response["Records"]
    assert sum("SequenceNumber" in r for r in results) == 1000
    assert all("SequenceNumber" in r for r in results[:1000])
    assert results[1000] == {
        "ErrorCode": "ProvisionedThroughputExceededException",
        "ErrorMessage": "Rate exceeded for shard shardId-000000000000 in stream s "
        "under account 123456789012.",
    }
    assert len(fake.stored_records("s")) == 1000
    await anyio.sleep(0.5)
    response = await fake.put_records(StreamName="s", Records=records(500))
    assert response["FailedRecordCount"] == 0
    response = await fake.put_records(StreamName="s", Records=records(1))
    assert response["FailedRecordCount"] == 1
    assert len(fake.stored_records("s")) == 1500
    await fails(
        fake.put_record(StreamName="s", PartitionKey="k", Data=b""),
        "ProvisionedThroughputExceededException",
    )


async def test_bytes_per_second_throttling_is_exact() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", throttle=True)
    quarter = {"PartitionKey": "k", "Data": b"x" * (MIB // 4 - 1)}  # 1 byte of key: 1/4 MiB
    response = await fake.put_records(StreamName="s", Records=[quarter] * 5)
    assert ["ErrorCode" in r for r in response["Records"]] == [False] * 4 + [True]
    await anyio.sleep(0.25)
    response = await fake.put_records(StreamName="s", Records=[quarter] * 2)
    assert ["ErrorCode" in r for r in response["Records"]] == [False, True]
    # A small record still fits where a large one does not: the two limits are separate.
    await anyio.sleep(0.125)
    response = await fake.put_records(StreamName="s", Records=[quarter, *records(3)])
    assert ["ErrorCode" in r for r in response["Records"]] == [True, False, False, False]


async def test_throttling_is_per_shard_and_configurable() -> None:
    fake = FakeKinesis()
    fake.add_stream(
        "s", 2, throttle=True, records_per_second=10.0, bytes_per_second=1e9, burst_seconds=2.0
    )
    low = [{"PartitionKey": "k", "Data": b"", "ExplicitHashKey": "0"}] * 25
    high = [{"PartitionKey": "k", "Data": b"", "ExplicitHashKey": str(MAX_HASH_KEY)}] * 25
    response = await fake.put_records(StreamName="s", Records=low + high)
    assert response["FailedRecordCount"] == 10
    counts = {s.shard_id: s.record_count for s in fake.shards("s")}
    assert counts == {"shardId-000000000000": 20, "shardId-000000000001": 20}
    # Children of a split get their own full buckets.
    fake.split("s", "shardId-000000000000", 2**120)
    response = await fake.put_records(StreamName="s", Records=low)
    assert response["FailedRecordCount"] == 5
    # Without throttle=True nothing is ever throttled.
    fake.add_stream("free")
    response = await fake.put_records(StreamName="free", Records=records(500) * 1)
    response2 = await fake.put_records(StreamName="free", Records=records(500))
    assert response["FailedRecordCount"] == response2["FailedRecordCount"] == 0


# -- scripted and random faults ---------------------------------------------------------


async def test_fail_requests() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.fail_requests(
        2, code="ServiceUnavailable", message="Slow down.", http_status=503, operation="ListShards"
    )
    fake.fail_requests()
    for _ in range(2):
        error = await fails(fake.list_shards(StreamName="s"), "ServiceUnavailable", http_status=503)
        assert error_of(error) == ("ServiceUnavailable", "Slow down.")
        assert error.operation_name == "ListShards"
    assert len((await fake.list_shards(StreamName="s"))["Shards"]) == 1
    await fails(
        fake.put_records(StreamName="s", Records=records(3)), "InternalFailure", http_status=500
    )
    assert fake.stored_records("s") == []
    assert (await fake.put_records(StreamName="s", Records=records(3)))["FailedRecordCount"] == 0
    fake.fail_requests(0)
    assert (await fake.put_records(StreamName="s", Records=records(1)))["FailedRecordCount"] == 0
    with pytest.raises(ValueError, match="count"):
        fake.fail_requests(-1)
    with pytest.raises(ValueError, match="unknown operation 'PutRecordz'"):
        fake.fail_requests(operation="PutRecordz")


async def test_deny_fails_every_call_until_allowed() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.fail_requests(code="InternalFailure", operation="ListShards")
    fake.deny("ListShards")
    for _ in range(3):
        error = await fails(fake.list_shards(StreamName="s"), "AccessDeniedException")
        assert error.operation_name == "ListShards"
        assert error_of(error)[1] == (
            "User: arn:aws:iam::123456789012:user/fake is not authorized to perform: "
            "kinesis:ListShards on resource: arn:aws:kinesis:us-east-1:123456789012:stream/s "
            "because no identity-based policy allows the kinesis:ListShards action"
        )
    # Only the denied operation, and every call is logged.
    assert len((await fake.describe_stream(StreamName="s"))["StreamDescription"]["Shards"]) == 1
    assert fake.calls("ListShards") == 3
    fake.deny("DescribeStream", message="no", code="UnrecognizedClientException")
    error = await fails(fake.describe_stream(StreamName="s"), "UnrecognizedClientException")
    assert error_of(error)[1] == "no"
    fake.allow("ListShards")
    fake.allow("ListShards")  # allowing what is allowed does nothing
    # The denial consumed nothing: the scripted fault comes first, then calls succeed.
    await fails(fake.list_shards(StreamName="s"), "InternalFailure", http_status=500)
    assert len((await fake.list_shards(StreamName="s"))["Shards"]) == 1
    with pytest.raises(ValueError, match="unknown operation"):
        fake.deny("ListShard")
    with pytest.raises(ValueError, match="unknown operation"):
        fake.allow("ListShard")


async def test_fail_requests_of_one_stream() -> None:
    fake = FakeKinesis()
    fake.add_stream("bad")
    fake.add_stream("good")
    fake.fail_requests(10**9, stream="bad")  # counted, not stored one per call
    fake.fail_requests(code="LimitExceededException", http_status=400)  # any stream
    # The first call to "good" passes the faults scoped to "bad" and takes the unscoped one.
    await fails(fake.put_records(StreamName="good", Records=records(1)), "LimitExceededException")
    for _ in range(3):
        assert (await fake.put_records(StreamName="good", Records=records(2)))[
            "FailedRecordCount"
        ] == 0
        await fails(
            fake.put_records(StreamName="bad", Records=records(2)),
            "InternalFailure",
            http_status=500,
        )
        # By ARN too, and the fake still fails them without storing anything.
        await fails(
            fake.put_records(StreamARN=fake.stream_arn("bad"), Records=records(1)),
            "InternalFailure",
            http_status=500,
        )
    assert fake.stored_records("bad") == []
    assert len(fake.stored_records("good")) == 6
    # Other operations of the stream are untouched; a ListShards page without a stream name
    # never matches a stream's faults.
    fake.fail_requests(2, operation="ListShards", stream=fake.stream_arn("bad"))
    first = await fake.list_shards(StreamName="good", MaxResults=1)
    assert "NextToken" not in first
    await fails(fake.list_shards(StreamName="bad"), "InternalFailure", http_status=500)
    # raise_next scoped alike, in script order with the rest.
    reset = ConnectionResetError()
    fake.raise_next(reset, stream="good")
    assert (await fake.list_shards(StreamName="good"))["Shards"]
    with pytest.raises(ConnectionResetError):
        await fake.put_records(StreamName="good", Records=records(1))
    assert (await fake.put_records(StreamName="good", Records=records(1)))["FailedRecordCount"] == 0
    with pytest.raises(ValueError, match="stream must be a stream name or ARN"):
        fake.fail_requests(stream="no spaces allowed")
    with pytest.raises(ValueError, match="stream must be a stream name or ARN"):
        fake.raise_next(OSError(), stream="")


async def test_raise_next_transport_errors_in_script_order() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    reset = ConnectionResetError("reset by peer")
    fake.raise_next(reset)
    fake.fail_requests(code="InternalFailure")
    fake.raise_next(TimeoutError(), after_processing=True)
    with pytest.raises(ConnectionResetError) as info:
        await fake.put_records(StreamName="s", Records=records(2))
    assert info.value is reset
    assert error_of(info.value) == ("Internal", "ConnectionResetError: reset by peer")
    await fails(
        fake.put_records(StreamName="s", Records=records(2)), "InternalFailure", http_status=500
    )
    assert fake.stored_records("s") == []
    with pytest.raises(TimeoutError):
        await fake.put_records(StreamName="s", Records=records(2))
    # The response was lost, but the records landed.
    assert len(fake.stored_records("s")) == 2
    fake.raise_next(OSError("down"), "GetShardIterator")
    with pytest.raises(OSError, match="down"):
        await fake.get_shard_iterator(
            StreamName="s", ShardId="shardId-000000000000", ShardIteratorType="LATEST"
        )
    with pytest.raises(ValueError, match="unknown operation"):
        fake.raise_next(OSError(), "Put")


async def test_script_records() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    throttled = ("ProvisionedThroughputExceededException", "Rate exceeded for shard")
    fake.script_records([None, throttled, None, ("InternalFailure", "Internal service failure.")])
    fake.script_records([throttled])
    # A call that fails as a whole does not consume the script.
    await fails(fake.put_records(StreamName="s", Records=[]), "ValidationException")
    response = await fake.put_records(StreamName="s", Records=records(5))
    assert response["FailedRecordCount"] == 2
    assert [r.get("ErrorCode") for r in response["Records"]] == [
        None,
        "ProvisionedThroughputExceededException",
        None,
        "InternalFailure",
        None,
    ]
    assert response["Records"][1]["ErrorMessage"] == "Rate exceeded for shard"
    assert [r.partition_key for r in fake.stored_records("s")] == ["k0", "k2", "k4"]
    response = await fake.put_records(StreamName="s", Records=records(2))
    assert [r.get("ErrorCode") for r in response["Records"]] == [throttled[0], None]
    response = await fake.put_records(StreamName="s", Records=records(2))
    assert response["FailedRecordCount"] == 0
    for bad in ([("only code",)], ["text"], [("a", 1)]):
        with pytest.raises(ValueError, match="None or"):
            fake.script_records(bad)  # type: ignore[arg-type]


async def outcomes_under(plan: FaultPlan) -> list[str]:
    fake = FakeKinesis()
    fake.add_stream("s", 4)
    fake.faults = plan
    seen: list[str] = []
    for _ in range(20):
        try:
            response = await fake.put_records(StreamName="s", Records=records(50))
        except ClientError as exc:
            seen.append(error_of(exc)[0])
        else:
            seen.append("".join("x" if "ErrorCode" in r else "." for r in response["Records"]))
    return seen


async def test_fault_plan_is_deterministic_per_seed() -> None:
    plan = FaultPlan(record_failure_rate=0.1, request_failure_rate=0.2, seed=7)
    first = await outcomes_under(plan)
    assert first == await outcomes_under(plan)
    assert first != await outcomes_under(
        FaultPlan(record_failure_rate=0.1, request_failure_rate=0.2, seed=8)
    )
    assert "InternalFailure" in first
    failed_records = sum(s.count("x") for s in first if s != "InternalFailure")
    assert 0 < failed_records < 500


async def test_fault_plan_errors_and_operations() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.faults = FaultPlan(
        record_failure_rate=1.0,
        request_failure_rate=1.0,
        request_error=("ServiceUnavailable", "Slow down.", 503),
        operations=("ListShards",),
    )
    assert fake.faults.operations == ("ListShards",)
    await fails(fake.list_shards(StreamName="s"), "ServiceUnavailable", http_status=503)
    response = await fake.put_records(StreamName="s", Records=records(3))
    assert (
        response["Records"]
        == [{"ErrorCode": "InternalFailure", "ErrorMessage": "Internal service failure."}] * 3
    )
    assert fake.stored_records("s") == []
    # Scripted faults come first and draw nothing.
    fake.script_records([None, ("Scripted", "by the test")])
    response = await fake.put_records(StreamName="s", Records=records(2))
    assert [r["ErrorCode"] for r in response["Records"]] == ["InternalFailure", "Scripted"]
    fake.fail_requests(operation="ListShards", code="Scripted")
    await fails(fake.list_shards(StreamName="s"), "Scripted", http_status=500)
    for bad in (
        {"record_failure_rate": -0.1},
        {"request_failure_rate": 1.5},
        {"operations": ("Nope",)},
    ):
        with pytest.raises(ValueError):  # noqa: PT011 - the messages are checked above
            FaultPlan(**bad)


# -- the rest of the API ------------------------------------------------------------------


async def test_stream_management_api() -> None:
    fake = FakeKinesis()
    await fake.create_stream(StreamName="a", ShardCount=2)
    await fails(fake.create_stream(StreamName="a", ShardCount=2), "ResourceInUseException")
    await fake.create_stream(StreamName="b", StreamModeDetails={"StreamMode": "ON_DEMAND"})
    assert len(fake.shards("b")) == 4
    await fake.create_stream(StreamName="c", ShardCount=1, MaxRecordSizeInKiB=2048)
    await fails(fake.create_stream(StreamName="d"), "InvalidArgumentException")
    await fails(fake.create_stream(StreamName="d", ShardCount=0), "ValidationException")
    await fails(fake.create_stream(StreamName="bad/name", ShardCount=1), "ValidationException")
    await fails(
        fake.create_stream(StreamName="d", ShardCount=1, StreamModeDetails={"StreamMode": "X"}),
        "ValidationException",
    )
    summary = (await fake.describe_stream_summary(StreamName="a"))["StreamDescriptionSummary"]
    assert summary["StreamName"] == "a"
    assert summary["StreamARN"] == "arn:aws:kinesis:us-east-1:123456789012:stream/a"
    assert summary["StreamStatus"] == "ACTIVE"
    assert summary["OpenShardCount"] == 2
    assert summary["StreamModeDetails"] == {"StreamMode": "PROVISIONED"}
    assert isinstance(summary["StreamCreationTimestamp"], datetime)
    by_arn = await fake.describe_stream_summary(StreamARN=fake.stream_arn("c"))
    assert by_arn["StreamDescriptionSummary"]["MaxRecordSizeInKiB"] == 2048
    await fails(
        fake.describe_stream_summary(StreamName="a", StreamARN=fake.stream_arn("b")),
        "InvalidArgumentException",
    )
    await fails(fake.describe_stream_summary(StreamARN="arn:nope"), "ValidationException")
    await fails(fake.describe_stream_summary(), "InvalidArgumentException")
    await fake.delete_stream(StreamName="a")
    await fails(fake.describe_stream_summary(StreamName="a"), "ResourceNotFoundException")
    await fails(fake.delete_stream(StreamName="a"), "ResourceNotFoundException")
    await fails(fake.put_records(StreamName="a", Records=records(1)), "ResourceNotFoundException")


async def test_remove_stream_mid_run() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    await fake.put_records(StreamName="s", Records=records(1))
    fake.remove_stream("s")
    error = await fails(
        fake.put_records(StreamName="s", Records=records(1)), "ResourceNotFoundException"
    )
    assert error_of(error) == (
        "ResourceNotFoundException",
        "Stream s under account 123456789012 not found.",
    )


async def test_requests_log_and_responses_carry_metadata() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    batch = records(2)
    response = await fake.put_records(StreamName="s", Records=batch)
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 200
    await fake.list_shards(StreamName="s", ShardFilter={"Type": "AT_LATEST"})
    fake.fail_requests()
    with pytest.raises(ClientError):
        await fake.put_records(StreamName="s", Records=batch)
    assert fake.requests == [
        Request("PutRecords", {"Records": batch, "StreamName": "s"}),
        Request("ListShards", {"StreamName": "s", "ShardFilter": {"Type": "AT_LATEST"}}),
        Request("PutRecords", {"Records": batch, "StreamName": "s"}),
    ]
    operation, kwargs = fake.requests[0]
    assert operation == "PutRecords"
    assert kwargs["Records"] is batch
    assert fake.calls("PutRecords") == 2
    assert fake.calls("GetRecords") == 0
    assert repr(fake) == "<FakeKinesis streams=1 records=2 requests=3>"
    fake.requests.clear()
    assert fake.calls("PutRecords") == 0


async def test_each_call_checkpoints_before_doing_anything() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    with anyio.CancelScope() as scope:
        scope.cancel()
        await fake.put_records(StreamName="s", Records=records(1))
    assert scope.cancelled_caught
    assert fake.stored_records("s") == []
    assert fake.calls("PutRecords") == 1


async def test_latency_delays_every_call_and_callers_interleave() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.latency = 0.25
    assert fake.latency == 0.25
    start = anyio.current_time()
    finished: list[float] = []

    async def put(prefix: str) -> None:
        await fake.put_records(StreamName="s", Records=records(1, prefix=prefix))
        finished.append(anyio.current_time() - start)

    async with anyio.create_task_group() as group:
        for prefix in "abc":
            group.start_soon(put, prefix)
    assert finished == [0.25, 0.25, 0.25]
    assert [r.arrival_time - start for r in fake.stored_records("s")] == [0.25] * 3
    with pytest.raises(ValueError, match="latency"):
        fake.latency = -1.0


async def test_custom_clock_and_client_lifecycle() -> None:
    now = [1_000.0]
    async with FakeKinesis(clock=lambda: now[0]) as fake:
        fake.add_stream("s")
        await fake.put_record(StreamName="s", PartitionKey="k", Data=b"1")
        now[0] = 1_002.5
        await fake.put_record(StreamName="s", PartitionKey="k", Data=b"2")
        assert [r.arrival_time for r in fake.stored_records("s")] == [1_000.0, 1_002.5]
        summary = await fake.describe_stream_summary(StreamName="s")
        assert summary["StreamDescriptionSummary"]["StreamCreationTimestamp"] == (
            datetime.fromtimestamp(1_000.0, tz=timezone.utc)
        )
        await fake.close()


def test_setup_outside_an_event_loop() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 2)
    assert fake.split("s", "shardId-000000000000", 1) == (
        "shardId-000000000002",
        "shardId-000000000003",
    )
    assert isinstance(fake.faults, FaultPlan)
    assert fake.stored_records("s", "shardId-000000000000") == []


def _ids(shards: Sequence[FakeShard]) -> list[str]:
    return [s.shard_id for s in shards]


# -- stream ARNs, regions and accounts ---------------------------------------------------------

OTHER_ACCOUNT = "210987654321"


async def test_every_call_that_names_a_stream_takes_its_arn_as_its_name() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 2)
    arn = fake.stream_arn("s")
    by_name = await fake.put_records(StreamName="s", Records=records(3))
    by_arn = await fake.put_records(StreamARN=arn, Records=records(3))
    assert [r["ShardId"] for r in by_arn["Records"]] == [r["ShardId"] for r in by_name["Records"]]
    one = await fake.put_record(StreamARN=arn, PartitionKey="k0", Data=b"x")
    assert one["ShardId"] == by_name["Records"][0]["ShardId"]
    assert await all_shards(fake, StreamARN=arn) == await all_shards(fake, StreamName="s")
    summary = await fake.describe_stream_summary(StreamARN=arn)
    assert summary["StreamDescriptionSummary"]["StreamName"] == "s"
    described = await fake.describe_stream(StreamARN=arn)
    assert described["StreamDescription"]["StreamARN"] == arn
    iterator = (
        await fake.get_shard_iterator(
            StreamARN=arn, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
        )
    )["ShardIterator"]
    assert (await fake.get_records(ShardIterator=iterator, StreamARN=arn))["Records"]
    await fake.split_shard(
        StreamARN=arn, ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**125)
    )
    await fake.merge_shards(
        StreamARN=arn,
        ShardToMerge="shardId-000000000002",
        AdjacentShardToMerge="shardId-000000000003",
    )
    # The setup and read-back helpers take the ARN too.
    assert len(fake.stored_records(arn)) == 7
    assert [s.shard_id for s in fake.shards(arn)] == [s.shard_id for s in fake.shards("s")]
    await fake.delete_stream(StreamARN=arn)
    await fails(fake.describe_stream_summary(StreamName="s"), "ResourceNotFoundException")


@pytest.mark.parametrize(
    "arn",
    [
        "arn:nope",
        "arn:aws:kinesis:us-east-1:12345:stream/s",  # an 11-digit account
        "arn:aws:sqs:us-east-1:123456789012:stream/s",
        "arn:aws:kinesis:us-east-1:123456789012:table/s",
        "arn:aws:kinesis:us-east-1:123456789012:stream/",
        "arn:gcp:kinesis:us-east-1:123456789012:stream/s",
    ],
)
async def test_a_stream_arn_outside_the_service_pattern_is_a_validation_error(arn: str) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    error = await fails(fake.put_records(StreamARN=arn, Records=records(1)), "ValidationException")
    assert "arn:aws.*:kinesis:.*:\\d{12}:stream/\\S+" in error_of(error)[1]
    await fails(fake.list_shards(StreamARN=arn), "ValidationException")
    assert fake.stored_records("s") == []


async def test_an_arn_of_another_region_is_not_found_and_of_another_account_denied() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    elsewhere = "arn:aws:kinesis:eu-west-1:123456789012:stream/s"
    error = await fails(
        fake.put_records(StreamARN=elsewhere, Records=records(1)), "ResourceNotFoundException"
    )
    assert error_of(error)[1] == "Stream s under account 123456789012 not found."
    foreign = f"arn:aws:kinesis:us-east-1:{OTHER_ACCOUNT}:stream/s"
    error = await fails(
        fake.put_records(StreamARN=foreign, Records=records(1)), "AccessDeniedException"
    )
    assert error_of(error)[1] == (
        "User: arn:aws:iam::123456789012:user/fake is not authorized to perform: "
        f"kinesis:PutRecords on resource: {foreign} because no resource-based policy allows "
        "the kinesis:PutRecords action"
    )
    await fails(fake.list_shards(StreamARN=foreign), "AccessDeniedException")
    assert fake.stored_records("s") == []


async def test_region_and_account_make_the_arns_and_the_messages() -> None:
    fake = FakeKinesis(region="cn-north-1", account_id=OTHER_ACCOUNT)
    assert (fake.region, fake.account_id) == ("cn-north-1", OTHER_ACCOUNT)
    fake.add_stream("s")
    arn = fake.stream_arn("s")
    assert arn == f"arn:aws-cn:kinesis:cn-north-1:{OTHER_ACCOUNT}:stream/s"
    summary = (await fake.describe_stream_summary(StreamARN=arn))["StreamDescriptionSummary"]
    assert summary["StreamARN"] == arn
    await fake.put_records(StreamARN=arn, Records=records(2))
    error = await fails(fake.describe_stream_summary(StreamName="t"), "ResourceNotFoundException")
    assert error_of(error)[1] == f"Stream t under account {OTHER_ACCOUNT} not found."
    # Same region and account, another partition: not this endpoint's stream.
    await fails(
        fake.list_shards(StreamARN=f"arn:aws:kinesis:cn-north-1:{OTHER_ACCOUNT}:stream/s"),
        "ResourceNotFoundException",
    )
    with pytest.raises(ValueError, match="no stream named"):
        fake.shards("arn:aws:kinesis:us-east-1:123456789012:stream/s")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"account_id": "1234"}, "account_id must be 12 digits"),
        ({"region": "mars"}, "region must be a region name"),
    ],
)
def test_region_and_account_are_checked(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FakeKinesis(**changes)


# -- on-demand streams ---------------------------------------------------------------------------


async def test_an_on_demand_stream_says_so() -> None:
    fake = FakeKinesis()
    fake.add_stream("od", 2, on_demand=True)
    fake.add_stream("pr", 2)
    for name, mode in (("od", "ON_DEMAND"), ("pr", "PROVISIONED")):
        summary = (await fake.describe_stream_summary(StreamName=name))["StreamDescriptionSummary"]
        assert summary["StreamModeDetails"] == {"StreamMode": mode}
        described = (await fake.describe_stream(StreamName=name))["StreamDescription"]
        assert described["StreamModeDetails"] == {"StreamMode": mode}


def open_ranges(fake: FakeKinesis, stream: str) -> list[tuple[int, int]]:
    return sorted(
        (s.starting_hash_key, s.ending_hash_key) for s in fake.shards(stream) if s.is_open
    )


async def test_auto_reshard_splits_the_hottest_and_merges_the_coldest_under_load() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 2, on_demand=True)
    fake.auto_reshard("s", every_seconds=2.0, merge_every=3)
    half = 2**127
    low, high = [
        {"PartitionKey": "k", "Data": b"x", "ExplicitHashKey": str(key)} for key in (5, half + 5)
    ]
    # Before the interval: nothing happens, however hot.
    await fake.put_records(StreamName="s", Records=[low] * 10)
    await anyio.sleep(1.9)
    await fake.put_records(StreamName="s", Records=[low])
    assert len(fake.shards("s")) == 2
    # After it, the next put splits the shard that stored the most since: the low one.
    await anyio.sleep(0.1)
    await fake.put_records(StreamName="s", Records=[high])
    assert open_ranges(fake, "s") == [(0, half // 2 - 1), (half // 2, half - 1), (half, 2**128 - 1)]
    split = shard_of(fake, "s", "shardId-000000000000")
    assert split.closed_at == pytest.approx(2.0)
    assert shard_of(fake, "s", "shardId-000000000002").created_at == pytest.approx(2.0)
    # The second reshard, before the put that finds it due stores anything, splits the
    # shard that stored the most since the first: the high one, which stored one record.
    await anyio.sleep(2.0)
    await fake.put_records(StreamName="s", Records=[high] * 3)
    assert len(open_ranges(fake, "s")) == 4
    assert shard_of(fake, "s", "shardId-000000000001").closed_at == pytest.approx(4.0)
    # The third merges the coldest adjacent pair: the two low children, which stored nothing.
    await anyio.sleep(2.0)
    await fake.put_records(StreamName="s", Records=[high])
    merged = [s for s in fake.shards("s") if s.adjacent_parent_shard_id is not None]
    assert [(m.parent_shard_id, m.adjacent_parent_shard_id) for m in merged] == [
        ("shardId-000000000002", "shardId-000000000003")
    ]
    assert open_ranges(fake, "s")[0] == (0, half - 1)
    # Nothing stored was lost on the way.
    assert len(fake.stored_records("s")) == 16


async def test_auto_reshard_stays_within_its_bounds() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 1)
    fake.auto_reshard("s", every_seconds=1.0, merge_every=0, max_open_shards=3)
    counts = []
    for _ in range(6):
        await anyio.sleep(1.0)
        await fake.put_record(StreamName="s", PartitionKey="k", Data=b"x")
        counts.append(len(open_ranges(fake, "s")))
    # A put reshards only after load: the first stores, the next ones split up to three
    # shards, then merge back instead of splitting beyond.
    assert counts == [1, 2, 3, 2, 3, 2]
    with pytest.raises(ValueError, match="every_seconds"):
        fake.auto_reshard("s", every_seconds=0)
    with pytest.raises(ValueError, match="merge_every"):
        fake.auto_reshard("s", merge_every=-1)
    with pytest.raises(ValueError, match="min_open_shards"):
        fake.auto_reshard("s", min_open_shards=4, max_open_shards=3)
    with pytest.raises(ValueError, match="no stream named"):
        fake.auto_reshard("t")

"""``FakeKinesis`` and on-demand streams whose record distribution strategy is ``AUTO``.

On ``AUTO`` the service places each record on a shard of its own choosing, ignoring the
partition key and explicit hash key, and takes records without a partition key; the fake draws
the shard from a seeded generator. Also here: ``DryRun`` and ``StreamId``, new members of the
same API release. Async tests run on asyncio and trio under virtual clocks.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Awaitable
from typing import Any

import pytest
from botocore.exceptions import ClientError

from aiokpl._core.hashing import MAX_HASH_KEY, hash_key_of
from aiokpl._kinesis import error_of
from aiokpl.testing import FakeKinesis, FaultPlan, StoredRecord

pytestmark = pytest.mark.anyio

DRY_RUN = (
    "DryRunOperationException",
    "The request was rejected because the DryRun parameter was specified.",
)
SHARDS = 4
WIDTH = (MAX_HASH_KEY + 1) // SHARDS


def key_of_shard(index: int, shards: int = SHARDS) -> str:
    """A partition key whose hash lies in shard ``index`` of an evenly split stream."""
    width = (MAX_HASH_KEY + 1) // shards
    return next(
        key
        for key in (f"key-{n}" for n in itertools.count())
        if hash_key_of(key.encode()) // width == index
    )


async def fails(awaitable: Awaitable[object], code: str) -> str:
    """The message of the ``ClientError`` ``awaitable`` raises, checked to be ``code``."""
    with pytest.raises(ClientError) as info:
        await awaitable
    found_code, message = error_of(info.value)
    assert found_code == code, (found_code, message)
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    return message


def auto_stream(fake: FakeKinesis, name: str = "auto", shards: int = SHARDS, **options: Any) -> str:
    fake.add_stream(name, shards, on_demand=True, record_distribution="AUTO", **options)
    return name


async def summary(fake: FakeKinesis, stream: str) -> dict[str, Any]:
    answer = await fake.describe_stream_summary(StreamName=stream)
    found: dict[str, Any] = answer["StreamDescriptionSummary"]
    return found


# -- the strategy: set up, created, updated, described ---------------------------------------


async def test_the_summary_shows_the_strategy_of_on_demand_streams_only() -> None:
    fake = FakeKinesis()
    fake.add_stream("provisioned", 2)
    fake.add_stream("keyed", 2, on_demand=True)
    auto_stream(fake)
    assert "RecordDistributionStrategy" not in await summary(fake, "provisioned")
    assert (await summary(fake, "keyed"))["RecordDistributionStrategy"] == "USER_PARTITION_KEY"
    assert (await summary(fake, "auto"))["RecordDistributionStrategy"] == "AUTO"


async def test_update_takes_effect_at_once_on_demand_and_is_refused_when_provisioned() -> None:
    fake = FakeKinesis()
    fake.add_stream("keyed", 2, on_demand=True)
    fake.add_stream("provisioned", 2)
    arn = fake.stream_arn("keyed")
    answer = await fake.update_stream_record_distribution_strategy(
        StreamARN=arn, RecordDistributionStrategy="AUTO", StreamId="abcdefghij0123456789-abc"
    )
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert (await summary(fake, "keyed"))["RecordDistributionStrategy"] == "AUTO"
    await fake.put_records(StreamName="keyed", Records=[{"Data": b"keyless"}])
    message = await fails(
        fake.update_stream_record_distribution_strategy(
            StreamARN=fake.stream_arn("provisioned"), RecordDistributionStrategy="AUTO"
        ),
        "InvalidArgumentException",
    )
    assert "PROVISIONED" in message
    await fails(
        fake.update_stream_record_distribution_strategy(
            StreamARN=fake.stream_arn("provisioned"),
            RecordDistributionStrategy="USER_PARTITION_KEY",
        ),
        "InvalidArgumentException",
    )
    message = await fails(
        fake.update_stream_record_distribution_strategy(
            StreamARN=arn, RecordDistributionStrategy="RANDOM"
        ),
        "ValidationException",
    )
    assert "[AUTO, USER_PARTITION_KEY]" in message
    await fails(
        fake.update_stream_record_distribution_strategy(
            StreamARN=fake.stream_arn("missing"), RecordDistributionStrategy="AUTO"
        ),
        "ResourceNotFoundException",
    )
    assert fake.calls("UpdateStreamRecordDistributionStrategy") == 5
    assert fake.requests[-1].kwargs["RecordDistributionStrategy"] == "AUTO"


async def test_create_stream_takes_the_strategy_for_on_demand_streams() -> None:
    fake = FakeKinesis()
    await fake.create_stream(
        StreamName="auto",
        StreamModeDetails={"StreamMode": "ON_DEMAND"},
        RecordDistributionStrategy="AUTO",
    )
    assert (await summary(fake, "auto"))["RecordDistributionStrategy"] == "AUTO"
    assert (await summary(fake, "auto"))["OpenShardCount"] == 4
    await fake.create_stream(
        StreamName="keyed", ShardCount=2, RecordDistributionStrategy="USER_PARTITION_KEY"
    )
    assert "RecordDistributionStrategy" not in await summary(fake, "keyed")
    await fails(
        fake.create_stream(StreamName="p", ShardCount=2, RecordDistributionStrategy="AUTO"),
        "InvalidArgumentException",
    )
    await fails(
        fake.create_stream(
            StreamName="p",
            ShardCount=2,
            StreamModeDetails={"StreamMode": "PROVISIONED"},
            RecordDistributionStrategy="AUTO",
        ),
        "InvalidArgumentException",
    )
    await fails(
        fake.create_stream(
            StreamName="p",
            StreamModeDetails={"StreamMode": "ON_DEMAND"},
            RecordDistributionStrategy="auto",
        ),
        "ValidationException",
    )
    assert sorted(fake._model.streams) == ["auto", "keyed"]


def test_setup_helpers_refuse_auto_for_provisioned_streams_and_unknown_strategies() -> None:
    fake = FakeKinesis()
    with pytest.raises(ValueError, match="only an on-demand stream"):
        fake.add_stream("p", 2, record_distribution="AUTO")
    with pytest.raises(ValueError, match="record_distribution must be one of"):
        fake.add_stream("p", 2, on_demand=True, record_distribution="RANDOM")
    fake.add_stream("p", 2)
    fake.set_record_distribution("p", "USER_PARTITION_KEY")  # the default, a no-op
    with pytest.raises(ValueError, match="'p' is provisioned"):
        fake.set_record_distribution("p", "AUTO")
    fake.add_stream("o", 2, on_demand=True)
    with pytest.raises(ValueError, match="record_distribution must be one of"):
        fake.set_record_distribution("o", "auto")
    with pytest.raises(ValueError, match="no stream named"):
        fake.set_record_distribution("missing", "AUTO")
    fake.set_record_distribution(fake.stream_arn("o"), "AUTO")
    assert fake._model.streams["o"].auto


# -- placement ---------------------------------------------------------------------------------


async def test_auto_spreads_records_over_every_shard_whatever_their_keys() -> None:
    fake = FakeKinesis()
    auto_stream(fake)
    first = key_of_shard(0)
    answer = await fake.put_records(
        StreamName="auto",
        Records=[{"PartitionKey": first, "Data": b"%d" % i} for i in range(200)]
        + [{"PartitionKey": first, "ExplicitHashKey": "0", "Data": b"e%d" % i} for i in range(200)],
    )
    assert answer["FailedRecordCount"] == 0
    placed = Counter(entry["ShardId"] for entry in answer["Records"])
    # Every shard gets records though every key hashes to shard 0; none gets nearly all.
    assert sorted(placed) == [f"shardId-00000000000{i}" for i in range(SHARDS)]
    assert max(placed.values()) < 200
    by_explicit_key = {entry["ShardId"] for entry in answer["Records"][200:]}
    assert by_explicit_key != {"shardId-000000000000"}
    # Each answer names where the record is: the stored records agree.
    for entry, stored in zip(answer["Records"], fake.stored_records("auto"), strict=True):
        assert (stored.shard_id, stored.sequence_number) == (
            entry["ShardId"],
            entry["SequenceNumber"],
        )
        assert stored.partition_key == first


async def test_the_same_seed_places_the_same_records_on_the_same_shards() -> None:
    def placed(seed: int) -> Any:
        fake = FakeKinesis(placement_seed=seed)
        auto_stream(fake)
        return fake

    same = [placed(7), placed(7), placed(8)]
    shards = []
    for fake in same:
        answer = await fake.put_records(
            StreamName="auto", Records=[{"Data": b"x"} for _ in range(50)]
        )
        shards.append([entry["ShardId"] for entry in answer["Records"]])
    assert shards[0] == shards[1]
    assert shards[0] != shards[2]


async def test_put_record_is_placed_at_random_too_and_may_come_without_a_key() -> None:
    fake = FakeKinesis()
    auto_stream(fake)
    key = key_of_shard(1)
    landed = set()
    for _ in range(40):
        answer = await fake.put_record(StreamName="auto", PartitionKey=key, Data=b"k")
        landed.add(answer["ShardId"])
    assert landed != {"shardId-000000000001"}
    answer = await fake.put_record(StreamName="auto", Data=b"keyless")
    assert fake.stored_records("auto", answer["ShardId"])[-1].partition_key is None
    assert len(fake.stored_records("auto")) == 41


async def test_switching_back_to_user_partition_key_routes_by_key_again() -> None:
    fake = FakeKinesis()
    auto_stream(fake)
    key = key_of_shard(2)
    fake.set_record_distribution("auto", "USER_PARTITION_KEY")
    answer = await fake.put_records(
        StreamName="auto",
        Records=[{"PartitionKey": key, "Data": b"x"} for _ in range(20)]
        + [{"PartitionKey": key, "ExplicitHashKey": str(WIDTH * 3), "Data": b"y"}],
    )
    assert {entry["ShardId"] for entry in answer["Records"][:20]} == {"shardId-000000000002"}
    assert answer["Records"][20]["ShardId"] == "shardId-000000000003"
    assert (await summary(fake, "auto"))["RecordDistributionStrategy"] == "USER_PARTITION_KEY"
    await fails(fake.put_record(StreamName="auto", Data=b"keyless"), "ValidationException")


async def test_auto_places_records_on_open_shards_only() -> None:
    fake = FakeKinesis()
    auto_stream(fake, shards=2)
    lower, upper = fake.split("auto", "shardId-000000000000", WIDTH)
    answer = await fake.put_records(StreamName="auto", Records=[{"Data": b"x"}] * 300)
    placed = Counter(entry["ShardId"] for entry in answer["Records"])
    assert sorted(placed) == sorted(["shardId-000000000001", lower, upper])


async def test_a_shards_throttle_applies_to_the_records_placed_on_it() -> None:
    fake = FakeKinesis()
    auto_stream(fake, throttle=True, records_per_second=5.0)
    answer = await fake.put_records(StreamName="auto", Records=[{"Data": b"x"}] * 60)
    stored = Counter(record.shard_id for record in fake.stored_records("auto"))
    # 60 records over 4 shards of 5: every shard full, the rest throttled by the shard drawn.
    assert stored == {f"shardId-00000000000{i}": 5 for i in range(SHARDS)}
    assert answer["FailedRecordCount"] == 40
    throttled = [entry for entry in answer["Records"] if "ErrorCode" in entry]
    assert {entry["ErrorCode"] for entry in throttled} == {"ProvisionedThroughputExceededException"}
    assert {entry["ErrorMessage"].split()[4] for entry in throttled} == set(stored)


# -- records without a partition key ------------------------------------------------------------


async def test_a_record_without_a_key_is_stored_on_auto_and_read_back_without_one() -> None:
    fake = FakeKinesis()
    auto_stream(fake, shards=1)
    await fake.put_records(
        StreamName="auto", Records=[{"Data": b"keyless"}, {"PartitionKey": "k", "Data": b"keyed"}]
    )
    stored = fake.stored_records("auto")
    assert [(record.partition_key, record.data) for record in stored] == [
        (None, b"keyless"),
        ("k", b"keyed"),
    ]
    assert isinstance(stored[0], StoredRecord)
    iterator = await fake.get_shard_iterator(
        StreamName="auto", ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
    )
    page = await fake.get_records(ShardIterator=iterator["ShardIterator"])
    first, second = page["Records"]
    assert "PartitionKey" not in first
    assert first["Data"] == b"keyless"
    assert second["PartitionKey"] == "k"


async def test_a_record_without_a_key_fails_the_whole_request_on_other_streams() -> None:
    fake = FakeKinesis()
    fake.add_stream("provisioned", 2)
    fake.add_stream("keyed", 2, on_demand=True)
    for stream in ("provisioned", "keyed"):
        message = await fails(
            fake.put_records(
                StreamName=stream, Records=[{"PartitionKey": "k", "Data": b"x"}, {"Data": b"y"}]
            ),
            "ValidationException",
        )
        assert message == (
            "1 validation error detected: Value null at 'records.2.member.partitionKey' failed "
            "to satisfy constraint: Member must not be null"
        )
        message = await fails(fake.put_record(StreamName=stream, Data=b"y"), "ValidationException")
        assert "Value null at 'partitionKey'" in message
        assert fake.stored_records(stream) == []
    with pytest.raises(TypeError, match=r"Records\[0\]\.PartitionKey"):
        await fake.put_records(StreamName="keyed", Records=[{"PartitionKey": None, "Data": b""}])


# -- SequenceNumberForOrdering ----------------------------------------------------------------


async def test_sequence_number_for_ordering_is_refused_on_auto_only() -> None:
    fake = FakeKinesis()
    auto_stream(fake)
    fake.add_stream("keyed", 1, on_demand=True)
    first = await fake.put_record(StreamName="keyed", PartitionKey="k", Data=b"1")
    await fake.put_record(
        StreamName="keyed",
        PartitionKey="k",
        Data=b"2",
        SequenceNumberForOrdering=first["SequenceNumber"],
    )
    message = await fails(
        fake.put_record(
            StreamName="auto",
            PartitionKey="k",
            Data=b"3",
            SequenceNumberForOrdering=first["SequenceNumber"],
        ),
        "InvalidArgumentException",
    )
    assert "SequenceNumberForOrdering" in message
    assert "AUTO" in message
    assert fake.stored_records("auto") == []
    assert len(fake.stored_records("keyed")) == 2


# -- DryRun ------------------------------------------------------------------------------------


@pytest.mark.parametrize("auto", [False, True], ids=["keyed", "auto"])
async def test_a_dry_run_stores_nothing_and_answers_dry_run_operation(auto: bool) -> None:
    fake = FakeKinesis()
    fake.add_stream(
        "s", 2, on_demand=True, record_distribution="AUTO" if auto else "USER_PARTITION_KEY"
    )
    fake.script_records([("InternalFailure", "scripted")])
    records = [{"PartitionKey": "k", "Data": b"x"}]
    message = await fails(
        fake.put_records(StreamName="s", Records=records, DryRun=True), DRY_RUN[0]
    )
    assert message == DRY_RUN[1]
    await fails(
        fake.put_record(StreamName="s", PartitionKey="k", Data=b"x", DryRun=True), DRY_RUN[0]
    )
    assert fake.stored_records("s") == []
    # The dry runs left the record script for the next real request, which takes it.
    answer = await fake.put_records(StreamName="s", Records=records, DryRun=False)
    assert answer["Records"][0]["ErrorCode"] == "InternalFailure"
    answer = await fake.put_records(StreamName="s", Records=records)
    assert answer["FailedRecordCount"] == 0


async def test_a_dry_run_is_checked_as_the_real_request_first() -> None:
    fake = FakeKinesis()
    fake.add_stream("keyed", 1, on_demand=True)
    auto_stream(fake)
    await fails(
        fake.put_records(
            StreamName="missing", Records=[{"PartitionKey": "k", "Data": b""}], DryRun=True
        ),
        "ResourceNotFoundException",
    )
    await fails(
        fake.put_records(StreamName="keyed", Records=[], DryRun=True), "ValidationException"
    )
    await fails(
        fake.put_records(StreamName="keyed", Records=[{"Data": b""}], DryRun=True),
        "ValidationException",
    )
    await fails(
        fake.put_records(
            StreamName="keyed",
            Records=[{"PartitionKey": "k", "Data": b"x" * (1024 * 1024)}],
            DryRun=True,
        ),
        "InvalidArgumentException",
    )
    await fails(
        fake.put_record(StreamName="auto", Data=b"", SequenceNumberForOrdering="1", DryRun=True),
        "InvalidArgumentException",
    )
    await fails(
        fake.put_records(StreamName="auto", Records=[{"Data": b""}], DryRun=True), DRY_RUN[0]
    )
    with pytest.raises(TypeError, match="parameter DryRun"):
        await fake.put_records(StreamName="auto", Records=[{"Data": b""}], DryRun="yes")  # type: ignore[arg-type]
    assert fake.stored_records("keyed") == fake.stored_records("auto") == []


async def test_a_dry_run_takes_no_throughput_and_no_random_draw() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 1, throttle=True, records_per_second=2.0)
    fake.faults = FaultPlan(record_failure_rate=0.5, seed=3)
    twin = FakeKinesis()
    twin.add_stream("s", 1, throttle=True, records_per_second=2.0)
    twin.faults = FaultPlan(record_failure_rate=0.5, seed=3)
    records = [{"PartitionKey": "k", "Data": b"x"}] * 6
    for _ in range(3):
        await fails(fake.put_records(StreamName="s", Records=records, DryRun=True), DRY_RUN[0])
    real = await fake.put_records(StreamName="s", Records=records)
    untouched = await twin.put_records(StreamName="s", Records=records)
    assert [entry.get("ErrorCode") for entry in real["Records"]] == [
        entry.get("ErrorCode") for entry in untouched["Records"]
    ]
    assert len(fake.stored_records("s")) == 2


async def test_dry_run_reads_are_checked_then_refused() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 1)
    await fake.put_records(StreamName="s", Records=[{"PartitionKey": "k", "Data": b"x"}])
    await fails(
        fake.get_shard_iterator(
            StreamName="s",
            ShardId="shardId-000000000009",
            ShardIteratorType="TRIM_HORIZON",
            DryRun=True,
        ),
        "ResourceNotFoundException",
    )
    await fails(
        fake.get_shard_iterator(
            StreamName="s",
            ShardId="shardId-000000000000",
            ShardIteratorType="TRIM_HORIZON",
            DryRun=True,
        ),
        DRY_RUN[0],
    )
    iterator = (
        await fake.get_shard_iterator(
            StreamName="s",
            ShardId="shardId-000000000000",
            ShardIteratorType="TRIM_HORIZON",
            DryRun=False,
        )
    )["ShardIterator"]
    await fails(fake.get_records(ShardIterator="nonsense", DryRun=True), "InvalidArgumentException")
    await fails(fake.get_records(ShardIterator=iterator, DryRun=True), DRY_RUN[0])
    page = await fake.get_records(ShardIterator=iterator, DryRun=False)
    assert [record["Data"] for record in page["Records"]] == [b"x"]


# -- StreamId ----------------------------------------------------------------------------------


async def test_stream_id_is_accepted_wherever_the_api_has_it_and_ignored() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 2, on_demand=True)
    arn = fake.stream_arn("s")
    sid = "abcdefghij0123456789-abc"
    await fake.describe_stream(StreamName="s", StreamId=sid)
    await fake.describe_stream_summary(StreamName="s", StreamId=sid)
    await fake.list_shards(StreamName="s", StreamId=sid)
    await fake.update_max_record_size(StreamARN=arn, MaxRecordSizeInKiB=2048, StreamId=sid)
    await fake.put_records(
        StreamName="s", Records=[{"PartitionKey": "k", "Data": b"x"}], StreamId=sid
    )
    await fake.put_record(StreamName="s", PartitionKey="k", Data=b"y", StreamId=sid)
    iterator = await fake.get_shard_iterator(
        StreamName="s",
        ShardId="shardId-000000000001",
        ShardIteratorType="TRIM_HORIZON",
        StreamId=sid,
    )
    page = await fake.get_records(ShardIterator=iterator["ShardIterator"], StreamId=sid)
    assert [record["Data"] for record in page["Records"]] == [b"x", b"y"]
    await fake.split_shard(
        StreamName="s", ShardToSplit="shardId-000000000000", NewStartingHashKey="1", StreamId=sid
    )
    await fake.merge_shards(
        StreamName="s",
        ShardToMerge="shardId-000000000002",
        AdjacentShardToMerge="shardId-000000000003",
        StreamId=sid,
    )
    await fake.delete_stream(StreamName="s", StreamId=sid)
    assert sum(request.kwargs.get("StreamId") == sid for request in fake.requests) == 11

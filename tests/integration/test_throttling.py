"""moto's server with AWS's per-shard write limits and faults, through aiobotocore over HTTP.

The servers are started by module fixtures with small limits, so that what a shard takes is
exact whatever the machine's speed: 100 records (and 10,000 bytes) of burst per shard,
refilled at one record every 20 s, so nothing refills between the requests of a test.
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Iterator
from typing import Any

import anyio
import botocore.exceptions
import pytest

from aiokpl import Producer
from aiokpl.testing import read_stream
from aiokpl.testing._servers import moto_server, throughput
from aiokpl.testing._throttling import THROTTLED, ServerFaults, ShardLimits

from .helpers import admin_client, config, create_stream, stream_name

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ACCOUNT = "123456789012"  # moto's default account
SHARD_0, SHARD_1 = "shardId-000000000000", "shardId-000000000001"
HANG_SECONDS = 2.0


@pytest.fixture(scope="module")
def throttling_endpoint() -> Iterator[str]:
    limits = ShardLimits(records_per_second=0.05, bytes_per_second=5.0, burst_seconds=2000.0)
    faults = ServerFaults(
        fail_streams=("failing",), hang_streams=("hanging",), hang_seconds=HANG_SECONDS
    )
    with moto_server(limits=limits, faults=faults) as endpoint:
        yield endpoint


def counted(endpoint: str, stream: str) -> Counter[str]:
    """The server's own counts for ``stream``, summed over every second."""
    totals: Counter[str] = Counter()
    for row in throughput(endpoint)["series"]:
        if row["stream"] == stream:
            totals.update({k: row[k] for k in ("delivered", "throttled", "failed")})
    return totals


async def create_once(admin: Any, stream: str) -> None:
    """Create ``stream`` (1 shard) unless the other backend's run did; moto is ACTIVE at once.

    (Not ``helpers.create_stream``: its ``DescribeStreamSummary`` is a call a fault hits.)
    """
    try:
        await admin.create_stream(StreamName=stream, ShardCount=1)
    except botocore.exceptions.ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceInUseException":
            raise


def rate_exceeded(shard_id: str, stream: str) -> str:
    return f"Rate exceeded for shard {shard_id} in stream {stream} under account {ACCOUNT}."


async def test_put_records_refuses_each_record_over_its_shard_with_aws_code_and_message(
    throttling_endpoint: str,
) -> None:
    stream = stream_name("throttled")
    # 150 records for each shard, interleaved; each shard takes its first 100.
    records = [
        {
            "Data": f"record {i}".encode(),
            "PartitionKey": f"key-{i}",
            "ExplicitHashKey": str(0 if i % 2 == 0 else 2**127 + 5),
        }
        for i in range(300)
    ]
    async with admin_client(throttling_endpoint) as admin:
        await create_stream(admin, stream, 2)
        response = await admin.put_records(StreamName=stream, Records=records)
        stored = await read_stream(admin, stream)
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert response["FailedRecordCount"] == 100
    expected_stored = {}
    for i, entry in enumerate(response["Records"]):
        shard = SHARD_0 if i % 2 == 0 else SHARD_1
        if i < 200:  # the 100th record of each shard is number 198 or 199
            assert entry["ShardId"] == shard, (i, entry)
            expected_stored[entry["SequenceNumber"], shard] = f"record {i}".encode()
        else:
            assert entry == {"ErrorCode": THROTTLED, "ErrorMessage": rate_exceeded(shard, stream)}
    assert response["Records"][201]["ErrorMessage"] == (
        f"Rate exceeded for shard shardId-000000000001 in stream {stream} under account "
        "123456789012."
    )
    assert {(r["SequenceNumber"], shard): r["Data"] for shard, r in stored} == expected_stored
    assert counted(throttling_endpoint, stream) == Counter(delivered=200, throttled=100)


async def test_put_record_over_its_shard_is_a_whole_request_error(
    throttling_endpoint: str,
) -> None:
    stream = stream_name("throttled")
    async with admin_client(throttling_endpoint) as admin:
        await create_stream(admin, stream, 1)
        first = await admin.put_record(StreamName=stream, Data=b"one", PartitionKey="k")
        filled = await admin.put_records(
            StreamName=stream, Records=[{"Data": b"x", "PartitionKey": "k"}] * 99
        )
        with pytest.raises(botocore.exceptions.ClientError) as caught:
            await admin.put_record(StreamName=stream, Data=b"refused", PartitionKey="k")
        stored = await read_stream(admin, stream)
    assert first["ShardId"] == SHARD_0
    assert filled["FailedRecordCount"] == 0
    error = caught.value.response
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error["Error"]["Code"] == THROTTLED
    assert error["Error"]["Message"] == rate_exceeded(SHARD_0, stream)
    assert len(stored) == 100
    assert b"refused" not in [record["Data"] for _, record in stored]
    assert counted(throttling_endpoint, stream) == Counter(delivered=100, throttled=1)


async def test_bytes_are_limited_too_and_the_partition_key_counts(
    throttling_endpoint: str,
) -> None:
    # 10,000 bytes of burst: ten records of 744 data bytes and a 256-byte key fill it
    # exactly; without the key, thirteen would fit.
    stream = stream_name("bytes")
    records = [{"Data": bytes(744), "PartitionKey": f"{i:02d}" + "k" * 254} for i in range(14)]
    async with admin_client(throttling_endpoint) as admin:
        await create_stream(admin, stream, 1)
        response = await admin.put_records(StreamName=stream, Records=records)
    codes = [entry.get("ErrorCode") for entry in response["Records"]]
    assert codes == [None] * 10 + [THROTTLED] * 4


async def test_a_failing_stream_fails_every_request(throttling_endpoint: str) -> None:
    async with admin_client(throttling_endpoint) as admin:
        await create_once(admin, "failing")  # creating it is not a fault
        calls = [
            admin.put_record(StreamName="failing", Data=b"x", PartitionKey="k"),
            admin.put_records(StreamName="failing", Records=[{"Data": b"x", "PartitionKey": "k"}]),
            admin.list_shards(StreamName="failing"),
        ]
        for call in calls:
            with pytest.raises(botocore.exceptions.ClientError) as caught:
                await call
            assert caught.value.response["Error"]["Code"] == "InternalFailure"
            assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert counted(throttling_endpoint, "failing")["failed"] >= 2  # both backends add theirs


async def test_a_hanging_stream_answers_late_while_other_streams_are_served(
    throttling_endpoint: str,
) -> None:
    healthy = stream_name("healthy")
    order: list[str] = []
    async with admin_client(throttling_endpoint) as admin:
        await create_once(admin, "hanging")
        await create_stream(admin, healthy, 1)
        hung_answer: dict[str, Any] = {}

        async def hang() -> None:
            started = anyio.current_time()
            hung_answer.update(
                await admin.put_record(StreamName="hanging", Data=b"late", PartitionKey="k")
            )
            hung_answer["waited"] = anyio.current_time() - started
            order.append("hanging")

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(hang)
            await anyio.sleep(0.2)  # the hung request is in the server by now
            for i in range(3):  # served one after the other, while the hang goes on
                await admin.put_record(StreamName=healthy, Data=b"now", PartitionKey="k")
                order.append(f"healthy {i}")
    assert order == ["healthy 0", "healthy 1", "healthy 2", "hanging"]
    assert hung_answer["waited"] >= HANG_SECONDS
    assert hung_answer["ShardId"] == SHARD_0  # answered late, and stored


@pytest.fixture(scope="module")
def faulty_endpoint() -> Iterator[str]:
    with moto_server(faults=ServerFaults(fault_rate=0.5, seed=7)) as endpoint:
        yield endpoint


async def test_a_fault_rate_fails_that_share_of_requests_with_500_or_503(
    faulty_endpoint: str,
) -> None:
    stream = stream_name("faulty")
    outcomes: Counter[tuple[str, int]] = Counter()
    async with admin_client(faulty_endpoint) as admin:
        await admin.create_stream(StreamName=stream, ShardCount=1)  # never a fault
        for i in range(60):
            try:
                await admin.put_record(StreamName=stream, Data=b"x", PartitionKey=f"{i}")
                outcomes["stored", 200] += 1
            except botocore.exceptions.ClientError as exc:
                response = exc.response
                outcomes[
                    response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]
                ] += 1
    assert set(outcomes) == {("stored", 200), ("InternalFailure", 500), ("ServiceUnavailable", 503)}
    assert 10 <= outcomes["stored", 200] <= 50
    assert counted(faulty_endpoint, stream) == Counter(
        delivered=outcomes["stored", 200], failed=60 - outcomes["stored", 200]
    )


@pytest.fixture(scope="module")
def aws_like_endpoint() -> Iterator[str]:
    with moto_server(limits=ShardLimits(records_per_second=400.0)) as endpoint:
        yield endpoint


async def test_a_producer_over_the_limit_is_throttled_then_delivers_everything_once(
    aws_like_endpoint: str,
) -> None:
    # The producer's own limit (1,000/s per shard by default) is above the server's 400/s:
    # what a producer sharing a shard with writers it cannot see meets. Every record still
    # lands once; some attempts name the throttling.
    stream = stream_name("producer")
    async with admin_client(aws_like_endpoint) as admin:
        await create_stream(admin, stream, 1)
        async with Producer(config(aws_like_endpoint, aggregation_enabled=False)) as producer:
            outcomes = [
                await producer.put_record(stream=stream, partition_key=f"k{i}", data=b"%d" % i)
                for i in range(800)
            ]
            await producer.flush()
        stored = await read_stream(admin, stream)
    results = [outcome.result() for outcome in outcomes]
    assert all(result.success for result in results)
    assert sorted(int(record["Data"]) for _, record in stored) == list(range(800))
    codes = Counter(a.error_code for r in results for a in r.attempts if not a.success)
    assert codes[THROTTLED] > 0
    assert set(codes) == {THROTTLED}
    counts = counted(aws_like_endpoint, stream)
    assert counts["delivered"] == 800
    assert counts["throttled"] == codes[THROTTLED]


def test_base64_sizes_match_what_botocore_sends() -> None:
    # The server sizes records from the base64 text botocore sends, without decoding it.
    from aiokpl.testing._throttling import _decoded_size

    for length in (0, 1, 2, 3, 100, 9000):
        assert _decoded_size(base64.b64encode(bytes(length)).decode()) == length

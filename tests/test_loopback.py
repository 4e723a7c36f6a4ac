"""The loopback Kinesis server: FakeKinesis over real HTTP on 127.0.0.1.

Real sockets, so real event loops (no virtual clock): this module's ``anyio_backend`` runs every
async test on plain asyncio and trio. Clients are the producer's own aiobotocore client
(aiohttp on asyncio, httpx on trio) and, for the HTTP details botocore never exercises, a raw
client below.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from aiokpl import Config, Producer, RecordResult
from aiokpl._kinesis import create_client, error_of
from aiokpl.aggregation import deaggregate
from aiokpl.testing import FakeKinesis, HttpFaultPlan, LoopbackKinesis, StoredRecord
from aiokpl.testing._http_faults import draw
from integration.helpers import config as local_config

_streams = itertools.count()


@pytest.fixture(params=[pytest.param("asyncio", id="asyncio"), pytest.param("trio", id="trio")])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return (request.param, {})


def config(endpoint_url: str, **changes: Any) -> Config:
    return local_config(endpoint_url, **{"record_max_buffered_time_ms": 20, **changes})


def new_stream(fake: FakeKinesis, shard_count: int = 1, **options: Any) -> str:
    name = f"stream-{next(_streams)}"
    fake.add_stream(name, shard_count, **options)
    return name


async def produce(cfg: Config, stream: str, count: int) -> list[RecordResult]:
    async with Producer(cfg) as producer:
        outcomes = [
            await producer.put_record(stream=stream, partition_key=f"key-{i % 7}", data=b"r%d" % i)
            for i in range(count)
        ]
    assert all(outcome.done() for outcome in outcomes)
    return [outcome.result() for outcome in outcomes]


def user_data(stored: list[StoredRecord]) -> Counter[bytes]:
    """How many times each user record's data is in the stream (aggregates opened)."""
    found: Counter[bytes] = Counter()
    for record in stored:
        found.update(user.data for user in deaggregate({"Data": record.data, "PartitionKey": "x"}))
    return found


def codes(result: RecordResult) -> list[str | None]:
    return [attempt.error_code for attempt in result.attempts]


@pytest.fixture
async def server() -> AsyncIterator[LoopbackKinesis]:
    async with LoopbackKinesis() as running:
        yield running


# -- the protocol through aiobotocore --------------------------------------------------------


@pytest.mark.anyio
async def test_round_trip_through_aiobotocore(server: LoopbackKinesis) -> None:
    async with create_client(config(server.endpoint_url)) as client:
        await client.create_stream(StreamName="trip", ShardCount=3)

        first = await client.list_shards(StreamName="trip", MaxResults=2)
        assert [s["ShardId"] for s in first["Shards"]] == [
            "shardId-000000000000",
            "shardId-000000000001",
        ]
        rest = await client.list_shards(NextToken=first["NextToken"])
        assert [s["ShardId"] for s in rest["Shards"]] == ["shardId-000000000002"]
        assert "NextToken" not in rest
        assert [r.kwargs for r in server.fake.requests if r.operation == "ListShards"][1] == {
            "NextToken": first["NextToken"]
        }

        blobs = [bytes(range(256)), b"", b"\x00", "é".encode()]
        answer = await client.put_records(
            StreamName="trip",
            Records=[
                {"Data": blob, "PartitionKey": f"p{i}", "ExplicitHashKey": "0"}
                for i, blob in enumerate(blobs)
            ],
        )
        assert answer["FailedRecordCount"] == 0
        assert [r["ShardId"] for r in answer["Records"]] == ["shardId-000000000000"] * 4
        single = await client.put_record(StreamName="trip", PartitionKey="one", Data=b"\xff\xfe")
        stored = server.fake.stored_records("trip")
        assert [r.data for r in stored] == [*blobs, b"\xff\xfe"]
        assert stored[-1].sequence_number == single["SequenceNumber"]

        iterator = (
            await client.get_shard_iterator(
                StreamName="trip",
                ShardId="shardId-000000000000",
                ShardIteratorType="AT_SEQUENCE_NUMBER",
                StartingSequenceNumber=answer["Records"][1]["SequenceNumber"],
            )
        )["ShardIterator"]
        page = await client.get_records(ShardIterator=iterator, Limit=2)
        assert [r["Data"] for r in page["Records"]] == blobs[1:3]
        assert [r["PartitionKey"] for r in page["Records"]] == ["p1", "p2"]
        arrival = page["Records"][0]["ApproximateArrivalTimestamp"]
        assert arrival.timestamp() == pytest.approx(stored[1].arrival_time, abs=1e-3)
        page = await client.get_records(ShardIterator=page["NextShardIterator"])
        assert [r["Data"] for r in page["Records"]] == blobs[3:]

        await client.split_shard(
            StreamName="trip",
            ShardToSplit="shardId-000000000002",
            NewStartingHashKey=str(3 * 2**126),
        )
        await client.merge_shards(
            StreamName="trip",
            ShardToMerge="shardId-000000000000",
            AdjacentShardToMerge="shardId-000000000001",
        )
        shards = (await client.list_shards(StreamName="trip", ShardFilter={"Type": "AT_LATEST"}))[
            "Shards"
        ]
        assert {s["ShardId"]: s.get("ParentShardId") for s in shards} == {
            "shardId-000000000003": "shardId-000000000002",
            "shardId-000000000004": "shardId-000000000002",
            "shardId-000000000005": "shardId-000000000000",
        }
        summary = (await client.describe_stream_summary(StreamName="trip"))[
            "StreamDescriptionSummary"
        ]
        assert (summary["StreamName"], summary["OpenShardCount"]) == ("trip", 3)
        assert summary["StreamCreationTimestamp"].timestamp() > 0


@pytest.mark.anyio
async def test_service_errors_round_trip_exactly(server: LoopbackKinesis) -> None:
    async with create_client(config(server.endpoint_url)) as client:
        with pytest.raises(Exception) as missing:  # noqa: PT011 - botocore's ClientError
            await client.describe_stream_summary(StreamName="nowhere")
        with pytest.raises(Exception) as fake_missing:  # noqa: PT011
            await server.fake.describe_stream_summary(StreamName="nowhere")
        assert error_of(missing.value) == error_of(fake_missing.value)
        assert error_of(missing.value) == (
            "ResourceNotFoundException",
            "Stream nowhere under account 123456789012 not found.",
        )
        assert missing.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400  # type: ignore[attr-defined]

        await client.create_stream(StreamName="errors", ShardCount=1)
        first = await client.list_shards(StreamName="errors", MaxResults=1)
        assert "NextToken" not in first
        server.fake.fail_requests(
            code="LimitExceededException", message="slow down", http_status=400
        )
        server.fake.fail_requests(code="KMSThrottlingException", message="kms", http_status=503)
        for expected in [
            ("LimitExceededException", "slow down"),
            ("KMSThrottlingException", "kms"),
        ]:
            with pytest.raises(Exception) as scripted:  # noqa: PT011
                await client.put_records(
                    StreamName="errors", Records=[{"Data": b"x", "PartitionKey": "k"}]
                )
            assert error_of(scripted.value) == expected
        assert server.statistics().statuses == {200: 2, 400: 2, 503: 1}


@pytest.mark.anyio
async def test_describe_stream_and_denials_round_trip(server: LoopbackKinesis) -> None:
    server.fake.add_stream("described", 150)
    server.fake.split("described", "shardId-000000000000", 2**100)
    async with create_client(config(server.endpoint_url)) as client:
        first = (await client.describe_stream(StreamName="described", Limit=1000))[
            "StreamDescription"
        ]
        assert (len(first["Shards"]), first["HasMoreShards"]) == (100, True)
        assert first["StreamStatus"] == "ACTIVE"
        assert first["StreamCreationTimestamp"].timestamp() >= 0
        rest = (
            await client.describe_stream(
                StreamName="described", ExclusiveStartShardId=first["Shards"][-1]["ShardId"]
            )
        )["StreamDescription"]
        assert (len(rest["Shards"]), rest["HasMoreShards"]) == (52, False)
        assert "EndingSequenceNumber" in first["Shards"][0]["SequenceNumberRange"]
        server.fake.deny("ListShards")
        with pytest.raises(Exception) as denied:  # noqa: PT011 - botocore's ClientError
            await client.list_shards(StreamName="described")
        code, message = error_of(denied.value)
        assert code == "AccessDeniedException"
        assert "kinesis:ListShards" in message
        assert denied.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_faults_scoped_to_a_stream_fail_only_its_requests(server: LoopbackKinesis) -> None:
    bad, good = new_stream(server.fake), new_stream(server.fake)
    server.fake.fail_requests(1000, stream=bad)
    entries = [{"Data": b"x", "PartitionKey": "k"}]
    async with create_client(config(server.endpoint_url)) as client:
        for _ in range(2):
            answer = await client.put_records(StreamName=good, Records=entries)
            assert answer["FailedRecordCount"] == 0
            with pytest.raises(Exception) as failed:  # noqa: PT011 - botocore's ClientError
                await client.put_records(StreamARN=server.fake.stream_arn(bad), Records=entries)
            assert error_of(failed.value) == ("InternalFailure", "Internal service failure.")
            assert failed.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500  # type: ignore[attr-defined]
    assert server.fake.stored_records(bad) == []
    assert len(server.fake.stored_records(good)) == 2
    assert server.statistics().statuses == {200: 2, 500: 2}


# -- the producer end to end -----------------------------------------------------------------


@pytest.mark.anyio
async def test_producer_end_to_end_in_loop(server: LoopbackKinesis) -> None:
    stream = new_stream(server.fake, shard_count=2)
    results = await produce(config(server.endpoint_url), stream, 300)
    assert all(result.success for result in results)
    assert user_data(server.fake.stored_records(stream)) == Counter(b"r%d" % i for i in range(300))
    assert {result.shard_id for result in results} == {
        "shardId-000000000000",
        "shardId-000000000001",
    }
    statistics = server.statistics()
    assert statistics.requests["ListShards"] >= 1
    assert statistics.requests["PutRecords"] >= 1
    assert statistics.faults == {}


@pytest.mark.anyio
async def test_producer_with_list_shards_denied_uses_describe_stream(
    server: LoopbackKinesis,
) -> None:
    stream = new_stream(server.fake, shard_count=150)
    server.fake.deny("ListShards")
    # Records wait for the map (however long two HTTP calls take here), then the flush sends
    # them at once, aggregated.
    async with Producer(config(server.endpoint_url, record_max_buffered_time_ms=5000)) as producer:
        outcomes = [
            await producer.put_record(stream=stream, partition_key=f"key-{i % 7}", data=b"r%d" % i)
            for i in range(300)
        ]
        with anyio.fail_after(4):
            await producer.flush()
        stats = producer.statistics().streams[0]
    assert (stats.shard_map_source, stats.open_shards) == ("DescribeStream", 150)
    assert all(outcome.result().success for outcome in outcomes)
    assert user_data(server.fake.stored_records(stream)) == Counter(b"r%d" % i for i in range(300))
    # Predicted with the map DescribeStream gave (two pages through aiobotocore): aggregated.
    assert len(server.fake.stored_records(stream)) == 7
    assert server.statistics().requests["DescribeStream"] == 2
    pages = [r.kwargs for r in server.fake.requests if r.operation == "DescribeStream"]
    assert pages[1] == {
        "StreamName": stream,
        "Limit": 100,
        "ExclusiveStartShardId": "shardId-000000000099",
    }


@pytest.mark.anyio
@pytest.mark.parametrize("server_backend", ["asyncio", "trio"])
async def test_producer_end_to_end_in_thread(server_backend: str) -> None:
    fake = FakeKinesis()
    stream = new_stream(fake, shard_count=2)
    with LoopbackKinesis(fake).running_in_thread(server_backend) as server:
        server.fail_http(operation="PutRecords")  # scripted from this thread
        results = await produce(config(server.endpoint_url), stream, 100)
        stored = server.call(fake.stored_records, stream)
        statistics = server.statistics()
    assert all(result.success for result in results)
    assert user_data(stored) == Counter(b"r%d" % i for i in range(100))
    assert statistics.faults == {"fail_http": 1}
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.port


def test_thread_mode_from_synchronous_code() -> None:
    fake = FakeKinesis()
    stream = new_stream(fake)
    with LoopbackKinesis(fake).running_in_thread() as server:
        results = anyio.run(produce, config(server.endpoint_url), stream, 10)
        assert server.call(len, server.call(fake.stored_records, stream)) >= 1
    assert all(result.success for result in results)


# -- HTTP faults, as the producer sees them ------------------------------------------------


@pytest.mark.anyio
async def test_5xx_are_retried(server: LoopbackKinesis) -> None:
    stream = new_stream(server.fake)
    server.fail_http(2, status=500)
    server.fail_http(1, status=503)
    [result] = await produce(config(server.endpoint_url), stream, 1)
    assert result.success
    assert codes(result) == ["InternalFailure", "InternalFailure", "ServiceUnavailable", None]
    assert [a.error_message for a in result.attempts[:3]] == [
        "Internal service failure.",
        "Internal service failure.",
        "Service Unavailable",
    ]
    assert user_data(server.fake.stored_records(stream)) == {b"r0": 1}
    assert server.statistics().statuses[500] == 2


@pytest.mark.anyio
async def test_connection_reset_is_retried(server: LoopbackKinesis) -> None:
    stream = new_stream(server.fake)
    server.reset_connection()
    [result] = await produce(config(server.endpoint_url), stream, 1)
    assert result.success
    assert codes(result) == ["Internal", None]
    # aiohttp's reset reaches botocore as EndpointConnectionError, httpx's as HTTPClientError.
    message = result.attempts[0].error_message or ""
    assert message.split(":")[0].endswith("Error"), message
    assert user_data(server.fake.stored_records(stream)) == {b"r0": 1}
    assert server.statistics().faults == {"reset_connection": 1}


@pytest.mark.anyio
async def test_lost_response_duplicates_the_record(server: LoopbackKinesis) -> None:
    stream = new_stream(server.fake)
    server.reset_connection(after_processing=True)
    [result] = await produce(config(server.endpoint_url), stream, 1)
    assert result.success
    assert codes(result) == ["Internal", None]
    # At least once: the first copy was stored before the connection dropped.
    assert user_data(server.fake.stored_records(stream)) == {b"r0": 2}


@pytest.mark.anyio
async def test_fake_transport_error_resets_the_connection(server: LoopbackKinesis) -> None:
    stream = new_stream(server.fake)
    server.fake.raise_next(ConnectionResetError())
    [result] = await produce(config(server.endpoint_url), stream, 1)
    assert codes(result) == ["Internal", None]
    assert server.statistics().faults == {"reset_connection": 1}


@pytest.mark.anyio
async def test_fake_bug_is_a_500_naming_it(server: LoopbackKinesis) -> None:
    server.fake.raise_next(ValueError("boom"), operation="ListShards")
    async with create_client(config(server.endpoint_url)) as client:
        with pytest.raises(Exception) as raised:  # noqa: PT011 - botocore's ClientError
            await client.list_shards(StreamName="anything")
    assert error_of(raised.value) == ("InternalFailure", "ValueError: boom")
    assert server.statistics().statuses == {500: 1}


@pytest.mark.anyio
async def test_slow_response_times_out_and_is_retried(server: LoopbackKinesis) -> None:
    stream = new_stream(server.fake)
    # Held back for an hour: the producer finishing at all proves nobody waited for it.
    server.delay_response(3600.0)
    # A 1 s timeout: wide enough that the retry itself never times out on a loaded machine.
    [result] = await produce(config(server.endpoint_url, request_timeout_ms=1000), stream, 1)
    assert result.success
    assert codes(result) == ["Internal", None]
    # The sender's own timeout and botocore's read timeout race: either message says so.
    assert "time" in (result.attempts[0].error_message or "").lower()
    # Every request was answered but the held one, still unsent when the producer was done.
    statistics = server.statistics()
    assert statistics.requests["PutRecords"] == 2
    assert sum(statistics.statuses.values()) == statistics.total_requests - 1
    # The slow request was applied before its response was held back: a duplicate.
    assert user_data(server.fake.stored_records(stream)) == {b"r0": 2}


@pytest.mark.anyio
async def test_malformed_bodies_become_retries(server: LoopbackKinesis) -> None:
    stream = new_stream(server.fake)
    for kind in ("not-json", "truncated", "missing-records", "wrong-count"):
        server.malformed_body(kind=kind)
    [result] = await produce(config(server.endpoint_url), stream, 1)
    assert result.success
    assert codes(result) == ["Internal", "Internal", "Internal", "RecordCountMismatch", None]
    messages = [attempt.error_message or "" for attempt in result.attempts]
    assert messages[0] == messages[2] == "malformed PutRecords response: no Records list"
    # truncated: the HTTP client's own error (aiohttp's or httpx's, as botocore wraps them)
    assert messages[1].split(":")[0].endswith("Error"), messages[1]
    assert messages[3] == "PutRecords answered with 0 results for 1 records"
    assert user_data(server.fake.stored_records(stream)) == {b"r0": 1}
    assert server.statistics().faults == {"malformed_body": 4}


@pytest.mark.anyio
async def test_random_http_faults_keep_every_outcome(server: LoopbackKinesis) -> None:
    stream = new_stream(server.fake, shard_count=2)
    server.http_faults = HttpFaultPlan(
        reset_rate=0.1,
        lost_response_rate=0.1,
        error_5xx_rate=0.1,
        slow_rate=0.05,
        malformed_rate=0.1,
        slow_seconds=0.5,
        seed=7,  # its first 16 draws hold every kind of fault
    )
    cfg = config(
        server.endpoint_url,
        request_timeout_ms=300,
        collection_max_count=10,
        aggregation_enabled=False,
    )
    results = await produce(cfg, stream, 200)  # at least 20 PutRecords calls
    assert all(result.success for result in results)
    found = user_data(server.fake.stored_records(stream))
    assert set(found) == {b"r%d" % i for i in range(200)}  # each at least once
    assert set(server.statistics().faults) == {
        "fail_http",
        "reset_connection",
        "delay_response",
        "malformed_body",
    }


# -- throttling through HTTP ---------------------------------------------------------------


@pytest.mark.anyio
# aiohttp warns about any request body over 1 MiB given as bytes, as botocore gives it.
@pytest.mark.filterwarnings("ignore:Sending a large body directly:ResourceWarning")
async def test_throttling_is_exact_per_request(server: LoopbackKinesis) -> None:
    fake = server.fake
    records_limited = new_stream(fake, throttle=True, records_per_second=100.0)
    bytes_limited = new_stream(fake, throttle=True)  # the service's limits: 1000/s, 1 MiB/s
    async with create_client(config(server.endpoint_url)) as client:
        answer = await client.put_records(
            StreamName=records_limited,
            Records=[{"Data": b"x", "PartitionKey": "k"} for _ in range(150)],
        )
        assert answer["FailedRecordCount"] == 50
        assert all("SequenceNumber" in r for r in answer["Records"][:100])
        assert {r.get("ErrorCode") for r in answer["Records"][100:]} == {
            "ProvisionedThroughputExceededException"
        }
        # 1 MiB is 499 records of 2100 bytes (partition key plus data), not 500.
        answer = await client.put_records(
            StreamName=bytes_limited,
            Records=[{"Data": b"x" * 2099, "PartitionKey": "k"} for _ in range(500)],
        )
        assert answer["FailedRecordCount"] == 1
        assert "ErrorCode" in answer["Records"][499]


@pytest.mark.anyio
async def test_throttling_refills_at_the_configured_rate() -> None:
    # The fake's clock is the test's, moved by hand: what the bucket holds is exact.
    now = 0.0
    fake = FakeKinesis(clock=lambda: now)
    stream = new_stream(fake, throttle=True)  # 1000 records/s, a one-second burst
    records = [{"Data": b"", "PartitionKey": "k"} for _ in range(500)]
    async with (
        LoopbackKinesis(fake) as server,
        create_client(config(server.endpoint_url)) as client,
    ):

        async def accepted() -> int:
            answer = await client.put_records(StreamName=stream, Records=records)
            return 500 - int(answer["FailedRecordCount"])

        assert [await accepted(), await accepted(), await accepted()] == [500, 500, 0]  # burst
        now += 0.25  # a quarter of a second refills 250 records
        assert await accepted() == 250
        now += 10.0  # never more than the burst
        assert [await accepted(), await accepted(), await accepted()] == [500, 500, 0]
    assert len(fake.stored_records(stream)) == 2250


# -- HTTP details, with a raw client ---------------------------------------------------------


class RawConnection:
    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.reader = BufferedByteReceiveStream(stream)

    async def request(
        self,
        body: bytes | None = None,
        *,
        operation: str = "ListShards",
        method: str = "POST",
        extra: str = "",
        send_body: bool = True,
    ) -> None:
        payload = b"{}" if body is None else body
        head = (
            f"{method} / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: Kinesis_20131202.{operation}\r\n"
            f"Content-Type: application/x-amz-json-1.1\r\n{extra}"
        )
        if "chunked" not in extra:
            head += f"Content-Length: {len(payload)}\r\n"
        await self.stream.send(head.encode() + b"\r\n" + (payload if send_body else b""))

    async def response(self) -> tuple[int, dict[str, str], bytes]:
        head = (await self.reader.receive_until(b"\r\n\r\n", 65536)).decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
        length = int(headers.get("content-length", "0"))
        body = await self.reader.receive_exactly(length) if length else b""
        return int(head[0].split()[1]), headers, body


async def raw(server: LoopbackKinesis) -> RawConnection:
    return RawConnection(await anyio.connect_tcp("127.0.0.1", server.port))


def error_body(body: bytes) -> str:
    return str(json.loads(body)["__type"])


@pytest.mark.anyio
async def test_keep_alive_close_and_100_continue(server: LoopbackKinesis) -> None:
    stream = new_stream(server.fake)
    connection = await raw(server)
    async with connection.stream:
        for _ in range(2):
            await connection.request(json.dumps({"StreamName": stream}).encode())
            status, headers, body = await connection.response()
            assert (status, headers["connection"]) == (200, "keep-alive")
            assert len(json.loads(body)["Shards"]) == 1

        put = json.dumps(
            {"StreamName": stream, "Records": [{"Data": "AP8=", "PartitionKey": "k"}]}
        ).encode()
        await connection.request(
            put, operation="PutRecords", extra="Expect: 100-continue\r\n", send_body=False
        )
        assert await connection.reader.receive_until(b"\r\n\r\n", 100) == b"HTTP/1.1 100 Continue"
        await connection.stream.send(put)
        status, _, body = await connection.response()
        assert (status, json.loads(body)["FailedRecordCount"]) == (200, 0)

        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(put), put)
        await connection.request(
            chunked, operation="PutRecords", extra="Transfer-Encoding: chunked\r\n"
        )
        assert (await connection.response())[0] == 200

        await connection.request(
            json.dumps({"StreamName": stream}).encode(), extra="Connection: close\r\n"
        )
        status, headers, _ = await connection.response()
        assert (status, headers["connection"]) == (200, "close")
        with pytest.raises((anyio.EndOfStream, anyio.IncompleteRead)):
            await connection.reader.receive_until(b"\r\n", 10)
    assert [r.data for r in server.fake.stored_records(stream)] == [b"\x00\xff"] * 2
    assert server.statistics().connections == 1


@pytest.mark.anyio
async def test_bad_requests_get_the_services_errors(server: LoopbackKinesis) -> None:
    stream = new_stream(server.fake)
    connection = await raw(server)
    async with connection.stream:
        cases: list[tuple[dict[str, Any], tuple[int, str]]] = [
            ({"operation": "DescribeLimits"}, (400, "UnknownOperationException")),
            ({"method": "GET"}, (400, "UnknownOperationException")),
            ({"body": b"{not json"}, (400, "SerializationException")),
            ({"body": b"[1]"}, (400, "SerializationException")),
            ({"operation": "PutRecords", "body": b"{}"}, (400, "ValidationException")),
            (
                {
                    "operation": "PutRecords",
                    "body": json.dumps(
                        {"StreamName": stream, "Records": [{"Data": "!!", "PartitionKey": "k"}]}
                    ).encode(),
                },
                (400, "SerializationException"),
            ),
            (
                {
                    "operation": "PutRecord",
                    "body": json.dumps(
                        {"StreamName": stream, "Data": 5, "PartitionKey": "k"}
                    ).encode(),
                },
                (400, "SerializationException"),
            ),
            (
                {
                    "operation": "PutRecords",
                    "body": json.dumps(
                        {"StreamName": stream, "Records": [{"Data": "", "PartitionKey": 5}]}
                    ).encode(),
                },
                (400, "SerializationException"),
            ),
            # Members the fake does not know are ignored, as by the service.
            ({"body": json.dumps({"StreamName": stream, "Future": 1}).encode()}, (200, "")),
        ]
        for request, expected in cases:
            await connection.request(**request)
            status, headers, body = await connection.response()
            got = (status, error_body(body) if status != 200 else "")
            assert got == expected, request
            if status != 200:
                assert headers["x-amzn-errortype"] == expected[1]
    assert server.statistics().requests["UnknownOperation"] == 2


@pytest.mark.anyio
async def test_missing_member_message_names_it(server: LoopbackKinesis) -> None:
    connection = await raw(server)
    async with connection.stream:
        await connection.request(b'{"StreamName": "s"}', operation="PutRecords")
        _, _, body = await connection.response()
    assert json.loads(body) == {
        "__type": "ValidationException",
        "message": "1 validation error detected: Value null at 'records' failed to satisfy "
        "constraint: Member must not be null",
    }


@pytest.mark.anyio
async def test_malformed_http_is_answered_400_and_closed(server: LoopbackKinesis) -> None:
    connection = await raw(server)
    async with connection.stream:
        await connection.stream.send(b"NONSENSE\r\n\r\n")
        status, headers, _ = await connection.response()
        assert (status, headers["connection"]) == (400, "close")


# -- the API's own checks --------------------------------------------------------------------


def test_address_and_validation() -> None:
    server = LoopbackKinesis()
    assert repr(server).startswith("<LoopbackKinesis stopped")
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.endpoint_url
    with pytest.raises(ValueError, match="unknown operation 'Nope'"):
        server.fail_http(operation="Nope")
    with pytest.raises(ValueError, match="5xx"):
        server.fail_http(status=400)
    with pytest.raises(ValueError, match="count"):
        server.reset_connection(-1)
    with pytest.raises(ValueError, match="seconds"):
        server.delay_response(-1.0)
    with pytest.raises(ValueError, match="kind"):
        server.malformed_body(kind="nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at most 1"):
        HttpFaultPlan(reset_rate=0.6, error_5xx_rate=0.6)
    with pytest.raises(ValueError, match="reset_rate"):
        HttpFaultPlan(reset_rate=-0.1)
    with pytest.raises(ValueError, match="slow_seconds"):
        HttpFaultPlan(slow_seconds=float("inf"))
    server.fail_http(3)
    server.clear_http_faults()
    assert server.statistics().total_requests == 0


def test_fault_plan_draws_each_kind() -> None:
    plan = HttpFaultPlan(
        reset_rate=0.2,
        lost_response_rate=0.2,
        error_5xx_rate=0.2,
        slow_rate=0.2,
        malformed_rate=0.1,
    )
    kinds = [draw(plan, x) for x in (0.1, 0.3, 0.45, 0.55, 0.7, 0.85, 0.95)]
    assert [(k.kind, k.after_processing) if k else None for k in kinds] == [
        ("reset_connection", False),
        ("reset_connection", True),
        ("fail_http", False),
        ("fail_http", False),
        ("delay_response", True),
        ("malformed_body", True),
        None,
    ]
    assert [k.status for k in kinds[2:4] if k] == [500, 503]


@pytest.mark.anyio
async def test_runs_once() -> None:
    server = LoopbackKinesis()
    async with server:
        pass
    with pytest.raises(RuntimeError, match="runs once"):
        async with server:
            pass


def test_thread_mode_timeline_uses_wall_time() -> None:
    # In thread mode the fake's clock is the server loop's clock: real time passes.
    fake = FakeKinesis()
    stream = new_stream(fake, throttle=True, records_per_second=10.0, burst_seconds=0.1)
    with LoopbackKinesis(fake).running_in_thread("trio") as server:

        async def put(count: int) -> int:
            async with create_client(config(server.endpoint_url)) as client:
                answer = await client.put_records(
                    StreamName=stream, Records=[{"Data": b"1", "PartitionKey": "k"}] * count
                )
            return int(answer["FailedRecordCount"])

        assert anyio.run(put, 2) == 1  # a burst of one record
        time.sleep(0.15)  # 1.5 records' worth of time refills it
        assert anyio.run(put, 1) == 0


def test_thread_mode_reports_a_failed_start() -> None:
    server = LoopbackKinesis()
    with pytest.raises(LookupError), server.running_in_thread("no-such-backend"):
        pass  # pragma: no cover


@pytest.mark.anyio
async def test_thread_mode_faults_set_from_the_test_thread() -> None:
    fake = FakeKinesis()
    stream = new_stream(fake)
    with LoopbackKinesis(fake).running_in_thread() as server:
        server.http_faults = HttpFaultPlan(error_5xx_rate=1.0)
        assert server.http_faults.error_5xx_rate == 1.0
        server.clear_http_faults()
        server.reset_connection()
        [result] = await produce(config(server.endpoint_url), stream, 1)
        assert server.statistics().faults == {"reset_connection": 1}
    assert codes(result) == ["Internal", None]

"""Streams named by ARN, regions, and a stream's capacity mode.

Pure checks run synchronously; the producer runs against ``FakeKinesis`` on asyncio and trio
under virtual clocks. A stream ARN is sent as ``StreamARN`` wherever the producer names the
stream, keys the stream's pipeline as given, and must be in the producer's region when one is
fixed; when ``Config.region`` is unset, each ARN's region gets its own client.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import botocore.loaders
import pytest

from aiokpl import Config, InvalidRecordError, InvalidRecordTypeError, Producer
from aiokpl._cli import main
from aiokpl._cli.options import EXIT_USAGE, config_from_args
from aiokpl._cli.reader import StartPosition, tail_stream
from aiokpl._core.hashing import StreamArn, check_stream_name, parse_stream_arn, stream_name_of
from aiokpl._core.metrics import MetricStatistics
from aiokpl._kinesis import stream_argument
from aiokpl.testing import FakeKinesis
from running import running

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1")
ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/events"
OTHER_ACCOUNT = "210987654321"


# -- the ARN itself (pure) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arn", "parts"),
    [
        (ARN, StreamArn("aws", "us-east-1", "123456789012", "events")),
        (
            "arn:aws-cn:kinesis:cn-north-1:123456789012:stream/a.b_c-1",
            StreamArn("aws-cn", "cn-north-1", "123456789012", "a.b_c-1"),
        ),
        (
            "arn:aws-us-gov:kinesis:us-gov-west-1:000000000000:stream/" + "x" * 128,
            StreamArn("aws-us-gov", "us-gov-west-1", "000000000000", "x" * 128),
        ),
    ],
)
def test_a_well_formed_stream_arn_is_parsed(arn: str, parts: StreamArn) -> None:
    assert parse_stream_arn(arn) == parts
    assert check_stream_name(arn) == arn
    assert stream_name_of(arn) == parts.name
    assert stream_argument(arn) == {"StreamARN": arn}


def test_a_name_is_not_an_arn() -> None:
    assert parse_stream_arn("events") is None
    assert stream_name_of("events") == "events"
    assert stream_argument("events") == {"StreamName": "events"}


@pytest.mark.parametrize(
    ("arn", "reason"),
    [
        ("arn:aws:kinesis:us-east-1:123456789012", "does not have six ':'-separated parts"),
        ("arn:gcp:kinesis:us-east-1:123456789012:stream/s", "the partition 'gcp' is not aws"),
        ("arn:aws:sqs:us-east-1:123456789012:stream/s", "names the service 'sqs', not 'kinesis'"),
        ("arn:aws:kinesis:useast1:123456789012:stream/s", "the region 'useast1' is not a region"),
        ("arn:aws:kinesis::123456789012:stream/s", "the region '' is not a region"),
        ("arn:aws:kinesis:us-east-1:12345678901:stream/s", "'12345678901' is not 12 digits"),
        ("arn:aws:kinesis:us-east-1:123456789012:table/s", "'table/s' is not 'stream/<stream"),
        ("arn:aws:kinesis:us-east-1:123456789012:stream/", "the stream name '' is not 1 … 128"),
        ("arn:aws:kinesis:us-east-1:123456789012:stream/a b", "the stream name 'a b' is not"),
        ("arn:aws:kinesis:us-east-1:123456789012:stream/" + "x" * 129, "is not 1 … 128"),
        ("arn:aws:kinesis:us-east-1:123456789012:stream/s/consumer/c", "'s/consumer/c' is not"),
    ],
)
def test_a_malformed_arn_is_refused_saying_which_part_is_wrong(arn: str, reason: str) -> None:
    with pytest.raises(InvalidRecordError) as info:
        check_stream_name(arn)
    message = str(info.value)
    assert message.startswith(f"stream {arn[:200]!r} is not a valid stream ARN: ")
    assert reason in message
    assert message.endswith(
        "a stream ARN is arn:<partition>:kinesis:<region>:<12-digit account id>:stream/"
        "<stream name>"
    )


def botocore_partition_regions() -> list[tuple[str, str]]:
    """Every ``(partition, region)`` botocore's partition data lists (not ``*-global``)."""
    data = botocore.loaders.create_loader().load_data("partitions")
    return [
        (partition["id"], region)
        for partition in data["partitions"]
        for region in partition["regions"]
        if not region.endswith("-global")
    ]


def test_a_stream_arn_of_every_partition_and_region_botocore_knows_is_accepted() -> None:
    known = botocore_partition_regions()
    assert ("aws-eusc", "eusc-de-east-1") in known  # the partition that was refused
    for partition, region in known:
        arn = f"arn:{partition}:kinesis:{region}:123456789012:stream/s"
        assert parse_stream_arn(arn) == (partition, region, "123456789012", "s"), arn
        # The fake serves every one of them too, under the ARN of the right partition.
        assert FakeKinesis(region=region).stream_arn("s") == arn


@pytest.mark.parametrize("region", ["eusc-de-east-1", "us-isof-south-1", "eu-isoe-west-1"])
async def test_a_stream_arn_of_a_newer_partition_is_written_with_its_region_configured(
    region: str,
) -> None:
    fake = FakeKinesis(region=region)
    fake.add_stream("events")
    arn = fake.stream_arn("events")
    async with Producer(Config(region=region), client=fake) as producer:
        outcome = await producer.put_record(stream=arn, partition_key="k", data=b"x")
    assert (await outcome).success
    assert [r.data for r in fake.stored_records("events")] == [b"x"]


def test_a_bad_name_mentions_that_an_arn_would_do() -> None:
    with pytest.raises(InvalidRecordError, match=r"stream must be 1 … 128 characters .* or a "):
        check_stream_name("no spaces")
    with pytest.raises(InvalidRecordTypeError):
        check_stream_name(b"events")


def test_the_cloudwatch_dimension_of_a_stream_named_by_arn_is_its_name() -> None:
    stats = MetricStatistics("UserRecordsPut", "Count", 1, 1.0, 1.0, 1.0, stream=ARN)
    assert stats.dimensions == (("StreamName", "events"),)


# -- the producer, with one client -------------------------------------------------------------


async def test_records_put_by_arn_land_and_every_call_names_the_stream_by_arn() -> None:
    fake = FakeKinesis()
    fake.add_stream("events", shard_count=2)
    async with Producer(CONFIG, client=fake) as producer:
        outcomes = [
            await producer.put_record(stream=ARN, partition_key=f"k{i}", data=b"%d" % i)
            for i in range(20)
        ]
        await producer.flush(stream=ARN)
        assert all(outcome.done() for outcome in outcomes)
        stats = producer.statistics().streams
        assert [s.stream for s in stats] == [ARN]
    assert all(outcome.result().success for outcome in outcomes)
    assert len(fake.stored_records("events")) >= 1
    for request in fake.requests:
        if request.kwargs.get("NextToken") is None:
            assert request.kwargs.get("StreamARN") == ARN, request
            assert "StreamName" not in request.kwargs, request
    operations = {request.operation for request in fake.requests}
    assert {"ListShards", "PutRecords", "DescribeStreamSummary"} <= operations


async def test_a_malformed_arn_fails_at_put_and_the_producer_keeps_working() -> None:
    fake = FakeKinesis()
    fake.add_stream("events")
    bad = "arn:aws:kinesis:us-east-1:123456789012:stream/bad name"
    async with Producer(CONFIG, client=fake) as producer:
        with pytest.raises(InvalidRecordError, match="is not a valid stream ARN"):
            await producer.put_record(stream=bad, partition_key="k", data=b"x")
        with pytest.raises(InvalidRecordError, match="is not a valid stream ARN"):
            producer.put_record_nowait(stream=bad, partition_key="k", data=b"x")
        with pytest.raises(InvalidRecordError, match="is not a valid stream ARN"):
            await producer.put_records(stream=bad, records=[("k", b"x")])
        assert producer.statistics().streams == ()
        outcome = await producer.put_record(stream=ARN, partition_key="k", data=b"x")
    assert (await outcome).success
    assert not [r for r in fake.requests if "bad name" in str(r.kwargs)]


@pytest.mark.parametrize("config", [CONFIG, Config()], ids=["Config.region", "client region"])
async def test_an_arn_of_another_region_than_the_producers_is_refused_at_put(
    config: Config,
) -> None:
    fake = FakeKinesis()  # in us-east-1: without Config.region, the client's region holds
    fake.add_stream("events")
    elsewhere = "arn:aws:kinesis:eu-west-1:123456789012:stream/events"
    async with Producer(config, client=fake) as producer:
        with pytest.raises(InvalidRecordError) as info:
            await producer.put_record(stream=elsewhere, partition_key="k", data=b"x")
        assert "is in region 'eu-west-1'" in str(info.value)
        assert "writes to 'us-east-1'" in str(info.value)
        assert "leave Config.region unset" in str(info.value)
        outcome = await producer.put_record(stream=ARN, partition_key="k", data=b"x")
    assert (await outcome).success
    assert not [r for r in fake.requests if r.kwargs.get("StreamARN") == elsewhere]


async def test_a_stream_of_another_account_is_written_by_arn_alone() -> None:
    # The fake plays the other account's service: the producer knows nothing but the ARN.
    owner = FakeKinesis(account_id=OTHER_ACCOUNT)
    owner.add_stream("shared")
    arn = owner.stream_arn("shared")
    async with Producer(CONFIG, client=owner) as producer:
        outcome = await producer.put_record(stream=arn, partition_key="k", data=b"x")
    assert (await outcome).success
    assert [r.data for r in owner.stored_records("shared")] == [b"x"]


async def test_an_arn_the_credentials_may_not_use_fails_fast_with_access_denied() -> None:
    fake = FakeKinesis()
    fake.add_stream("events")
    foreign = f"arn:aws:kinesis:us-east-1:{OTHER_ACCOUNT}:stream/events"
    async with Producer(CONFIG, client=fake) as producer:
        outcome = await producer.put_record(stream=foreign, partition_key="k", data=b"x")
        result = await outcome
    assert not result.success
    assert result.error_code == "AccessDeniedException"
    assert len(result.attempts) == 1


async def test_a_name_and_the_arn_of_one_stream_are_two_pipelines() -> None:
    fake = FakeKinesis()
    fake.add_stream("events")
    async with Producer(CONFIG, client=fake) as producer:
        by_name = await producer.put_record(stream="events", partition_key="k", data=b"a")
        by_arn = await producer.put_record(stream=ARN, partition_key="k", data=b"b")
        await producer.flush(stream="events")
        assert by_name.done()
        await producer.flush(stream=ARN)
        assert by_arn.done()
        assert sorted(s.stream for s in producer.statistics().streams) == [ARN, "events"]
    assert sorted(r.data for r in fake.stored_records("events")) == [b"a", b"b"]


# -- the producer's own clients, one per region ------------------------------------------------


class _Opened:
    """A ``create_client`` stand-in: a FakeKinesis per region, each with stream ``events``."""

    def __init__(self) -> None:
        self.fakes: dict[str, FakeKinesis] = {}
        self.closed: list[str] = []

    @contextlib.asynccontextmanager
    async def __call__(self, config: Config) -> AsyncIterator[FakeKinesis]:
        region = config.region or "us-east-1"  # as botocore would from AWS_DEFAULT_REGION
        fake = FakeKinesis(region=region)
        fake.add_stream("events")
        self.fakes[region] = fake
        try:
            yield fake
        finally:
            self.closed.append(region)


async def test_without_config_region_each_arn_is_written_in_its_own_region(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened = _Opened()
    monkeypatch.setattr("aiokpl._producer.producer.create_client", opened)
    eu = "arn:aws:kinesis:eu-west-1:123456789012:stream/events"
    cn = "arn:aws-cn:kinesis:cn-north-1:123456789012:stream/events"
    async with Producer(Config()) as producer:
        assert list(opened.fakes) == ["us-east-1"]  # the producer's region: opened at start
        here = await producer.put_record(stream="events", partition_key="k", data=b"here")
        same = await producer.put_record(stream=ARN, partition_key="k", data=b"same")
        there = await producer.put_record(stream=eu, partition_key="k", data=b"there")
        far = await producer.put_record(stream=cn, partition_key="k", data=b"far")
        await producer.flush()
        assert sorted(opened.fakes) == ["cn-north-1", "eu-west-1", "us-east-1"]
        assert opened.closed == []
    for outcome in (here, same, there, far):
        assert (await outcome).success
    stored = {
        region: sorted(r.data for r in fake.stored_records("events"))
        for region, fake in opened.fakes.items()
    }
    assert stored == {
        "us-east-1": [b"here", b"same"],
        "eu-west-1": [b"there"],
        "cn-north-1": [b"far"],
    }
    # Each region's calls went to its own client, by ARN.
    eu_calls = opened.fakes["eu-west-1"].requests
    assert {r.operation for r in eu_calls} >= {"ListShards", "PutRecords"}
    assert all(r.kwargs.get("StreamARN") == eu for r in eu_calls)
    assert sorted(opened.closed) == ["cn-north-1", "eu-west-1", "us-east-1"]


async def test_with_config_region_the_producer_opens_no_other_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened = _Opened()
    monkeypatch.setattr("aiokpl._producer.producer.create_client", opened)
    eu = "arn:aws:kinesis:eu-west-1:123456789012:stream/events"
    async with Producer(Config(region="us-east-1")) as producer:
        with pytest.raises(InvalidRecordError, match="is in region 'eu-west-1'"):
            await producer.put_record(stream=eu, partition_key="k", data=b"x")
        outcome = await producer.put_record(stream=ARN, partition_key="k", data=b"x")
    assert (await outcome).success
    assert list(opened.fakes) == ["us-east-1"]


# -- capacity mode -----------------------------------------------------------------------------


async def capacity_mode_after_start(fake: Any, stream: str = "events") -> str | None:
    async with Producer(CONFIG, client=fake) as producer:
        outcome = await producer.put_record(stream=stream, partition_key="k", data=b"x")
        await outcome
        await anyio.sleep(1)
        mode = producer.statistics().streams[0].capacity_mode
        assert (await outcome).success
    return mode


@pytest.mark.parametrize("on_demand", [True, False])
async def test_statistics_show_the_capacity_mode(on_demand: bool) -> None:
    fake = FakeKinesis()
    fake.add_stream("events", shard_count=2, on_demand=on_demand)
    mode = await capacity_mode_after_start(fake)
    assert mode == ("ON_DEMAND" if on_demand else "PROVISIONED")
    assert fake.calls("DescribeStreamSummary") == 1


async def test_the_summary_is_asked_beside_the_first_map_and_records_wait_for_both() -> None:
    fake = FakeKinesis()
    fake.add_stream("events", on_demand=True)
    fake.latency = 0.5  # every call takes 0.5 s
    async with Producer(CONFIG, client=fake) as producer:
        t0 = anyio.current_time()
        outcome = await producer.put_record(stream="events", partition_key="k", data=b"x")
        await outcome
        # Both asked at once; the record waited for them (0.5 s, past its deadline), went
        # predicted after the collector's grace (20 ms) and was answered 0.5 s later.
        assert anyio.current_time() - t0 == pytest.approx(1.02, abs=1e-6)
        operations = [r.operation for r in fake.requests]
        assert sorted(operations[:2]) == ["DescribeStreamSummary", "ListShards"]
        assert operations[2:] == ["PutRecords"]
        stats = producer.statistics().streams[0]
        assert (stats.capacity_mode, stats.record_distribution) == (
            "ON_DEMAND",
            "USER_PARTITION_KEY",
        )


async def test_the_summary_is_read_again_every_check_interval() -> None:
    fake = FakeKinesis()
    fake.add_stream("events", shard_count=2)
    config = CONFIG.replace(record_distribution_check_ms=60_000)
    async with Producer(config, client=fake) as producer:
        for _ in range(5):  # kept busy, so its pipeline is not released as idle
            await producer.put_record(stream="events", partition_key="k", data=b"x")
            await anyio.sleep(30)
        # At 0, 60 and 120 s.
        assert fake.calls("DescribeStreamSummary") == 3


async def test_a_denied_summary_leaves_the_mode_unknown_and_is_not_asked_again_soon(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeKinesis()
    fake.add_stream("events", shard_count=2, on_demand=True)
    fake.deny("DescribeStreamSummary")
    async with Producer(CONFIG, client=fake) as producer:
        first = await producer.put_record(stream="events", partition_key="k", data=b"x")
        assert (await first).success
        await anyio.sleep(5)
        stats = producer.statistics().streams[0]
        assert (stats.capacity_mode, stats.record_distribution) == (None, None)
        assert not stats.placed_by_service
        assert fake.calls("DescribeStreamSummary") == 1
        # Ten minutes later (the stream kept busy, so its pipeline is not released as idle)
        # it is asked again, and answered.
        fake.allow("DescribeStreamSummary")
        for _ in range(60):
            await producer.put_record(stream="events", partition_key="k", data=b"x")
            await anyio.sleep(10)
        stats = producer.statistics().streams[0]
        assert stats.capacity_mode == "ON_DEMAND"
    assert fake.calls("DescribeStreamSummary") == 2
    denials = [
        r.getMessage()
        for r in caplog.records
        if "DescribeStreamSummary is denied" in r.getMessage()
    ]
    assert len(denials) == 1
    assert "Grant kinesis:DescribeStreamSummary" in denials[0]


async def test_a_failed_summary_is_asked_again_after_a_backoff() -> None:
    fake = FakeKinesis()
    fake.add_stream("events", shard_count=2)
    fake.fail_requests(2, operation="DescribeStreamSummary", code="LimitExceededException")
    async with Producer(CONFIG, client=fake) as producer:
        assert (
            await (await producer.put_record(stream="events", partition_key="k", data=b"x"))
        ).success
        assert producer.statistics().streams[0].capacity_mode is None
        assert running(producer).streams.pipelines["events"].distribution.last_error == (
            "LimitExceededException",
            "Internal service failure.",
        )
        await anyio.sleep(4)  # backoffs of at most 1 s and 2 s
        assert producer.statistics().streams[0].capacity_mode == "PROVISIONED"
    assert fake.calls("DescribeStreamSummary") == 3


class _ListingOnly:
    """A client with only the methods a producer cannot do without."""

    def __init__(self, fake: FakeKinesis) -> None:
        self.fake = fake

    async def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        return await self.fake.list_shards(**kwargs)

    async def put_records(self, **kwargs: Any) -> dict[str, Any]:
        return await self.fake.put_records(**kwargs)


async def test_a_client_without_describe_stream_summary_works() -> None:
    fake = FakeKinesis()
    fake.add_stream("events", on_demand=True)
    assert await capacity_mode_after_start(_ListingOnly(fake)) is None


# -- reading and the command line ----------------------------------------------------------------


async def test_tail_reads_a_stream_named_by_arn() -> None:
    fake = FakeKinesis()
    fake.add_stream("events", shard_count=2)
    await fake.put_records(
        StreamName="events",
        Records=[{"PartitionKey": f"k{i}", "Data": b"%d" % i} for i in range(6)],
    )
    seen: list[bytes] = []
    await tail_stream(
        fake,
        ARN,
        start=StartPosition("TRIM_HORIZON"),
        on_records=lambda shard, records: seen.extend(r.data for r in records),
        follow=False,
    )
    assert sorted(seen) == [b"%d" % i for i in range(6)]
    assert all(
        r.kwargs.get("StreamARN") == ARN
        for r in fake.requests
        if r.operation in ("ListShards", "GetShardIterator") and "NextToken" not in r.kwargs
    )


def cli_args(stream: str, region: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(
        stream=stream,
        region=region,
        endpoint_url=None,
        profile=None,
        verify_ssl=True,
        ca_bundle=None,
    )


def test_the_command_line_takes_the_region_of_a_stream_arn() -> None:
    eu = "arn:aws:kinesis:eu-west-1:123456789012:stream/events"
    assert config_from_args(cli_args(eu)).region == "eu-west-1"
    assert config_from_args(cli_args(eu, "eu-west-1")).region == "eu-west-1"
    assert config_from_args(cli_args("events")).region is None
    with pytest.raises(InvalidRecordError, match="is in region 'eu-west-1'"):
        config_from_args(cli_args(eu, "us-east-1"))
    with pytest.raises(InvalidRecordError, match="not a valid stream ARN"):
        config_from_args(cli_args("arn:aws:kinesis:eu-west-1:1:stream/events"))


@pytest.mark.parametrize("command", ["put", "tail"])
@pytest.mark.parametrize(
    ("stream", "options", "message"),
    [
        ("arn:aws:kinesis:eu-west-1:1234:stream/events", [], "the account id '1234' is not 12"),
        (
            "arn:aws:kinesis:eu-west-1:123456789012:stream/events",
            ["--region", "us-east-1"],
            "is in region 'eu-west-1'",
        ),
    ],
)
def test_the_command_line_refuses_a_bad_arn_as_a_usage_error(
    command: str,
    stream: str,
    options: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [command, stream, *options, *(["/dev/null"] if command == "put" else [])]
    assert main(argv) == EXIT_USAGE
    assert message in capsys.readouterr().err

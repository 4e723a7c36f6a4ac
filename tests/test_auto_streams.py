"""Streams that place records themselves (``RecordDistributionStrategy`` ``AUTO``) and records
put without a partition key (SPEC §4.16, §4.17).

Through a real ``Producer`` and ``FakeKinesis`` (which places an ``AUTO`` stream's records at
random, as the service does), on asyncio and trio under virtual clocks; what a KCL consumer
sees is read with ``aiokpl.testing.read_as_kcl`` (a consumer drops an aggregate whole when one
of its user records is outside the range of its shard).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import anyio
import botocore.session
import pytest

from aiokpl import Config, Outcome, Producer, RecordResult
from aiokpl._core.decoder import decode, is_aggregated
from aiokpl._core.hashing import MAX_HASH_KEY
from aiokpl.aggregation import deaggregate
from aiokpl.testing import FakeKinesis, read_as_kcl, read_stream
from running import running

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1")
KEYS = 997


def auto_stream(shards: int = 4, **options: Any) -> FakeKinesis:
    fake = FakeKinesis(**options)
    fake.add_stream("s", shards, on_demand=True, record_distribution="AUTO")
    return fake


async def put_many(producer: Producer, count: int, start: int = 0) -> list[Outcome[RecordResult]]:
    return [
        await producer.put_record(
            stream="s", partition_key=f"key-{i % KEYS}", data=f"record-{i}".encode()
        )
        for i in range(start, start + count)
    ]


def stored_user_records(fake: FakeKinesis) -> Counter[bytes]:
    """Every copy of every user record the stream holds, whatever a consumer keeps."""
    found: Counter[bytes] = Counter()
    for stored in fake.stored_records("s"):
        if is_aggregated(stored.data):
            found.update(record.data for record in decode(stored.data))
        else:
            found[stored.data] += 1
    return found


async def kcl_view(fake: FakeKinesis) -> Counter[bytes]:
    return Counter(record.data for _, record in await read_as_kcl(fake, "s"))


async def test_on_an_auto_stream_each_record_goes_alone_once_and_a_kcl_consumer_sees_it() -> None:
    fake = auto_stream(4)
    async with Producer(CONFIG, client=fake) as producer:
        outcomes = await put_many(producer, 2_000)
        results = [await outcome for outcome in outcomes]
        stats = producer.statistics().streams[0]
    assert all(result.success and len(result.attempts) == 1 for result in results)
    assert len(fake.stored_records("s")) == 2_000  # one Kinesis record each
    expected = Counter(f"record-{i}".encode() for i in range(2_000))
    assert stored_user_records(fake) == expected  # no copies
    assert await kcl_view(fake) == expected
    assert (stats.record_distribution, stats.placed_by_service) == ("AUTO", True)
    # One stream-level limit, at the four shards' rates; no per-shard state.
    assert stats.unmapped_rate == (4_000.0, 4 * 1_048_576.0)
    assert stats.rates_by_shard == {}
    assert stats.shard_map_refreshes == 1
    assert stats.billed_kib == 2_000  # each record rounded up to 1 KiB
    # Records landed on every shard, whatever their keys.
    assert {record.shard_id for record in fake.stored_records("s")} == {
        shard.shard_id for shard in fake.shards("s")
    }


class SlowSummary(FakeKinesis):
    """``DescribeStreamSummary`` answers ``delay`` seconds late (``ListShards`` at once)."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    async def describe_stream_summary(self, **kwargs: Any) -> dict[str, Any]:
        await anyio.sleep(self.delay)
        return await super().describe_stream_summary(**kwargs)


@pytest.mark.parametrize("delay", [0.05, 0.5])
async def test_records_put_before_the_first_summary_are_not_aggregated_for_an_auto_stream(
    delay: float,
) -> None:
    # The map loads at once; the summary says AUTO 50 ms later (within the records'
    # deadline: they wait for it), or 500 ms later (past it: they go alone at their deadline).
    fake = SlowSummary(delay)
    fake.add_stream("s", 4, on_demand=True, record_distribution="AUTO")
    async with Producer(CONFIG, client=fake) as producer:
        outcomes = await put_many(producer, 20)
        await anyio.sleep(0.01)  # the map is in, the summary not yet
        outcomes += await put_many(producer, 500, start=20)
        results = [await outcome for outcome in outcomes]
    assert all(result.success and len(result.attempts) == 1 for result in results)
    assert len(fake.stored_records("s")) == 520  # not one aggregate


async def test_records_sent_alone_awaiting_the_summary_are_aggregated_when_it_answers() -> None:
    # The map loads at once, the summary 0.5 s later: records put meanwhile reach their
    # deadline and go alone to the stream-level limit (one shard's rates, one second of
    # burst). The summary says the stream places records by key: what still
    # waits there is predicted and aggregated, not trickled out one by one.
    fake = SlowSummary(0.5)
    fake.add_stream("s", 4)
    async with Producer(CONFIG, client=fake) as producer:
        await anyio.sleep(0.01)
        outcomes = await put_many(producer, 5_000)
        results = [await outcome for outcome in outcomes]
        finished = anyio.current_time()
    assert all(result.success for result in results)
    stored = fake.stored_records("s")
    # What the stream-level limit let through until the summary came (1,000 of burst and
    # 1,000 a second from 0.1 s to 0.5 s), then a few aggregates; not 5,000 one by one.
    assert len(stored) < 1_500
    assert finished < 1.0  # not 4 s at one shard's rate


async def test_records_without_a_key_held_past_their_deadline_are_placed_first() -> None:
    # No map before half the records' TTL is left (0.25 s): each goes alone, and must carry a
    # key there (the stream places records by key), not go without one.
    fake = FakeKinesis()
    fake.add_stream("s", 4)
    fake.latency = 0.3
    async with Producer(CONFIG.replace(record_ttl_ms=500), client=fake) as producer:
        outcomes = [await producer.put_record(stream="s", data=b"%d" % i) for i in range(50)]
        results = [await outcome for outcome in outcomes]
    assert all(result.success and len(result.attempts) == 1 for result in results)
    stored = fake.stored_records("s")
    assert all(record.partition_key == "-" for record in stored)


async def test_a_record_without_a_key_goes_to_an_auto_stream_without_one() -> None:
    fake = auto_stream(2)
    async with Producer(CONFIG, client=fake) as producer:
        outcome = await producer.put_record(stream="s", data=b"no key")
        result = await outcome
    assert result.success
    (stored,) = fake.stored_records("s")
    assert (stored.partition_key, stored.explicit_hash_key, stored.data) == (None, None, b"no key")
    (read,) = [record for _, record in await read_stream(fake, "s")]
    assert "PartitionKey" not in read
    (user,) = deaggregate(read)
    assert (user.partition_key, user.data) == (None, b"no key")


async def test_tags_on_an_auto_stream_fail_at_once_unless_aggregates_may_go_anywhere(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = auto_stream(4)
    async with Producer(CONFIG, client=fake) as producer:
        await (await producer.put_record(stream="s", partition_key="warm", data=b"w"))
        tagged = [
            await producer.put_record(stream="s", partition_key="k", data=b"t", tags={"a": "b"})
            for _ in range(3)
        ]
        results = [await outcome for outcome in tagged]
    for result in results:
        assert not result.success
        assert result.error_code == "TagsOnAutoStream"
        assert "aggregation_on_auto_streams=True" in (result.error_message or "")
    warnings = [r.getMessage() for r in caplog.records if "TagsOnAutoStream" in r.getMessage()]
    assert len(warnings) == 1  # once, not per record
    # Consumers without the range check: aggregates go, tags and all, wherever they land.
    fake = auto_stream(4)
    config = CONFIG.replace(aggregation_on_auto_streams=True)
    async with Producer(config, client=fake) as producer:
        outcomes = [
            await producer.put_record(
                stream="s", partition_key=f"k{i}", data=b"t%d" % i, tags={"n": str(i)}
            )
            for i in range(100)
        ]
        assert all(result.success for result in [await outcome for outcome in outcomes])
    stored = fake.stored_records("s")
    assert len(stored) < 10  # aggregated
    users = [
        user
        for record in stored
        for user in deaggregate({"Data": record.data, "PartitionKey": record.partition_key})
    ]
    assert sorted((user.data, dict(user.tags)) for user in users) == sorted(
        (b"t%d" % i, {"n": str(i)}) for i in range(100)
    )


async def test_ordering_by_shard_fails_on_an_auto_stream_with_its_reason() -> None:
    fake = auto_stream(2)
    async with Producer(CONFIG.replace(ordering="shard"), client=fake) as producer:
        result = await (await producer.put_record(stream="s", partition_key="k", data=b"x"))
    assert not result.success
    assert result.error_code == "OrderingOnAutoStream"
    assert "ordering='shard' cannot be kept" in (result.error_message or "")
    assert fake.stored_records("s") == []


async def offer(
    producer: Producer, per_second: int, seconds: float, start: int = 0
) -> list[Outcome[RecordResult]]:
    """Put ``per_second`` records a second for ``seconds``, in steps of 10 ms."""
    outcomes = []
    step = per_second // 100
    for tick in range(int(seconds * 100)):
        outcomes += await put_many(producer, step, start + tick * step)
        await anyio.sleep(0.01)
    return outcomes


async def test_a_stream_switched_under_ordering_by_shard_fails_its_records_with_the_reason() -> (
    None
):
    fake = FakeKinesis()
    fake.add_stream("s", 4, on_demand=True)
    async with Producer(CONFIG.replace(ordering="shard"), client=fake) as producer:
        before = await offer(producer, 500, 2.0)
        fake.set_record_distribution("s", "AUTO")
        during = await offer(producer, 500, 1.0, start=len(before))
        stats = producer.statistics().streams[0]
        after = await put_many(producer, 100, start=len(before) + len(during))
        results = [await outcome for outcome in before + during + after]
    assert (stats.record_distribution, stats.placed_by_service) == ("AUTO", True)
    codes = Counter(result.error_code for result in results if not result.success)
    assert set(codes) == {"OrderingOnAutoStream"}  # no record failed for another reason
    # Those sent before the switch were delivered (the last 100 ms of them were still
    # buffered when it came: they fail with the rest).
    assert all(result.success for result in results[: len(before) - 50])
    # Once the switch is known, nothing more goes: every record put from then on fails.
    assert all(result.error_code == "OrderingOnAutoStream" for result in results[-100:])


async def test_a_live_switch_to_auto_and_back_loses_nothing_for_a_kcl_consumer() -> None:
    # The scenario: 1,500 records/s for 12 s, AUTO from 4 s to 8 s, Config defaults.
    fake = FakeKinesis()
    fake.add_stream("s", 4, on_demand=True)
    async with Producer(CONFIG, client=fake) as producer:
        outcomes = await offer(producer, 1_500, 4.0)
        fake.set_record_distribution("s", "AUTO")
        summaries = fake.calls("DescribeStreamSummary")
        outcomes += await offer(producer, 1_500, 4.0, start=len(outcomes))
        asked = fake.calls("DescribeStreamSummary") - summaries
        placed_by_service = producer.statistics().streams[0].placed_by_service
        fake.set_record_distribution("s", "USER_PARTITION_KEY")
        outcomes += await offer(producer, 1_500, 4.0, start=len(outcomes))
        results = [await outcome for outcome in outcomes]
    count = len(outcomes)
    assert count == 18_000
    assert all(result.success for result in results)
    attempts = sum(len(result.attempts) for result in results)
    assert attempts <= 1.05 * count
    expected = {f"record-{i}".encode() for i in range(count)}
    assert set(await kcl_view(fake)) == expected  # every record, for a KCL consumer
    stored = stored_user_records(fake)
    assert set(stored) == expected
    assert sum(stored.values()) - count <= 0.01 * count  # extra copies
    # The switch was learnt from the first misplaced aggregate, not at the next interval
    # (5 minutes by default), with one summary.
    assert placed_by_service
    assert asked == 1


async def test_a_switch_back_aggregates_again_at_the_next_check() -> None:
    fake = auto_stream(4)
    config = CONFIG.replace(record_distribution_check_ms=5_000)
    async with Producer(config, client=fake) as producer:
        before = await offer(producer, 1_000, 1.0)
        fake.set_record_distribution("s", "USER_PARTITION_KEY")
        during = await offer(producer, 1_000, 6.0, start=len(before))
        stored_before = len(fake.stored_records("s"))
        after = await offer(producer, 1_000, 1.0, start=len(before) + len(during))
        results = [await outcome for outcome in before + during + after]
        stats = producer.statistics().streams[0]
    assert all(result.success and len(result.attempts) == 1 for result in results)
    assert (stats.record_distribution, stats.placed_by_service) == ("USER_PARTITION_KEY", False)
    # The last second's 1,000 records went in aggregates (a few per shard per 100 ms).
    assert len(fake.stored_records("s")) - stored_before < 200
    assert len(await kcl_view(fake)) == len(results)


async def test_without_the_summary_a_misplaced_aggregate_is_evidence_enough(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = auto_stream(4)
    fake.deny("DescribeStreamSummary")
    async with Producer(CONFIG, client=fake) as producer:
        outcomes = await offer(producer, 1_000, 2.0)
        results = [await outcome for outcome in outcomes]
        stats = producer.statistics().streams[0]
    assert all(result.success for result in results)
    assert (stats.record_distribution, stats.placed_by_service) == (None, True)
    assert set(await kcl_view(fake)) == {f"record-{i}".encode() for i in range(len(outcomes))}
    denied = [r for r in caplog.records if "DescribeStreamSummary is denied" in r.getMessage()]
    assert len(denied) == 1
    assert fake.calls("DescribeStreamSummary") == 1  # not asked again on evidence


async def test_records_without_a_key_aggregate_and_spread_on_a_stream_placed_by_key() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 4)
    async with Producer(CONFIG, client=fake) as producer:
        outcomes = []
        for i in range(8_000):
            outcomes.append(await producer.put_record(stream="s", data=b"%05d" % i + b"x" * 95))
            if i % 100 == 99:
                await anyio.sleep(0.01)
        results = [await outcome for outcome in outcomes]
    assert all(result.success and len(result.attempts) == 1 for result in results)
    stored = fake.stored_records("s")
    users = sum(len(decode(r.data)) if is_aggregated(r.data) else 1 for r in stored)
    assert users == 8_000
    assert users / len(stored) >= 50  # aggregated (about 100-byte records, 50 KiB aggregates)
    by_shard = Counter(result.shard_id for result in results)
    mean = 8_000 / 4
    assert len(by_shard) == 4
    assert all(abs(count - mean) <= 0.1 * mean for count in by_shard.values()), by_shard
    # Each carries the partition key "-" and a hash key of its shard: a KCL consumer keeps it.
    ranges = {shard.shard_id: shard for shard in fake.shards("s")}
    for record in stored:
        for user in decode(record.data):
            assert user.partition_key == "-"
            assert user.explicit_hash_key is not None
            shard = ranges[record.shard_id]
            assert shard.starting_hash_key <= int(user.explicit_hash_key) <= shard.ending_hash_key
    assert len(await kcl_view(fake)) == 8_000


async def test_a_record_without_a_key_and_without_a_map_goes_alone_at_a_random_key() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 4)
    fake.deny("ListShards")
    fake.deny("DescribeStream")
    async with Producer(CONFIG, client=fake) as producer:
        results = [await (await producer.put_record(stream="s", data=b"%d" % i)) for i in range(20)]
    assert all(result.success for result in results)
    stored = fake.stored_records("s")
    assert len(stored) == 20
    assert all(record.partition_key == "-" for record in stored)
    keys = {int(record.explicit_hash_key or -1) for record in stored}
    assert len(keys) == 20
    assert all(0 <= key <= MAX_HASH_KEY for key in keys)


async def test_an_on_demand_stream_placed_by_key_is_left_as_it_is(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 4, on_demand=True)
    caplog.set_level(logging.INFO)
    async with Producer(CONFIG, client=fake) as producer:
        outcomes = await put_many(producer, 1_000)
        assert all(result.success for result in [await outcome for outcome in outcomes])
        stats = producer.statistics().streams[0]
    assert (stats.record_distribution, stats.placed_by_service) == ("USER_PARTITION_KEY", False)
    assert len(fake.stored_records("s")) < 100  # aggregated
    assert any("places records by partition key" in r.getMessage() for r in caplog.records)


# --- the rest of the 2025-26 write API: StreamId, DryRun ------------------------------------


class WithStreamId(FakeKinesis):
    """A service whose summary gives the stream's ``StreamId``."""

    async def describe_stream_summary(self, **kwargs: Any) -> dict[str, Any]:
        answer = await super().describe_stream_summary(**kwargs)
        answer["StreamDescriptionSummary"]["StreamId"] = "stream-id-1"
        return answer


async def test_the_stream_id_the_summary_gives_is_kept_and_not_sent() -> None:
    fake = WithStreamId()
    fake.add_stream("s", 2)
    async with Producer(CONFIG, client=fake) as producer:
        outcomes = await put_many(producer, 50)
        assert all(result.success for result in [await outcome for outcome in outcomes])
        assert running(producer).streams.pipelines["s"].distribution.stream_id == "stream-id-1"
    puts = [request.kwargs for request in fake.requests if request.operation == "PutRecords"]
    assert puts
    assert all("StreamId" not in put for put in puts)


def test_botocore_sends_a_request_with_a_stream_id_past_the_endpoint_url() -> None:
    # Why the producer does not pass StreamId on: botocore's endpoint rules route a request
    # carrying a well-formed one to the stream's own AWS endpoint, whatever endpoint_url says.
    # If this changes, passing it on may become safe.
    session = botocore.session.get_session()
    client = session.create_client(
        "kinesis",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    urls: list[str] = []

    class Captured(Exception):
        """Raised instead of sending: nothing leaves the machine."""

    def before_send(request: Any, **_: Any) -> Any:
        urls.append(request.url)
        raise Captured

    client.meta.events.register("before-send", before_send)
    for stream_id in ("abcdefghijklmnopqrst-uvw", None):
        extra = {} if stream_id is None else {"StreamId": stream_id}
        with pytest.raises(Captured):
            client.put_records(
                StreamName="s", Records=[{"Data": b"x", "PartitionKey": "k"}], **extra
            )
    assert urls == [
        "https://abcdefghijklmnopqrst.uvw.data-kinesis.us-east-1.amazonaws.com/",
        "http://127.0.0.1:9/",
    ]


async def test_a_dry_run_before_the_first_record_says_it_would_be_taken() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 2)
    async with Producer(CONFIG.replace(dry_run_check=True), client=fake) as producer:
        result = await (await producer.put_record(stream="s", partition_key="k", data=b"x"))
        stats = producer.statistics().streams[0]
    assert result.success
    assert stats.dry_run == "DryRunOperationException"
    puts = [r.kwargs for r in fake.requests if r.operation == "PutRecords"]
    assert [put.get("DryRun") for put in puts] == [True, None]  # the dry run first
    assert [record.data for record in fake.stored_records("s")] == [b"x"]  # it stored nothing
    # Off by default: no dry run.
    fake = FakeKinesis()
    fake.add_stream("s", 2)
    async with Producer(CONFIG, client=fake) as producer:
        await (await producer.put_record(stream="s", partition_key="k", data=b"x"))
        assert producer.statistics().streams[0].dry_run is None
    assert all("DryRun" not in r.kwargs for r in fake.requests)


async def test_a_dry_run_denied_is_one_line_naming_the_permission_before_the_first_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 2)
    fake.deny("PutRecords")
    async with Producer(CONFIG.replace(dry_run_check=True), client=fake) as producer:
        outcomes = await put_many(producer, 3)
        results = [await outcome for outcome in outcomes]
        stats = producer.statistics().streams[0]
    assert stats.dry_run == "AccessDeniedException"
    assert {result.error_code for result in results} == {"AccessDeniedException"}
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "Grant kinesis:PutRecords" in errors[0]


class IgnoresDryRun(FakeKinesis):
    """A server older than ``DryRun`` (moto, kinesalite): it stores the record."""

    async def put_records(self, **kwargs: Any) -> dict[str, Any]:
        kwargs.pop("DryRun", None)
        return await super().put_records(**kwargs)


async def test_a_server_that_ignores_dry_run_is_said_to(caplog: pytest.LogCaptureFixture) -> None:
    fake = IgnoresDryRun()
    fake.add_stream("s", 1)
    async with Producer(CONFIG.replace(dry_run_check=True), client=fake) as producer:
        assert (await (await producer.put_record(stream="s", partition_key="k", data=b"x"))).success
        assert producer.statistics().streams[0].dry_run == "Stored"
    assert any("does not know DryRun" in r.getMessage() for r in caplog.records)
    assert [r.partition_key for r in fake.stored_records("s")] == ["aiokpl-dry-run", "k"]

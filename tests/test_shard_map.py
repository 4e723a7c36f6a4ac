"""The shard map, seen through the producer, at exact virtual timestamps (SPEC §4.2, §4.10).

Loading with ``ListShards`` (``AT_LATEST``, pages of 1000, ``NextToken`` alone on later pages),
the ``DescribeStream`` fallback when ``ListShards`` fails (remembered for 10 minutes when it is
denied, with one warning per stream naming the missing permission), refresh backoff (1 s ×1.5
up to 30 s, jittered down by up to half), invalidation only by news, predictions that continue
while a refresh runs, resharding, and a stream that does not exist.
Everything runs on asyncio and trio under virtual clocks (see conftest).
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import anyio
import pytest

from aiokpl import Config, Producer, RecordResult
from aiokpl._core.decoder import decode, is_aggregated
from aiokpl.testing import FakeKinesis
from running import running

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1")
EPS = 1e-6
HALF = 2**127
SEND = 0.1 + 0.02  # deadline + collector grace, for a predicted (aggregated) record


def shard(n: int) -> str:
    return f"shardId-{n:012d}"


class TimedListShards(FakeKinesis):
    """A FakeKinesis that notes when each ``ListShards`` call arrives.

    Args:
        slow_calls: ``{n: seconds}``: the ``n``-th call (from 1) waits that long first.
    """

    def __init__(self, slow_calls: dict[int, float] | None = None) -> None:
        super().__init__()
        self.list_times: list[float] = []
        self._slow_calls = slow_calls or {}

    async def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        self.list_times.append(anyio.current_time())
        delay = self._slow_calls.get(len(self.list_times))
        if delay:
            await anyio.sleep(delay)
        return await super().list_shards(**kwargs)


async def warm_up(producer: Producer, stream: str) -> None:
    """Load the stream's shard map, so later records are predicted and aggregated."""
    outcome = await producer.put_record(stream=stream, partition_key="warm-up", data=b"")
    assert (await outcome).success  # sent at its deadline, 100 ms on: the map loaded meanwhile
    assert producer.statistics().streams[0].shard_map_state == "READY"


def user_records(fake: FakeKinesis, stream: str = "s") -> list[tuple[str, bytes]]:
    """(shard, data) of every user record stored, deaggregated."""
    found: list[tuple[str, bytes]] = []
    for stored in fake.stored_records(stream):
        if is_aggregated(stored.data):
            found.extend((stored.shard_id, r.data) for r in decode(stored.data))
        else:
            found.append((stored.shard_id, stored.data))
    return found


def codes(result: RecordResult) -> list[str | None]:
    return [attempt.error_code for attempt in result.attempts]


def state(producer: Producer) -> tuple[str, int]:
    stats = producer.statistics().streams[0]
    return stats.shard_map_state, stats.open_shards


async def test_failed_loads_back_off_with_jitter_and_records_flow_meanwhile() -> None:
    fake = TimedListShards()
    fake.add_stream("s", shard_count=2)
    # Each attempt tries ListShards, then DescribeStream: both fail three times.
    fake.fail_requests(3, code="InternalFailure", http_status=500, operation="ListShards")
    fake.fail_requests(3, code="LimitExceededException", operation="DescribeStream")
    async with Producer(CONFIG, client=fake) as producer:
        t0 = anyio.current_time()
        early = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"early %d" % i)
            for i in range(3)
        ]
        await anyio.sleep(0.3)
        assert state(producer) == ("INVALID", 0)
        stats = producer.statistics().streams[0]
        assert stats.shard_map_last_error is not None
        assert stats.shard_map_last_error[:2] == ("DescribeStream", "LimitExceededException")
        assert stats.shard_map_source is None
        await anyio.sleep(0.7)
        t1 = anyio.current_time()
        late = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"late %d" % i)
            for i in range(3)
        ]
        early_results = [await outcome for outcome in early]
        late_results = [await outcome for outcome in late]
        await anyio.sleep(10)
        assert state(producer) == ("READY", 2)
        assert producer.statistics().streams[0].shard_map_refreshes == 1
    times = fake.list_times
    assert len(times) == 4  # three failures, then the load that stuck
    calls = [op for op, _ in fake.requests if op not in ("PutRecords", "DescribeStreamSummary")]
    assert calls == ["ListShards", "DescribeStream"] * 3 + ["ListShards"]
    assert times[0] == pytest.approx(t0, abs=EPS)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    for gap, nominal in zip(gaps, (1.0, 1.5, 2.25), strict=True):
        assert nominal / 2 - EPS <= gap <= nominal + EPS
    # Before the map loads nothing is predicted: each record goes alone, raw, at its deadline
    # (the collector's grace is only for records that enter it before their deadline).
    assert times[3] > t1  # the late records were put before the map loaded, too
    for results, put_at in ((early_results, t0), (late_results, t1)):
        for result in results:
            assert result.success
            (attempt,) = result.attempts
            assert attempt.started_at == pytest.approx(put_at + 0.1, abs=EPS)
    stored = fake.stored_records("s")
    assert len(stored) == 6
    assert all(not is_aggregated(record.data) for record in stored)
    assert {record.partition_key for record in stored} == {"k0", "k1", "k2"}


async def test_the_map_loads_page_by_page() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2500)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        assert state(producer) == ("READY", 2500)
        top = await producer.put_record(
            stream="s", partition_key="k", data=b"d", explicit_hash_key=2**128 - 1
        )
    assert top.result().shard_id == shard(2499)
    assert len(top.result().attempts) == 1
    pages = [kwargs for operation, kwargs in fake.requests if operation == "ListShards"]
    assert len(pages) == 3
    assert pages[0] == {"StreamName": "s", "ShardFilter": {"Type": "AT_LATEST"}, "MaxResults": 1000}
    for page in pages[1:]:
        assert set(page) == {"NextToken", "MaxResults"}
        assert page["MaxResults"] == 1000
    assert pages[1]["NextToken"] != pages[2]["NextToken"]


async def test_a_burst_of_stale_results_after_a_split_refreshes_once() -> None:
    fake = TimedListShards()
    fake.add_stream("s", shard_count=2)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        fake.split("s", shard(0), HALF // 2)  # children: shards 2 (lower) and 3 (upper)
        fake.latency = 0.3  # every call, ListShards included: results overlap the refresh
        outcomes = []
        for i in range(200):
            outcomes.append(
                await producer.put_record(stream="s", partition_key=f"key-{i}", data=b"%d" % i)
            )
            await anyio.sleep(0.01)
        results = [await outcome for outcome in outcomes]
        await anyio.sleep(5)
        stats = producer.statistics().streams[0]
    assert len(fake.list_times) == 2  # the warm-up's load and one refresh
    assert (stats.shard_map_state, stats.open_shards, stats.shard_map_refreshes) == ("READY", 3, 2)
    refresh_started = fake.list_times[1]
    refreshed_at = refresh_started + 0.3
    assert all(result.success for result in results)
    assert {result.shard_id for result in results} == {shard(1), shard(2), shard(3)}
    # Answers that contradicted the map: a record predicted for shard 0 (any answer sent
    # before the refresh completed that landed on a child) or an aggregate on the wrong child.
    contradicting = [
        attempt
        for result in results
        for attempt in result.attempts
        if attempt.error_code == "Wrong Shard"
        or (attempt.shard_id in (shard(2), shard(3)) and attempt.started_at < refreshed_at)
    ]
    # Many of them, and every kind that must not start another refresh:
    # answered while the refresh ran,
    during = [a for a in contradicting if refresh_started < a.ended_at < refreshed_at]
    # sent before it completed and answered after (not news: seen before the map loaded),
    straddling = [a for a in contradicting if a.started_at < refreshed_at < a.ended_at]
    # sent after it, still predicted for shard 0, which the map no longer has (only such a
    # prediction makes an aggregate land on the wrong child once the children are known).
    blaming_a_closed_shard = [
        a for a in contradicting if a.error_code == "Wrong Shard" and a.started_at > refreshed_at
    ]
    # A burst, not a single answer. (How many depends on the pipeline: aggregates on a child
    # the map did not know yet wait for the refresh instead of being retried whole.)
    assert len(contradicting) >= 20
    assert during
    assert straddling
    assert blaming_a_closed_shard
    delivered = {data for _, data in user_records(fake)}
    assert delivered == {b""} | {b"%d" % i for i in range(200)}


async def test_predictions_continue_with_the_previous_map_during_a_refresh() -> None:
    fake = TimedListShards(slow_calls={2: 5.0})  # the refresh after the split takes 5 s
    fake.add_stream("s", shard_count=2)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        fake.split("s", shard(0), HALF // 2)
        trigger = await producer.put_record(
            stream="s", partition_key="k", data=b"trigger", explicit_hash_key=1
        )
        assert (await trigger).shard_id == shard(2)
        await anyio.sleep(0.1)
        assert len(fake.list_times) == 2
        refresh_started = fake.list_times[1]
        stored_before = len(fake.stored_records("s"))
        t0 = anyio.current_time()
        outcomes = [
            await producer.put_record(
                stream="s", partition_key="k", data=b"%d" % i, explicit_hash_key=HALF + i
            )
            for i in range(100)
        ]
        assert state(producer) == ("UPDATING", 2)  # the previous map, still in use
        results = [await outcome for outcome in outcomes]
        assert anyio.current_time() < refresh_started + 5.0
        assert state(producer) == ("UPDATING", 2)
        assert shard(1) in producer.statistics().streams[0].rates_by_shard
        await anyio.sleep(5)
        assert state(producer) == ("READY", 3)
    for result in results:
        assert result.success
        (attempt,) = result.attempts
        assert attempt.shard_id == shard(1)
        assert attempt.started_at == pytest.approx(t0 + SEND, abs=EPS)
    # Aggregated, as with a loaded map: one Kinesis record for the hundred.
    assert len(fake.stored_records("s")) == stored_before + 1
    assert len({result.sequence_number for result in results}) == 1


async def test_after_a_merge_records_land_on_the_child() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        child = fake.merge("s", shard(0), shard(1))
        list_shards = fake.calls("ListShards")
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"key-{i}", data=b"%d" % i)
            for i in range(50)
        ]
        results = [await outcome for outcome in outcomes]
        await anyio.sleep(2)
        assert state(producer) == ("READY", 1)
        later = await producer.put_record(stream="s", partition_key="later", data=b"later")
        later_result = await later
    assert fake.calls("ListShards") == list_shards + 1
    assert all(result.success and result.shard_id == child for result in results)
    # The first aggregates landed on a shard the map did not know yet, so they went again.
    assert all(codes(result) in ([None], ["Wrong Shard", None]) for result in results)
    assert later_result.shard_id == child
    assert len(later_result.attempts) == 1
    assert {data for _, data in user_records(fake)} == {b"", b"later"} | {
        b"%d" % i for i in range(50)
    }
    assert all(s == child for s, data in user_records(fake) if data != b"")


async def test_a_missing_stream_fails_fast_and_its_map_waits_for_the_next_record() -> None:
    fake = TimedListShards()
    async with Producer(CONFIG, client=fake) as producer:
        t0 = anyio.current_time()
        outcomes = [
            await producer.put_record(stream="missing", partition_key=f"k{i}", data=b"d")
            for i in range(5)
        ]
        results = [await outcome for outcome in outcomes]
        failed_at = anyio.current_time()
        assert failed_at == pytest.approx(t0 + 0.1, abs=EPS)
        await anyio.sleep(6)
        assert state(producer) == ("INVALID", 0)
        leaving = anyio.current_time()
    assert anyio.current_time() - leaving < 0.5
    for result in results:
        assert not result.success
        assert result.error_code == "ResourceNotFoundException"
        assert len(result.attempts) == 1
    # No refresh in the background for a stream that does not exist: the next record put to
    # it tries again (tests/test_bounded_state.py).
    assert len(fake.list_times) == 1
    calls = [operation for operation, _ in fake.requests]
    assert calls.count("PutRecords") == 1
    assert "DescribeStream" not in calls  # a missing stream: no fallback


class IgnoresTheFilter(FakeKinesis):
    """Lists closed shards despite ``AT_LATEST``, as moto and kinesalite do."""

    async def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        kwargs.pop("ShardFilter", None)
        return await super().list_shards(**kwargs)


async def test_closed_shards_listed_despite_the_filter_are_dropped() -> None:
    fake = IgnoresTheFilter()
    fake.add_stream("s", shard_count=2)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        fake.split("s", shard(0), HALF // 2)
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"%d" % i)
            for i in range(200)
        ]
        results = [await outcome for outcome in outcomes]
        stats = producer.statistics().streams[0]
    # The overlapping closed parent did not break the refresh: the map has the 3 open shards.
    assert (stats.shard_map_state, stats.open_shards, stats.shard_map_refreshes) == ("READY", 3, 2)
    assert all(result.success for result in results)
    assert {result.shard_id for result in results} <= {shard(1), shard(2), shard(3)}


class RefreshFailsAfterTheFirst(FakeKinesis):
    """Loads the map once, then every ``ListShards`` fails, and so does ``DescribeStream``."""

    async def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        if self.calls("ListShards") >= 1:
            self.fail_requests(1, code="InternalFailure", http_status=500, operation="ListShards")
            self.fail_requests(1, code="LimitExceededException", operation="DescribeStream")
        return await super().list_shards(**kwargs)


async def test_a_verdict_waiting_for_a_refresh_that_fails_is_decided_anyway() -> None:
    fake = RefreshFailsAfterTheFirst()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(record_ttl_ms=3_000)
    async with Producer(config, client=fake) as producer:
        await warm_up(producer, "s")
        fake.split("s", shard(0), HALF)
        t0 = anyio.current_time()
        # One aggregate predicted for the closed parent lands on a child the map cannot learn.
        first = await producer.put_record(
            stream="s", partition_key="k", data=b"a", explicit_hash_key=5
        )
        second = await producer.put_record(
            stream="s", partition_key="k", data=b"b", explicit_hash_key=HALF + 5
        )
        with anyio.fail_after(10):
            await producer.flush()  # does not hang waiting for the refresh
        results = [first.result(), second.result()]
    # Without a map, nothing is known about the child: retried as "Wrong Shard" until the TTL.
    for result in results:
        assert not result.success
        assert result.error_code == "Expired"
        assert "Wrong Shard" in {a.error_code for a in result.attempts}
        assert result.attempts[-1].ended_at == pytest.approx(t0 + 3.0, abs=EPS)  # at its TTL


class FirstListingMalformed(FakeKinesis):
    """The first ``ListShards`` answer has no ``Shards`` (as botocore parses a non-JSON page)."""

    async def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        answer = await super().list_shards(**kwargs)
        return {} if self.calls("ListShards") == 1 else answer


async def test_an_answer_without_shards_is_a_failed_listing_not_an_empty_map(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FirstListingMalformed()
    fake.add_stream("s", shard_count=2)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        stats = producer.statistics().streams[0]
        # The malformed listing failed: the same attempt loaded the map with DescribeStream.
        assert (stats.shard_map_state, stats.open_shards) == ("READY", 2)
        assert stats.shard_map_source == "DescribeStream"
        # A malformed answer is its own error (not "Internal", as a failed call), counted
        # and logged as such.
        assert stats.shard_map_last_error == (
            "ListShards",
            "MalformedResponse",
            "ListShards answered without any open shard",
        )
        assert running(producer).streams.pipelines["s"].shard_map.malformed_answers == 1
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
            "ListShards answered malformed for stream 's' (ListShards answered without any "
            "open shard): the answer is not used"
        ]
        # Not a denial: the next refresh asks ListShards again.
        fake.split("s", shard(0), HALF // 2)
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"d")
            for i in range(20)
        ]
        assert all([(await outcome).success for outcome in outcomes])
        await anyio.sleep(1)
        stats = producer.statistics().streams[0]
        assert (stats.shard_map_state, stats.open_shards) == ("READY", 3)
        assert (stats.shard_map_source, stats.shard_map_last_error) == ("ListShards", None)
    assert fake.calls("ListShards") == 2
    assert fake.calls("DescribeStream") == 1


class DescribesACreatingStream(FakeKinesis):
    async def describe_stream(self, **kwargs: Any) -> dict[str, Any]:
        answer = await super().describe_stream(**kwargs)
        answer["StreamDescription"]["StreamStatus"] = "CREATING"
        return answer


async def test_describe_stream_of_a_stream_not_active_is_a_failed_load() -> None:
    fake = DescribesACreatingStream()
    fake.add_stream("s", shard_count=2)
    fake.fail_requests(1, code="InternalFailure", http_status=500, operation="ListShards")
    async with Producer(CONFIG, client=fake) as producer:
        await producer.put_record(stream="s", partition_key="k", data=b"d")
        await anyio.sleep(0.01)
        stats = producer.statistics().streams[0]
        assert (stats.shard_map_state, stats.open_shards) == ("INVALID", 0)
        assert stats.shard_map_last_error == (
            "DescribeStream",
            "StreamNotActive",
            "stream 's' is CREATING",
        )
        await anyio.sleep(1.0)  # the retry, after the first backoff (0.5 … 1 s)
        assert state(producer) == ("READY", 2)
    assert fake.calls("ListShards") == 2
    assert fake.calls("DescribeStream") == 1


def denial_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "aiokpl.shard_map" and record.levelno >= logging.WARNING
    ]


async def test_list_shards_denied_loads_with_describe_stream(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = TimedListShards()
    fake.add_stream("s", shard_count=250)
    fake.deny("ListShards")
    async with Producer(CONFIG, client=fake) as producer:
        t0 = anyio.current_time()
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"key-{i}", data=b"%d" % i)
            for i in range(2000)
        ]
        results = [await outcome for outcome in outcomes]
        stats = producer.statistics().streams[0]
        assert (stats.shard_map_state, stats.open_shards) == ("READY", 250)
        assert stats.shard_map_source == "DescribeStream"
        assert stats.shard_map_last_error is not None
        assert stats.shard_map_last_error[:2] == ("ListShards", "AccessDeniedException")
        # A split: the refresh goes to DescribeStream directly, ListShards is not asked.
        fake.split("s", shard(0), 2**100)
        split = [
            await producer.put_record(
                stream="s", partition_key="k", data=b"split", explicit_hash_key=2**100 + i
            )
            for i in range(10)
        ]
        assert all([(await outcome).success for outcome in split])
        await anyio.sleep(1)
        assert state(producer) == ("READY", 251)
        assert fake.calls("ListShards") == 1
        assert fake.calls("DescribeStream") == 6  # 3 pages per load
        # Ten minutes after the denial, a refresh tries ListShards again: now allowed.
        fake.allow("ListShards")
        await anyio.sleep(600 - (anyio.current_time() - t0))
        middle_of_1 = (2**128 // 250) * 3 // 2
        fake.split("s", shard(1), middle_of_1)
        late = await producer.put_record(
            stream="s", partition_key="k", data=b"late", explicit_hash_key=middle_of_1
        )
        assert (await late).success
        await anyio.sleep(1)
        stats = producer.statistics().streams[0]
        assert (stats.shard_map_state, stats.open_shards) == ("READY", 252)
        assert (stats.shard_map_source, stats.shard_map_last_error) == ("ListShards", None)
    assert fake.calls("DescribeStream") == 6
    describes = [kwargs for operation, kwargs in fake.requests if operation == "DescribeStream"]
    assert describes[:3] == [
        {"StreamName": "s", "Limit": 100},
        {"StreamName": "s", "Limit": 100, "ExclusiveStartShardId": shard(99)},
        {"StreamName": "s", "Limit": 100, "ExclusiveStartShardId": shard(199)},
    ]
    # The records were predicted and aggregated: a few aggregates, no record sent alone twice.
    assert all(result.success and len(result.attempts) == 1 for result in results)
    assert len(fake.stored_records("s")) < 300
    assert sorted(data for _, data in user_records(fake) if data.isdigit()) == sorted(
        b"%d" % i for i in range(2000)
    )
    (warning,) = denial_warnings(caplog)
    assert "kinesis:ListShards" in warning
    assert "DescribeStream" in warning
    assert "kinesis:DescribeStream" not in warning


async def test_both_denied_warns_once_naming_both_and_records_still_go(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    fake.deny("ListShards")
    fake.deny("DescribeStream")
    async with Producer(CONFIG, client=fake) as producer:
        t0 = anyio.current_time()
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"%d" % i)
            for i in range(20)
        ]
        results = [await outcome for outcome in outcomes]
        await anyio.sleep(60)  # many more attempts, all denied
        stats = producer.statistics().streams[0]
        assert (stats.shard_map_state, stats.open_shards, stats.shard_map_source) == (
            "INVALID",
            0,
            None,
        )
        assert stats.shard_map_last_error is not None
        assert stats.shard_map_last_error[:2] == ("DescribeStream", "AccessDeniedException")
    assert fake.calls("DescribeStream") >= 5
    # ListShards is asked on the first attempt only (then again after ten minutes).
    assert fake.calls("ListShards") == 1
    for result in results:
        assert result.success
        (attempt,) = result.attempts
        assert attempt.started_at == pytest.approx(t0 + 0.1, abs=EPS)  # alone, at its deadline
    assert len(fake.stored_records("s")) == 20  # not aggregated
    (warning,) = denial_warnings(caplog)
    assert "kinesis:ListShards" in warning
    assert "kinesis:DescribeStream" in warning
    assert "not aggregated" in warning

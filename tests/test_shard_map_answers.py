"""The shard map's error boundary: only its client calls are caught.

A malformed ``ListShards``, ``DescribeStream`` or ``DescribeStreamSummary`` answer is its own
error (``"MalformedResponse"``: logged, counted, in ``last_error``), not an ``"Internal"``
failure like a broken connection; an exception from our own code reading an answer
propagates instead of being retried forever. The readers themselves (``_core.listings``)
are tested synchronously at the end.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from aiokpl import Config, Producer
from aiokpl._core.listings import (
    MALFORMED,
    NOT_ACTIVE,
    StreamSummary,
    UnusableAnswer,
    describe_stream_page,
    list_shards_page,
    open_shards_table,
    summary_of,
)
from aiokpl.testing import FakeKinesis
from running import running

CONFIG = Config(region="us-east-1")


def shard(n: int, start: int = 0, end: int = 2**128 - 1, closed: bool = False) -> dict[str, Any]:
    sequence: dict[str, str] = {"StartingSequenceNumber": "1"}
    if closed:
        sequence["EndingSequenceNumber"] = "9"
    return {
        "ShardId": f"shardId-{n:012d}",
        "HashKeyRange": {"StartingHashKey": str(start), "EndingHashKey": str(end)},
        "SequenceNumberRange": sequence,
    }


class Garbled(FakeKinesis):
    """A fake whose listings come back garbled (``list_shards`` and ``describe_stream`` answer
    with ``listing``, ``describe_stream_summary`` with ``summary``), until ``heal()``."""

    def __init__(self, listing: object, summary: object = None) -> None:
        super().__init__()
        self.listing = listing
        self.summary = summary
        self.healed = False

    def heal(self) -> None:
        self.healed = True

    async def list_shards(self, **kwargs: Any) -> Any:
        answer = await super().list_shards(**kwargs)
        return answer if self.healed else self.listing

    async def describe_stream(self, **kwargs: Any) -> Any:
        answer = await super().describe_stream(**kwargs)
        return answer if self.healed else self.listing

    async def describe_stream_summary(self, **kwargs: Any) -> Any:
        answer = await super().describe_stream_summary(**kwargs)
        return answer if self.summary is None else self.summary


@pytest.mark.anyio
@pytest.mark.parametrize(
    "listing",
    [
        pytest.param({"Shards": [{"ShardId": "x"}]}, id="shard-without-range"),
        pytest.param({"Shards": "none"}, id="shards-not-a-list"),
        pytest.param([], id="not-a-document"),
    ],
)
async def test_a_malformed_listing_is_its_own_error_counted_and_retried(
    listing: object, caplog: pytest.LogCaptureFixture
) -> None:
    fake = Garbled(listing)
    fake.add_stream("s", shard_count=2)
    async with Producer(CONFIG, client=fake) as producer:
        await producer.put_record(stream="s", partition_key="k", data=b"d")
        await anyio.sleep(0.01)
        stats = producer.statistics().streams[0]
        assert (stats.shard_map_state, stats.open_shards) == ("INVALID", 0)
        assert stats.shard_map_last_error is not None
        assert stats.shard_map_last_error[:2] == ("DescribeStream", MALFORMED)
        shard_map = running(producer).streams.pipelines["s"].shard_map
        assert shard_map.malformed_answers == 2  # ListShards, then DescribeStream
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert warnings[0].startswith("ListShards answered malformed for stream 's' (")
        assert warnings[1].startswith("DescribeStream answered malformed for stream 's' (")
        # Retried after the backoff (0.5 … 1 s), like a failed call: it loads once healed.
        fake.heal()
        await anyio.sleep(1.0)
        stats = producer.statistics().streams[0]
        assert (stats.shard_map_state, stats.open_shards) == ("READY", 2)
        assert stats.shard_map_last_error is None
        assert shard_map.malformed_answers == 2


@pytest.mark.anyio
async def test_a_malformed_summary_is_counted_and_logged_and_the_mode_stays_unknown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = Garbled(None, summary={"StreamDescriptionSummary": {"StreamModeDetails": {}}})
    fake.heal()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG, client=fake) as producer:
        outcome = await producer.put_record(stream="s", partition_key="k", data=b"d")
        assert (await outcome).success
        stats = producer.statistics().streams[0]
        assert (stats.capacity_mode, stats.record_distribution) == (None, None)
        assert stats.shard_map_last_error is None  # the map's state does not depend on it
        assert running(producer).streams.pipelines["s"].distribution.malformed_answers == 1
        assert running(producer).streams.pipelines["s"].distribution.last_error == (
            "MalformedResponse",
            "DescribeStreamSummary answered without StreamModeDetails.StreamMode",
        )
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "DescribeStreamSummary answered malformed for stream 's' (DescribeStreamSummary "
        "answered without StreamModeDetails.StreamMode): the answer is not used"
    ]


@pytest.mark.anyio
async def test_a_bug_reading_a_listing_propagates_instead_of_failing_the_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Only the client call is caught: a bug in our own reading of an answer is not an
    # "Internal" failure retried with backoff for ever, indistinguishable from an outage.
    def broken(shards: object, operation: str) -> None:
        raise RuntimeError("bug in the reader")

    monkeypatch.setattr("aiokpl._pipeline.shard_map.open_shards_table", broken)
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    with pytest.RaisesGroup(
        pytest.RaisesExc(RuntimeError, match="bug in the reader"), flatten_subgroups=True
    ):
        async with Producer(CONFIG, client=fake) as producer:
            await producer.put_record(stream="s", partition_key="k", data=b"d")
            await anyio.sleep(60)
    assert fake.calls("ListShards") == 1


# --- the readers, synchronously -------------------------------------------------------------
def test_list_shards_pages() -> None:
    assert list_shards_page({"Shards": [shard(0)], "NextToken": "t"}) == ([shard(0)], "t")
    assert list_shards_page({"NextToken": ""}) == ([], None)  # no Shards: botocore omits []
    assert list_shards_page({"Shards": [], "NextToken": 5}) == ([], None)
    for response, message in (
        (None, "ListShards answered a NoneType"),
        ({"Shards": {"a": 1}}, "ListShards answered Shards that are not a list of shards"),
        ({"Shards": ["shardId-0"]}, "ListShards answered Shards that are not a list of shards"),
    ):
        with pytest.raises(UnusableAnswer) as caught:
            list_shards_page(response)
        assert (caught.value.code, caught.value.message) == (MALFORMED, message)
        assert str(caught.value) == f"{MALFORMED}: {message}"


def test_describe_stream_pages() -> None:
    def page(status: str = "ACTIVE", more: bool = False, shards: Any = None) -> dict[str, Any]:
        shards = [shard(0), shard(1)] if shards is None else shards
        description = {"StreamStatus": status, "HasMoreShards": more, "Shards": shards}
        return {"StreamDescription": description}

    assert describe_stream_page("s", page()) == ([shard(0), shard(1)], None)
    assert describe_stream_page("s", page("UPDATING", more=True)) == (
        [shard(0), shard(1)],
        "shardId-000000000001",
    )
    for response, code, message in (
        ({}, MALFORMED, "DescribeStream answered without a StreamDescription"),
        ("x", MALFORMED, "DescribeStream answered without a StreamDescription"),
        (page("CREATING"), NOT_ACTIVE, "stream 's' is CREATING"),
        (
            page(more=True, shards=[]),
            MALFORMED,
            "DescribeStream answered HasMoreShards without any shard",
        ),
        (
            page(more=True, shards=[{}]),
            MALFORMED,
            "DescribeStream answered HasMoreShards without any shard",
        ),
    ):
        with pytest.raises(UnusableAnswer) as caught:
            describe_stream_page("s", response)
        assert (caught.value.code, caught.value.message) == (code, message)


def test_the_table_holds_the_open_shards_only() -> None:
    half = 2**127
    shards = [shard(0, closed=True), shard(1, 0, half - 1), shard(2, half)]
    table = open_shards_table(shards, "ListShards")
    assert [s.shard_id for s in table] == ["shardId-000000000001", "shardId-000000000002"]
    for listing, message in (
        ([shard(0, closed=True)], "ListShards answered without any open shard"),
        ([{"ShardId": "x"}], "ListShards answered malformed shard description: KeyError"),
        ([shard(1, 0, half), shard(2, half)], "ListShards answered shard"),
    ):
        with pytest.raises(UnusableAnswer) as caught:
            open_shards_table(listing, "ListShards")
        assert caught.value.code == MALFORMED
        assert caught.value.message.startswith(message)


def test_the_summary() -> None:
    summary = {
        "StreamDescriptionSummary": {
            "StreamModeDetails": {"StreamMode": "ON_DEMAND"},
            "RecordDistributionStrategy": "AUTO",
            "OpenShardCount": 4,
            "StreamId": "abc",
        }
    }
    assert summary_of(summary) == StreamSummary("ON_DEMAND", "AUTO", 4, "abc")
    # A server older than capacity modes (kinesalite) says nothing of them: not malformed;
    # a stream without a distribution (provisioned, or an older server) places by key.
    assert summary_of({"StreamDescriptionSummary": {"StreamStatus": "ACTIVE"}}) == StreamSummary(
        None, "USER_PARTITION_KEY", None, None
    )
    garbled: list[object] = [None, {}, {"StreamDescriptionSummary": []}]
    for response in garbled:
        with pytest.raises(UnusableAnswer, match="without a StreamDescriptionSummary"):
            summary_of(response)
    odd_details: list[object] = [[], {}, {"StreamMode": 1}]
    for details in odd_details:
        with pytest.raises(UnusableAnswer, match=r"without StreamModeDetails\.StreamMode"):
            summary_of({"StreamDescriptionSummary": {"StreamModeDetails": details}})
    for member, value, says in (
        ("RecordDistributionStrategy", 1, "RecordDistributionStrategy that is not a string"),
        ("OpenShardCount", "4", "OpenShardCount that is not an integer"),
        ("OpenShardCount", True, "OpenShardCount that is not an integer"),
        ("StreamId", 7, "StreamId that is not a string"),
    ):
        with pytest.raises(UnusableAnswer, match=says) as caught:
            summary_of({"StreamDescriptionSummary": {member: value}})
        assert caught.value.code == MALFORMED

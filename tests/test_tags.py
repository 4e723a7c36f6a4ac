"""Record tags through the producer: every put path, on asyncio and trio, read back from the
stream with ``deaggregate`` (ours) and ``aws_kinesis_agg`` (AWS's)."""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any, Literal

import anyio
import pytest

from aiokpl import (
    Config,
    InvalidRecordError,
    InvalidRecordTypeError,
    RecordResult,
    SyncProducer,
)
from aiokpl._core.encoder import MAX_TAGS, encode_tags
from aiokpl._core.hashing import MAX_HASH_KEY
from aiokpl._core.wire import MAGIC
from aiokpl._producer.producer import Producer
from aiokpl.aggregation import DeaggregatedRecord, Tag, deaggregate, is_aggregated
from aiokpl.testing import FakeKinesis, read_stream
from test_producer import warm_up

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1")


async def read_back(fake: FakeKinesis, stream: str) -> list[DeaggregatedRecord]:
    return [user for _, record in await read_stream(fake, stream) for user in deaggregate(record)]


def tags_by_data(records: list[DeaggregatedRecord]) -> dict[bytes, tuple[Tag, ...]]:
    return {record.data: record.tags for record in records}


async def test_tags_travel_inside_aggregates_on_every_async_put_path() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        outcomes = [
            await producer.put_record(
                stream="s", partition_key="a", data=b"mapping", tags={"env": "prod", "x": None}
            ),
            await producer.put_record(stream="s", partition_key="a", data=b"untagged"),
            producer.put_record_nowait(
                stream="s", partition_key="b", data=b"nowait", tags=[Tag("k", "v"), ("k", "w")]
            ),
        ]
        outcomes += await producer.put_records(
            stream="s",
            records=[
                ("c", b"group-plain"),
                ("c", b"group-tagged", None, {"n": "1"}),
                ["d", b"group-list", str(MAX_HASH_KEY), [("pinned", "")]],
                ("d", b"group-none", None, None),
            ],
        )
        results = [await outcome for outcome in outcomes]
    assert all(result.success for result in results)
    stored = await read_back(fake, "s")
    assert all(record.aggregated for record in stored if record.data != b"")
    assert tags_by_data(stored) == {
        b"": (),  # the warm-up record
        b"mapping": (Tag("env", "prod"), Tag("x")),
        b"untagged": (),
        b"nowait": (Tag("k", "v"), Tag("k", "w")),
        b"group-plain": (),
        b"group-tagged": (Tag("n", "1"),),
        b"group-list": (Tag("pinned", ""),),
        b"group-none": (),
    }
    # Aggregated with their untagged neighbours: one Kinesis record for the first two.
    assert results[0].sequence_number == results[1].sequence_number


async def test_a_lone_tagged_record_goes_as_an_aggregate_of_one() -> None:
    """A raw Kinesis record has no place for tags: alone, a tagged record is still framed,
    with its own partition key and hash key, so it lands where it would have raw."""
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=4)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        tagged = await producer.put_record(
            stream="s", partition_key="alone", data=b"tagged", tags={"t": "1"}
        )
        await producer.flush()
        pinned = await producer.put_record(
            stream="s",
            partition_key="alone",
            data=b"pinned",
            explicit_hash_key=MAX_HASH_KEY,
            tags=[("t", None)],
        )
        await producer.flush()
        plain = await producer.put_record(stream="s", partition_key="alone", data=b"plain")
        results = [await tagged, await pinned, await plain]
    assert results[2].shard_id == results[0].shard_id  # routed by the same partition key
    assert results[1].shard_id == "shardId-000000000003"  # the explicit hash key decides
    by_data = {stored.data: stored for stored in fake.stored_records("s")}
    assert not is_aggregated(by_data[b"plain"].data)
    framed = [stored for stored in fake.stored_records("s") if is_aggregated(stored.data)]
    assert len(framed) == 2
    for stored in framed:
        assert stored.data.startswith(MAGIC)
        assert stored.partition_key == "alone"  # not the aggregates' "a"
    read = {r.data: r for r in await read_back(fake, "s")}
    assert read[b"tagged"].tags == (Tag("t", "1"),)
    assert read[b"pinned"].tags == (Tag("t"),)
    assert read[b"pinned"].explicit_hash_key == str(MAX_HASH_KEY)
    assert read[b"plain"].tags == ()
    assert not read[b"plain"].aggregated


async def test_aws_kinesis_agg_reads_what_the_producer_wrote_with_tags() -> None:
    saved = sys.path[:]
    try:
        from aws_kinesis_agg import deaggregator
    finally:
        sys.path[:] = saved
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        for i in range(5):
            await producer.put_record(
                stream="s", partition_key=f"k{i}", data=b"%d" % i, tags={"i": str(i)}
            )
        await producer.put_record(stream="s", partition_key="z", data=b"alone", tags={"z": "z"})
    records = [record for _, record in await read_stream(fake, "s")]
    theirs = list(deaggregator.iter_deaggregate_records(records, data_format="Boto3"))
    assert sorted(base64.b64decode(r["kinesis"]["data"]) for r in theirs) == sorted(
        [b"", b"alone"] + [b"%d" % i for i in range(5)]
    )


async def test_a_retried_tagged_record_keeps_its_tags() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        fake.script_records([("InternalFailure", "try again")])
        outcomes = [
            await producer.put_record(
                stream="s", partition_key=f"k{i}", data=b"%d" % i, tags={"i": str(i)}
            )
            for i in range(3)
        ]
        results = [await outcome for outcome in outcomes]
    assert all(result.success for result in results)
    assert [a.error_code for a in results[0].attempts] == ["InternalFailure", None]
    stored = await read_back(fake, "s")
    assert tags_by_data(stored) == {b"": ()} | {b"%d" % i: (Tag("i", str(i)),) for i in range(3)}


async def test_tags_count_toward_max_record_size_as_an_aggregate_of_one() -> None:
    limit = 1000
    config = CONFIG.replace(max_record_size=limit)
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(config, client=fake) as producer:
        tags = {"key": "v" * 100}
        # Key and data alone fit; with the tags and the framing (as an aggregate of one,
        # partition key included) they do not.
        with pytest.raises(InvalidRecordError, match=r"plus tags is \d+ bytes .*max_record_size"):
            await producer.put_record(stream="s", partition_key="k", data=bytes(900), tags=tags)
        assert producer.outstanding_records == 0
        fits = await producer.put_record(stream="s", partition_key="k", data=bytes(800), tags=tags)
        assert (await fits).success
        # The tags' bytes count toward the outstanding bytes while the record is held.
        held = await producer.put_record(stream="s", partition_key="k", data=b"", tags=tags)
        assert producer.outstanding_bytes == len("k") + len(encode_tags(tags))
        await held


async def test_tags_need_aggregation() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG.replace(aggregation_enabled=False), client=fake) as producer:
        with pytest.raises(InvalidRecordError, match=r"tags need aggregation"):
            await producer.put_record(stream="s", partition_key="k", data=b"x", tags={"a": "b"})
        with pytest.raises(InvalidRecordError, match=r"^records\[1\]: tags need aggregation"):
            await producer.put_records(
                stream="s", records=[("k", b"x"), ("k", b"y", None, {"a": "b"})]
            )
        assert producer.outstanding_records == 0
        # No tags (or empty ones) is an ordinary record.
        plain = await producer.put_record(stream="s", partition_key="k", data=b"z", tags={})
        assert (await plain).success


@pytest.mark.parametrize(
    ("tags", "error", "message"),
    [
        pytest.param("a=b", InvalidRecordTypeError, r"tags must be a mapping", id="str"),
        pytest.param({"a": 1}, InvalidRecordTypeError, r"tags\[0\]: a tag's value", id="value"),
        pytest.param([("a", "b", "c")], InvalidRecordTypeError, r"tags\[0\]: a tag is", id="3"),
        pytest.param({"\ud800": None}, InvalidRecordError, r"tags\[0\]: .* UTF-8", id="utf8"),
        pytest.param(
            {f"k{i}": None for i in range(MAX_TAGS + 1)},
            InvalidRecordError,
            r"tags: more than 1000 tags; a record may have at most 1000",
            id="too-many-mapping",
        ),
        pytest.param(
            [("k", "v")] * (MAX_TAGS + 1),
            InvalidRecordError,
            r"tags: more than 1000 tags; a record may have at most 1000",
            id="too-many-pairs",
        ),
    ],
)
async def test_bad_tags_are_rejected_at_put_and_change_nothing(
    tags: Any, error: type[Exception], message: str
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG, client=fake) as producer:
        with pytest.raises(error, match=message):
            await producer.put_record(stream="s", partition_key="k", data=b"x", tags=tags)
        with pytest.raises(error, match=message):
            producer.put_record_nowait(stream="s", partition_key="k", data=b"x", tags=tags)
        with pytest.raises(error, match=r"^records\[0\]: " + message):
            await producer.put_records(stream="s", records=[("k", b"x", None, tags)])
        assert producer.outstanding_records == 0
        ok = await producer.put_record(stream="s", partition_key="k", data=b"x", tags={"a": "b"})
        assert (await ok).success


async def test_a_put_reads_no_more_than_one_tag_past_the_limit() -> None:
    """Each tag costs work on every path that reads it, whatever its size: a put of 50,000
    tags (200 KB) was accepted, and held the event loop 2.5 s in its reserved-key check."""
    read = 0

    def tags() -> Iterator[tuple[str, None]]:
        nonlocal read
        for i in range(50_000):
            read += 1
            yield ("aiokpl.x" if i == 0 else "", None)  # a reserved key: its check reads all

    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG, client=fake) as producer:
        with pytest.raises(InvalidRecordError, match="more than 1000 tags"):
            await producer.put_record(stream="s", partition_key="k", data=b"x", tags=tags())
        assert read == MAX_TAGS + 1
        most = [(f"k{i}", None) for i in range(MAX_TAGS)]
        ok = await producer.put_record(stream="s", partition_key="k", data=b"x", tags=most)
        assert (await ok).success
    (record,) = await read_back(fake, "s")
    assert record.tags == tuple(Tag(key) for key, _ in most)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_sync_producer_puts_tags(backend: Literal["asyncio", "trio"]) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    futures: list[Future[RecordResult]] = []
    with SyncProducer(CONFIG, client=fake, backend=backend) as producer:
        for i in range(20):
            futures.append(
                producer.put_record(
                    stream="s", partition_key=f"k{i}", data=b"%d" % i, tags=[("i", str(i))]
                )
            )
        futures.append(producer.put_record(stream="s", partition_key="p", data=b"plain"))
        with pytest.raises(InvalidRecordTypeError, match="tags must be a mapping"):
            producer.put_record(stream="s", partition_key="k", data=b"x", tags=5)  # type: ignore[arg-type]
    assert all(future.result(30).success for future in futures)
    stored = anyio.run(read_back, fake, "s")
    assert tags_by_data(stored) == {b"%d" % i: (Tag("i", str(i)),) for i in range(20)} | {
        b"plain": ()
    }
    with (
        SyncProducer(CONFIG.replace(aggregation_enabled=False), client=fake) as producer,
        pytest.raises(InvalidRecordError, match="tags need aggregation"),
    ):
        producer.put_record(stream="s", partition_key="k", data=b"x", tags={"a": "b"})


async def test_a_failed_tagged_record_comes_back_with_its_tags_for_a_replay() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(return_record_on_failure=True)
    async with Producer(config, client=fake) as producer:
        await warm_up(producer, "s")
        fake.script_records([("AccessDeniedException", "no")])  # fails at once, not retried
        outcomes = [
            await producer.put_record(
                stream="s", partition_key="k", data=b"tagged", tags={"a": "b"}
            ),
            await producer.put_record(stream="s", partition_key="k", data=b"plain"),
        ]
        failed = [(await outcome).record for outcome in outcomes]
        assert failed[0] is not None
        assert failed[1] is not None
        assert failed[0].tags == (Tag("a", "b"),)
        assert "tags=(Tag(key='a', value='b'),)" in repr(failed[0])
        assert failed[1].tags == ()
        replayed = await producer.put_record(
            stream="s",
            partition_key=failed[0].partition_key,
            data=failed[0].data,
            tags=failed[0].tags,
        )
        assert (await replayed).success
    assert tags_by_data(await read_back(fake, "s"))[b"tagged"] == (Tag("a", "b"),)

"""``aiokpl._cli.reader.tail_stream`` against the in-process fake, under virtual time.

Every read goes through :class:`aiokpl.testing.FakeKinesis`, whose shards close and list their
children as the service's do, so the reader's resharding rules, its pacing (exact virtual
times of its calls) and its error handling are checked without a server.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from datetime import datetime, timezone
from typing import Any

import anyio
import pytest

from aiokpl import Config, Producer
from aiokpl._cli.reader import MIN_READ_INTERVAL, StartPosition, TailError, tail_stream
from aiokpl._cli.tail import format_record
from aiokpl._kinesis import client_error
from aiokpl.aggregation import MAGIC, DeaggregatedRecord, Record, Tag, encode
from aiokpl.testing import FakeKinesis
from aiokpl.tracing import context_tags

pytestmark = pytest.mark.anyio

TRIM_HORIZON = StartPosition("TRIM_HORIZON")
LATEST = StartPosition("LATEST")


class Recorder:
    """A client that notes the virtual time of each call and can fail chosen calls."""

    def __init__(self, fake: FakeKinesis) -> None:
        self.fake = fake
        self.calls: list[tuple[str, float, dict[str, Any]]] = []
        self.fail: dict[tuple[str, int], BaseException] = {}  # (method, nth call) -> error

    def times(self, method: str) -> list[float]:
        return [at for name, at, _ in self.calls if name == method]

    def __getattr__(self, method: str) -> Any:
        async def call(**arguments: Any) -> dict[str, Any]:
            self.calls.append((method, anyio.current_time(), arguments))
            error = self.fail.pop((method, len(self.times(method))), None)
            if error is not None:
                await anyio.lowlevel.checkpoint()
                raise error
            response: dict[str, Any] = await getattr(self.fake, method)(**arguments)
            return response

        return call


class Collected:
    """The ``on_records`` callback: keeps ``(shard_id, record)`` pairs in arrival order."""

    def __init__(self, stop_after: int | None = None, scope: anyio.CancelScope | None = None):
        self.records: list[tuple[str, DeaggregatedRecord]] = []
        self.stop_after = stop_after
        self.scope = scope

    def __call__(self, shard_id: str, records: list[DeaggregatedRecord]) -> None:
        self.records += [(shard_id, record) for record in records]
        if self.stop_after is not None and len(self.records) >= self.stop_after:
            assert self.scope is not None
            self.scope.cancel()

    def data(self, partition_key: str | None = None) -> list[bytes]:
        return [r.data for _, r in self.records if partition_key in (None, r.partition_key)]


async def put(fake: FakeKinesis, stream: str, key: str, *datas: bytes) -> None:
    for data in datas:
        await fake.put_record(StreamName=stream, PartitionKey=key, Data=data)


async def test_reads_every_user_record_of_every_shard() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=3)
    sent: list[tuple[str, bytes, str | None]] = []
    async with Producer(Config(region="us-east-1"), client=fake) as producer:
        await (await producer.put_record(stream="s", partition_key="warm", data=b"up"))
        sent.append(("warm", b"up", None))
        for i in range(300):
            key, data = f"k{i % 17}", f"record {i}".encode()
            ehk = str(i * 10**35) if i % 5 == 0 else None
            if i % 7 == 0:
                data = bytes([0xFF, i % 256])  # not UTF-8
            await producer.put_record(
                stream="s", partition_key=key, data=data, explicit_hash_key=ehk
            )
            sent.append((key, data, ehk))
    collected = Collected()
    await tail_stream(fake, "s", start=TRIM_HORIZON, on_records=collected, follow=False)

    assert Counter((r.partition_key, r.data) for _, r in collected.records) == Counter(
        (key, data) for key, data, _ in sent
    )
    aggregated = [r for _, r in collected.records if r.aggregated]
    assert len(aggregated) > 100  # the fixture does exercise deaggregation
    wanted_ehk: dict[tuple[str | None, bytes], str | None] = {
        (key, data): ehk for key, data, ehk in sent
    }
    for shard_id, record in collected.records:
        if record.aggregated:  # Kinesis returns no explicit hash key for a plain record
            assert record.explicit_hash_key == wanted_ehk[(record.partition_key, record.data)]
        stored = {s.sequence_number: s for s in fake.stored_records("s", shard_id)}
        assert record.sequence_number in stored
    # Within one Kinesis record, sub-sequence numbers count up from 0.
    by_sequence: dict[str | None, list[int]] = {}
    for _, record in collected.records:
        by_sequence.setdefault(record.sequence_number, []).append(record.sub_sequence_number)
    assert all(subs == list(range(len(subs))) for subs in by_sequence.values())


async def test_a_split_parent_is_read_to_its_end_before_its_children() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    await put(fake, "s", "k", b"a0", b"a1", b"a2")
    children = fake.split("s", "shardId-000000000000", 2**127)
    await put(fake, "s", "k", b"b0", b"b1")
    await put(fake, "s", "other", b"c0")
    started: list[str] = []
    collected = Collected()
    await tail_stream(
        fake,
        "s",
        start=TRIM_HORIZON,
        on_records=collected,
        follow=False,
        on_shard_started=lambda shard_id, kind: started.append(f"{shard_id} {kind}"),
    )
    assert collected.data("k") == [b"a0", b"a1", b"a2", b"b0", b"b1"]
    assert collected.data("other") == [b"c0"]
    assert started[0] == "shardId-000000000000 TRIM_HORIZON"
    assert sorted(started[1:]) == [f"{child} TRIM_HORIZON" for child in sorted(children)]


async def test_a_merged_child_waits_for_both_parents() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    # The left parent has a backlog, the right one is read at once: the child must still wait
    # for the left one to be read to its end.
    await put(fake, "s", "left", *[f"l{i}".encode() for i in range(5)])
    await put(fake, "s", "right", b"r0")
    child = fake.merge("s", "shardId-000000000000", "shardId-000000000001")
    await put(fake, "s", "left", b"l5")
    await put(fake, "s", "right", b"r1")
    started: list[str] = []
    collected = Collected()
    await tail_stream(
        fake,
        "s",
        start=TRIM_HORIZON,
        on_records=collected,
        follow=False,
        limit=1,
        on_shard_started=lambda shard_id, kind: started.append(shard_id),
    )
    assert collected.data("left") == [f"l{i}".encode() for i in range(6)]
    assert collected.data("right") == [b"r0", b"r1"]
    assert sorted(started[:2]) == ["shardId-000000000000", "shardId-000000000001"]
    assert started[2:] == [child]
    shards = [shard_id for shard_id, _ in collected.records]
    assert shards.index(child) == len(shards) - 2  # after every parent record


async def test_latest_skips_old_records_and_reads_children_from_their_start() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    await put(fake, "s", "k", b"old")
    started: list[str] = []
    reading = anyio.Event()

    def on_started(shard_id: str, kind: str) -> None:
        started.append(f"{shard_id} {kind}")
        reading.set()

    async with anyio.create_task_group() as task_group:
        collected = Collected(stop_after=3, scope=task_group.cancel_scope)
        task_group.start_soon(
            lambda: tail_stream(
                fake, "s", start=LATEST, on_records=collected, on_shard_started=on_started
            )
        )
        await reading.wait()
        await put(fake, "s", "k", b"new0")
        children = fake.split("s", "shardId-000000000000", 2**127)
        await put(fake, "s", "k", b"new1", b"new2")
    assert collected.data() == [b"new0", b"new1", b"new2"]
    assert started[0] == "shardId-000000000000 LATEST"
    assert sorted(started[1:]) == [f"{child} TRIM_HORIZON" for child in sorted(children)]


async def test_latest_does_not_read_shards_closed_before_it_started() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    await put(fake, "s", "k", b"old")
    children = fake.split("s", "shardId-000000000000", 2**127)
    client = Recorder(fake)
    started: list[str] = []
    with anyio.move_on_after(5):
        await tail_stream(
            client,
            "s",
            start=LATEST,
            on_records=Collected(),
            on_shard_started=lambda shard_id, kind: started.append(f"{shard_id} {kind}"),
        )
    assert sorted(started) == [f"{child} LATEST" for child in sorted(children)]


async def test_at_timestamp_starts_at_the_first_record_written_then() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    await put(fake, "s", "a", b"early")
    await anyio.sleep(10)
    moment = datetime.fromtimestamp(anyio.current_time(), tz=timezone.utc)
    await put(fake, "s", "a", b"late0")
    await put(fake, "s", "b", b"late1")
    collected = Collected()
    await tail_stream(
        fake,
        "s",
        start=StartPosition("AT_TIMESTAMP", moment),
        on_records=collected,
        follow=False,
    )
    assert sorted(collected.data()) == [b"late0", b"late1"]
    assert all(r.approximate_arrival_timestamp >= moment for _, r in collected.records)


async def test_polls_fast_while_behind_and_slowly_once_caught_up() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    await put(fake, "s", "k", b"0", b"1", b"2", b"3", b"4")
    await anyio.sleep(10)  # so that MillisBehindLatest is not 0 while behind
    client = Recorder(fake)
    collected = Collected()
    start = anyio.current_time()
    with anyio.move_on_after(2.5):
        await tail_stream(
            client, "s", start=TRIM_HORIZON, on_records=collected, poll_interval=1.0, limit=2
        )
    assert collected.data() == [b"0", b"1", b"2", b"3", b"4"]
    # Pages of 2, 2 and 1 records (caught up after the third), then empty polls.
    offsets = [at - start for at in client.times("get_records")]
    step = MIN_READ_INTERVAL
    assert offsets == pytest.approx([0.0, step, 2 * step, 2 * step + 1.0, 2 * step + 2.0])


async def test_throttling_and_transient_errors_back_off_and_retry() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    await put(fake, "s", "k", b"x", b"y")
    fake.fail_requests(
        2,
        code="ProvisionedThroughputExceededException",
        message="Rate exceeded for shard",
        http_status=400,
        operation="GetRecords",
    )
    fake.fail_requests(1, operation="GetRecords")  # InternalFailure, 500
    client = Recorder(fake)
    warnings: list[str] = []
    collected = Collected()
    start = anyio.current_time()
    await tail_stream(
        client,
        "s",
        start=TRIM_HORIZON,
        on_records=collected,
        follow=False,
        on_warning=warnings.append,
        random_value=lambda: 0.0,  # no jitter: nominal delays
    )
    assert collected.data() == [b"x", b"y"]
    offsets = [at - start for at in client.times("get_records")]
    assert offsets == pytest.approx([0.0, 0.5, 1.5, 3.5])  # 0.5, then x2 per failure
    assert warnings == [
        "GetRecords failed (ProvisionedThroughputExceededException: Rate exceeded for shard); "
        "retrying in 0.5 s",
        "GetRecords failed (ProvisionedThroughputExceededException: Rate exceeded for shard); "
        "retrying in 1.0 s",
        "GetRecords failed (InternalFailure: Internal service failure.); retrying in 2.0 s",
    ]


async def test_an_expired_iterator_is_renewed_after_the_last_record_read() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    await put(fake, "s", "k", b"0", b"1", b"2")
    await anyio.sleep(10)  # so that the first page is not "caught up"
    client = Recorder(fake)
    client.fail[("get_records", 2)] = client_error(
        "ExpiredIteratorException", "Iterator expired.", "GetRecords"
    )
    collected = Collected()
    await tail_stream(client, "s", start=TRIM_HORIZON, on_records=collected, follow=False, limit=2)
    assert collected.data() == [b"0", b"1", b"2"]
    iterator_calls = [a for name, _, a in client.calls if name == "get_shard_iterator"]
    second = collected.records[1][1].sequence_number
    assert [a["ShardIteratorType"] for a in iterator_calls] == [
        "TRIM_HORIZON",
        "AFTER_SEQUENCE_NUMBER",
    ]
    assert iterator_calls[1]["StartingSequenceNumber"] == second


async def test_an_iterator_that_expires_before_any_record_restarts_where_it_began() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    await put(fake, "s", "k", b"0")
    client = Recorder(fake)
    client.fail[("get_records", 1)] = client_error("ExpiredIteratorException", "x", "GetRecords")
    collected = Collected()
    await tail_stream(client, "s", start=TRIM_HORIZON, on_records=collected, follow=False)
    assert collected.data() == [b"0"]
    types = [a["ShardIteratorType"] for name, _, a in client.calls if name == "get_shard_iterator"]
    assert types == ["TRIM_HORIZON", "TRIM_HORIZON"]


async def test_a_missing_stream_is_a_tail_error() -> None:
    fake = FakeKinesis()
    with pytest.raises(TailError) as raised:
        await tail_stream(fake, "nope", start=LATEST, on_records=Collected())
    assert raised.value.code == "ResourceNotFoundException"
    assert str(raised.value).startswith("ResourceNotFoundException: Stream nope")


async def test_a_stream_deleted_while_read_ends_the_reader_with_a_tail_error() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)

    def on_records(shard_id: str, records: list[DeaggregatedRecord]) -> None:
        fake.remove_stream("s")

    await put(fake, "s", "k", b"0")
    with pytest.raises(TailError) as raised:
        await tail_stream(fake, "s", start=TRIM_HORIZON, on_records=on_records)
    assert raised.value.code == "ResourceNotFoundException"


async def test_an_undecodable_aggregate_is_passed_on_as_it_is() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    body = b"\x0a\x05ab"  # a partition key that runs past the end of the body
    blob = MAGIC + body + hashlib.md5(body).digest()
    await put(fake, "s", "k", blob)
    warnings: list[str] = []
    collected = Collected()
    await tail_stream(
        fake,
        "s",
        start=TRIM_HORIZON,
        on_records=collected,
        follow=False,
        on_warning=warnings.append,
    )
    assert [(r.partition_key, r.data, r.aggregated) for _, r in collected.records] == [
        ("k", blob, False)
    ]
    assert len(warnings) == 1
    assert "shown undecoded" in warnings[0]


async def test_records_stored_without_a_partition_key_are_read_with_none() -> None:
    # A stream that places records itself (AUTO) keeps no key for a record put without one.
    fake = FakeKinesis()
    fake.add_stream("auto", shard_count=2, on_demand=True, record_distribution="AUTO")
    await fake.put_record(StreamName="auto", Data=b"keyless")
    await fake.put_records(StreamName="auto", Records=[{"Data": b"keyless too"}])
    await put(fake, "auto", "k", b"keyed")
    collected = Collected()
    await tail_stream(fake, "auto", start=TRIM_HORIZON, on_records=collected, follow=False)
    assert sorted((r.data, r.partition_key, r.aggregated) for _, r in collected.records) == [
        (b"keyed", "k", False),
        (b"keyless", None, False),
        (b"keyless too", None, False),
    ]
    # aiokpl tail prints null for the missing key; every other field as for a keyed record.
    lines = {
        r.data: json.loads(format_record("auto", shard_id, r, "auto"))
        for shard_id, r in collected.records
    }
    keyless, keyed = lines[b"keyless"], lines[b"keyed"]
    assert keyless["partition_key"] is None
    assert keyed["partition_key"] == "k"
    assert list(keyless) == list(keyed)  # the same keys, in the same order
    assert (keyless["data"], keyless["data_encoding"]) == ("keyless", "text")
    assert keyless["explicit_hash_key"] is None
    assert keyless["sequence_number"] == next(
        s.sequence_number for s in fake.stored_records("auto") if s.data == b"keyless"
    )


async def test_a_line_gives_the_trace_context_a_user_record_carries() -> None:
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    state = "rojo=00f067aa0ba902b7"
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    aggregate = encode(
        [
            Record("k", b"traced", None, context_tags(traceparent, state)),
            Record("k", b"untraced", None, (Tag("team", "payments"),)),
            Record("k", b"no state", None, context_tags(traceparent)),
            Record("k", b"damaged", None, (Tag("aiokpl.trace", "not a context"),)),
        ]
    )
    await fake.put_record(StreamName="s", PartitionKey="k", Data=aggregate)
    await put(fake, "s", "k", b"plain")
    collected = Collected()
    await tail_stream(fake, "s", start=TRIM_HORIZON, on_records=collected, follow=False)
    lines = {
        r.data: json.loads(format_record("s", shard_id, r, "auto"))
        for shard_id, r in collected.records
    }
    assert lines[b"traced"]["trace"] == {"traceparent": traceparent, "tracestate": state}
    assert lines[b"no state"]["trace"] == {"traceparent": traceparent, "tracestate": None}
    for untraced in (b"untraced", b"damaged", b"plain"):  # no field at all
        assert "trace" not in lines[untraced]
        assert list(lines[untraced]) == [key for key in lines[b"traced"] if key != "trace"]


async def test_an_undecodable_aggregate_without_a_partition_key_is_passed_on() -> None:
    fake = FakeKinesis()
    fake.add_stream("auto", shard_count=1, on_demand=True, record_distribution="AUTO")
    body = b"\x0a\x05ab"  # a partition key that runs past the end of the body
    blob = MAGIC + body + hashlib.md5(body).digest()
    await fake.put_record(StreamName="auto", Data=blob)
    warnings: list[str] = []
    collected = Collected()
    await tail_stream(
        fake,
        "auto",
        start=TRIM_HORIZON,
        on_records=collected,
        follow=False,
        on_warning=warnings.append,
    )
    assert [(r.partition_key, r.data, r.aggregated) for _, r in collected.records] == [
        (None, blob, False)
    ]
    assert len(warnings) == 1
    assert "shown undecoded" in warnings[0]


async def test_shards_are_listed_page_by_page() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=3)

    class SmallPages(Recorder):
        def __getattr__(self, method: str) -> Any:
            call = super().__getattr__(method)
            if method != "list_shards":
                return call

            async def paged(**arguments: Any) -> dict[str, Any]:
                if "NextToken" not in arguments:
                    arguments["MaxResults"] = 2
                response: dict[str, Any] = await call(**arguments)
                return response

            return paged

    client = SmallPages(fake)
    started: list[str] = []
    await tail_stream(
        client,
        "s",
        start=TRIM_HORIZON,
        on_records=Collected(),
        follow=False,
        on_shard_started=lambda shard_id, kind: started.append(shard_id),
    )
    assert sorted(started) == [shard.shard_id for shard in fake.shards("s")]
    assert len([name for name, _, _ in client.calls if name == "list_shards"]) == 2


async def test_an_error_of_the_first_listing_is_not_retried() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    fake.fail_requests(1, operation="ListShards")  # InternalFailure: retried later, not here
    with pytest.raises(TailError) as raised:
        await tail_stream(fake, "s", start=LATEST, on_records=Collected())
    assert raised.value.code == "InternalFailure"


async def test_a_later_listing_is_retried() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    await put(fake, "s", "k", b"a")
    fake.split("s", "shardId-000000000000", 2**127)
    await put(fake, "s", "k", b"b")
    client = Recorder(fake)
    client.fail[("list_shards", 2)] = client_error("LimitExceededException", "slow", "ListShards")
    warnings: list[str] = []
    collected = Collected()
    await tail_stream(
        client,
        "s",
        start=TRIM_HORIZON,
        on_records=collected,
        follow=False,
        on_warning=warnings.append,
        random_value=lambda: 0.0,
    )
    assert collected.data() == [b"a", b"b"]
    assert warnings == ["ListShards failed (LimitExceededException: slow); retrying in 0.5 s"]

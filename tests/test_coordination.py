"""Coordination in the pipeline: ceilings in the limiter, the producer's coordination task,
and its failure handling, against an in-memory store under the virtual clock (asyncio, trio).
"""

from __future__ import annotations

import logging
import random
from typing import Any

import anyio
import pytest

from aiokpl import Config, ConfigError
from aiokpl._coordination.coordinator import ProducerCoordinator
from aiokpl._core.coordination import (
    ShardLoad,
    Summary,
    decode_report,
    decode_summary,
    encode_summary,
)
from aiokpl._core.records import KinesisRecord
from aiokpl._pipeline.limiter import Limiter, Limits, ShardLimiter
from aiokpl._pipeline.scheduler import RoutedDeadlines, Scheduler
from aiokpl._producer.producer import Producer
from aiokpl.coordination import Coordination, DynamoDBStore, run_summarizer
from aiokpl.testing import FakeKinesis
from running import running
from stages import collect

SHARD = "shardId-000000000000"


class MemoryStore:
    """A CoordinationStore in a dict; can be told to fail or to hang."""

    def __init__(self) -> None:
        self.reports_by_id: dict[str, bytes] = {}
        self.summary: bytes | None = None
        self.failure: BaseException | None = None
        self.hang = False
        self.calls = 0

    async def _io(self) -> None:
        self.calls += 1
        await anyio.lowlevel.checkpoint()
        if self.hang:
            await anyio.sleep_forever()
        if self.failure is not None:
            raise self.failure

    async def publish(self, producer_id: str, data: bytes) -> None:
        await self._io()
        self.reports_by_id[producer_id] = data

    async def remove(self, producer_id: str) -> None:
        await self._io()
        self.reports_by_id.pop(producer_id, None)

    async def reports(self) -> list[bytes]:
        await self._io()
        return list(self.reports_by_id.values())

    async def write_summary(self, data: bytes) -> None:
        await self._io()
        self.summary = data

    async def read_summary(self) -> bytes | None:
        await self._io()
        return self.summary


def kinesis_record(
    size: int, shard: str | None = SHARD, expires_at: float = 100.0
) -> KinesisRecord:
    return KinesisRecord([], b"x" * (size - 1), "k", "0", shard, 0.0, expires_at, 1)


# -- ceilings in the limiter (synchronous, explicit times) -----------------------------------


def test_a_ceiling_lowers_the_rates_and_throttle_feedback_recovers_to_it_not_above() -> None:
    limiter = ShardLimiter(1000.0, 1_000_000.0)
    assert limiter.ceiling == (1000.0, 1_000_000.0)
    limiter.set_ceiling(200.0, 100_000.0, now=0.0)
    assert limiter.rates == (200.0, 100_000.0)
    assert limiter.ceiling == (200.0, 100_000.0)
    # One second of burst, as at creation: an idle shard bursts at most its share.
    assert limiter.bucket.capacities == (200.0, 100_000.0)
    assert limiter.bucket.tokens(0.0) == (200.0, 100_000.0)
    for tenth in range(10):  # the shard accepted 150 records/s, 15,000 bytes/s
        limiter.accepted(15, 1500, now=tenth / 10)
    limiter.throttled(now=1.0, sent_at=0.9)
    # Cut to 90% of what was accepted, but never more than halved (the bytes).
    assert limiter.rates == pytest.approx((135.0, 45_000.0))
    limiter.throttled(now=1.5, sent_at=1.2)  # within the window: no second cut
    assert limiter.rates == pytest.approx((135.0, 45_000.0))
    admitted: list[KinesisRecord] = []
    # Back at the rate of the cut within 4 × cbrt(150 / 200) s, then beyond, to the ceiling.
    collect(limiter.put(kinesis_record(10), 1.0 + 4.0 * 0.75 ** (1 / 3)), admitted, admitted)
    assert limiter.rates[0] == pytest.approx(150.0)
    collect(limiter.put(kinesis_record(10), 60.0), admitted, admitted)
    assert limiter.rates == (200.0, 100_000.0)
    # A higher ceiling later: the rate follows at once when not recovering.
    limiter.set_ceiling(500.0, 200_000.0, now=61.0)
    assert limiter.rates == (500.0, 200_000.0)


def test_limiter_applies_a_ceiling_now_or_when_the_shard_first_appears() -> None:
    limiter = Limiter(
        RoutedDeadlines(Scheduler(), lambda item, now: None),
        lambda: 0.0,
        Limits(
            records_per_second=1000.0,
            bytes_per_second=1_000_000.0,
            drain_interval=0.025,
        ),
    )
    limiter.set_ceiling("shardId-000000000007", 300.0, 3000.0)
    limiter.put(kinesis_record(10, "shardId-000000000007"), 0.0)
    limiter.put(kinesis_record(10, "shardId-000000000001"), 0.0)
    assert limiter.shards["shardId-000000000007"].ceiling == (300.0, 3000.0)
    assert limiter.shards["shardId-000000000001"].ceiling == (1000.0, 1_000_000.0)
    limiter.set_ceiling("shardId-000000000001", 10.0, 100.0)
    assert limiter.shards["shardId-000000000001"].rates == (10.0, 100.0)


# -- settings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"interval": 0.5}, "interval must be at least 1 and at most 3600; got 0.5"),
        ({"interval": True}, "interval must be a number"),
        ({"staleness": 2.0, "interval": 5.0}, "staleness must be at least 5"),
        ({"smoothing": 0.0}, r"smoothing must be in \(0, 1\]"),
        ({"fairness": 1.5}, r"fairness must be in \[0, 1\]"),
        ({"shard_max_records_per_sec": 0}, "shard_max_records_per_sec must be greater than 0"),
        ({"shard_max_bytes_per_sec": float("inf")}, "shard_max_bytes_per_sec must be greater"),
        ({"request_timeout": 0.0}, "request_timeout must be greater than 0"),
        ({"producer_id": ""}, "producer_id must be 1 … 200 characters"),
    ],
)
def test_coordination_rejects_bad_settings(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Coordination(store=MemoryStore(), **changes)


def test_dynamodb_store_rejects_a_ttl_that_is_not_positive() -> None:
    with pytest.raises(ConfigError, match="ttl_seconds must be greater than 0; got 0"):
        DynamoDBStore(object(), "table", ttl_seconds=0)


def test_coordination_defaults() -> None:
    coordination = Coordination(store=MemoryStore())
    assert (coordination.interval, coordination.effective_staleness) == (5.0, 15.0)
    assert Coordination(store=MemoryStore(), staleness=7.0).effective_staleness == 7.0


def test_producer_refuses_something_else_as_coordination() -> None:
    with pytest.raises(TypeError, match="coordination must be"):
        Producer(Config(region="us-east-1"), coordination=object())  # type: ignore[arg-type]


# -- the producer's coordination task (virtual time) -----------------------------------------

CAPACITY = 100.0  # records/s of the one throttled shard; small, so virtual time runs fast


def producer_config() -> Config:
    return Config(
        region="us-east-1",
        aggregation_enabled=False,
        rate_limit_records_per_sec_per_shard=CAPACITY,
        record_ttl_ms=60_000,
    )


def coordination(store: MemoryStore, **changes: Any) -> Coordination:
    options: dict[str, Any] = {
        "store": store,
        "interval": 1.0,
        "shard_max_records_per_sec": CAPACITY,
    }
    options.update(changes)
    return Coordination(**options)


@pytest.mark.parametrize(("summarize", "counted"), [(False, 1), (True, 2)])
def test_a_summary_counts_the_report_before_the_latest_unless_this_producer_wrote_it(
    summarize: bool, counted: int
) -> None:
    """The part of the aggregate a producer scales is from the report the summary counts.

    A summarizer of its own wrote the summary read right after a publish from the report
    before; a producer that summarizes counts the one it has just published.
    """
    now = [0.0]
    coordinator = ProducerCoordinator(
        coordination(MemoryStore(), summarize=summarize), producer_config(), lambda: now[0]
    )
    admit = coordinator.meter("events", lambda record: None)
    for report in (1, 2):  # 10 records of 100 bytes in the first second, 20 in the second
        for _ in range(10 * report):
            admit(kinesis_record(100))
        now[0] += 1.0
        coordinator._take_report(now[0])
    assert coordinator._own_part() == {f"events/{SHARD}": (10.0 * counted, 1000.0 * counted)}


async def offer(producer: Producer, stream: str, rate: float, seconds: float) -> None:
    """Put ``rate`` records per second for ``seconds`` (one every 1/rate s)."""
    for index in range(int(rate * seconds)):
        producer.put_record_nowait(stream=stream, partition_key=f"k{index}", data=b"x" * 50)
        await anyio.sleep(1.0 / rate)


@pytest.mark.anyio
async def test_two_producers_share_one_shard_through_the_store(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeKinesis()
    fake.add_stream("events", shard_count=1, throttle=True, records_per_second=CAPACITY)
    store = MemoryStore()
    first = Producer(producer_config(), client=fake, coordination=coordination(store))
    second = Producer(
        producer_config(), client=fake, coordination=coordination(store, summarize=True)
    )
    async with first, second, anyio.create_task_group() as task_group:
        # Together they offer twice what the shard takes, for 30 s.
        task_group.start_soon(offer, first, "events", CAPACITY, 30.0)
        task_group.start_soon(offer, second, "events", CAPACITY, 30.0)
        await anyio.sleep(20.0)
        ceilings = [p.statistics().streams[0].ceilings_by_shard[SHARD][0] for p in (first, second)]
        # Each is near half the shard, and together within 10% of it.
        assert all(0.4 * CAPACITY <= c <= 0.6 * CAPACITY for c in ceilings), ceilings
        assert abs(sum(ceilings) - CAPACITY) <= 0.1 * CAPACITY, ceilings
        stored_before = len(fake.stored_records("events"))
        await anyio.sleep(10.0)
        delivered = len(fake.stored_records("events")) - stored_before
        # The shard stays busy: at least 90% of its capacity delivered over those 10 s.
        assert delivered >= 0.9 * CAPACITY * 10.0, delivered
        reports = [decode_report(data) for data in store.reports_by_id.values()]
        assert {r.producer_id for r in reports} == {
            running(first).coordinator.producer_id,  # type: ignore[union-attr]
            running(second).coordinator.producer_id,  # type: ignore[union-attr]
        }
        assert decode_summary(store.summary or b"").producers == 2
    # Leaving, each producer removed its report.
    assert store.reports_by_id == {}
    # Nothing went wrong: the first round found no summary yet, which is not a warning.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.anyio
async def test_a_failing_store_keeps_the_pipeline_and_the_ceilings_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="aiokpl.coordination")
    fake = FakeKinesis()
    fake.add_stream("events", shard_count=1)
    store = MemoryStore()
    producer = Producer(
        producer_config(), client=fake, coordination=coordination(store, summarize=True)
    )
    async with producer:
        await offer(producer, "events", 50.0, 3.0)  # a few rounds: summaries applied
        ceiling = producer.statistics().streams[0].ceilings_by_shard[SHARD]
        assert store.summary is not None
        store.failure = ConnectionError("store unreachable")
        calls = store.calls
        await offer(producer, "events", 50.0, 10.0)
        assert store.calls > calls  # it kept trying, every interval
        assert producer.statistics().streams[0].ceilings_by_shard[SHARD] == ceiling
        assert producer.statistics().records_failed == 0
        store.failure = None
        await offer(producer, "events", 50.0, 3.0)
    assert producer.statistics().records_succeeded == 50 * 16
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    warnings = [m for level, m in messages if level == "WARNING"]
    assert warnings == [
        "coordination: the store failed (Internal: ConnectionError: store unreachable) "
        "(logged once until it recovers)"
    ]
    assert ("INFO", "coordination: store recovered") in messages


@pytest.mark.anyio
async def test_a_hanging_store_never_blocks_the_pipeline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="aiokpl.coordination")
    fake = FakeKinesis()
    fake.add_stream("events", shard_count=1)
    store = MemoryStore()
    store.hang = True
    producer = Producer(
        producer_config(),
        client=fake,
        coordination=coordination(store, request_timeout=0.5),
    )
    started = anyio.current_time()
    async with producer:
        await offer(producer, "events", 50.0, 5.0)
        await producer.flush()
        assert producer.statistics().records_succeeded == 250
    # Exit waits at most a second for the report's removal from a store that hangs.
    assert anyio.current_time() - started <= 5.0 + 1.0 + 0.1
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "coordination: the store did not answer within 0.5 s (logged once until it recovers)"
    ]


@pytest.mark.anyio
async def test_a_malformed_or_missing_summary_changes_nothing_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="aiokpl.coordination")
    fake = FakeKinesis()
    fake.add_stream("events", shard_count=1)
    store = MemoryStore()
    async with Producer(producer_config(), client=fake, coordination=coordination(store)) as p:
        await offer(p, "events", 20.0, 2.5)
        # No summary yet, but within the staleness (3 s) of the start: not worth a warning.
        assert [r for r in caplog.records if r.levelname == "WARNING"] == []
        await offer(p, "events", 20.0, 2.5)
        store.summary = b'{"format": "something else"}'
        await offer(p, "events", 20.0, 3.0)
        assert p.statistics().streams[0].ceilings_by_shard[SHARD] == (CAPACITY, 1_048_576.0)
        # A valid one arrives: 200 records/s sent by one producer; ours sent 20/s (its part
        # of the aggregate, in its report), so the base is halfway to the mean (110), scaled
        # by 100 / 200.
        store.summary = encode_summary(
            Summary("e", 1, 1, {f"events/{SHARD}": ShardLoad(200.0, 2000.0, 200.0, 2000.0, 1)})
        )
        await offer(p, "events", 20.0, 2.0)
        records, size = p.statistics().streams[0].ceilings_by_shard[SHARD]
        assert records == pytest.approx(
            0.6 * CAPACITY + 0.4 * (CAPACITY / 200.0) * (0.5 * 20.0 + 0.5 * 200.0), rel=0.01
        )
        assert size < 1_048_576.0
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "coordination: no summary in the store yet: is a summarizer running? "
        "(logged once until it recovers)"
    ]
    # The malformed summary came while that problem was still on: not logged again.
    assert ("INFO", "coordination: summary recovered") in [
        (r.levelname, r.getMessage()) for r in caplog.records
    ]


@pytest.mark.anyio
async def test_a_stopped_summarizer_is_noticed_and_the_ceilings_stay(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="aiokpl.coordination")
    fake = FakeKinesis()
    fake.add_stream("events", shard_count=1)
    store = MemoryStore()
    async with Producer(producer_config(), client=fake, coordination=coordination(store)) as p:
        await run_summarizer(store, interval=1.0, rounds=1)  # writes one summary, then stops
        summary = decode_summary(store.summary or b"")
        assert isinstance(summary, Summary)
        await offer(p, "events", 20.0, 6.0)
        ceiling = p.statistics().streams[0].ceilings_by_shard
        await offer(p, "events", 20.0, 2.0)
        assert p.statistics().streams[0].ceilings_by_shard == ceiling
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "coordination: the summary has not changed for 3 s: is its summarizer running? "
        "(logged once until it recovers)"
    ]


@pytest.mark.anyio
async def test_the_summarizer_skips_foreign_objects_and_deletes_long_gone_reports() -> None:
    store = MemoryStore()
    store.reports_by_id["foreign"] = b"not a report"
    store.reports_by_id["old"] = (
        b'{"format":"aiokpl.coordination.report/1","producer":"old","sequence":3,'
        b'"wall_time":0,"shards":{"s/a":[10.0,100.0,10.0,100.0]}}'
    )
    await run_summarizer(store, interval=1.0, staleness=2.0, rounds=1)
    summary = decode_summary(store.summary or b"")
    assert (summary.producers, dict(summary.shards)) == (1, {"s/a": summary.shards["s/a"]})
    assert summary.shards["s/a"].records_per_second == 10.0
    # "old" never changes: stale after 2 s, deleted after 20 s; the foreign object stays.
    await run_summarizer(store, interval=1.0, staleness=2.0, rounds=25)
    assert set(store.reports_by_id) == {"foreign"}


@pytest.mark.anyio
async def test_the_summarizer_survives_a_failing_store(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()
    store.failure = OSError("down")
    await run_summarizer(store, interval=1.0, rounds=3)
    assert store.calls == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "coordination summarizer: the store failed (Internal: OSError: down) "
        "(logged once until it recovers)"
    ]


@pytest.mark.anyio
async def test_a_joiner_reads_the_summary_at_once_and_starts_at_a_share() -> None:
    fake = FakeKinesis()
    fake.add_stream("events", shard_count=1)
    store = MemoryStore()
    # Three producers already fill the shard (100 records/s, limits summing to 100).
    busy = ShardLoad(CAPACITY, 5000.0, CAPACITY, 5000.0, 3)
    store.summary = encode_summary(Summary("e", 1, 3, {f"events/{SHARD}": busy}))
    async with Producer(producer_config(), client=fake, coordination=coordination(store)) as p:
        for _ in range(2):  # the first loads the shard map, the second is limited per shard
            p.put_record_nowait(stream="events", partition_key="k", data=b"x")
            await anyio.sleep(0.05)  # together far less than the 1 s interval
        ceiling = p.statistics().streams[0].ceilings_by_shard[SHARD]
        assert ceiling[0] == pytest.approx(CAPACITY / 3)


class FakeDynamoDB:
    """Just the DynamoDB calls DynamoDBStore makes to write and read the summary; every answer
    carries ``date`` as its ``Date`` header (``None``: no header)."""

    def __init__(self, date: str | None) -> None:
        self.date = date
        self.calls: list[str] = []
        self.items: dict[str, dict[str, Any]] = {}

    def _answer(self, **fields: Any) -> dict[str, Any]:
        headers = {} if self.date is None else {"date": self.date}
        return {"ResponseMetadata": {"HTTPHeaders": headers}, **fields}

    async def put_item(self, TableName: str, Item: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("PutItem")
        self.items[Item["sk"]["S"]] = Item
        return self._answer()

    async def get_item(self, TableName: str, Key: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("GetItem")
        item = self.items.get(Key["sk"]["S"])
        return self._answer() if item is None else self._answer(Item=item)

    def get_paginator(self, operation: str) -> Any:
        fake = self

        class Pages:
            async def paginate(self, **kwargs: Any) -> Any:
                fake.calls.append("Query")
                reports = [v for k, v in fake.items.items() if k.startswith("report#")]
                yield fake._answer(Items=reports)

        assert operation == "query"
        return Pages()


DATE = "Sun, 22 Nov 2026 00:00:00 GMT"
EPOCH = 1795305600.0  # DATE in seconds since the epoch


@pytest.mark.anyio
async def test_dynamodb_ttl_counts_on_the_services_clock_carried_by_the_loops() -> None:
    client = FakeDynamoDB(DATE)
    store = DynamoDBStore(client, "table", group="g", ttl_seconds=600)
    assert store.server_clock.now() is None
    await store.publish("a", b"report")
    # No answer yet: the store first read the summary item to learn the service's time.
    assert client.calls == ["GetItem", "PutItem"]
    assert client.items["report#a"]["expires_at"] == {"N": str(int(EPOCH + 600))}
    await anyio.sleep(7.5)  # virtual time: the service's clock moves on with the loop's
    assert store.server_clock.now() == pytest.approx(EPOCH + 7.5)
    await store.write_summary(b"summary")
    assert client.calls == ["GetItem", "PutItem", "PutItem"]
    assert client.items["summary"]["expires_at"] == {"N": str(int(EPOCH + 7.5 + 600))}
    assert await store.read_summary() == b"summary"


@pytest.mark.anyio
async def test_without_a_date_header_items_do_not_expire_and_wall_times_are_unknown() -> None:
    client = FakeDynamoDB(None)
    store = DynamoDBStore(client, "table", group="g")
    await store.publish("a", b"report")
    assert "expires_at" not in client.items["report#a"]
    assert store.server_clock.now() is None
    client.date = "not a date"
    await store.publish("a", b"report")
    assert store.server_clock.now() is None  # unreadable: still unknown
    client.date = DATE
    await store.read_summary()
    client.date = "not a date"
    await store.read_summary()
    assert store.server_clock.now() == pytest.approx(EPOCH)  # the last good one is kept


@pytest.mark.anyio
async def test_reports_and_summaries_carry_the_services_wall_time() -> None:
    client = FakeDynamoDB(DATE)
    store = DynamoDBStore(client, "table", group="g")
    await anyio.sleep(2.0)
    await run_summarizer(store, interval=1.0, rounds=1)
    # No answer before the summarizer's query: the summary bears the time that query gave.
    summary = decode_summary(client.items["summary"]["body"]["B"])
    assert summary.wall_time == pytest.approx(EPOCH)


@pytest.mark.anyio
async def test_the_report_interval_jitter_comes_from_the_producers_jitter_source() -> None:
    class TimedStore(MemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.published_at: list[float] = []

        async def publish(self, producer_id: str, data: bytes) -> None:
            self.published_at.append(anyio.current_time())
            await super().publish(producer_id, data)

    class LowestDraws(random.Random):
        def random(self) -> float:
            return 0.0  # uniform(0.9, 1.1) is then 0.9: each wait 90% of the interval

    store = TimedStore()
    fake = FakeKinesis()
    fake.add_stream("events")
    async with Producer(
        producer_config(),
        client=fake,
        coordination=coordination(store),
        jitter_source=LowestDraws(),
    ):
        await anyio.sleep(5.0)
    gaps = [b - a for a, b in zip(store.published_at, store.published_at[1:], strict=False)]
    assert len(gaps) == 5
    assert gaps == pytest.approx([0.9] * 5, abs=1e-9)

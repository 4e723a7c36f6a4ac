"""The producer's metrics end to end against FakeKinesis, under the virtual clock, on both
backends: every KPL metric with its exact value in scripted scenarios, levels, granularity,
the sliding window, the sink protocol and the upload loop."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from aiokpl import CloudWatchSink, Config, ConfigError, MetricsSink, MetricStatistics, Producer
from aiokpl._core.answers import Answered
from aiokpl._core.hashing import hash_key_of
from aiokpl._core.metrics import METRICS, MetricsTable
from aiokpl._core.records import KinesisRecord, UserRecordLike
from aiokpl._metrics.recorder import MetricsRecorder
from aiokpl._record import UserRecord
from aiokpl.testing import FakeKinesis
from stages import stamped

pytestmark = pytest.mark.anyio

THROTTLED = "ProvisionedThroughputExceededException"
SHARD0, SHARD1 = "shardId-000000000000", "shardId-000000000001"


def key_on(shard: int, prefix: str = "k") -> str:
    """A partition key that a 2-shard stream routes to ``shard``."""
    for i in range(1000):
        key = f"{prefix}{i}"
        if (hash_key_of(key.encode()) >= 2**127) == bool(shard):
            return key
    raise AssertionError("unreachable")


def config(**changes: Any) -> Config:
    base = Config(
        region="us-east-1",
        aggregation_enabled=False,  # one user record per Kinesis record: exact counts
        metrics_level="detailed",
    )
    return base.replace(**changes)


def series(
    metrics: Sequence[MetricStatistics],
    name: str,
    stream: str | None = None,
    shard_id: str | None = None,
    error_code: str | None = None,
) -> MetricStatistics | None:
    found = [
        m
        for m in metrics
        if (m.name, m.stream, m.shard_id, m.error_code) == (name, stream, shard_id, error_code)
    ]
    assert len(found) <= 1
    return found[0] if found else None


def values(stats: MetricStatistics | None) -> tuple[int, float, float, float] | None:
    if stats is None:
        return None
    return (stats.count, round(stats.sum, 6), round(stats.min, 6), round(stats.max, 6))


async def start(producer: Producer, fake: FakeKinesis, stream: str) -> None:
    """Load the shard map (so records are predicted), then let the warm-up's metrics leave
    the 60-second window."""
    outcome = await producer.put_record(stream=stream, partition_key="warm-up", data=b"")
    await producer.flush()
    assert (await outcome).success
    while producer.statistics().streams[0].shard_map_state != "READY":  # noqa: ASYNC110
        await anyio.sleep(0.01)  # polling a snapshot: there is no event to wait on
    await anyio.sleep(61)


async def test_every_metric_has_the_kpl_value_in_a_scripted_scenario() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    async with Producer(config(), client=fake) as producer:
        await start(producer, fake, "s")
        fake.latency = 0.25
        # Request 1 holds r1, r2, r3; r2 is throttled, retried, delivered by request 2.
        fake.script_records([None, (THROTTLED, "slow down"), None])
        t0 = anyio.current_time()
        outcomes = [
            await producer.put_record(stream="s", partition_key=key_on(0, "a"), data=b"x" * 10),
            await producer.put_record(stream="s", partition_key=key_on(1, "b"), data=b"y" * 20),
            await producer.put_record(stream="s", partition_key=key_on(0, "c"), data=b"z" * 30),
        ]
        await anyio.sleep(0.05)
        pending_early = series(producer.metrics(window_s=1), "UserRecordsPending", "s")
        results = [await outcome for outcome in outcomes]
        assert [len(r.attempts) for r in results] == [1, 2, 1]
        assert results[1].attempts[1].started_at == pytest.approx(t0 + 0.4)  # 0.35 + 0.05
        await anyio.sleep(0.5)  # pending samples of 0 after the last result
        metrics = producer.metrics()

    assert {m.name for m in metrics} == set(METRICS) - {
        "UserRecordExpired",
        "UserRecordsExpiredUnsent",
        *(name for name in METRICS if name.startswith("Spool")),  # no spool here
    }
    assert values(series(metrics, "UserRecordsReceived", "s")) == (3, 3, 1, 1)
    assert values(series(metrics, "UserRecordsReceived")) == (3, 3, 1, 1)
    # UserRecordsPut: one value per finished record, 1 = delivered.
    assert values(series(metrics, "UserRecordsPut", "s")) == (3, 3, 1, 1)
    assert values(series(metrics, "UserRecordsPut", "s", SHARD0)) == (2, 2, 1, 1)
    assert values(series(metrics, "UserRecordsPut", "s", SHARD1)) == (1, 1, 1, 1)
    assert values(series(metrics, "UserRecordsDataPut", "s")) == (3, 60, 10, 30)
    assert values(series(metrics, "UserRecordsDataPut", "s", SHARD0)) == (2, 40, 10, 30)
    # KinesisRecordsPut: per Kinesis record sent, 1 = delivered, 0 = failed.
    assert values(series(metrics, "KinesisRecordsPut", "s")) == (4, 3, 0, 1)
    assert values(series(metrics, "KinesisRecordsPut", "s", SHARD1)) == (2, 1, 0, 1)
    assert values(series(metrics, "KinesisRecordsDataPut", "s")) == (3, 60, 10, 30)
    assert values(series(metrics, "ErrorsByCode", error_code=THROTTLED)) == (1, 1, 1, 1)
    assert values(series(metrics, "ErrorsByCode", "s", SHARD1, THROTTLED)) == (1, 1, 1, 1)
    assert series(metrics, "ErrorsByCode", "s", SHARD0, THROTTLED) is None
    assert values(series(metrics, "AllErrors", "s")) == (4, 1, 0, 1)
    assert values(series(metrics, "AllErrors", "s", SHARD1)) == (2, 1, 0, 1)
    assert values(series(metrics, "RetriesPerRecord", "s")) == (3, 1, 0, 1)
    # BufferingTime: the wait before each attempt: 100 ms buffered, then 50 ms retry delay.
    assert values(series(metrics, "BufferingTime", "s")) == (4, 350, 50, 100)
    assert values(series(metrics, "BufferingTime", "s", SHARD1)) == (2, 150, 50, 100)
    assert values(series(metrics, "RequestTime", "s")) == (2, 500, 250, 250)
    assert series(metrics, "RequestTime", "s", SHARD0) is None  # a stream-level metric
    assert values(series(metrics, "UserRecordsPerKinesisRecord", "s")) == (4, 4, 1, 1)
    assert values(series(metrics, "UserRecordsPerKinesisRecord", "s", SHARD0)) == (2, 2, 1, 1)
    assert values(series(metrics, "KinesisRecordsPerPutRecordsRequest", "s")) == (2, 4, 1, 3)
    assert values(series(metrics, "UserRecordsPerPutRecordsRequest", "s")) == (2, 4, 1, 3)
    pending = series(metrics, "UserRecordsPending", "s")
    assert pending is not None
    assert (pending.min, pending.max) == (0, 3)
    assert pending_early is not None
    assert pending_early.max == 3


async def test_waits_and_data_sizes_that_differ_within_one_aggregate() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    async with Producer(config(aggregation_enabled=True), client=fake) as producer:
        await start(producer, fake, "s")
        outcomes = []
        # Three records for one shard, 20 ms apart, sent together at the first's deadline;
        # the middle one has the smallest data and a key of 2-byte characters (UTF-8 longer
        # than its length), which must not count as data.
        for key, data in (
            (key_on(0, "a"), b"x" * 20),
            (key_on(0, "é"), b"y" * 5),
            (key_on(0, "c"), b"z" * 30),
        ):
            outcomes.append(await producer.put_record(stream="s", partition_key=key, data=data))
            await anyio.sleep(0.02)
        results = [await outcome for outcome in outcomes]
        metrics = producer.metrics()
    assert len({result.sequence_number for result in results}) == 1  # one aggregate
    # Sent at +120 ms (100 ms deadline, 20 ms collector grace): waits 120, 100 and 80 ms.
    assert values(series(metrics, "BufferingTime", "s", SHARD0)) == (3, 300, 80, 120)
    assert values(series(metrics, "UserRecordsDataPut", "s", SHARD0)) == (3, 55, 5, 30)
    assert values(series(metrics, "UserRecordsPut", "s", SHARD0)) == (3, 3, 1, 1)
    assert values(series(metrics, "UserRecordsPerKinesisRecord", "s", SHARD0)) == (1, 3, 3, 3)


async def test_expired_records_and_request_failures() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2, throttle=True, records_per_second=1, burst_seconds=1)
    async with Producer(config(record_ttl_ms=300), client=fake) as producer:
        await start(producer, fake, "s")
        fake.latency = 0.25
        fake.fail_requests(1, code="InternalFailure", message="oops", http_status=500)
        outcome = await producer.put_record(stream="s", partition_key=key_on(0), data=b"abc")
        result = await outcome
        metrics = producer.metrics()
    # Sent at +0.1, the request fails as a whole at +0.35, past the TTL of 0.3: "Expired".
    assert [a.error_code for a in result.attempts] == ["InternalFailure", "Expired"]
    assert values(series(metrics, "UserRecordExpired", "s", SHARD0)) == (1, 1, 1, 1)
    assert values(series(metrics, "UserRecordsPut", "s", SHARD0)) == (1, 0, 0, 0)
    assert values(series(metrics, "RetriesPerRecord", "s")) == (1, 1, 1, 1)
    assert values(series(metrics, "BufferingTime", "s")) == (2, 100, 0, 100)
    # A request-level error: counted once, per stream (no shard), by code.
    assert values(series(metrics, "ErrorsByCode", "s", error_code="InternalFailure")) == (
        1,
        1,
        1,
        1,
    )
    assert values(series(metrics, "AllErrors", "s")) == (1, 1, 1, 1)
    assert series(metrics, "AllErrors", "s", SHARD0) is None
    assert series(metrics, "KinesisRecordsPut", "s") is None
    assert series(metrics, "UserRecordsDataPut", "s") is None


async def test_records_failed_by_a_malformed_entry_count_as_internal() -> None:
    class Malformed(FakeKinesis):
        async def put_records(self, **kwargs: Any) -> dict[str, Any]:
            answer = await super().put_records(**kwargs)
            answer["Records"][0] = {"SequenceNumber": "1"}  # no ShardId: not a success
            return answer

    fake = Malformed()
    fake.add_stream("s")
    async with Producer(config(), client=fake) as producer:
        await producer.put_record(stream="s", partition_key="k", data=b"abc")
        await anyio.sleep(0.12)  # sent and answered at 0.1; the retry goes at 0.15
        metrics = producer.metrics()
    assert values(series(metrics, "ErrorsByCode", error_code="Internal")) == (1, 1, 1, 1)


@pytest.mark.parametrize(
    ("granularity", "expected"),
    [
        ("global", {(None, None)}),
        ("stream", {(None, None), ("s", None), ("t", None)}),
        (
            "shard",
            {(None, None), ("s", None), ("t", None), ("s", SHARD0), ("s", SHARD1), ("t", SHARD0)},
        ),
    ],
)
async def test_granularity_decides_the_dimensions(
    granularity: str, expected: set[tuple[str | None, str | None]]
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    fake.add_stream("t", shard_count=2)
    async with Producer(config(metrics_granularity=granularity), client=fake) as producer:
        for stream in ("s", "t"):
            await start(producer, fake, stream)
        await producer.put_record(stream="s", partition_key=key_on(0), data=b"1")
        await producer.put_record(stream="s", partition_key=key_on(1), data=b"22")
        await producer.put_record(stream="t", partition_key=key_on(0), data=b"333")
        await producer.flush()
        metrics = producer.metrics("UserRecordsDataPut", window_s=1)
    assert {(m.stream, m.shard_id) for m in metrics} == expected
    total = series(metrics, "UserRecordsDataPut")
    assert values(total) == (3, 6, 1, 3)


async def test_summary_level_records_no_detailed_metric() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    async with Producer(config(metrics_level="summary"), client=fake) as producer:
        await (await producer.put_record(stream="s", partition_key="k", data=b"x"))
        await anyio.sleep(1)
        names = {m.name for m in producer.metrics()}
        # Sampled once a second at this level, 0 = healthy.
        assert values(series(producer.metrics(), "ProducerHealth")) == (1, 0, 0, 0)
    assert names == {
        "UserRecordsPut",
        "KinesisRecordsPut",
        "AllErrors",
        "BufferingTime",
        "ProducerHealth",
    }


async def test_level_none_records_nothing_and_runs_no_task() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    async with Producer(config(metrics_level="none"), client=fake) as producer:
        assert producer._arguments.metrics is None
        await (await producer.put_record(stream="s", partition_key="k", data=b"x"))
        assert producer.metrics() == []
        assert producer.metrics("UserRecordsPut", window_s=5) == []
    assert Config().metrics_level == "none"


async def test_the_window_slides() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    async with Producer(config(metrics_level="summary"), client=fake) as producer:
        await (await producer.put_record(stream="s", partition_key="k", data=b"x"))
        await anyio.sleep(30)
        await (await producer.put_record(stream="s", partition_key="k", data=b"x"))
        assert values(series(producer.metrics(), "UserRecordsPut")) == (2, 2, 1, 1)
        assert values(series(producer.metrics(window_s=10), "UserRecordsPut")) == (1, 1, 1, 1)
        await anyio.sleep(31)
        assert values(series(producer.metrics(), "UserRecordsPut")) == (1, 1, 1, 1)
        await anyio.sleep(30)
        # Only the health is sampled without records: healthy all the time.
        [health] = producer.metrics()
        assert (health.name, health.count, health.max) == ("ProducerHealth", 60, 0)


async def test_metrics_arguments_are_checked() -> None:
    async with Producer(config(), client=FakeKinesis()) as producer:
        for window in (0, 61, 1.5, True):
            with pytest.raises(ValueError, match="window_s must be an int, 1 … 60"):
                producer.metrics(window_s=window)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="name must be one of the KPL metric names"):
            producer.metrics("UserRecordsSent")


def test_config_fields_and_their_checks() -> None:
    default = Config()
    assert (default.metrics_level, default.metrics_granularity) == ("none", "shard")
    assert default.metrics_namespace == "KinesisProducerLibrary"
    assert default.metrics_upload_interval_ms == 60_000
    with pytest.raises(ConfigError, match="metrics_level must be one of 'none', 'summary'"):
        Config(metrics_level="all")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="metrics_granularity must be one of 'global'"):
        Config(metrics_granularity="region")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="metrics_namespace must be 1 … 255 characters"):
        Config(metrics_namespace="")
    with pytest.raises(ConfigError, match="metrics_namespace must be 1 … 255 characters"):
        Config(metrics_namespace="n" * 256)
    with pytest.raises(TypeError, match="metrics_namespace must be a str, not int"):
        Config(metrics_namespace=5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="metrics_upload_interval_ms must be 1,000 … 60,000"):
        Config(metrics_upload_interval_ms=999)


# --- sinks ---------------------------------------------------------------------------------


class RecordingSink:
    def __init__(self, *, fail: bool = False, hang: bool = False) -> None:
        self.calls: list[str] = []
        self.published: list[tuple[float, list[MetricStatistics]]] = []
        self.fail = fail
        self.hang = hang

    async def open(self, config: Config) -> None:
        self.calls.append(f"open {config.metrics_namespace}")

    async def publish(self, metrics: Sequence[MetricStatistics]) -> None:
        self.calls.append("publish")
        self.published.append((anyio.current_time(), list(metrics)))
        if self.hang:
            await anyio.sleep_forever()
        if self.fail:
            raise RuntimeError("sink is down")

    async def aclose(self) -> None:
        self.calls.append("aclose")


def put_counts(sink: RecordingSink) -> list[int]:
    return [
        int(stats.sum)
        for _, metrics in sink.published
        for stats in metrics
        if stats.name == "UserRecordsPut" and stats.stream is None
    ]


async def test_sinks_get_each_interval_once_and_a_last_upload_on_exit() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    sink = RecordingSink()
    assert isinstance(sink, MetricsSink)
    cfg = config(metrics_upload_interval_ms=5_000, metrics_namespace="Mine")
    async with Producer(cfg, client=fake, metrics_sinks=[sink]) as producer:
        begin = anyio.current_time()
        for second in range(12):
            for _ in range(second + 1):
                await producer.put_record(stream="s", partition_key="k", data=b"x")
            await anyio.sleep(1)
        assert sink.calls == ["open Mine", "publish", "publish"]
    assert sink.calls == ["open Mine", "publish", "publish", "publish", "aclose"]
    assert [round(when - begin, 6) for when, _ in sink.published[:2]] == [5, 10]
    # Every record once: the intervals do not overlap and nothing is lost between them.
    assert sum(put_counts(sink)) == sum(range(1, 13))
    for _, metrics in sink.published:
        assert all(stats.count > 0 for stats in metrics)


async def test_a_failing_or_hanging_sink_does_not_disturb_delivery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    failing, hanging, fine = RecordingSink(fail=True), RecordingSink(hang=True), RecordingSink()
    cfg = config(metrics_upload_interval_ms=1_000)
    with caplog.at_level(logging.WARNING, logger="aiokpl.metrics"):
        async with Producer(cfg, client=fake, metrics_sinks=[failing, hanging, fine]) as producer:
            outcomes = []
            for _ in range(5):
                outcomes.append(await producer.put_record(stream="s", partition_key="k", data=b"x"))
                await anyio.sleep(1.5)
    assert all(outcome.result().success for outcome in outcomes)
    assert sum(put_counts(fine)) == 5
    assert "metrics upload to RecordingSink failed: Internal: RuntimeError: sink is down" in (
        caplog.text
    )
    assert "metrics upload to RecordingSink took over 1 s: abandoned" in caplog.text
    assert failing.calls[-1] == hanging.calls[-1] == "aclose"


async def test_sinks_need_a_level_and_must_be_sinks() -> None:
    with pytest.raises(ConfigError, match=r"metrics_sinks need Config\.metrics_level"):
        Producer(Config(region="us-east-1"), metrics_sinks=[RecordingSink()])
    with pytest.raises(TypeError, match="is not a MetricsSink"):
        Producer(config(), metrics_sinks=[object()])  # type: ignore[list-item]


async def test_a_sink_that_cannot_open_fails_the_start_and_closes_the_others() -> None:
    class Broken(RecordingSink):
        async def open(self, config: Config) -> None:
            raise OSError("no route")

    first = RecordingSink()
    producer = Producer(config(), client=FakeKinesis(), metrics_sinks=[first, Broken()])
    with pytest.raises(OSError, match="no route"):
        async with producer:
            pytest.fail("entered")
    assert first.calls == ["open KinesisProducerLibrary", "aclose"]


class FakeCloudWatch:
    """Records ``put_metric_data`` calls; fails the first ``failures`` of them."""

    def __init__(self, failures: int = 0) -> None:
        self.calls: list[dict[str, Any]] = []
        self.failures = failures

    async def put_metric_data(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if len(self.calls) <= self.failures:
            raise ConnectionResetError("reset by peer")
        return {}


async def test_cloudwatch_sink_retries_then_drops_and_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    client = FakeCloudWatch(failures=3)  # the first upload fails 3 times, and is dropped
    sink = CloudWatchSink(client=client, attempts=3, retry_delay=0.5)
    cfg = config(metrics_upload_interval_ms=10_000, metrics_namespace="NS")
    with caplog.at_level(logging.WARNING, logger="aiokpl.metrics"):
        async with Producer(cfg, client=fake, metrics_sinks=[sink]) as producer:
            await (await producer.put_record(stream="s", partition_key="k", data=b"x"))
            await anyio.sleep(12)  # tries at 10, 10.5 and 11.5
            assert len(client.calls) == 3
            await (await producer.put_record(stream="s", partition_key="k", data=b"x"))
    assert len(client.calls) == 4  # and the last upload, on exit
    assert repr(sink) == (
        "<CloudWatchSink endpoint_url=None namespace='NS' requests_sent=4 requests_failed=1>"
    )
    assert {call["Namespace"] for call in client.calls} == {"NS"}
    assert sink.requests_failed == 1
    assert "PutMetricData of" in caplog.text
    assert "failed 3 times, dropped: Internal: ConnectionResetError: reset by peer" in caplog.text
    last = client.calls[-1]["MetricData"]
    names = {datum["MetricName"] for datum in last}
    assert "UserRecordsPut" in names
    puts = [d for d in last if d["MetricName"] == "UserRecordsPut" and not d["Dimensions"]]
    assert puts[0]["StatisticValues"] == {
        "SampleCount": 1.0,
        "Sum": 1.0,
        "Minimum": 1.0,
        "Maximum": 1.0,
    }


async def test_cloudwatch_sink_cuts_large_uploads_into_requests() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=400)
    client = FakeCloudWatch()
    async with Producer(config(), client=fake, metrics_sinks=[CloudWatchSink(client=client)]) as p:
        await start(p, fake, "s")
        for i in range(4000):
            await p.put_record(stream="s", partition_key=f"k{i}", data=b"x")
        await p.flush()
    sizes = [len(call["MetricData"]) for call in client.calls]
    assert max(sizes) == 1000
    assert sum(sizes) > 2000  # 400 shards × several metrics, with the roll-ups


async def test_cloudwatch_sink_checks_its_arguments_and_state() -> None:
    sink = CloudWatchSink(endpoint_url="http://127.0.0.1:9")
    with pytest.raises(RuntimeError, match="before open"):
        await sink.publish([])
    await sink.aclose()  # nothing opened: nothing to close
    with pytest.raises(ValueError, match="attempts must be 1 … 10"):
        CloudWatchSink(attempts=0)


async def test_a_sink_that_fails_to_close_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    class Sticky(RecordingSink):
        async def aclose(self) -> None:
            raise OSError("still busy")

    fake = FakeKinesis()
    fake.add_stream("s")
    sink = Sticky()
    with caplog.at_level(logging.WARNING, logger="aiokpl"):
        async with Producer(config(), client=fake, metrics_sinks=[sink]) as producer:
            await (await producer.put_record(stream="s", partition_key="k", data=b"x"))
    assert "closing metrics sink Sticky failed: OSError('still busy')" in caplog.text
    assert put_counts(sink) == [1]


async def test_records_failing_at_once_are_put_as_zero_not_expired() -> None:
    fake = FakeKinesis()  # no stream: every request fails with ResourceNotFoundException
    async with Producer(config(metrics_level="summary"), client=fake) as producer:
        result = await (await producer.put_record(stream="gone", partition_key="k", data=b"x"))
        metrics = producer.metrics()
    assert result.error_code == "ResourceNotFoundException"
    assert values(series(metrics, "UserRecordsPut", "gone")) == (1, 0, 0, 0)
    assert series(metrics, "UserRecordExpired", "gone") is None
    code = "ResourceNotFoundException"
    assert values(series(metrics, "ErrorsByCode", "gone", error_code=code)) == (1, 1, 1, 1)
    assert {m.name for m in metrics} == {
        "UserRecordsPut",
        "BufferingTime",
        "ErrorsByCode",
        "AllErrors",
    }


async def test_records_delivered_to_another_shard_than_predicted_count_there() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    async with Producer(config(), client=fake) as producer:
        await start(producer, fake, "s")
        # The map still has shard 1: records predicted to it land on its children.
        low, high = fake.split("s", SHARD1, 2**127 + 2**126)
        keys = [key_on(0, "a"), *(key for key in (f"b{i}" for i in range(200)))]
        outcomes = [
            await producer.put_record(stream="s", partition_key=key, data=b"x") for key in keys
        ]
        results = [await outcome for outcome in outcomes]
        await anyio.sleep(0.5)  # a pending sample after the last result
        metrics = producer.metrics()
    landed: dict[str, int] = {}
    for result in results:
        landed[result.shard_id or ""] = landed.get(result.shard_id or "", 0) + 1
    assert set(landed) == {SHARD0, low, high}
    for shard, n in landed.items():
        assert values(series(metrics, "UserRecordsPut", "s", shard)) == (n, n, 1, 1)
    assert values(series(metrics, "UserRecordsPut", "s")) == (201, 201, 1, 1)
    assert series(metrics, "UserRecordsPut", "s", SHARD1) is None
    # The Kinesis records (one per user record: no aggregation) keep their predicted shard,
    # as in the KPL.
    moved = landed[low] + landed[high]
    assert values(series(metrics, "KinesisRecordsPut", "s", SHARD1)) == (moved, moved, 1, 1)
    received = series(metrics, "UserRecordsReceived", "s")
    pending = series(metrics, "UserRecordsPending", "s")
    assert received is not None
    assert pending is not None
    assert received.count == 201
    assert pending.min == 0


async def test_data_put_counts_each_user_records_data_inside_aggregates() -> None:
    """Aggregated records drop their own copy of the data while in flight (see
    KinesisRecord.seal): the data sizes must come from what each record put."""
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    async with Producer(config(aggregation_enabled=True), client=fake) as producer:
        await start(producer, fake, "s")
        for n, prefix in ((10, "é"), (20, "k"), (30, "ü")):  # keys in and out of ASCII
            await producer.put_record(stream="s", partition_key=key_on(0, prefix), data=b"x" * n)
        await producer.flush()
        metrics = producer.metrics(window_s=1)
    assert values(series(metrics, "UserRecordsPerKinesisRecord", "s", SHARD0)) == (1, 3, 3, 3)
    assert values(series(metrics, "UserRecordsDataPut", "s", SHARD0)) == (3, 60, 10, 30)


def test_one_pass_finds_the_extremes_wherever_they_sit_in_a_request() -> None:
    # Delivered records are not always in the order of their last ends (a record retried
    # after a shard-map refresh joins a batch behind later arrivals): the earliest may come
    # last, the largest first.
    ends_and_data = [(0.2, b"x" * 30), (0.3, b"y" * 5), (0.1, b"z" * 10)]
    records: list[UserRecordLike] = [
        stamped(UserRecord("s", "k", data, None, 1 + len(data)), end, end + 0.1, end + 30)
        for end, data in ends_and_data
    ]
    for record in records:
        record.predicted_shard = SHARD0
    aggregate = KinesisRecord(records, b"blob", "a", "1", SHARD0, 0.3, 30.1, 1)
    recorder = MetricsRecorder(MetricsTable("detailed", "shard"))
    answer = Answered([(SHARD0, "1")])
    assert recorder.request_done("s", [aggregate], answer, 0.5, 0.6, 0.6) == 3
    metrics = recorder.table.window(0.6, 1)
    # Waits: 0.5 less each last end: 300, 200 and 400 ms.
    assert values(series(metrics, "BufferingTime", "s", SHARD0)) == (3, 900, 200, 400)
    assert values(series(metrics, "UserRecordsDataPut", "s", SHARD0)) == (3, 45, 5, 30)
    assert values(series(metrics, "RetriesPerRecord", "s", SHARD0)) == (3, 0, 0, 0)

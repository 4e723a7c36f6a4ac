"""The OpenTelemetry and Prometheus sinks (optional extras), fed by a producer under the fake
clock: what an exporter or a scrape reads back. Skipped, with the reason, when the extra's
package is not installed (``make test`` installs both: the ``otel`` and ``prometheus``
extras)."""

from __future__ import annotations

import builtins
import importlib.util
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import pytest

from aiokpl import (
    Config,
    MetricsSink,
    MetricStatistics,
    OpenTelemetrySink,
    Producer,
    PrometheusSink,
)
from aiokpl._metrics.recorder import RunningTotals, snake_case
from aiokpl.testing import FakeKinesis

pytestmark = pytest.mark.anyio

T = TypeVar("T")

HAVE_OTEL = importlib.util.find_spec("opentelemetry.sdk") is not None
HAVE_PROMETHEUS = importlib.util.find_spec("prometheus_client") is not None

CONFIG = Config(region="us-east-1", metrics_level="summary", metrics_upload_interval_ms=1_000)


async def produce(
    sink: MetricsSink, records: int, scrape: Callable[[], T] | None = None
) -> T | None:
    """Put ``records`` over several upload intervals; return ``scrape()`` from just before
    the producer exits (the last upload happens on exit)."""
    fake = FakeKinesis()
    fake.add_stream("s")
    async with Producer(CONFIG, client=fake, metrics_sinks=[sink]) as producer:
        for _ in range(records):
            await producer.put_record(stream="s", partition_key="k", data=b"12345")
            await anyio.sleep(0.4)
        await anyio.sleep(1.0)  # every result in, and uploaded
        return scrape() if scrape is not None else None


@pytest.mark.skipif(not HAVE_OTEL, reason="opentelemetry-sdk is not installed (aiokpl[otel])")
async def test_opentelemetry_instruments_report_the_totals() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

    reader = InMemoryMetricReader()
    sink = OpenTelemetrySink(meter_provider=MeterProvider(metric_readers=[reader]), prefix="kpl")
    assert isinstance(sink, MetricsSink)
    await produce(sink, 7)
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[tuple[str, tuple[tuple[str, Any], ...]], float] = {}
    units: dict[str, str] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "aiokpl"
            for metric in scope.metrics:
                units[metric.name] = metric.unit or ""
                for point in metric.data.data_points:
                    assert isinstance(point, NumberDataPoint)  # sums and gauges only
                    attributes = tuple(sorted((point.attributes or {}).items()))
                    points[(metric.name, attributes)] = point.value
    assert points[("kpl.user_records_put.count", ())] == 7
    assert points[("kpl.user_records_put.sum", (("stream", "s"),))] == 7
    assert points[("kpl.user_records_put.min", ())] == 1
    assert (
        points[
            (
                "kpl.kinesis_records_put.count",
                (("shard_id", "shardId-000000000000"), ("stream", "s")),
            )
        ]
        >= 1
    )
    # 100 ms buffered in the aggregator, then 20 ms of the collector's grace.
    assert points[("kpl.buffering_time.max", ())] == pytest.approx(120)
    assert units["kpl.buffering_time.sum"] == "ms"
    assert units["kpl.user_records_put.count"] == "1"
    assert "series=" in repr(sink)


@pytest.mark.skipif(not HAVE_PROMETHEUS, reason="prometheus-client is not installed")
async def test_prometheus_scrape_shows_summaries_and_gauges() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    sink = PrometheusSink(registry=registry)
    assert isinstance(sink, MetricsSink)
    scraped = await produce(sink, 5, lambda: generate_latest(registry))
    assert scraped is not None
    text = scraped.decode()
    assert 'aiokpl_user_records_put_count{error_code="",shard_id="",stream=""} 5.0' in text
    assert 'aiokpl_user_records_put_sum{error_code="",shard_id="",stream="s"} 5.0' in text
    assert "# TYPE aiokpl_user_records_put summary" in text
    assert 'aiokpl_buffering_time_max{error_code="",shard_id="",stream=""} 120.0' in text
    assert "# TYPE aiokpl_buffering_time_min gauge" in text
    # The producer closed its sinks: the collector is unregistered, a new one can register.
    assert generate_latest(registry) == b""
    assert "series=" in repr(sink)


@pytest.mark.skipif(not HAVE_PROMETHEUS, reason="prometheus-client is not installed")
async def test_prometheus_scrape_while_running() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    fake = FakeKinesis()
    fake.add_stream("s")
    async with Producer(
        CONFIG, client=fake, metrics_sinks=[PrometheusSink(registry=registry)]
    ) as p:
        assert generate_latest(registry) == b""  # nothing published yet
        await (await p.put_record(stream="s", partition_key="k", data=b"x"))
        await anyio.sleep(1.5)
        assert b'aiokpl_user_records_put_count{error_code="",shard_id="",stream=""} 1.0' in (
            generate_latest(registry)
        )


@pytest.mark.parametrize(
    ("sink", "missing", "message"),
    [
        (OpenTelemetrySink, "opentelemetry", r"pip install 'aiokpl\[otel\]'"),
        (PrometheusSink, "prometheus_client", r"pip install 'aiokpl\[prometheus\]'"),
    ],
)
async def test_a_missing_extra_is_named_when_the_sink_opens(
    monkeypatch: pytest.MonkeyPatch,
    sink: type[OpenTelemetrySink | PrometheusSink],
    missing: str,
    message: str,
) -> None:
    real_import = builtins.__import__

    def without(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] == missing:
            raise ImportError(f"No module named {missing!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without)
    with pytest.raises(ImportError, match=message):
        await sink().open(CONFIG)


def test_running_totals_accumulate_counts_and_keep_the_last_extremes() -> None:
    totals = RunningTotals()
    first = MetricStatistics("ErrorsByCode", "Count", 2, 2.0, 1.0, 1.0, "s", "shard-1", "Boom")
    totals.add([first, MetricStatistics("AllErrors", "Count", 3, 1.0, 0.0, 1.0)])
    totals.add(
        [MetricStatistics("ErrorsByCode", "Count", 1, 1.0, 1.0, 1.0, "s", "shard-1", "Boom")]
    )
    assert totals.of("ErrorsByCode") == [
        ({"stream": "s", "shard_id": "shard-1", "error_code": "Boom"}, [3, 3.0, 1.0, 1.0])
    ]
    assert totals.of("AllErrors") == [({}, [3, 1.0, 0.0, 1.0])]
    assert totals.of("RequestTime") == []
    assert snake_case("KinesisRecordsPerPutRecordsRequest") == (
        "kinesis_records_per_put_records_request"
    )


async def test_sinks_that_were_never_opened_close_quietly() -> None:
    await PrometheusSink().aclose()
    await OpenTelemetrySink().aclose()

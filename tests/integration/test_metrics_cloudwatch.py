"""The CloudWatch sink over real HTTP to moto's server (which serves CloudWatch too): records go
to Kinesis, their metrics to CloudWatch, and both are read back."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from aiokpl import CloudWatchSink, MetricStatistics, Producer
from aiokpl._kinesis import create_cloudwatch_client
from aiokpl.testing._servers import DUMMY_CREDENTIALS

from .helpers import admin_client, config, create_stream, stream_name

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


class _WatchedSink(CloudWatchSink):
    """A CloudWatch sink that says when its first publish has returned."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.published = anyio.Event()

    async def publish(self, metrics: Sequence[MetricStatistics]) -> None:
        await super().publish(metrics)
        self.published.set()


async def test_metrics_uploaded_to_cloudwatch_read_back(moto_endpoint: str) -> None:
    stream = stream_name("metrics")
    namespace = f"aiokpl-test-{stream}"
    async with admin_client(moto_endpoint) as admin:
        await create_stream(admin, stream, 2)
    cfg = config(
        moto_endpoint,
        metrics_level="detailed",
        metrics_namespace=namespace,
        metrics_upload_interval_ms=1_000,
    )
    sink = _WatchedSink(endpoint_url=moto_endpoint)
    async with Producer(cfg, metrics_sinks=[sink]) as producer:
        outcomes = [
            await producer.put_record(stream=stream, partition_key=f"k{i}", data=b"x" * 10)
            for i in range(50)
        ]
        await producer.flush()
        # At least one whole upload while running (every second; waited for, not timed: a
        # loaded machine may take longer), then the last one on exit. Waiting for the first
        # request only would let exit cancel the upload mid-way, and the last upload sends a
        # cancelled span again (the uploader's rule: resend rather than lose).
        with anyio.fail_after(30):
            await sink.published.wait()
        # One record after that upload: the last upload, on exit, has something of its own to
        # send (without it, an exit in the same second as that upload may have nothing new).
        outcomes.append(
            await producer.put_record(stream=stream, partition_key="k50", data=b"x" * 10)
        )
        await producer.flush()
    assert all(outcome.result().success for outcome in outcomes)
    assert sink.requests_sent >= 2
    assert sink.requests_failed == 0

    now = datetime.datetime.now(datetime.timezone.utc)
    async with create_cloudwatch_client(cfg, endpoint_url=moto_endpoint) as cloudwatch:
        listed = await cloudwatch.list_metrics(Namespace=namespace)
        names = {metric["MetricName"] for metric in listed["Metrics"]}
        dimensions = {
            tuple(sorted(d["Name"] for d in metric["Dimensions"]))
            for metric in listed["Metrics"]
            if metric["MetricName"] == "UserRecordsPut"
        }
        # moto matches every series whose dimensions include the ones asked for (CloudWatch
        # wants them equal), so only the most detailed series can be read alone: per shard.
        points = []
        for shard in ("shardId-000000000000", "shardId-000000000001"):
            statistics = await cloudwatch.get_metric_statistics(
                Namespace=namespace,
                MetricName="UserRecordsPut",
                Dimensions=[
                    {"Name": "StreamName", "Value": stream},
                    {"Name": "ShardId", "Value": shard},
                ],
                StartTime=now - datetime.timedelta(minutes=5),
                EndTime=now + datetime.timedelta(minutes=5),
                Period=600,
                Statistics=["SampleCount", "Sum", "Minimum", "Maximum"],
            )
            points += statistics["Datapoints"]
    assert {"UserRecordsPut", "UserRecordsDataPut", "RequestTime", "BufferingTime"} <= names
    assert dimensions == {(), ("StreamName",), ("ShardId", "StreamName")}
    assert len(points) == 2
    assert sum(point["SampleCount"] for point in points) == 51
    assert sum(point["Sum"] for point in points) == 51
    assert {(point["Minimum"], point["Maximum"], point["Unit"]) for point in points} == {
        (1, 1, "Count")
    }


async def test_upload_failures_do_not_disturb_delivery(
    moto_endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    stream = stream_name("metrics")
    async with admin_client(moto_endpoint) as admin:
        await create_stream(admin, stream, 1)
    cfg = config(moto_endpoint, metrics_level="summary", metrics_upload_interval_ms=1_000)
    # Nothing listens on port 9 (discard) of 127.0.0.1: every upload fails to connect.
    sink = CloudWatchSink(endpoint_url="http://127.0.0.1:9", attempts=2, retry_delay=0.05)
    with caplog.at_level(logging.WARNING, logger="aiokpl.metrics"):
        async with Producer(cfg, metrics_sinks=[sink]) as producer:
            outcomes = [
                await producer.put_record(stream=stream, partition_key=f"k{i}", data=b"y")
                for i in range(20)
            ]
            await anyio.sleep(1.5)
    assert all(outcome.result().success for outcome in outcomes)
    assert sink.requests_failed >= 1
    assert "PutMetricData of" in caplog.text
    assert "dropped" in caplog.text
    for secret in (
        DUMMY_CREDENTIALS["aws_access_key_id"],
        DUMMY_CREDENTIALS["aws_secret_access_key"],
    ):
        assert secret not in caplog.text

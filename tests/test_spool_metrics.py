"""The spool's metrics through ``Producer``, on asyncio and trio under virtual clocks: its size
sampled, each fsync's time, and what the start recovered and lost; global series only, and
none at all without a spool. The spool's disk is ``MemoryFiles`` and its worker-thread hop an
inline call that takes a set virtual time (see tests/test_spool_producer.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import anyio
import pytest

from aiokpl import MetricStatistics, Producer, _spooling
from aiokpl._core.metrics import METRICS
from test_spool_producer import CONFIG, Disk, put_and_cancel, stream_fake

pytestmark = pytest.mark.anyio

SPOOL_METRICS = {
    "SpoolBytes",
    "SpoolSegments",
    "SpoolFsyncTime",
    "SpoolRecordsRecovered",
    "SpoolBytesLost",
}


class SlowDisk(Disk):
    """A disk whose every hop to the worker thread takes ``hop`` seconds."""

    def __init__(self) -> None:
        super().__init__()
        self.hop = 0.0

    async def run_sync(self, function: Callable[..., Any], *args: Any) -> Any:
        await anyio.sleep(self.hop)
        return await super().run_sync(function, *args)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> SlowDisk:
    disk = SlowDisk()
    monkeypatch.setattr(_spooling, "spool_files", lambda config: disk.files)
    monkeypatch.setattr(_spooling, "run_sync", disk.run_sync)
    return disk


def spool_series(metrics: Sequence[MetricStatistics]) -> dict[str, MetricStatistics]:
    found = [m for m in metrics if m.name in SPOOL_METRICS]
    # Global only: no stream, shard or error code, whatever the granularity.
    assert all((m.stream, m.shard_id, m.error_code) == (None, None, None) for m in found)
    by_name = {m.name: m for m in found}
    assert len(by_name) == len(found)
    return by_name


def test_the_spool_metrics_and_their_units() -> None:
    assert {name: METRICS[name] for name in SPOOL_METRICS} == {
        "SpoolBytes": ("Bytes", "summary"),
        "SpoolSegments": ("Count", "detailed"),
        "SpoolFsyncTime": ("Milliseconds", "summary"),
        "SpoolRecordsRecovered": ("Count", "summary"),
        "SpoolBytesLost": ("Bytes", "summary"),
    }


async def test_size_fsync_time_and_the_start_are_recorded_globally(disk: SlowDisk) -> None:
    config = CONFIG.replace(metrics_level="detailed", metrics_granularity="shard")
    async with Producer(config, client=stream_fake()) as producer:
        disk.hop = 0.004  # each flush: 4 ms of the producer's clock
        for i in range(10):
            await producer.put_record(stream="s", partition_key="k", data=b"%d" % i)
        await producer.wait_durable()
        await producer.flush()
        await anyio.sleep(0.5)  # the acknowledgements written, and samples taken since
        statistics = producer.statistics().spool
        assert statistics is not None
        metrics = spool_series(producer.metrics(window_s=1))
    assert set(metrics) == SPOOL_METRICS
    size = metrics["SpoolBytes"]
    assert size.unit == "Bytes"
    assert size.count >= 2  # sampled every 200 ms
    assert size.max == statistics.bytes_on_disk > 0
    segments = metrics["SpoolSegments"]
    assert (segments.min, segments.max) == (1, statistics.segments) == (1, 1)
    fsync = metrics["SpoolFsyncTime"]
    assert fsync.count == statistics.fsyncs >= 2  # the records', then the acknowledgements'
    assert fsync.min == fsync.max == pytest.approx(4.0)  # milliseconds
    # Once, at the start: a clean, empty spool.
    assert (metrics["SpoolRecordsRecovered"].count, metrics["SpoolRecordsRecovered"].max) == (1, 0)
    assert (metrics["SpoolBytesLost"].count, metrics["SpoolBytesLost"].max) == (1, 0)


async def test_summary_level_samples_the_size_without_segments(disk: SlowDisk) -> None:
    config = CONFIG.replace(metrics_level="summary")
    async with Producer(config, client=stream_fake()) as producer:
        await producer.put_record(stream="s", partition_key="k", data=b"x")
        await producer.wait_durable()
        await anyio.sleep(0.5)
        metrics = spool_series(producer.metrics(window_s=1))
        bytes_on_disk = producer.statistics().spool.bytes_on_disk  # type: ignore[union-attr]
    assert set(metrics) == SPOOL_METRICS - {"SpoolSegments"}
    assert metrics["SpoolBytes"].count >= 2  # the sampler runs at summary level with a spool
    assert metrics["SpoolBytes"].max == bytes_on_disk


async def test_what_recovery_found_and_lost_is_recorded_once_at_the_start(
    disk: SlowDisk,
) -> None:
    await put_and_cancel(CONFIG, 20)
    (segment,) = disk.segments()
    content = disk.files.files[segment].content
    content[len(content) // 2] ^= 0xFF  # a flipped byte inside a record frame
    config = CONFIG.replace(metrics_level="summary")
    async with Producer(config, client=stream_fake()) as producer:
        await producer.flush()
        statistics = producer.statistics().spool
        assert statistics is not None
        metrics = spool_series(producer.metrics())
    recovered = metrics["SpoolRecordsRecovered"]
    assert recovered.count == 1
    assert recovered.sum == statistics.records_recovered > 0
    lost = metrics["SpoolBytesLost"]
    assert lost.count == 1
    assert lost.sum == statistics.bytes_lost > 0


async def test_without_a_spool_there_are_no_spool_metrics() -> None:
    config = CONFIG.replace(spool_directory=None, metrics_level="detailed")
    async with Producer(config, client=stream_fake()) as producer:
        outcome = await producer.put_record(stream="s", partition_key="k", data=b"x")
        await outcome
        await anyio.sleep(0.5)
        names = {m.name for m in producer.metrics()}
    assert "UserRecordsPending" in names
    assert not names & SPOOL_METRICS

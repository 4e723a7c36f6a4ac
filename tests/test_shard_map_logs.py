"""What the shard map logs when streams are missing or answers are garbage (asyncio and trio,
virtual clock, ``FakeKinesis``): few lines, each short enough to read.

A producer given 195 names of streams that do not exist used to log one warning per stream
per attempt (390 lines for two rounds), and a map-load warning quoted a broken answer whole.
"""

from __future__ import annotations

import logging

import anyio
import pytest

from aiokpl import Config, Producer
from aiokpl._kinesis import client_error
from aiokpl._pipeline.shard_map_logs import LOG_MESSAGE_MAX, MISSING_LOG_INTERVAL, MissingStreamsLog
from aiokpl.testing import FakeKinesis

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1")
STREAMS = 195


def shard_map_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.name == "aiokpl.shard_map" and record.levelno >= logging.WARNING
    ]


async def put_to_each(producer: Producer, streams: list[str]) -> None:
    outcomes = [
        await producer.put_record(stream=stream, partition_key="k", data=b"x") for stream in streams
    ]
    await producer.flush()
    for outcome in outcomes:
        assert (await outcome).error_code == "ResourceNotFoundException"


async def test_many_missing_streams_make_one_warning_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "aiokpl.shard_map")
    streams = [f"missing-{i:03d}" for i in range(STREAMS)]
    fake = FakeKinesis()
    async with Producer(CONFIG, client=fake) as producer:
        await put_to_each(producer, streams)
        await anyio.sleep(2)
        [first] = shard_map_warnings(caplog)  # soon, not an interval later
        await put_to_each(producer, streams)  # each map is tried again, and fails again
        await anyio.sleep(MISSING_LOG_INTERVAL)
        await put_to_each(producer, streams)
        await anyio.sleep(MISSING_LOG_INTERVAL + 1)
        warnings = shard_map_warnings(caplog)
    assert fake.calls("ListShards") >= 2 * STREAMS  # the maps were tried again
    assert len(warnings) == 3, [w.getMessage()[:100] for w in warnings]
    message = first.getMessage()
    assert message.startswith(
        f"{STREAMS} streams were not found: 'missing-000', 'missing-001', 'missing-002', "
        f"'missing-003', 'missing-004' and {STREAMS - 5} more (ListShards: "
        "ResourceNotFoundException: "
    )
    assert "missing-005" not in message
    assert "since the last warning" in warnings[1].getMessage()
    assert warnings[1].getMessage().startswith(f"{STREAMS} streams were not found since")


async def test_one_missing_stream_is_named_alone(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "aiokpl.shard_map")
    async with Producer(CONFIG, client=FakeKinesis()) as producer:
        await put_to_each(producer, ["nope"])
        await anyio.sleep(2)
    [warning] = shard_map_warnings(caplog)
    assert warning.getMessage().startswith(
        "1 stream was not found: 'nope' (ListShards: ResourceNotFoundException: Stream nope "
    )
    assert "Records put to it fail with ResourceNotFoundException" in warning.getMessage()


async def test_a_warning_still_gathering_streams_is_logged_at_exit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "aiokpl.shard_map")
    async with Producer(CONFIG, client=FakeKinesis()) as producer:
        await put_to_each(producer, ["nope", "nada"])
        assert shard_map_warnings(caplog) == []  # gathering others for a second
    [warning] = shard_map_warnings(caplog)
    assert warning.getMessage().startswith("2 streams were not found: 'nada', 'nope' (")


async def test_a_garbage_answer_is_cut_short_in_the_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "aiokpl.shard_map")
    page = "<html>\n<head><title>502 Bad Gateway</title></head>\n" + "\x00\x7f garbage " * 90
    fake = FakeKinesis()
    fake.add_stream("s")
    for operation in ("ListShards", "DescribeStream"):
        fake.raise_next(client_error("502", page, operation), operation=operation)
    async with Producer(CONFIG, client=fake) as producer:
        outcome = await producer.put_record(stream="s", partition_key="k", data=b"x")
        assert (await outcome).success  # the map loads at its second attempt
    [warning] = shard_map_warnings(caplog)
    message = warning.getMessage()
    assert len(message) < LOG_MESSAGE_MAX + 150
    assert "\n" not in message
    assert "\x00" not in message
    assert "(DescribeStream: 502: <html> <head><title>502 Bad Gateway</title></head> " in message
    # Cut at LOG_MESSAGE_MAX, saying how long the message was (as kept: 1000 characters).
    assert "garba… [1000 characters]); retrying in" in message


async def test_without_a_scheduler_each_missing_stream_is_logged_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A shard map made on its own, outside a producer, has nobody to gather for.
    caplog.set_level(logging.WARNING, "aiokpl.shard_map")
    log = MissingStreamsLog(None)
    log.report("a", "ListShards: ResourceNotFoundException: gone")
    log.report("b", "ListShards: ResourceNotFoundException: gone")
    first, second = (warning.getMessage() for warning in shard_map_warnings(caplog))
    assert first.startswith("1 stream was not found: 'a' (ListShards: ResourceNotFound")
    assert second.startswith("1 stream was not found since the last warning: 'b' (")

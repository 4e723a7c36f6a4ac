"""The throttling server's pure parts (``aiokpl.testing._throttling``), with explicit ``now``.

The server itself, over HTTP with aiobotocore, is in ``tests/integration/test_throttling.py``.
"""

from __future__ import annotations

import base64
import math

import pytest

from aiokpl.testing._throttling import (
    ServerFaults,
    ShardLimits,
    ShardThrottle,
    ThroughputCounts,
    _decoded_size,
    _records_of,
    _stream_named,
    throttled_message,
)


def admitted(throttle: ShardThrottle, count: int, now: float, size: int = 100) -> int:
    """How many of ``count`` records of ``size`` bytes one shard takes at ``now``."""
    return sum(throttle.admit("arn", "shardId-000000000000", size, now) for _ in range(count))


def test_a_shard_starts_full_with_one_second_of_burst_then_takes_its_rate() -> None:
    throttle = ShardThrottle(ShardLimits(records_per_second=250.0))
    assert admitted(throttle, 300, now=10.0) == 250  # full at the first write, whenever it is
    assert admitted(throttle, 300, now=10.5) == 125
    assert admitted(throttle, 300, now=10.5) == 0
    assert admitted(throttle, 300, now=11.0) == 125


def test_a_quiet_shard_never_holds_more_than_its_burst() -> None:
    throttle = ShardThrottle(ShardLimits(records_per_second=250.0))
    assert admitted(throttle, 300, now=0.0) == 250
    assert admitted(throttle, 1000, now=100.0) == 250
    longer = ShardThrottle(ShardLimits(records_per_second=250.0, burst_seconds=2.0))
    assert admitted(longer, 1000, now=0.0) == 500
    assert admitted(longer, 1000, now=1.0) == 250


def test_aws_defaults_are_a_thousand_records_and_one_mib_per_second() -> None:
    assert ShardLimits() == ShardLimits(1000.0, 1_048_576.0, 1.0)
    throttle = ShardThrottle(ShardLimits())
    assert admitted(throttle, 2000, now=0.0, size=10) == 1000
    by_bytes = ShardThrottle(ShardLimits())
    # 1 MiB of 128 KiB records: eight fit, the ninth waits for the bytes, not the records.
    assert admitted(by_bytes, 20, now=0.0, size=128 * 1024) == 8
    assert admitted(by_bytes, 20, now=0.1, size=128 * 1024) == 0
    assert admitted(by_bytes, 20, now=0.25, size=128 * 1024) == 2


def test_shards_and_streams_have_buckets_of_their_own() -> None:
    throttle = ShardThrottle(ShardLimits(records_per_second=10.0))
    assert sum(throttle.admit("a", "shardId-000000000000", 1, 0.0) for _ in range(20)) == 10
    assert sum(throttle.admit("a", "shardId-000000000001", 1, 0.0) for _ in range(20)) == 10
    assert sum(throttle.admit("b", "shardId-000000000000", 1, 0.0) for _ in range(20)) == 10


def test_what_is_given_back_can_be_taken_again_and_never_beyond_the_burst() -> None:
    throttle = ShardThrottle(ShardLimits(records_per_second=10.0, bytes_per_second=1000.0))
    assert admitted(throttle, 10, now=0.0, size=50) == 10
    assert not throttle.admit("arn", "shardId-000000000000", 50, 0.0)
    throttle.give_back("arn", "shardId-000000000000", 50, 0.0)
    assert throttle.admit("arn", "shardId-000000000000", 50, 0.0)
    fresh = ShardThrottle(ShardLimits(records_per_second=10.0))
    fresh.give_back("arn", "shardId-000000000000", 1, 0.0)
    assert admitted(fresh, 20, now=0.0, size=1) == 10


@pytest.mark.parametrize("field", ["records_per_second", "bytes_per_second", "burst_seconds"])
@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan])
def test_limits_are_positive_finite_numbers(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"{field} must be a positive finite number"):
        ShardLimits(**{field: value})


def test_limits_and_faults_describe_themselves() -> None:
    assert ShardLimits().describe() == (
        "1000 records/s and 1,048,576 bytes/s (1 MiB/s) per shard, 1 s of burst"
    )
    assert ShardLimits(250, 512 * 1024, 2).describe() == (
        "250 records/s and 524,288 bytes/s (0.5 MiB/s) per shard, 2 s of burst"
    )
    assert ServerFaults().describe() == []
    assert not ServerFaults().any
    faults = ServerFaults(
        fault_rate=0.05,
        fail_streams=["a"],  # type: ignore[arg-type]  # as JSON gives it to the server process
        hang_streams=("b",),
        hang_seconds=3,
    )
    assert faults.any
    assert faults.fail_streams == ("a",)  # a list (from JSON) is kept as a tuple
    assert faults.describe() == [
        "5% of requests fail at random (InternalFailure HTTP 500, ServiceUnavailable HTTP 503)",
        "stream a: every request fails (InternalFailure)",
        "stream b: every request is answered 3 s late",
    ]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"fault_rate": -0.1}, "fault_rate must be within 0 … 1"),
        ({"fault_rate": 1.5}, "fault_rate must be within 0 … 1"),
        ({"fault_rate": math.nan}, "fault_rate must be within 0 … 1"),
        ({"hang_seconds": -1.0}, "hang_seconds must be 0 or more"),
        ({"hang_seconds": math.inf}, "hang_seconds must be 0 or more"),
    ],
)
def test_faults_are_checked(arguments: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServerFaults(**arguments)  # type: ignore[arg-type]


def test_the_throttled_message_is_aws_s() -> None:
    assert throttled_message("shardId-000000000001", "events", "123456789012") == (
        "Rate exceeded for shard shardId-000000000001 in stream events under account 123456789012."
    )


def test_counts_add_up_per_second_and_stream_in_order() -> None:
    counts = ThroughputCounts()
    counts.add(101, "b", delivered=3)
    counts.add(100, "a", delivered=5, throttled=2)
    counts.add(100, "a", throttled=1, failed=4)
    assert counts.rows() == [
        {"second": 100, "stream": "a", "delivered": 5, "throttled": 3, "failed": 4},
        {"second": 101, "stream": "b", "delivered": 3, "throttled": 0, "failed": 0},
    ]


@pytest.mark.parametrize("length", range(12))
def test_the_size_of_base64_data_is_known_without_decoding_it(length: int) -> None:
    text = base64.b64encode(bytes(range(length))).decode()
    assert _decoded_size(text) == length


def test_a_request_names_its_stream_by_name_or_arn() -> None:
    assert _stream_named({"StreamName": "a"}) == "a"
    arn = "arn:aws:kinesis:us-east-1:123456789012:stream/b.c"
    assert _stream_named({"StreamARN": arn}) == "b.c"
    assert _stream_named({"StreamARN": "nonsense"}) is None
    assert _stream_named({}) is None
    assert _decoded_size(None) == 0


def test_the_records_of_a_write() -> None:
    one = {"StreamName": "a", "Data": "eA==", "PartitionKey": "k"}
    assert _records_of("PutRecord", one) == [one]
    assert _records_of("PutRecords", {"Records": [one, one]}) == [one, one]
    assert _records_of("PutRecords", {"Records": "nonsense"}) == []
    assert _records_of("PutRecords", {"Records": [1]}) == []
    assert _records_of("ListShards", one) == []

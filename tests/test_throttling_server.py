"""The throttling server's pure parts (``aiokpl.testing._throttling``), with explicit ``now``.

The server itself, over HTTP with aiobotocore, is in ``tests/integration/test_throttling.py``.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import threading
from collections import Counter
from typing import Any

import pytest

from aiokpl.aggregation import encode
from aiokpl.testing._shard_limits import THROUGHPUT_MAX_ROWS, THROUGHPUT_WINDOW_SECONDS
from aiokpl.testing._throttling import (
    THROTTLED,
    ServerFaults,
    ShardLimits,
    ShardThrottle,
    ThrottlingApp,
    ThroughputCounts,
    _decoded_size,
    _records_of,
    _stream_named,
    _user_records,
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
        control_latency=0.5,
    )
    assert faults.any
    assert ServerFaults(control_latency=0.5).any
    assert faults.fail_streams == ("a",)  # a list (from JSON) is kept as a tuple
    assert faults.describe() == [
        "5% of requests fail at random (InternalFailure HTTP 500, ServiceUnavailable HTTP 503)",
        "stream a: every request fails (InternalFailure)",
        "stream b: every request is answered 3 s late",
        "ListShards, DescribeStream and DescribeStreamSummary are answered 0.5 s late",
    ]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"fault_rate": -0.1}, "fault_rate must be within 0 … 1"),
        ({"fault_rate": 1.5}, "fault_rate must be within 0 … 1"),
        ({"fault_rate": math.nan}, "fault_rate must be within 0 … 1"),
        ({"hang_seconds": -1.0}, "hang_seconds must be 0 or more"),
        ({"hang_seconds": math.inf}, "hang_seconds must be 0 or more"),
        ({"control_latency": -0.1}, "control_latency must be 0 or more"),
        ({"control_latency": math.nan}, "control_latency must be 0 or more"),
    ],
)
def test_faults_are_checked(arguments: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServerFaults(**arguments)  # type: ignore[arg-type]


def test_the_throttled_message_is_aws_s() -> None:
    assert throttled_message("shardId-000000000001", "events", "123456789012") == (
        "Rate exceeded for shard shardId-000000000001 in stream events under account 123456789012."
    )


def test_counts_keep_a_window_of_seconds() -> None:
    counts = ThroughputCounts(window_seconds=3)
    for second in range(10):
        counts.add(second, "a", delivered=1)
    counts.add(6, "a", delivered=1)  # out of the window (7 … 9): not counted
    counts.add(8, "b", delivered=2)  # late, in the window
    assert [(r["second"], r["stream"], r["delivered"]) for r in counts.rows()] == [
        (7, "a", 1),
        (8, "a", 1),
        (8, "b", 2),
        (9, "a", 1),
    ]


def test_counts_keep_at_most_max_rows_oldest_seconds_first() -> None:
    counts = ThroughputCounts(max_rows=4)
    for second, stream in [(1, "a"), (1, "b"), (2, "a"), (2, "b"), (3, "a")]:
        counts.add(second, stream, delivered=1)
    assert [(r["second"], r["stream"]) for r in counts.rows()] == [(2, "a"), (2, "b"), (3, "a")]
    for stream in "bcdef":  # one second naming more streams than the rows kept
        counts.add(4, stream, delivered=1)
    assert [(r["second"], r["stream"]) for r in counts.rows()] == [
        (4, "b"),
        (4, "c"),
        (4, "d"),
        (4, "e"),
    ]


def test_a_server_left_running_keeps_an_hour_of_counts() -> None:
    # The defaults: `aiokpl local` counting a stream for two hours keeps the last hour.
    counts = ThroughputCounts()
    for second in range(7_200):
        counts.add(second, "events", delivered=1)
    rows = counts.rows()
    assert (len(rows), rows[0]["second"], rows[-1]["second"]) == (3_600, 3_600, 7_199)
    assert (THROUGHPUT_WINDOW_SECONDS, THROUGHPUT_MAX_ROWS) == (3_600, 100_000)


def test_counts_add_up_per_second_and_stream_in_order() -> None:
    counts = ThroughputCounts()
    counts.add(101, "b", delivered=3, delivered_user=30)
    counts.add(100, "a", delivered=5, throttled=2, delivered_user=5, throttled_user=2)
    counts.add(100, "a", throttled=1, failed=4, throttled_user=1)
    assert counts.rows() == [
        {
            "second": 100,
            "stream": "a",
            "delivered": 5,
            "throttled": 3,
            "failed": 4,
            "delivered_user_records": 5,
            "throttled_user_records": 3,
        },
        {
            "second": 101,
            "stream": "b",
            "delivered": 3,
            "throttled": 0,
            "failed": 0,
            "delivered_user_records": 30,
            "throttled_user_records": 0,
        },
    ]


def test_an_aggregate_counts_its_user_records() -> None:
    aggregate = encode([(f"k{i}", b"x" * 100) for i in range(7)])
    assert _user_records({"Data": base64.b64encode(aggregate).decode()}) == 7
    assert _user_records({"Data": base64.b64encode(b"plain").decode()}) == 1
    # The magic without a valid aggregate behind it is a record of its own.
    assert _user_records({"Data": base64.b64encode(aggregate[:-1]).decode()}) == 1
    assert _user_records({"Data": None}) == 1


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


# -- the WSGI application in front of moto's, in this process, with an explicit clock ----------

AUTHORIZATION = (
    "AWS4-HMAC-SHA256 Credential=testing/20261125/us-east-1/kinesis/aws4_request, "
    "SignedHeaders=host, Signature=0"
)
ACCOUNT = "123456789012"  # moto's default account


class Served:
    """A :class:`ThrottlingApp` over moto's application, called through werkzeug's test client.

    ``now`` is the buckets' clock; ``refuse`` makes moto's application answer every
    ``PutRecords`` / ``PutRecord`` with HTTP 500 without storing anything (what a failure
    inside moto looks like), so the tokens paid for the records must come back.
    """

    def __init__(
        self,
        limits: ShardLimits | None,
        faults: ServerFaults | None = None,
        placement_seed: int | None = 0,
    ) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
        from werkzeug.test import Client

        self.now = 0.0
        self.refuse = False
        self.calls: list[str] = []
        moto = DomainDispatcherApplication(create_backend_app)

        def inner(environ: dict[str, Any], start_response: Any) -> Any:
            target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
            self.calls.append(target.rpartition(".")[2])
            if self.refuse and target.endswith(("PutRecords", "PutRecord")):
                start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
                return [b"refused"]
            return moto(environ, start_response)

        self.app = ThrottlingApp(
            inner,
            threading.Lock(),
            limits,
            faults,
            placement_seed=placement_seed,
            clock=lambda: self.now,
            wall=lambda: 7.5,
        )
        self.client = Client(self.app)

    def call(self, operation: str, **body: Any) -> tuple[int, dict[str, Any]]:
        response = self.client.post(
            "/",
            data=json.dumps(body),
            headers={
                "X-Amz-Target": f"Kinesis_20131202.{operation}",
                "Content-Type": "application/x-amz-json-1.1",
                "Authorization": AUTHORIZATION,
            },
        )
        try:
            return response.status_code, json.loads(response.data)
        except ValueError:  # moto's answer to what it cannot serve is not always JSON
            return response.status_code, {"text": response.data.decode(errors="replace")}

    def put(self, stream: str, count: int, key: str = "k") -> tuple[int, dict[str, Any]]:
        records = [{"Data": "eA==", "PartitionKey": key} for _ in range(count)]
        return self.call("PutRecords", StreamName=stream, Records=records)

    def codes(self, stream: str, count: int) -> list[str | None]:
        status, body = self.put(stream, count)
        assert status == 200, body
        return [entry.get("ErrorCode") for entry in body["Records"]]


_streams = itertools.count()


def new_stream(served: Served, shards: int = 1) -> str:
    name = f"wsgi-{next(_streams)}"  # moto's model lives in this process: every name is new
    assert served.call("CreateStream", StreamName=name, ShardCount=shards)[0] == 200
    return name


def test_the_app_refills_shards_by_its_clock() -> None:
    served = Served(ShardLimits(records_per_second=100.0))
    stream = new_stream(served)
    assert served.codes(stream, 150) == [None] * 100 + [THROTTLED] * 50
    served.now = 0.5
    assert served.codes(stream, 60) == [None] * 50 + [THROTTLED] * 10
    served.now = 0.5
    status, body = served.call("PutRecord", StreamName=stream, Data="eA==", PartitionKey="k")
    assert (status, body) == (
        400,
        {
            "__type": THROTTLED,
            "message": throttled_message("shardId-000000000000", stream, ACCOUNT),
        },
    )
    served.now = 10.0
    status, body = served.call("PutRecord", StreamName=stream, Data="eA==", PartitionKey="k")
    assert status == 200
    assert body["ShardId"] == "shardId-000000000000"
    rows = [row for row in served.app.counts.rows() if row["stream"] == stream]
    assert [tuple(row.values())[2:] for row in rows] == [(151, 61, 0, 151, 61)]
    assert rows[0]["second"] == 7


def test_a_request_the_service_refuses_whole_takes_nothing_from_the_shard() -> None:
    served = Served(ShardLimits(records_per_second=10.0))
    stream = new_stream(served)
    status, body = served.put(stream, 501)
    assert (status, body["__type"]) == (400, "ValidationException")
    big = [{"Data": base64.b64encode(bytes(1024 * 1024)).decode(), "PartitionKey": "k"}]
    assert served.call("PutRecords", StreamName=stream, Records=big)[0] == 400
    status, body = served.put("no-such-stream", 1)
    assert (status, body["__type"]) == (400, "ResourceNotFoundException")
    # moto places no record whose explicit hash key is out of range: its own answer.
    status, _ = served.call(
        "PutRecords",
        StreamName=stream,
        Records=[{"Data": "", "PartitionKey": "k", "ExplicitHashKey": str(2**128)}],
    )
    assert status != 200
    # moto counts a shard's ending hash key out of it, so the very last key has no shard: moto
    # fails on it (HTTP 500 over a socket; here its exception comes through), as without us.
    last = [{"Data": "", "PartitionKey": "k", "ExplicitHashKey": str(2**128 - 1)}]
    with pytest.raises(AttributeError):
        served.call("PutRecords", StreamName=stream, Records=last)
    assert served.codes(stream, 12) == [None] * 10 + [THROTTLED] * 2


def test_tokens_come_back_when_moto_stores_nothing() -> None:
    """Records moto's whole request handling serves (here, data that is not a string, which
    the direct path leaves to moto) and that moto refuses give their tokens back."""
    served = Served(ShardLimits(records_per_second=10.0))
    stream = new_stream(served)
    served.refuse = True
    odd = [{"Data": None, "PartitionKey": "k"}]
    assert served.call("PutRecords", StreamName=stream, Records=odd * 10)[0] == 500
    assert served.call("PutRecords", StreamName=stream, Records=odd * 15)[0] == 500
    assert served.calls[-2:] == ["PutRecords", "PutRecords"]  # then the original, for its error
    status, _ = served.call("PutRecord", StreamName=stream, Data="eA==", PartitionKey="k")
    assert status == 500
    served.refuse = False
    assert served.codes(stream, 12) == [None] * 10 + [THROTTLED] * 2
    assert all(
        row["delivered"] == 10 for row in served.app.counts.rows() if row["stream"] == stream
    )


def test_put_records_is_stored_by_moto_s_model_without_its_request_handling() -> None:
    """``PutRecords`` that fit are handed to moto's model directly: moto's sequence numbers and
    shards, the records readable through moto, and moto's application never called."""
    served = Served(ShardLimits(records_per_second=10.0))
    stream = new_stream(served, shards=2)
    served.calls.clear()
    records = [{"Data": "eA==", "PartitionKey": f"key-{n}"} for n in range(12)]
    status, body = served.call("PutRecords", StreamName=stream, Records=records)
    assert served.calls == []
    assert status == 200
    assert body["FailedRecordCount"] == sum("ErrorCode" in entry for entry in body["Records"])
    stored = [entry for entry in body["Records"] if "SequenceNumber" in entry]
    assert len(stored) == 12 - body["FailedRecordCount"] >= 10
    for shard in {entry["ShardId"] for entry in stored}:
        _, iterator = served.call(
            "GetShardIterator",
            StreamName=stream,
            ShardId=shard,
            ShardIteratorType="TRIM_HORIZON",
        )
        _, read = served.call("GetRecords", ShardIterator=iterator["ShardIterator"])
        assert [r["SequenceNumber"] for r in read["Records"]] == [
            e["SequenceNumber"] for e in stored if e["ShardId"] == shard
        ]
        assert all(r["Data"] == "eA==" for r in read["Records"])


def test_a_record_moto_s_model_fails_is_an_internal_failure_and_gives_its_tokens_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A record moto's model raises on (its bug: it placed the record a moment before) gets
    AWS's per-record ``InternalFailure``; the others of the request are stored."""
    from moto.kinesis.models import Stream

    served = Served(ShardLimits(records_per_second=10.0))
    stream = new_stream(served)
    store = Stream.put_record

    def put_record(self: Any, key: str, explicit: Any, data: str) -> Any:
        if key == "bad":
            raise RuntimeError("moto failed")
        return store(self, key, explicit, data)

    monkeypatch.setattr(Stream, "put_record", put_record)
    records = [{"Data": "eA==", "PartitionKey": key} for key in ("k", "bad", "k")]
    status, body = served.call("PutRecords", StreamName=stream, Records=records)
    assert status == 200
    assert body["FailedRecordCount"] == 1
    assert [entry.get("ErrorCode") for entry in body["Records"]] == [None, "InternalFailure", None]
    assert body["Records"][1]["ErrorMessage"] == "Internal service failure."
    # The failed record's token came back: 8 more fit in the shard's 10.
    assert served.codes(stream, 9) == [None] * 8 + [THROTTLED]
    rows = [row for row in served.app.counts.rows() if row["stream"] == stream]
    assert (rows[0]["delivered"], rows[0]["failed"]) == (10, 1)


def test_a_whole_put_records_over_the_limit_never_reaches_moto() -> None:
    served = Served(ShardLimits(records_per_second=5.0))
    stream = new_stream(served, shards=2)
    status, body = served.put(stream, 5)  # one key: one shard, now empty
    assert (status, body["FailedRecordCount"]) == (200, 0)
    shard = body["Records"][0]["ShardId"]
    served.calls.clear()
    _, body = served.put(stream, 3)
    assert served.calls == []
    assert body == {
        "FailedRecordCount": 3,
        "Records": [
            {"ErrorCode": THROTTLED, "ErrorMessage": throttled_message(shard, stream, ACCOUNT)}
        ]
        * 3,
    }


def test_other_requests_pass_through_untouched() -> None:
    served = Served(ShardLimits(records_per_second=1.0))
    stream = new_stream(served)
    status, body = served.call("ListShards", StreamName=stream)
    assert status == 200
    assert [shard["ShardId"] for shard in body["Shards"]] == ["shardId-000000000000"]
    served.client.post(
        "/", data=b"{not json", headers={"X-Amz-Target": "Kinesis_20131202.PutRecords"}
    )
    assert served.calls[-1] == "PutRecords"  # moto answers what is malformed
    assert served.call("DescribeStreamSummary", StreamName=stream)[0] == 200
    report = served.client.get("/_local/throughput").json
    assert report is not None
    assert report.pop("cpu_seconds") > 0
    assert report == {
        "limits": {"records_per_second": 1.0, "bytes_per_second": 1048576.0, "burst_seconds": 1.0},
        "faults": {
            "fault_rate": 0.0,
            "fail_streams": [],
            "hang_streams": [],
            "hang_seconds": 10.0,
            "control_latency": 0.0,
            "seed": None,
        },
        "series": [],
    }


def test_faults_without_limits_count_what_is_stored_and_failed() -> None:
    served = Served(None, ServerFaults(fault_rate=0.5, seed=3, fail_streams=("broken",)))
    stream = new_stream(served)
    statuses = Counter(served.put(stream, 2)[0] for _ in range(40))
    assert set(statuses) == {200, 500, 503}
    assert served.call(
        "PutRecords", StreamName="broken", Records=[{"Data": "", "PartitionKey": "k"}]
    ) == (
        500,
        {
            "__type": "InternalFailure",
            "message": "Internal service failure (injected: stream broken fails every request).",
        },
    )
    assert served.call("ListShards", StreamName="broken")[0] == 500
    [row] = [row for row in served.app.counts.rows() if row["stream"] == stream]
    assert (row["delivered"], row["failed"]) == (2 * statuses[200], 80 - 2 * statuses[200])


def test_closing_releases_a_hanging_request() -> None:
    served = Served(None, ServerFaults(hang_streams=("stuck",), hang_seconds=600.0))
    answers: list[int] = []
    thread = threading.Thread(target=lambda: answers.append(served.put("stuck", 1)[0]))
    thread.start()
    served.app.close()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert answers == [400]  # served once released: moto has no stream "stuck"


def test_control_latency_slows_the_calls_that_load_a_shard_map_only() -> None:
    served = Served(None, ServerFaults(control_latency=0.3))
    stream = new_stream(served)
    waits: list[float] = []

    class Closing:  # the server's event: what it would wait, without waiting
        def wait(self, timeout: float) -> bool:
            waits.append(timeout)
            return False

    served.app._closing = Closing()  # type: ignore[assignment]
    assert served.put(stream, 1)[0] == 200
    assert (
        served.call(
            "GetShardIterator",
            StreamName=stream,
            ShardId="shardId-000000000000",
            ShardIteratorType="TRIM_HORIZON",
        )[0]
        == 200
    )
    assert waits == []
    for operation in ("ListShards", "DescribeStream", "DescribeStreamSummary"):
        assert served.call(operation, StreamName=stream)[0] == 200
    assert waits == [0.3, 0.3, 0.3]


def test_moto_shards_mended_answer_as_before_without_copying_their_keys() -> None:
    """``mend_shards``: a shard's first and last sequence numbers are its smallest and
    largest (0 when empty), read without copying every key (moto's own way: a list of all the
    keys, once per record stored)."""
    from moto.kinesis.models import Stream

    from aiokpl.testing._moto_model import mend_shards

    mend_shards()
    mend_shards()  # idempotent
    stream = Stream("mended", 1, None, "us-east-1", ACCOUNT, "PROVISIONED")  # type: ignore[abstract,arg-type]
    (shard,) = stream.shards.values()
    assert (shard.get_min_sequence_number(), shard.get_max_sequence_number()) == (0, 0)
    for n in range(25):
        stream.put_record(f"k{n}", None, "eA==")  # type: ignore[arg-type]
        keys = list(shard.records)
        assert shard.get_min_sequence_number() == min(keys)
        assert shard.get_max_sequence_number() == max(keys) == n + 1

    class NoKeys(dict):  # type: ignore[type-arg]
        def keys(self) -> Any:
            raise AssertionError("the keys were copied")

    shard.records = NoKeys(shard.records)
    assert (shard.get_min_sequence_number(), shard.get_max_sequence_number()) == (1, 25)
    shard.put_record("k", "eA==", None)  # type: ignore[arg-type]
    assert shard.get_max_sequence_number() == 26


# -- AUTO streams, keyless records and DryRun, played in front of moto -------------------------

DRY_RUN = "DryRunOperationException"


def auto_stream(served: Served, shards: int = 4, strategy: str | None = "AUTO") -> str:
    """An on-demand stream with ``shards`` shards (moto alone would make 4) and ``strategy``."""
    name = f"wsgi-{next(_streams)}"
    body: dict[str, Any] = {
        "StreamName": name,
        "ShardCount": shards,
        "StreamModeDetails": {"StreamMode": "ON_DEMAND"},
    }
    if strategy is not None:
        body["RecordDistributionStrategy"] = strategy
    assert served.call("CreateStream", **body) == (200, {})
    return name


def arn_of(stream: str) -> str:
    return f"arn:aws:kinesis:us-east-1:{ACCOUNT}:stream/{stream}"


def read_shard(served: Served, stream: str, shard: str) -> list[dict[str, Any]]:
    """Every record moto holds on ``shard``, as its ``GetRecords`` answers them."""
    _, iterator = served.call(
        "GetShardIterator", StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
    )
    status, page = served.call("GetRecords", ShardIterator=iterator["ShardIterator"])
    assert status == 200, page
    records: list[dict[str, Any]] = page["Records"]
    return records


def stored_count(served: Served, stream: str) -> int:
    _, listed = served.call("ListShards", StreamName=stream)
    return sum(len(read_shard(served, stream, s["ShardId"])) for s in listed["Shards"])


def strategy_of(served: Served, stream: str) -> str | None:
    status, body = served.call("DescribeStreamSummary", StreamName=stream)
    assert status == 200, body
    found: str | None = body["StreamDescriptionSummary"].get("RecordDistributionStrategy")
    return found


def test_create_stream_keeps_the_strategy_and_an_on_demand_shard_count() -> None:
    served = Served(None)
    stream = auto_stream(served, shards=3)
    _, listed = served.call("ListShards", StreamName=stream)
    assert len(listed["Shards"]) == 3
    assert listed["Shards"][-1]["HashKeyRange"]["EndingHashKey"] == str(2**128 - 1)
    assert strategy_of(served, stream) == "AUTO"
    keyed = auto_stream(served, shards=2, strategy=None)
    assert strategy_of(served, keyed) == "USER_PARTITION_KEY"
    assert strategy_of(served, new_stream(served)) is None  # provisioned: no such member
    name = f"wsgi-{next(_streams)}"
    assert served.call(
        "CreateStream", StreamName=name, StreamModeDetails={"StreamMode": "ON_DEMAND"}
    ) == (200, {})
    _, listed = served.call("ListShards", StreamName=name)
    assert len(listed["Shards"]) == 4  # moto's on-demand default, without a ShardCount


def test_create_stream_refuses_auto_when_provisioned_and_unknown_strategies() -> None:
    served = Served(None)
    name = f"wsgi-{next(_streams)}"
    status, body = served.call(
        "CreateStream", StreamName=name, ShardCount=1, RecordDistributionStrategy="AUTO"
    )
    assert (status, body["__type"]) == (400, "InvalidArgumentException")
    status, body = served.call(
        "CreateStream",
        StreamName=name,
        StreamModeDetails={"StreamMode": "ON_DEMAND"},
        RecordDistributionStrategy="auto",
    )
    assert (status, body["__type"]) == (400, "ValidationException")
    assert "[AUTO, USER_PARTITION_KEY]" in body["message"]
    assert served.call("DescribeStreamSummary", StreamName=name)[1]["__type"] == (
        "ResourceNotFoundException"
    )
    assert served.call(
        "CreateStream",
        StreamName=name,
        ShardCount=1,
        RecordDistributionStrategy="USER_PARTITION_KEY",
    ) == (200, {})
    status, body = served.call("CreateStream", StreamName=name, ShardCount=1)
    assert (status, body["__type"]) == (400, "ResourceInUseException")  # moto's own answer


def test_update_record_distribution_strategy_on_demand_only() -> None:
    served = Served(None)
    stream = auto_stream(served, shards=2, strategy=None)
    update = "UpdateStreamRecordDistributionStrategy"
    assert served.call(update, StreamARN=arn_of(stream), RecordDistributionStrategy="AUTO") == (
        200,
        {},
    )
    assert strategy_of(served, stream) == "AUTO"
    status, body = served.call(update, RecordDistributionStrategy="AUTO")
    assert (status, body["__type"]) == (400, "ValidationException")
    assert "Value null at 'streamARN'" in body["message"]
    status, body = served.call(update, StreamARN=arn_of(stream))
    assert "Value null at 'recordDistributionStrategy'" in body["message"]
    status, body = served.call(update, StreamARN=arn_of(stream), RecordDistributionStrategy="X")
    assert (status, body["__type"]) == (400, "ValidationException")
    status, body = served.call(update, StreamARN=arn_of("nope"), RecordDistributionStrategy="AUTO")
    assert (status, body["__type"]) == (400, "ResourceNotFoundException")
    provisioned = new_stream(served)
    status, body = served.call(
        update, StreamARN=arn_of(provisioned), RecordDistributionStrategy="AUTO"
    )
    assert (status, body["__type"]) == (400, "InvalidArgumentException")
    assert strategy_of(served, provisioned) is None
    assert served.calls.count(update) == 0  # moto never sees it (it does not implement it)


@pytest.mark.parametrize("limits", [None, ShardLimits()], ids=["plain", "throttled"])
def test_auto_places_records_at_random_whatever_their_keys(limits: ShardLimits | None) -> None:
    served = Served(limits)
    stream = auto_stream(served)
    served.calls.clear()
    records = [{"Data": "eA==", "PartitionKey": "k"} for _ in range(100)]
    records += [{"Data": "eQ==", "PartitionKey": "k", "ExplicitHashKey": "0"} for _ in range(100)]
    records += [{"Data": "eg=="} for _ in range(100)]  # no partition key at all
    status, body = served.call("PutRecords", StreamName=stream, Records=records)
    assert (status, body["FailedRecordCount"]) == (200, 0)
    assert served.calls == []  # stored on moto's shards directly
    entries = body["Records"]
    for block in (entries[:100], entries[100:200], entries[200:]):
        assert len({entry["ShardId"] for entry in block}) == 4  # every shard, whatever the key
    for shard in {entry["ShardId"] for entry in entries}:
        read = read_shard(served, stream, shard)
        mine = [
            (e["SequenceNumber"], r)
            for e, r in zip(entries, records, strict=True)
            if e["ShardId"] == shard
        ]
        assert [r["SequenceNumber"] for r in read] == [sequence for sequence, _ in mine]
        assert [(r["Data"], r.get("PartitionKey")) for r in read] == [
            (record["Data"], record.get("PartitionKey")) for _, record in mine
        ]
    rows = [row for row in served.app.counts.rows() if row["stream"] == stream]
    assert rows[0]["delivered"] == 300


def test_the_same_placement_seed_places_alike() -> None:
    def shards_of(seed: int) -> list[str]:
        served = Served(None, placement_seed=seed)
        stream = auto_stream(served)
        _, body = served.call("PutRecords", StreamName=stream, Records=[{"Data": ""}] * 40)
        return [entry["ShardId"] for entry in body["Records"]]

    assert shards_of(11) == shards_of(11)
    assert shards_of(11) != shards_of(12)


def test_switching_back_or_to_provisioned_routes_by_key_again() -> None:
    served = Served(None)
    stream = auto_stream(served)
    update = "UpdateStreamRecordDistributionStrategy"
    served.call(update, StreamARN=arn_of(stream), RecordDistributionStrategy="USER_PARTITION_KEY")
    _, body = served.put(stream, 30, key="k")
    assert len({entry["ShardId"] for entry in body["Records"]}) == 1
    served.call(update, StreamARN=arn_of(stream), RecordDistributionStrategy="AUTO")
    _, body = served.put(stream, 30, key="k")
    assert len({entry["ShardId"] for entry in body["Records"]}) > 1
    status, _ = served.call(
        "UpdateStreamMode",
        StreamARN=arn_of(stream),
        StreamModeDetails={"StreamMode": "PROVISIONED"},
    )
    assert status == 200
    assert strategy_of(served, stream) is None
    _, body = served.put(stream, 30, key="k")
    assert len({entry["ShardId"] for entry in body["Records"]}) == 1


@pytest.mark.parametrize("limits", [None, ShardLimits()], ids=["plain", "throttled"])
def test_a_record_without_a_key_fails_the_whole_write_unless_auto(
    limits: ShardLimits | None,
) -> None:
    served = Served(limits)
    for stream in (new_stream(served), auto_stream(served, strategy="USER_PARTITION_KEY")):
        status, body = served.call(
            "PutRecords",
            StreamName=stream,
            Records=[{"Data": "eA==", "PartitionKey": "k"}, {"Data": "eA=="}],
        )
        assert (status, body) == (
            400,
            {
                "__type": "ValidationException",
                "message": "1 validation error detected: Value null at "
                "'records.2.member.partitionKey' failed to satisfy constraint: Member must not "
                "be null",
            },
        )
        status, body = served.call("PutRecord", StreamName=stream, Data="eA==")
        assert (status, body["__type"]) == (400, "ValidationException")
        assert "'partitionKey'" in body["message"]
        assert stored_count(served, stream) == 0
    auto = auto_stream(served)
    status, body = served.call("PutRecord", StreamName=auto, Data="eA==")
    assert status == 200
    assert [r.get("PartitionKey", "none") for r in read_shard(served, auto, body["ShardId"])] == [
        "none"
    ]


def test_sequence_number_for_ordering_is_refused_on_auto_streams_only() -> None:
    served = Served(None)
    auto = auto_stream(served)
    keyed = auto_stream(served, strategy=None)
    ordering = {"Data": "eA==", "PartitionKey": "k", "SequenceNumberForOrdering": "1"}
    status, body = served.call("PutRecord", StreamName=auto, **ordering)
    assert (status, body["__type"]) == (400, "InvalidArgumentException")
    assert "AUTO" in body["message"]
    assert stored_count(served, auto) == 0
    assert served.call("PutRecord", StreamName=keyed, **ordering)[0] == 200


def test_throttling_on_auto_applies_to_the_shard_each_record_was_placed_on() -> None:
    served = Served(ShardLimits(records_per_second=5.0))
    stream = auto_stream(served)
    status, body = served.call("PutRecords", StreamName=stream, Records=[{"Data": "eA=="}] * 60)
    assert (status, body["FailedRecordCount"]) == (200, 40)
    stored = Counter(entry["ShardId"] for entry in body["Records"] if "ShardId" in entry)
    assert stored == {f"shardId-00000000000{i}": 5 for i in range(4)}
    throttled = {e["ErrorMessage"].split()[4] for e in body["Records"] if "ErrorCode" in e}
    assert throttled == set(stored)
    status, body = served.call("PutRecord", StreamName=stream, Data="eA==")
    assert (status, body["__type"]) == (400, THROTTLED)
    served.now = 1.0
    assert served.call("PutRecord", StreamName=stream, Data="eA==")[0] == 200
    [row] = [row for row in served.app.counts.rows() if row["stream"] == stream]
    assert (row["delivered"], row["throttled"]) == (21, 41)


@pytest.mark.parametrize("limits", [None, ShardLimits(records_per_second=2.0)])
def test_a_dry_run_write_stores_nothing_takes_nothing_and_never_reaches_moto(
    limits: ShardLimits | None,
) -> None:
    served = Served(limits)
    for stream in (new_stream(served, 2), auto_stream(served)):
        served.calls.clear()
        for _ in range(3):
            status, body = served.call(
                "PutRecords",
                StreamName=stream,
                Records=[{"Data": "eA==", "PartitionKey": "k"}] * 2,
                DryRun=True,
            )
            assert (status, body) == (
                400,
                {
                    "__type": DRY_RUN,
                    "message": "The request was rejected because the DryRun parameter was "
                    "specified.",
                },
            )
            status, body = served.call(
                "PutRecord", StreamName=stream, Data="eA==", PartitionKey="k", DryRun=True
            )
            assert (status, body["__type"]) == (400, DRY_RUN)
        assert served.calls == []
        assert stored_count(served, stream) == 0
        # No tokens were taken: the real request fits whole.
        status, body = served.call(
            "PutRecords",
            StreamName=stream,
            Records=[{"Data": "eA==", "PartitionKey": "k"}] * 2,
            DryRun=False,
        )
        assert (status, body["FailedRecordCount"]) == (200, 0)
    assert [row["delivered"] for row in served.app.counts.rows()] == [2, 2]


def test_a_dry_run_write_is_checked_as_the_real_one_and_refused_here() -> None:
    served = Served(None)
    stream = new_stream(served, 2)
    served.calls.clear()

    def dry(**body: Any) -> tuple[int, str]:
        status, answer = served.call("PutRecords", StreamName=stream, DryRun=True, **body)
        return status, answer["__type"]

    good = {"Data": "eA==", "PartitionKey": "k"}
    assert served.call("PutRecords", StreamName="nope", Records=[good], DryRun=True)[1][
        "__type"
    ] == ("ResourceNotFoundException")
    assert dry(Records=[good] * 501) == (400, "ValidationException")
    big = {"Data": base64.b64encode(bytes(1024 * 1024)).decode(), "PartitionKey": "k"}
    assert dry(Records=[good, big]) == (400, "ValidationException")
    assert dry(
        Records=[good, {"Data": "eA==", "PartitionKey": "k", "ExplicitHashKey": str(2**128)}]
    ) == (
        400,
        "InvalidArgumentException",
    )
    # moto has no shard for the very last key: its failure, answered here, nothing stored.
    assert dry(
        Records=[good, {"Data": "", "PartitionKey": "k", "ExplicitHashKey": str(2**128 - 1)}]
    ) == (
        500,
        "InternalFailure",
    )
    assert served.calls == []
    assert stored_count(served, stream) == 0


def test_a_dry_run_read_is_served_by_moto_then_refused() -> None:
    served = Served(None)
    stream = new_stream(served)
    served.put(stream, 1)
    ask = {"StreamName": stream, "ShardIteratorType": "TRIM_HORIZON"}
    status, body = served.call(
        "GetShardIterator", ShardId="shardId-000000000000", DryRun=True, **ask
    )
    assert (status, body["__type"]) == (400, DRY_RUN)
    status, body = served.call(
        "GetShardIterator", ShardId="shardId-000000000009", DryRun=True, **ask
    )
    assert (status, body["__type"]) == (400, "ResourceNotFoundException")
    _, iterator = served.call("GetShardIterator", ShardId="shardId-000000000000", **ask)
    status, body = served.call("GetRecords", ShardIterator=iterator["ShardIterator"], DryRun=True)
    assert (status, body["__type"]) == (400, DRY_RUN)
    assert len(read_shard(served, stream, "shardId-000000000000")) == 1


def test_auto_writes_moto_cannot_take_are_answered_here_and_store_nothing() -> None:
    served = Served(ShardLimits(records_per_second=10.0))
    stream = auto_stream(served, shards=1)
    served.calls.clear()
    good = {"Data": "eA==", "PartitionKey": "k"}
    for bad, code in (
        ({"Data": "eA==", "ExplicitHashKey": str(2**128)}, "InvalidArgumentException"),
        ({"Data": "eA==", "ExplicitHashKey": "x1"}, "InvalidArgumentException"),
        ({"Data": "eA==", "PartitionKey": "k" * 257}, "InvalidArgumentException"),
        ({"Data": "eA==", "PartitionKey": 5}, "InvalidArgumentException"),
        ({"Data": None}, "SerializationException"),
    ):
        status, body = served.call("PutRecords", StreamName=stream, Records=[good, bad])
        assert (status, body["__type"]) == (400, code), bad
    assert served.calls == []
    assert stored_count(served, stream) == 0
    assert served.codes(stream, 12) == [None] * 10 + [THROTTLED] * 2  # no tokens were taken


def test_a_record_moto_fails_to_store_on_auto_is_an_internal_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from moto.kinesis.models import Shard

    served = Served(ShardLimits(records_per_second=10.0))
    stream = auto_stream(served, shards=1)
    store = Shard.put_record

    def put_record(self: Any, key: Any, data: str, explicit: Any) -> Any:
        if data == "YmFk":  # b"bad"
            raise RuntimeError("moto failed")
        return store(self, key, data, explicit)

    monkeypatch.setattr(Shard, "put_record", put_record)
    records = [{"Data": data} for data in ("eA==", "YmFk", "eA==")]
    status, body = served.call("PutRecords", StreamName=stream, Records=records)
    assert status == 200
    assert [entry.get("ErrorCode") for entry in body["Records"]] == [None, "InternalFailure", None]
    status, body = served.call("PutRecord", StreamName=stream, Data="YmFk")
    assert (status, body["__type"]) == (500, "InternalFailure")
    # Both failed records' tokens came back: 8 more fit in the shard's 10.
    assert served.codes(stream, 9) == [None] * 8 + [THROTTLED]


def test_a_put_record_over_a_mebibyte_is_refused_whole() -> None:
    served = Served(None)
    stream = new_stream(served)
    data = base64.b64encode(bytes(1024 * 1024)).decode()
    status, body = served.call("PutRecord", StreamName=stream, Data=data, PartitionKey="k")
    assert (status, body["__type"]) == (400, "ValidationException")
    assert "'data'" in body["message"]
    assert stored_count(served, stream) == 0


def test_the_summary_of_a_stream_moto_does_not_know_is_moto_s_error() -> None:
    served = Served(None)
    status, body = served.call("DescribeStreamSummary", StreamName="nope")
    assert (status, body["__type"]) == (400, "ResourceNotFoundException")
    stream = auto_stream(served)
    status, body = served.call("DescribeStreamSummary", StreamARN=arn_of(stream))
    assert body["StreamDescriptionSummary"]["RecordDistributionStrategy"] == "AUTO"


def test_a_write_over_five_mebibytes_in_all_is_refused_whole() -> None:
    served = Served(None)
    stream = new_stream(served)
    data = base64.b64encode(bytes(900 * 1024)).decode()
    records = [{"Data": data, "PartitionKey": "k"}] * 6  # each under 1 MiB, 5.3 MiB in all
    status, body = served.call("PutRecords", StreamName=stream, Records=records)
    assert (status, body) == (
        400,
        {"__type": "InvalidArgumentException", "message": "Records size exceeds 5 MB limit"},
    )
    assert stored_count(served, stream) == 0


def test_without_limits_what_moto_fails_to_store_is_answered_as_with_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from moto.kinesis.models import Stream

    served = Served(None)
    stream = new_stream(served)
    store = Stream.put_record

    def put_record(self: Any, key: str, explicit: Any, data: str) -> Any:
        if key == "bad":
            raise RuntimeError("moto failed")
        return store(self, key, explicit, data)

    monkeypatch.setattr(Stream, "put_record", put_record)
    records = [{"Data": "eA==", "PartitionKey": key} for key in ("k", "bad")]
    status, body = served.call("PutRecords", StreamName=stream, Records=records)
    assert status == 200
    assert [entry.get("ErrorCode") for entry in body["Records"]] == [None, "InternalFailure"]
    served.refuse = True  # moto's application answers PutRecord with HTTP 500
    status, _ = served.call("PutRecord", StreamName=stream, Data="eA==", PartitionKey="k")
    assert status == 500
    [row] = [row for row in served.app.counts.rows() if row["stream"] == stream]
    assert (row["delivered"], row["failed"]) == (1, 1)


def test_a_region_moto_does_not_know_is_answered_as_the_service_does() -> None:
    # Issue 31: moto fails deep in its backend for such a region (an HTML 500, a traceback
    # logged per request); the server answers the service's JSON error instead.
    from werkzeug.test import Client

    from aiokpl.testing._moto_extras import known_regions_only

    client = Client(known_regions_only(Served(None).app))

    def list_shards(region: str) -> tuple[int, str, dict[str, Any]]:
        response = client.post(
            "/",
            data=json.dumps({"StreamName": "nowhere"}),
            headers={
                "X-Amz-Target": "Kinesis_20131202.ListShards",
                "Content-Type": "application/x-amz-json-1.1",
                "Authorization": AUTHORIZATION.replace("/us-east-1/", f"/{region}/"),
            },
        )
        return response.status_code, response.content_type, json.loads(response.data)

    assert list_shards("us-east-11") == (
        400,
        "application/x-amz-json-1.1",
        {
            "__type": "InvalidSignatureException",
            "message": "Credential should be scoped to a valid region, not 'us-east-11'. "
            "(aiokpl local: moto's Kinesis serves the regions AWS has, e.g. us-east-1)",
        },
    )
    status, _, body = list_shards("eu-west-1")  # a region moto knows: served by moto
    assert (status, body["__type"]) == (400, "ResourceNotFoundException")

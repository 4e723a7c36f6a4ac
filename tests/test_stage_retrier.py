"""The retrier on its own: synchronous, with explicit ``now``; it returns decisions (the router
carries them out) and keeps its counters. (The stream's backoff after a request-level failure
is its lane's: ``tests/test_sender.py``, ``tests/test_lane_states.py``.)"""

from __future__ import annotations

from typing import Any

from aiokpl._core.answers import Answer, RequestFailed
from aiokpl._core.hashing import MAX_HASH_KEY
from aiokpl._core.records import KinesisRecord
from aiokpl._core.retry_policy import RetryPolicy
from aiokpl._core.shards import ShardRange
from aiokpl._kinesis import answer_of
from aiokpl._pipeline.retrier import Retrier
from aiokpl._record import UserRecord
from stages import stamped

SHARD = "shardId-000000000000"
CHILD = "shardId-000000000002"
RANGES = {
    SHARD: ShardRange(SHARD, 0, MAX_HASH_KEY),
    CHILD: ShardRange(CHILD, 0, MAX_HASH_KEY),
}
NO_RANGES: dict[str, ShardRange] = {}  # a map that does not know the child yet
THROTTLED = "ProvisionedThroughputExceededException"


def retrier() -> Retrier:
    policy = RetryPolicy(fail_if_throttled=False, aggregation_enabled=True, retry_delay=0.05)
    return Retrier("s", policy)


def sent(*data: bytes) -> tuple[list[UserRecord], KinesisRecord]:
    records = [stamped(UserRecord("s", "k", d, "5", 1 + len(d))) for d in data]
    for record in records:
        record.predicted_shard = SHARD
    return records, KinesisRecord(list(records), b"blob", "a", "5", SHARD, 0.1, 30.0, 1)


def ok(shard: str = SHARD) -> dict[str, Any]:
    return {"SequenceNumber": "49590", "ShardId": shard}


def answered(*entries: dict[str, Any]) -> Answer:
    """A PutRecords response as the sender hands it over: read at the SDK boundary."""
    failed = sum(1 for entry in entries if "ErrorCode" in entry)
    return answer_of({"FailedRecordCount": failed, "Records": list(entries)}, len(entries))


def test_an_answer_becomes_decisions_and_the_retrier_touches_no_stage() -> None:
    stage = retrier()
    (delivered,), first = sent(b"1")
    (throttled,), second = sent(b"2")
    answer = answered(ok(), {"ErrorCode": THROTTLED, "ErrorMessage": "Rate exceeded"})
    decisions = stage.handle_result([first, second], answer, 0.5, 0.75, 1.0, RANGES.get)
    assert decisions.succeeded == [delivered]
    assert decisions.retry == [throttled]
    assert throttled.deadline == 1.0 + 0.05  # the retry deadline: the router puts it again
    assert decisions.throttled_shards == {SHARD}
    assert decisions.accepted == {SHARD: [1, first.size]}
    assert stage.retries == 1


def test_a_request_level_failure_retries_every_record_of_the_request() -> None:
    stage = retrier()
    records, first = sent(b"1", b"2")
    failure = RequestFailed.of("InternalFailure", "boom")
    decisions = stage.handle_result([first], failure, 0.5, 0.75, 1.0, RANGES.get)
    assert decisions.request_error == ("InternalFailure", "boom")
    assert decisions.retry == records
    assert stage.retries == 2


def test_a_delayed_verdict_is_placed_with_the_range_the_router_gives() -> None:
    stage = retrier()
    records, aggregate = sent(b"1", b"2")
    decisions = stage.handle_result([aggregate], answered(ok(CHILD)), 0.5, 0.75, 1.0, NO_RANGES.get)
    ((undecided, shard_id, sequence_number),) = decisions.undecided
    assert (undecided, shard_id) == (aggregate, CHILD)
    assert not decisions.succeeded
    placed = stage.place(undecided, shard_id, sequence_number, RANGES[CHILD], 0.5, 0.75, 2.0)
    assert placed.succeeded == records  # the refreshed map knows the child holds them all


def test_expire_fails_every_user_record_and_counts_them() -> None:
    stage = retrier()
    records, kinesis_record = sent(b"1", b"2")
    expired = stage.expire(kinesis_record, "rate limiter", 30.0)
    assert expired == records
    for record in records:
        (attempt,) = record.attempts
        assert attempt.error_code == "Expired"
    assert stage.statistics().expired_unsent == 2

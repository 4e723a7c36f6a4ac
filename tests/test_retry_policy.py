"""The retrier's decisions, one test per row of the table (pure, explicit time)."""

from __future__ import annotations

from typing import Any

import pytest

from aiokpl import RecordFailedError, RecordResult
from aiokpl._core.answers import Answer, RequestFailed
from aiokpl._core.encoder import AggregateBuilder
from aiokpl._core.hashing import MAX_HASH_KEY
from aiokpl._core.records import IN_AGGREGATE, KinesisRecord
from aiokpl._core.retry_policy import (
    EXPIRED_TOKEN,
    EXPIRED_TOKEN_ATTEMPTS,
    FAIL_FAST,
    NARROWED,
    THROTTLED,
    Decisions,
    RetryPolicy,
    classify,
    expire,
    place,
)
from aiokpl._core.shards import ShardRange
from aiokpl._kinesis import answer_of
from aiokpl._record import UserRecord
from stages import stamped

HALF = (MAX_HASH_KEY + 1) // 2
RANGES = {
    "shardId-000000000000": ShardRange("shardId-000000000000", 0, HALF - 1),
    "shardId-000000000001": ShardRange("shardId-000000000001", HALF, MAX_HASH_KEY),
    # children of shard 0 after a split
    "shardId-000000000002": ShardRange("shardId-000000000002", 0, HALF // 2 - 1),
    "shardId-000000000003": ShardRange("shardId-000000000003", HALF // 2, HALF - 1),
}
POLICY = RetryPolicy(fail_if_throttled=False, aggregation_enabled=True, retry_delay=0.05)


def user_record(hash_key: int, arrival: float = 0.0, ttl: float = 30.0) -> UserRecord:
    # An explicit hash key makes the record's hash key exactly `hash_key`.
    return stamped(
        UserRecord("s", "k", b"data", str(hash_key), 5), arrival, arrival + 0.1, arrival + ttl
    )


def kinesis_record(
    *records: UserRecord, shard: str | None = "shardId-000000000000"
) -> KinesisRecord:
    for record in records:
        record.predicted_shard = shard
    return KinesisRecord(list(records), b"blob", "a", str(records[0].hash_key), shard, 0.1, 30.0, 1)


def ok(shard: str = "shardId-000000000000", seq: str = "49590") -> dict[str, Any]:
    return {"SequenceNumber": seq, "ShardId": shard}


def result_of(record: UserRecord) -> RecordResult:
    """The record's result as its outcome would report it."""
    record.resolve()
    return record.result()


def answer(sent: list[KinesisRecord], result: Any) -> Answer:
    """``result`` as the sender hands it over: a ``(code, message)`` failure, or a response
    read at the boundary."""
    if isinstance(result, tuple):
        return RequestFailed.of(*result)
    return answer_of(result, len(sent))


def run(
    sent: list[KinesisRecord], result: Any, now: float = 1.0, policy: RetryPolicy = POLICY
) -> Decisions:
    return classify(sent, answer(sent, result), 0.5, 0.75, now, policy, RANGES.get)


def test_success_on_predicted_shard() -> None:
    record = user_record(5)
    decisions = run([kinesis_record(record)], {"Records": [ok()]})
    assert decisions.succeeded == [record]
    assert not decisions.failed
    assert not decisions.retry
    assert not decisions.invalidate
    # A success is kept as plain values; the result built from them holds the Attempt.
    assert record.delivered == (0.5, 0.75, "shardId-000000000000", "49590")
    result = result_of(record)
    assert (result.success, result.shard_id, result.sequence_number) == (
        True,
        "shardId-000000000000",
        "49590",
    )
    (attempt,) = result.attempts
    assert (attempt.success, attempt.shard_id, attempt.sequence_number) == (
        True,
        "shardId-000000000000",
        "49590",
    )
    assert (attempt.started_at, attempt.ended_at, attempt.delay, attempt.duration) == (
        0.5,
        0.75,
        0.5,
        0.25,
    )


def test_what_each_predicted_shard_accepted_is_tallied_for_the_throttle_feedback() -> None:
    """Kinesis records (and their bytes) stored where predicted, per predicted shard; a
    throttled one, or one stored elsewhere, is not counted."""
    sent = [
        kinesis_record(user_record(5)),
        kinesis_record(user_record(6)),
        kinesis_record(user_record(7), shard=None),
        kinesis_record(user_record(8)),
        kinesis_record(user_record(9)),
    ]
    decisions = run(
        sent,
        {
            "Records": [
                ok(),
                ok(),
                ok("shardId-000000000001"),
                {"ErrorCode": THROTTLED, "ErrorMessage": "Rate exceeded"},
                ok("shardId-000000000002"),
            ]
        },
    )
    size = sent[0].size
    assert decisions.accepted == {"shardId-000000000000": [2, 2 * size], None: [1, size]}


def test_success_without_prediction() -> None:
    record = user_record(5)
    decisions = run([kinesis_record(record, shard=None)], {"Records": [ok("shardId-000000000001")]})
    assert decisions.succeeded == [record]
    assert not decisions.invalidate


def test_success_on_split_child_counts_and_invalidates() -> None:
    a, b = user_record(5), user_record(6)
    decisions = run([kinesis_record(a, b)], {"Records": [ok("shardId-000000000002")]})
    assert decisions.succeeded == [a, b]
    assert decisions.invalidate == [(0.5, "shardId-000000000000")]


def test_wrong_shard_aggregate_is_retried_whole_and_invalidates_once() -> None:
    # A KCL consumer drops the whole aggregate (one record is outside shard 2's range): the
    # one inside goes again too, not only the one outside.
    inside, outside = user_record(5), user_record(HALF // 2 + 7)
    decisions = run([kinesis_record(inside, outside)], {"Records": [ok("shardId-000000000002")]})
    assert decisions.succeeded == []
    assert decisions.retry == [inside, outside]
    for record in (inside, outside):
        assert record.attempts[-1].error_code == "Wrong Shard"
        assert "KCL consumer then drops whole" in (record.attempts[-1].error_message or "")
        assert record.deadline == pytest.approx(1.05)
    assert decisions.invalidate == [(0.5, "shardId-000000000000")]
    # Shard 2's range holds the key the aggregate was routed by: a split, not evidence.
    assert not decisions.unrouted


def test_unknown_actual_shard_defers_the_verdict_of_an_aggregate() -> None:
    a, b = user_record(5), user_record(HALF // 2 + 7)
    sent = kinesis_record(a, b)
    decisions = run([sent], {"Records": [ok("shardId-000000000099")]})
    # Nothing decided yet: which records shard 99 holds is known only after a refresh.
    assert decisions.undecided == [(sent, "shardId-000000000099", "49590")]
    assert decisions.succeeded == decisions.retry == decisions.failed == []
    assert (a.attempts, b.attempts) == ((), ())
    assert decisions.invalidate == [(0.5, "shardId-000000000000")]
    # After the refresh: the range holds a but not b, so a KCL consumer drops both.
    later = Decisions()
    place(
        later,
        sent,
        "shardId-000000000099",
        "49590",
        RANGES["shardId-000000000002"],
        0.5,
        0.75,
        2.0,
        POLICY,
    )
    assert later.succeeded == []
    assert later.retry == [a, b]
    assert b.attempts[-1].error_code == "Wrong Shard"
    assert b.deadline == pytest.approx(2.05)


def test_still_unknown_after_the_refresh_retries_every_record() -> None:
    a, b = user_record(5), user_record(6)
    decisions = Decisions()
    place(
        decisions, kinesis_record(a, b), "shardId-000000000099", "1", None, 0.5, 0.75, 1.0, POLICY
    )
    assert decisions.retry == [a, b]


def test_a_known_range_without_the_routing_key_is_another_streams_and_defers_the_verdict() -> None:
    # Predicted for shard 0; Kinesis answered shard 1, whose range as known here (the upper
    # half) cannot hold the aggregate's explicit hash key (5): that range is another stream's,
    # deleted and created again with its shards numbered from 0. Not a "Wrong Shard".
    a, b = user_record(5), user_record(6)
    sent = kinesis_record(a, b)
    decisions = run([sent], {"Records": [ok("shardId-000000000001")]})
    assert decisions.undecided == [(sent, "shardId-000000000001", "49590")]
    assert decisions.succeeded == decisions.retry == []
    assert decisions.invalidate == [(0.5, "shardId-000000000000")]
    # Evidence too: either another stream's range, or the service placed it (AUTO).
    assert decisions.unrouted
    # Judged with the new stream's range of shard 1 (the whole key space, say): delivered.
    later = Decisions()
    whole = ShardRange("shardId-000000000001", 0, MAX_HASH_KEY)
    place(later, sent, "shardId-000000000001", "49590", whole, 0.5, 0.75, 2.0, POLICY)
    assert later.succeeded == [a, b]
    assert (a.attempts, b.attempts) == ((), ())
    # Still the old range after the refresh: nothing can be told, as for an unknown shard.
    again = Decisions()
    place(
        again,
        sent,
        "shardId-000000000001",
        "1",
        RANGES["shardId-000000000001"],
        0.5,
        0.75,
        2.0,
        POLICY,
    )
    assert again.retry == [a, b]


def test_a_hand_made_record_without_a_decimal_routing_key_is_judged_by_the_range() -> None:
    a, b = user_record(5), user_record(6)
    sent = kinesis_record(a, b)
    sent.explicit_hash_key = "not a number"
    decisions = run([sent], {"Records": [ok("shardId-000000000002")]})
    assert decisions.succeeded == [a, b]
    c, d = user_record(5), user_record(HALF // 2 + 7)
    sent = kinesis_record(c, d)
    sent.explicit_hash_key = "not a number"
    decisions = run([sent], {"Records": [ok("shardId-000000000002")]})
    assert decisions.retry == [c, d]


def test_raw_single_record_elsewhere_is_a_success() -> None:
    record = user_record(5)
    decisions = run([kinesis_record(record)], {"Records": [ok("shardId-000000000099")]})
    assert decisions.succeeded == [record]
    assert decisions.invalidate == [(0.5, "shardId-000000000000")]
    assert not decisions.unrouted  # shard 99 is unknown: nothing to tell


def test_a_raw_record_stored_where_its_key_does_not_route_is_a_success_and_evidence() -> None:
    record = user_record(5)
    decisions = run([kinesis_record(record)], {"Records": [ok("shardId-000000000001")]})
    assert decisions.succeeded == [record]
    assert decisions.unrouted


def auto_policy(*, anywhere: bool = False) -> RetryPolicy:
    policy = RetryPolicy(
        fail_if_throttled=False,
        aggregation_enabled=True,
        retry_delay=0.05,
        aggregates_anywhere=anywhere,
    )
    policy.service_places = True
    return policy


def test_on_a_stream_that_places_records_an_aggregate_is_judged_at_once_by_its_shard() -> None:
    # Shard 1's known range does not hold the routing key (5): under AUTO it is still the
    # range a KCL consumer judges by, so no wait for a refresh.
    a, b = user_record(5), user_record(HALF + 1)
    decisions = run(
        [kinesis_record(a, b)], {"Records": [ok("shardId-000000000001")]}, policy=auto_policy()
    )
    assert decisions.unrouted
    assert decisions.undecided == []
    assert decisions.retry == [a, b]  # a is outside shard 1: the KCL drops both
    # All inside the shard it landed on: a KCL consumer keeps it, delivered.
    c, d = user_record(HALF + 1), user_record(HALF + 2)
    sent = kinesis_record(c, d)
    sent.explicit_hash_key = "5"  # routed by a key of shard 0's, placed on shard 1
    decisions = run([sent], {"Records": [ok("shardId-000000000001")]}, policy=auto_policy())
    assert decisions.succeeded == [c, d]
    assert decisions.unrouted


def test_aggregates_anywhere_are_delivered_wherever_the_service_placed_them() -> None:
    a, b = user_record(5), user_record(HALF + 1)
    policy = auto_policy(anywhere=True)
    decisions = run(
        [kinesis_record(a, b)], {"Records": [ok("shardId-000000000001")]}, policy=policy
    )
    assert decisions.succeeded == [a, b]
    # Unknown shard: judged after the refresh, delivered then.
    c, d = user_record(5), user_record(6)
    sent = kinesis_record(c, d)
    decisions = run([sent], {"Records": [ok("shardId-000000000099")]}, policy=policy)
    assert decisions.undecided == [(sent, "shardId-000000000099", "49590")]
    later = Decisions()
    place(later, sent, "shardId-000000000099", "1", None, 0.5, 0.75, 2.0, policy)
    assert later.succeeded == [c, d]


def test_what_is_stored_is_counted_as_it_is_billed() -> None:
    small = kinesis_record(user_record(5))  # size 1: 1 KiB, one 25 KiB unit
    large = kinesis_record(user_record(6))
    large.size = 25 * 1024 + 1  # 26 KiB, two units
    throttled = kinesis_record(user_record(7))
    decisions = run(
        [small, large, throttled],
        {"Records": [ok(), ok(), {"ErrorCode": THROTTLED, "ErrorMessage": "Rate exceeded"}]},
    )
    assert (decisions.billed_kib, decisions.put_payload_units) == (1 + 26, 1 + 2)


def test_wrong_shard_with_aggregation_off_succeeds() -> None:
    policy = RetryPolicy(fail_if_throttled=False, aggregation_enabled=False, retry_delay=0.05)
    a, b = user_record(5), user_record(HALF // 2 + 7)
    decisions = run(
        [kinesis_record(a, b)], {"Records": [ok("shardId-000000000002")]}, policy=policy
    )
    assert decisions.succeeded == [a, b]


def test_throttled_record_retried_and_shard_reported() -> None:
    record = user_record(5)
    decisions = run(
        [kinesis_record(record)],
        {"Records": [{"ErrorCode": THROTTLED, "ErrorMessage": "Rate exceeded"}]},
    )
    assert decisions.retry == [record]
    assert decisions.throttled_shards == {"shardId-000000000000"}
    assert record.attempts[-1].error_code == THROTTLED


def test_throttled_record_fails_when_fail_if_throttled() -> None:
    policy = RetryPolicy(fail_if_throttled=True, aggregation_enabled=True, retry_delay=0.05)
    record = user_record(5)
    decisions = run(
        [kinesis_record(record)],
        {"Records": [{"ErrorCode": THROTTLED, "ErrorMessage": "x"}]},
        policy=policy,
    )
    assert decisions.failed == [record]


def test_request_throttled_fails_when_fail_if_throttled() -> None:
    policy = RetryPolicy(fail_if_throttled=True, aggregation_enabled=True, retry_delay=0.05)
    record = user_record(5)
    decisions = run([kinesis_record(record)], (THROTTLED, "slow down"), policy=policy)
    assert decisions.failed == [record]
    assert decisions.request_error == (THROTTLED, "slow down")


def test_other_record_error_retried() -> None:
    record = user_record(5)
    decisions = run(
        [kinesis_record(record)],
        {"Records": [{"ErrorCode": "InternalFailure", "ErrorMessage": "oops"}]},
    )
    assert decisions.retry == [record]
    assert not decisions.throttled_shards


@pytest.mark.parametrize("code", sorted(FAIL_FAST))
def test_fail_fast_codes_fail_at_once(code: str) -> None:
    a, b = user_record(5), user_record(6)
    decisions = run([kinesis_record(a), kinesis_record(b)], (code, "no"))
    if code in NARROWED:  # a request of several: split, see below
        assert decisions.resend == [[decisions.resend[0][0]], [decisions.resend[1][0]]]
        a, b = user_record(5), user_record(6)
    decisions = run([kinesis_record(a, b)], (code, "no"))
    assert decisions.failed == [a, b]
    assert a.attempts[-1].error_code == code
    per_record = user_record(7)
    decisions = run(
        [kinesis_record(per_record)], {"Records": [{"ErrorCode": code, "ErrorMessage": "no"}]}
    )
    assert decisions.failed == [per_record]


@pytest.mark.parametrize("code", sorted(NARROWED))
def test_a_request_refused_as_a_whole_is_split_until_the_bad_entry_is_alone(code: str) -> None:
    records = [user_record(n) for n in range(5)]
    sent = [kinesis_record(r) for r in records[:2]] + [kinesis_record(*records[2:])]
    decisions = run(sent, (code, "1 validation error detected"))
    assert decisions.request_error == (code, "1 validation error detected")
    # Resent as they are, in two requests; nothing failed, nothing back to the aggregator.
    assert decisions.resend == [sent[:2], sent[2:]]
    assert not decisions.failed
    assert not decisions.retry
    for record in records:
        (attempt,) = record.attempts
        assert (attempt.error_code, attempt.started_at, attempt.ended_at) == (code, 0.5, 0.75)
    # Alone in its request, the entry at fault fails with the code.
    decisions = run(sent[2:], (code, "1 validation error detected"))
    assert decisions.failed == records[2:]
    assert not decisions.resend


def test_a_split_request_fails_its_expired_records() -> None:
    young, old = user_record(5), user_record(6, ttl=0.9)
    old_record = kinesis_record(old)
    old_record.expires_at = 0.9
    decisions = run([kinesis_record(young), old_record], ("ValidationException", "bad"), now=1.0)
    assert decisions.resend == [[decisions.resend[0][0]]]
    assert decisions.resend[0][0].records == [young]
    assert decisions.failed == [old]
    assert [a.error_code for a in old.attempts] == ["ValidationException", "Expired"]


def test_an_expired_token_is_retried_a_bounded_number_of_times() -> None:
    record = user_record(5)
    for attempt in range(1, EXPIRED_TOKEN_ATTEMPTS):
        decisions = run([kinesis_record(record)], (EXPIRED_TOKEN, "The security token expired"))
        assert decisions.retry == [record], attempt
    decisions = run([kinesis_record(record)], (EXPIRED_TOKEN, "The security token expired"))
    assert decisions.failed == [record]
    assert [a.error_code for a in record.attempts] == [EXPIRED_TOKEN] * EXPIRED_TOKEN_ATTEMPTS


def test_request_error_retries_every_record() -> None:
    a, b, c = user_record(5), user_record(6), user_record(7)
    decisions = run([kinesis_record(a, b), kinesis_record(c)], ("Internal", "ConnectionResetError"))
    assert decisions.retry == [a, b, c]
    assert decisions.request_error == ("Internal", "ConnectionResetError")


def test_count_mismatch_is_a_request_error() -> None:
    a, b = user_record(5), user_record(6)
    decisions = run([kinesis_record(a), kinesis_record(b)], {"Records": [ok()]})
    assert decisions.retry == [a, b]
    assert decisions.request_error is not None
    assert decisions.request_error[0] == "RecordCountMismatch"


@pytest.mark.parametrize("response", [{}, {"Records": "nope"}, {"Records": None}])
def test_malformed_response_is_a_request_error(response: dict[str, Any]) -> None:
    record = user_record(5)
    decisions = run([kinesis_record(record)], response)
    assert decisions.retry == [record]
    assert decisions.request_error is not None
    assert decisions.request_error[0] == "Internal"


@pytest.mark.parametrize("entry", [{}, None, {"SequenceNumber": "1"}, {"ShardId": "x"}, "junk"])
def test_malformed_entry_is_retried_as_internal(entry: object) -> None:
    record = user_record(5)
    decisions = run([kinesis_record(record)], {"Records": [entry]})
    assert decisions.retry == [record]
    assert record.attempts[-1].error_code == "Internal"


def test_expired_record_fails_with_two_attempts() -> None:
    record = user_record(5, arrival=0.0, ttl=0.9)
    decisions = run([kinesis_record(record)], ("InternalFailure", "x"), now=1.0)
    assert decisions.failed == [record]
    assert [a.error_code for a in record.attempts] == ["InternalFailure", "Expired"]


def test_retry_deadline_never_past_expiry() -> None:
    record = user_record(5, arrival=0.0, ttl=1.02)
    decisions = run([kinesis_record(record)], ("InternalFailure", "x"), now=1.0)
    assert decisions.retry == [record]
    assert record.deadline == 1.02


def test_attempt_delays_chain_from_previous_attempt() -> None:
    record = user_record(5)
    run([kinesis_record(record)], ("InternalFailure", "x"), now=1.0)
    sent = [kinesis_record(record)]
    classify(sent, answer(sent, {"Records": [ok()]}), 2.0, 2.5, 2.5, POLICY, RANGES.get)
    assert [a.delay for a in result_of(record).attempts] == [0.5, 1.25]


def test_expire_helper() -> None:
    a, b = user_record(5), user_record(6)
    records = expire(kinesis_record(a, b), 31.0, "rate limiter")
    assert records == [a, b]
    assert a.attempts[-1].error_code == "Expired"
    assert "rate limiter" in (a.attempts[-1].error_message or "")


def test_record_reprs_show_live_state() -> None:
    record = user_record(5)
    kinesis = kinesis_record(record)
    assert repr(record) == (
        "<Outcome pending: stream='s' size=5 shard='shardId-000000000000' attempts=0>"
    )
    assert repr(kinesis) == "<KinesisRecord records=1 size=5 shard='shardId-000000000000'>"
    assert kinesis.entry() == {"Data": b"blob", "PartitionKey": "a", "ExplicitHashKey": "5"}


def test_a_failed_record_result_holds_only_its_failures() -> None:
    record = user_record(5)
    run([kinesis_record(record)], ("ResourceNotFoundException", "gone"))
    result = result_of(record)
    assert not result.success
    assert [a.error_code for a in result.attempts] == ["ResourceNotFoundException"]


def encoded_aggregate(*records: UserRecord, shard: str = "shardId-000000000000") -> KinesisRecord:
    """A Kinesis record whose blob really encodes its user records, data released as the
    aggregator releases it."""
    builder = AggregateBuilder()
    for record in records:
        record.predicted_shard = shard
        builder.add(record.partition_key, record.data, record.explicit_hash_key)
    aggregate = KinesisRecord(
        list(records), builder.encode(), "a", str(records[0].hash_key), shard, 0.1, 30.0, 1
    )
    aggregate.seal(release_data=True)
    return aggregate


def payload_record(hash_key: int, data: bytes) -> UserRecord:
    return stamped(UserRecord("s", "k", data, str(hash_key), 1 + len(data)))


def test_release_data_leaves_only_the_blob_and_keeps_single_records() -> None:
    a, b = payload_record(5, b"first"), payload_record(6, b"")
    encoded_aggregate(a, b)
    assert a.data is IN_AGGREGATE
    assert b.data is IN_AGGREGATE
    single = payload_record(7, b"raw")
    KinesisRecord.single(single, 7).seal(release_data=True)
    assert single.data == b"raw"  # a raw record's blob is its data: nothing to release


@pytest.mark.parametrize(
    "result",
    [
        {"Records": [{"ErrorCode": THROTTLED, "ErrorMessage": "slow down"}]},
        ("InternalFailure", "request failed"),
    ],
    ids=["entry-error", "request-error"],
)
def test_records_leaving_an_aggregate_get_their_data_back(result: Any) -> None:
    a, b = payload_record(5, b"first"), payload_record(6, b"\x00\xff second")
    decisions = run([encoded_aggregate(a, b)], result)
    assert decisions.retry == [a, b]
    assert (a.data, b.data) == (b"first", b"\x00\xff second")


def test_wrong_shard_records_get_their_data_back() -> None:
    inside, outside = payload_record(5, b"in"), payload_record(HALF // 2 + 5, b"out")
    aggregate = encoded_aggregate(inside, outside, shard="shardId-000000000001")
    decisions = run([aggregate], {"Records": [ok("shardId-000000000002")]})
    assert decisions.retry == [inside, outside]
    assert (inside.data, outside.data) == (b"in", b"out")


def test_delivered_aggregate_is_not_decoded() -> None:
    a, b = payload_record(5, b"first"), payload_record(6, b"second")
    decisions = run([encoded_aggregate(a, b)], {"Records": [ok()]})
    assert decisions.succeeded == [a, b]
    assert a.data is IN_AGGREGATE  # delivered records never needed their bytes again


# --- a record that runs out of time says what its attempts failed with (issue 31) ----------
REFUSED = ("EndpointConnectionError", 'Could not connect to the endpoint URL: "http://h:1/"')


def test_an_expired_record_names_the_last_cause_of_its_attempts() -> None:
    record = user_record(5, arrival=0.0, ttl=0.9)
    run([kinesis_record(record)], ("InternalFailure", "Internal service failure."), now=0.5)
    run([kinesis_record(record)], REFUSED, now=1.0)
    expired = record.attempts[-1]
    assert expired.error_code == "Expired"  # the code stays as documented
    assert expired.error_message == (
        "record_ttl_ms elapsed before delivery; after 2 attempts, the last failed with "
        'EndpointConnectionError: Could not connect to the endpoint URL: "http://h:1/"'
    )


def test_a_record_expired_while_queued_names_the_cause_of_its_last_attempt() -> None:
    tried, fresh = user_record(5), user_record(6)
    run([kinesis_record(tried)], REFUSED, now=1.0)
    expire(kinesis_record(tried, fresh), 31.0, "sender queue")
    assert tried.attempts[-1].error_message == (
        "record_ttl_ms elapsed while waiting in the sender queue; after 1 attempt, the last "
        'failed with EndpointConnectionError: Could not connect to the endpoint URL: "http://h:1/"'
    )
    # Never sent: nothing to name.
    assert fresh.attempts[-1].error_message == (
        "record_ttl_ms elapsed while waiting in the sender queue"
    )


def test_a_record_expired_in_a_split_request_names_the_refusal() -> None:
    young, old = user_record(5), user_record(6, ttl=0.9)
    old_record = kinesis_record(old)
    old_record.expires_at = 0.9
    run([kinesis_record(young), old_record], ("ValidationException", "bad"), now=1.0)
    assert old.attempts[-1].error_message == (
        "record_ttl_ms elapsed before delivery; after 1 attempt, the last failed with "
        "ValidationException: bad"
    )


def test_the_quoted_cause_is_cut_and_the_failed_error_names_it() -> None:
    record = user_record(5, arrival=0.0, ttl=0.9)
    run([kinesis_record(record)], ("Internal", "<html>" + "x" * 5000), now=1.0)
    message = record.attempts[-1].error_message or ""
    assert message.endswith("x" * 10 + "…")
    assert len(message) < 500  # the page is in the attempt before, whole
    with pytest.raises(RecordFailedError, match=r"Expired: record_ttl_ms elapsed .* with Internal"):
        result_of(record).raise_for_failure()

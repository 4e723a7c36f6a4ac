"""The limiter on its own: synchronous, with explicit ``now``; each call returns its Flow
(what it admitted, what expired)."""

from __future__ import annotations

from aiokpl._core.records import KinesisRecord
from aiokpl._pipeline.limiter import Flow, Limiter, Limits, ShardLimiter
from stages import Recorder, collect, kinesis_record


def flow(result: Flow) -> tuple[list[KinesisRecord], list[KinesisRecord]]:
    admitted, expired = result
    return list(admitted), list(expired)


def limiter(
    *, records_per_second: float = 2.0, send_margin: float = 0.0, admit_batch: float = 0.0
) -> tuple[Limiter, Recorder]:
    deadlines = Recorder()
    stage = Limiter(
        deadlines,
        lambda: 0.0,
        Limits(
            records_per_second=records_per_second,
            bytes_per_second=1_000_000.0,
            drain_interval=0.25,
            send_margin=send_margin,
            admit_batch=admit_batch,
        ),
    )
    return stage, deadlines


def test_a_record_within_the_rate_is_admitted_at_once() -> None:
    stage, deadlines = limiter()
    first, second = kinesis_record(), kinesis_record()
    assert flow(stage.put(first, 0.0)) == ([first], [])
    assert flow(stage.put(second, 0.0)) == ([second], [])
    assert deadlines.calls == []  # nothing queued, no drain
    assert stage.shards["a"].admitted == 2


def test_a_record_over_the_rate_waits_for_a_drain_and_goes_oldest_first() -> None:
    stage, deadlines = limiter(records_per_second=1.0)
    first, second, third = (kinesis_record(expires_at=30.0 + i) for i in range(3))
    assert flow(stage.put(first, 0.0)) == ([first], [])
    assert flow(stage.put(third, 0.0)) == ([], [])
    assert flow(stage.put(second, 0.0)) == ([], [])
    assert deadlines.calls == [(0.25, None)]  # one entry for the whole limiter
    assert stage.statistics().queued_by_shard == {"a": 2}
    assert deadlines.due(0.25) == [None]
    assert flow(stage.due(None, 0.25)) == ([], [])  # a quarter of a token
    assert deadlines.calls == [(0.5, None)]  # the next drain
    assert flow(stage.due(None, 1.0)) == ([second], [])  # the earlier expiry first
    assert flow(stage.due(None, 2.0)) == ([third], [])
    assert stage.queued == 0


def test_expired_records_fail_first_at_their_ttl_without_tokens() -> None:
    stage, deadlines = limiter(records_per_second=1.0)
    stage.put(kinesis_record(), 0.0)
    doomed = kinesis_record(expires_at=0.125)
    assert flow(stage.put(doomed, 0.0)) == ([], [])
    assert deadlines.calls == [(0.125, None)]  # the drain comes at the TTL, not later
    assert flow(stage.due(None, 0.125)) == ([], [doomed])
    assert stage.take_overloaded() == 1  # its shard was starved: overload, not bad luck
    assert stage.take_overloaded() == 0


def test_a_record_inside_the_send_margin_is_never_admitted_and_expires_at_its_ttl() -> None:
    stage, _ = limiter(send_margin=0.5)
    close = kinesis_record(expires_at=0.25)
    assert flow(stage.put(close, 0.0)) == ([], [])  # it cannot reach the wire in time
    fresh = kinesis_record(expires_at=30.0)
    assert flow(stage.put(fresh, 0.0)) == ([fresh], [])  # it holds back nobody
    assert flow(stage.due(None, 0.25)) == ([], [close])
    assert stage.take_overloaded() == 0  # the shard was not starved


def test_a_forced_drain_admits_everything_that_can_still_be_sent() -> None:
    stage, _ = limiter(records_per_second=1.0)
    records = [kinesis_record() for _ in range(3)]
    for record in records:
        stage.put(record, 0.0)
    assert flow(stage.drain(0.0, force=True)) == (records[1:], [])
    assert flow(stage.put(kinesis_record(), 0.0)) == ([], [])  # later traffic still pays for it


def test_a_refund_gives_a_records_tokens_back() -> None:
    stage, _ = limiter(records_per_second=1.0)
    first = kinesis_record()
    stage.put(first, 0.0)
    stage.refund(first, 0.0)  # it expired before it was sent
    second = kinesis_record()
    assert flow(stage.put(second, 0.0)) == ([second], [])
    assert stage.shards["a"].refunded == 1


def test_records_without_a_prediction_share_one_limit_and_go_back_when_a_map_loads() -> None:
    stage, _ = limiter(records_per_second=1.0)
    first, second = kinesis_record(None), kinesis_record(None)
    assert flow(stage.put(first, 0.0)) == ([first], [])
    assert flow(stage.put(second, 0.0)) == ([], [])
    assert stage.statistics().unmapped_rate == (1.0, 1_000_000.0)
    assert stage.take_unmapped(0.0) == ([second], ((), ()))
    assert stage.take_unmapped(0.0) == ([], ((), ()))


def test_outside_strict_order_a_settled_retry_is_queued_again() -> None:
    stage, _ = limiter()
    sent, again, more = kinesis_record(), kinesis_record(), kinesis_record()
    assert flow(stage.settle(sent, (), 0.0)) == ([], [])
    assert flow(stage.settle(sent, [again], 0.0)) == ([again], [])
    # A misplaced aggregate comes back as its records, each alone: each queued again, the
    # first admitted with the bucket's last token (2 records/s), the other left waiting.
    assert flow(stage.settle(sent, [more, again], 0.0)) == ([more], [])
    assert stage.statistics().queued_by_shard == {"a": 1}


def test_throttling_cuts_a_shards_rate_and_prune_forgets_idle_shards() -> None:
    stage, _ = limiter(records_per_second=100.0)
    stage.put(kinesis_record("a"), 0.0)
    stage.accepted("a", 50, 500, 1.0)
    stage.throttled("a", 1.0, 0.5)
    assert stage.shards["a"].rates[0] < 100.0
    stage.put(kinesis_record("b"), 1.0)
    assert flow(stage.prune({"b"}, 1.0)) == ([], [])
    assert set(stage.shards) == {"b"}


def test_a_shards_bucket_refills_from_its_first_answer_not_from_its_first_take() -> None:
    """A shard on quiet shards' server: its bucket is full, and so is the server's, which
    refills from when it serves the first request, later than this producer took its tokens.
    Until the shard's first answer the producer sends only what its bucket held, then its
    refill counts from the answer: never ahead of the server's (ahead by that lag, a lone
    producer over HTTP had 112-214 of its first 3,000 records throttled)."""
    records = [kinesis_record(expires_at=30.0) for _ in range(110)]
    admitted: list[KinesisRecord] = []
    shard = ShardLimiter(100.0, 1_000_000.0)
    for record in records[:100]:  # the burst: the full bucket, at once
        collect(shard.put(record, 0.0), admitted, admitted)
    assert len(admitted) == 100
    for record in records[100:]:
        collect(shard.put(record, 0.05), admitted, admitted)
    assert len(admitted) == 100  # 5 tokens' worth of refill, held back until an answer
    shard.accepted(50, 5_000, 0.06)  # the first answer: the refill until now is given up
    collect(shard.drain(0.07), admitted, admitted)
    assert len(admitted) == 101  # 0.01 s of refill since the answer
    collect(shard.drain(0.1), admitted, admitted)
    assert len(admitted) == 104
    # No answer within a second (a slow first response): the refill flows again then.
    silent = ShardLimiter(100.0, 1_000_000.0)
    late: list[KinesisRecord] = []
    for record in records:
        collect(silent.put(record, 0.0), late, late)
    collect(silent.drain(0.99), late, late)
    assert len(late) == 100
    collect(silent.drain(1.0), late, late)
    assert len(late) == 110


def test_the_settings_are_one_frozen_object_read_from_the_config() -> None:
    from dataclasses import FrozenInstanceError

    from aiokpl import Config
    from aiokpl._pipeline.limiter import limits_of

    config = Config(record_max_buffered_time_ms=200, drain_interval_ms=25)
    limits = limits_of(config, grace=0.02, phase=0.5)
    assert limits == Limits(
        records_per_second=config.rate_limit_records_per_sec_per_shard,
        bytes_per_second=config.rate_limit_bytes_per_sec_per_shard,
        drain_interval=0.025,
        send_margin=0.02 + 0.025,
        admit_batch=0.2,
        batch_phase=0.1,
    )
    try:
        limits.send_margin = 0.0  # type: ignore[misc]
    except FrozenInstanceError:
        pass
    else:
        raise AssertionError("the settings changed")


def test_records_taken_back_from_the_shards_come_oldest_first_across_shards() -> None:
    stage, _ = limiter(records_per_second=1.0)
    stage.put(kinesis_record("a"), 0.0)  # each shard's one token
    stage.put(kinesis_record("b"), 0.0)
    late_a = kinesis_record("a", expires_at=20.0)
    early_b = kinesis_record("b", expires_at=10.0)
    same_a, same_b = kinesis_record("a", expires_at=15.0), kinesis_record("b", expires_at=15.0)
    for record in (late_a, same_a, early_b, same_b):
        assert flow(stage.put(record, 0.0)) == ([], [])
    # By expiry (retried records first), records of equal expiry by shard.
    assert stage.take_queued(0.0) == [early_b, same_a, same_b, late_a]
    assert stage.queued == 0

"""The ordering policies the router consults (``_pipeline/ordering.py``), on their own."""

from __future__ import annotations

from aiokpl._core.records import KinesisRecord
from aiokpl._core.retry_policy import Decisions
from aiokpl._core.shards import ShardRange
from aiokpl._pipeline.limiter import Limiter, Limits, OrderGate
from aiokpl._pipeline.ordering import AggregateOrder, ShardOrder, ordering_of
from stages import Recorder, kinesis_record, user_record

NO_RANGES: dict[str, ShardRange] = {}
LIMITS = Limits(records_per_second=1000.0, bytes_per_second=1e6, drain_interval=0.025)


def aggregate(*data: bytes) -> KinesisRecord:
    records = [user_record(d) for d in data]
    return KinesisRecord(list(records), b"blob", "a", "1", "a", 0.1, 30.0, 1)


def test_the_mode_picks_the_policy_and_the_policy_its_limiter() -> None:
    assert type(ordering_of("aggregate")) is AggregateOrder
    assert type(ordering_of("shard")) is ShardOrder
    plain = AggregateOrder().limiter(Recorder(), lambda: 0.0, NO_RANGES.get, LIMITS)
    lanes = ShardOrder().limiter(Recorder(), lambda: 0.0, NO_RANGES.get, LIMITS)
    assert type(plain) is Limiter
    assert plain.gate is None
    assert type(lanes) is Limiter
    assert type(lanes.gate) is OrderGate
    assert not AggregateOrder.closes_batches_on_new_map
    assert ShardOrder.closes_batches_on_new_map


def test_only_strict_order_denies_the_grace_to_a_record_already_late() -> None:
    late, early = kinesis_record(deadline=1.0), kinesis_record(deadline=2.0)
    assert AggregateOrder().grace(late, 1.0, 0.02) == 0.02
    assert ShardOrder().grace(late, 1.0, 0.02) == 0.0
    assert ShardOrder().grace(early, 1.0, 0.02) == 0.02


def test_by_default_retried_records_go_back_to_the_aggregator() -> None:
    sent = aggregate(b"1", b"2")
    decisions = Decisions()
    assert AggregateOrder().after_answer([sent], decisions) == ((), ())
    decisions.retry = list(sent.records[1:])
    assert AggregateOrder().after_answer([sent], decisions) == (sent.records[1:], ())
    assert AggregateOrder().after_placed(sent, decisions) == (sent.records[1:], ())
    assert AggregateOrder().after_unsent(sent) == ()


def test_in_strict_order_every_answered_record_settles_its_lane_with_what_it_retries() -> None:
    retried, delivered, resent, waiting = (
        aggregate(b"r1", b"r2"),
        aggregate(b"d"),
        aggregate(b"s"),
        aggregate(b"w"),
    )
    decisions = Decisions()
    decisions.retry = [retried.records[1]]
    decisions.resend = [[resent]]
    decisions.undecided = [(waiting, "shardId-000000000002", "495")]
    to_aggregator, settlements = ShardOrder().after_answer(
        [retried, delivered, resent, waiting], decisions
    )
    assert to_aggregator == ()
    ((first, retry), (second, none)) = settlements  # resent and waiting stay in flight
    assert (first, second, none) == (retried, delivered, [])
    (again,) = retry
    assert again.records == [retried.records[1]]  # the head of the lane, in a record of its own
    assert again.predicted_shard == "a"
    assert ShardOrder().after_unsent(delivered) == [(delivered, ())]
    placed = Decisions()
    placed.retry = list(waiting.records)
    assert ShardOrder().after_placed(waiting, placed) == ((), [(waiting, [waiting])])

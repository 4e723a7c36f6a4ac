"""Strict order per shard (``Config(ordering="shard")``): the pure helpers, the lanes of the
limiter, and the producer on the paths the chaos mixes reach only by chance.

The chaos mixes (``tests/test_chaos.py``, the ``ordered`` tests) check the promise as a whole;
here each rule of ``aiokpl/_core/ordering.py`` is checked on its own, deterministically:
one record in flight per lane, a retry at the head of its lane, a retired lane holding the
lanes it overlaps, expiry leaving gaps, and in the producer: batches of dropped shards going
first, a lane staying closed while its record is resent in halves or judged after a refresh,
freed when its record expires waiting for a connection, and the lane of unpredicted records
going first.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokpl import Config, Producer, RecordResult
from aiokpl._core.decoder import decode, is_aggregated
from aiokpl._core.encoder import encode_tags
from aiokpl._core.hashing import MAX_HASH_KEY
from aiokpl._core.ordering import overlaps, regroup
from aiokpl._core.records import KinesisRecord, UserRecordLike
from aiokpl._core.results import Attempt
from aiokpl._core.shards import ShardRange
from aiokpl._core.wire import Tag
from aiokpl._pipeline.limiter import Flow, Limiter, Limits, OrderGate
from aiokpl._pipeline.scheduler import RoutedDeadlines, Scheduler
from aiokpl._pipeline.shard_limiter import OrderedShardLimiter
from aiokpl._record import TaggedRecord, UserRecord
from aiokpl.testing import FakeKinesis
from running import running
from stages import stamped

HALF = 2**127
SHARD_0 = "shardId-000000000000"
LOW = HALF // 2  # an explicit hash key in the lower half of the key space
HIGH = HALF + HALF // 2  # and one in the upper half


def in_flight(limiter: Any) -> int:
    """Lanes of ``limiter`` with a Kinesis record in flight (none without a gate)."""
    lanes = [*limiter.shards.values(), *([limiter.unmapped] if limiter.unmapped else [])]
    return sum(1 for lane in lanes if lane.in_flight is not None)


def user_record(data: bytes, ehk: int | None = None, *, expires_at: float = 30.0) -> UserRecord:
    record = UserRecord("s", "k", data, None if ehk is None else str(ehk), 1 + len(data))
    return stamped(record, 0.0, 0.1, expires_at)


def kinesis_record(
    shard: str | None, *, expires_at: float = 30.0, name: bytes = b"x"
) -> KinesisRecord:
    return KinesisRecord([], name, "k", "1", shard, expires_at, expires_at, 1)


# --- the pure helpers ---------------------------------------------------------------------------


def test_ranges_overlap_when_they_share_a_key_and_an_unknown_range_overlaps_all() -> None:
    lower = ShardRange("a", 0, HALF - 1)
    upper = ShardRange("b", HALF, MAX_HASH_KEY)
    parent = ShardRange("p", 0, MAX_HASH_KEY)
    assert not overlaps(lower, upper)
    assert not overlaps(upper, lower)
    assert overlaps(parent, lower)
    assert overlaps(upper, parent)
    assert overlaps(ShardRange("c", HALF - 1, HALF), lower)  # one shared key is enough
    assert overlaps(None, lower)
    assert overlaps(upper, None)


def test_regroup_resends_nothing_all_one_or_some_of_a_kinesis_record() -> None:
    records: list[UserRecordLike] = [user_record(b"%d" % i, LOW + i) for i in range(3)]
    sent = KinesisRecord(records, b"blob", "a", str(LOW), "shard-a", 0.1, 30.0, 1)
    assert regroup(sent, []) == []

    for record in records:
        record.set_deadline(5.0)
    (again,) = regroup(sent, records)
    assert again is sent  # all of them: the same aggregate, its blob unchanged
    assert (again.deadline, again.expires_at, again.data) == (5.0, 30.0, b"blob")

    records[2].expires_at = 20.0
    (one,) = regroup(sent, [records[2]])
    assert one.records == [records[2]]
    assert (one.data, one.partition_key, one.explicit_hash_key) == (b"2", "k", str(LOW + 2))
    assert one.predicted_shard == "shard-a"  # back to the same lane
    assert one.expires_at == 20.0

    (some,) = regroup(sent, [records[0], records[2]])
    assert some.records == [records[0], records[2]]
    assert is_aggregated(some.data)
    assert [r.data for r in decode(some.data)] == [b"0", b"2"]  # in put order
    assert (some.partition_key, some.explicit_hash_key) == ("a", str(LOW))
    assert some.predicted_shard == "shard-a"
    assert (some.deadline, some.expires_at) == (5.0, 20.0)


def test_regroup_sends_a_misplaced_aggregate_again_one_record_at_a_time() -> None:
    # It landed on a shard that does not hold all of it ("Wrong Shard"): the same aggregate
    # would land there again; each record alone lands where its own key routes it.
    records: list[UserRecordLike] = [user_record(b"%d" % i, LOW + i) for i in range(3)]
    sent = KinesisRecord(records, b"blob", "a", str(LOW), "shard-a", 0.1, 30.0, 1)
    for record in records:
        record.add_attempt(Attempt(0.0, 0.1, 0.0, False, "Wrong Shard", "landed elsewhere"))
    again = regroup(sent, records)
    assert [kinesis_record.records for kinesis_record in again] == [[r] for r in records]
    assert [kinesis_record.data for kinesis_record in again] == [b"0", b"1", b"2"]
    assert [kinesis_record.explicit_hash_key for kinesis_record in again] == [
        str(LOW + i) for i in range(3)
    ]
    assert {kinesis_record.predicted_shard for kinesis_record in again} == {"shard-a"}


def test_regroup_routes_a_new_aggregate_by_its_first_records_hash_key() -> None:
    # Without explicit hash keys: the first record's MD5 hash key, as the aggregator does.
    records: list[UserRecordLike] = [user_record(b"%d" % i) for i in range(3)]
    sent = KinesisRecord(records, b"blob", "a", "1", "shard-a", 0.1, 30.0, 1)
    (some,) = regroup(sent, records[1:])
    assert some.explicit_hash_key == str(records[1].hash_key)


def test_regroup_keeps_each_records_tags() -> None:
    tags = encode_tags({"source": "a"})
    tagged = [
        stamped(TaggedRecord("s", "k", b"%d" % i, None, 2 + len(tags), tags)) for i in range(3)
    ]
    records: list[UserRecordLike] = list(tagged)
    sent = KinesisRecord(records, b"blob", "a", "1", "shard-a", 0.1, 30.0, 1)
    (some,) = regroup(sent, records[1:])
    assert [(r.data, r.tags) for r in decode(some.data)] == [
        (b"1", (Tag("source", "a"),)),
        (b"2", (Tag("source", "a"),)),
    ]
    (one,) = regroup(sent, records[2:])
    assert is_aggregated(one.data)  # an aggregate of one: a raw record cannot carry tags
    assert [r.tags for r in decode(one.data)] == [(Tag("source", "a"),)]


# --- the lanes ------------------------------------------------------------------------------------


class _Recorded:
    """A limiter with a gate whose calls take the clock of ``lanes`` and record what they
    return (admitted, expired) in its lists."""

    def __init__(self, lanes: Lanes, limiter: Limiter) -> None:
        self._lanes = lanes
        self._limiter = limiter

    def __getattr__(self, name: str) -> Any:
        return getattr(self._limiter, name)

    def _record(self, flow: Flow) -> None:
        admitted, expired = flow
        self._lanes.admitted.extend(admitted)
        self._lanes.expired.extend(expired)

    def put(self, record: KinesisRecord) -> None:
        self._record(self._limiter.put(record, self._lanes.now))

    def settle(self, record: KinesisRecord, again: KinesisRecord | None) -> None:
        retried = [] if again is None else [again]
        self._record(self._limiter.settle(record, retried, self._lanes.now))

    def drain(self, now: float, *, force: bool = False) -> None:
        self._record(self._limiter.drain(now, force=force))

    def take_unmapped(self) -> list[KinesisRecord]:
        records, flow = self._limiter.take_unmapped(self._lanes.now)
        self._record(flow)
        return records

    def on_due(self, now: float) -> None:
        self._record(self._limiter.due(None, now))

    def prune(self, open_shards: set[str]) -> None:
        self._record(self._limiter.prune(open_shards, self._lanes.now))


class Lanes:
    """A limiter with a gate (``ordering="shard"``) on a hand-moved clock, recording what it
    admits and expires."""

    def __init__(self, ranges: dict[str, ShardRange] | None = None, *, margin: float = 0.0) -> None:
        self.now = 0.0
        self.admitted: list[KinesisRecord] = []
        self.expired: list[KinesisRecord] = []
        self.ranges = ranges or {}
        self.gate = OrderGate(self.ranges.get)
        limiter = Limiter(
            RoutedDeadlines(Scheduler(), lambda item, now: None),
            lambda: self.now,
            Limits(
                records_per_second=1000.0,
                bytes_per_second=1_000_000.0,
                drain_interval=0.025,
                send_margin=margin,
            ),
            self.gate,
        )
        self.ordered = limiter
        self.limiter = _Recorded(self, limiter)

    def lane(self, shard: str) -> OrderedShardLimiter:
        lane = self.ordered.shards[shard]
        assert isinstance(lane, OrderedShardLimiter)
        return lane


def test_a_lane_sends_one_record_at_a_time_in_put_order() -> None:
    lanes = Lanes()
    first, second, third = (kinesis_record("a", name=n) for n in (b"1", b"2", b"3"))
    other = kinesis_record("b")
    for record in (first, second, third, other):
        lanes.limiter.put(record)
    assert lanes.admitted == [first, other]  # lanes do not wait for each other
    assert in_flight(lanes.limiter) == 2
    lanes.limiter.settle(first, None)
    assert lanes.admitted == [first, other, second]
    assert lanes.lane("a").in_flight is second
    lanes.limiter.settle(second, None)
    lanes.limiter.settle(third, None)
    assert lanes.admitted == [first, other, second, third]
    assert lanes.lane("a").empty


def test_a_retried_record_goes_back_to_the_head_of_its_lane() -> None:
    lanes = Lanes()
    first, second = kinesis_record("a", name=b"1"), kinesis_record("a", name=b"2")
    lanes.limiter.put(first)
    lanes.limiter.put(second)
    retry = kinesis_record("a", name=b"1 again")
    lanes.limiter.settle(first, retry)
    assert lanes.admitted == [first, retry]
    lanes.limiter.settle(retry, None)
    assert lanes.admitted == [first, retry, second]


def test_a_record_not_in_flight_is_resent_at_the_tail_when_settled() -> None:
    # Defensive: a settle for a record its lane does not hold resends what is retried.
    lanes = Lanes()
    lanes.limiter.settle(kinesis_record("a"), None)
    assert not lanes.admitted
    stray = kinesis_record("a", name=b"stray")
    lanes.limiter.settle(kinesis_record("a"), stray)
    assert lanes.admitted == [stray]


def test_expired_records_leave_a_gap_and_the_next_record_goes() -> None:
    margin = 0.045
    lanes = Lanes(margin=margin)
    busy = kinesis_record("a", name=b"busy")
    doomed = kinesis_record("a", expires_at=1.0, name=b"doomed")
    close = kinesis_record("a", expires_at=2.0 + margin / 2, name=b"close")
    fresh = kinesis_record("a", expires_at=9.0, name=b"fresh")
    for record in (busy, doomed, close, fresh):
        lanes.limiter.put(record)
    lanes.now = 1.5
    lanes.limiter.drain(lanes.now)
    assert lanes.expired == [doomed]  # at its TTL, though its lane was busy
    assert lanes.lane("a").starved  # waiting for its turn
    lanes.now = 2.0
    lanes.limiter.settle(busy, None)
    # "close" cannot reach the wire in time: it stays until its TTL; "fresh" goes past it.
    assert lanes.admitted == [busy, fresh]
    lanes.now = 2.0 + margin
    lanes.limiter.drain(lanes.now)
    assert lanes.expired == [doomed, close]
    lanes.limiter.settle(fresh, None)
    assert lanes.lane("a").empty


def test_a_record_that_finds_no_tokens_waits_and_a_forced_drain_sends_it() -> None:
    lanes = Lanes()
    lane = lanes.limiter.shard_limiter("a")
    lane.bucket.try_take((1000, 0), 0.0)  # no record token left
    record = kinesis_record("a")
    lanes.limiter.put(record)
    assert not lanes.admitted
    assert lane.starved
    lanes.limiter.drain(0.0, force=True)
    assert lanes.admitted == [record]


def test_a_retired_lane_holds_the_lanes_it_overlaps_until_it_is_empty() -> None:
    parent = ShardRange("p", 0, HALF - 1)
    lanes = Lanes(
        {
            "p": parent,
            "c1": ShardRange("c1", 0, HALF // 2 - 1),
            "c2": ShardRange("c2", HALF // 2, HALF - 1),
            "q": ShardRange("q", HALF, MAX_HASH_KEY),
        }
    )
    in_flight, queued = kinesis_record("p", name=b"p1"), kinesis_record("p", name=b"p2")
    lanes.limiter.put(in_flight)
    lanes.limiter.put(queued)
    lanes.limiter.put(kinesis_record("gone"))  # an empty lane of another dropped shard
    lanes.limiter.settle(lanes.admitted[-1], None)
    lanes.limiter.prune({"c1", "c2", "q"})  # p split into c1 and c2; "gone" is forgotten
    assert set(lanes.gate.retired) == {"p"}
    assert "gone" not in lanes.limiter.shards
    child, unrelated = kinesis_record("c1", name=b"c1"), kinesis_record("q", name=b"q")
    lanes.limiter.put(child)
    lanes.limiter.put(unrelated)
    assert lanes.admitted[-1] is unrelated  # q does not overlap p
    assert lanes.lane("c1").held
    lanes.limiter.settle(in_flight, None)
    assert lanes.admitted[-1] is queued  # the retired lane goes on sending
    lanes.limiter.drain(0.0)
    assert lanes.lane("c1").starved  # held, with a record that could go
    lanes.limiter.settle(queued, None)
    # Empty: the retired lane is forgotten, and its children's lanes are freed at once.
    assert "p" not in lanes.limiter.shards
    assert not lanes.gate.retired
    assert lanes.admitted[-1] is child
    assert not lanes.lane("c2" if "c2" in lanes.limiter.shards else "c1").held


def test_a_lane_retired_later_waits_for_the_older_one_and_holds_its_own_children() -> None:
    # p split into c1, c2 while p still sent; then c1 split into d1, d2 while p still sent.
    ranges = {
        "p": ShardRange("p", 0, HALF - 1),
        "c1": ShardRange("c1", 0, HALF // 2 - 1),
        "c2": ShardRange("c2", HALF // 2, HALF - 1),
        "d1": ShardRange("d1", 0, HALF // 4 - 1),
        "d2": ShardRange("d2", HALF // 4, HALF // 2 - 1),
    }
    lanes = Lanes(ranges)
    p = kinesis_record("p", name=b"p")
    lanes.limiter.put(p)
    lanes.limiter.prune({"c1", "c2"})
    c1 = kinesis_record("c1", name=b"c1")
    lanes.limiter.put(c1)
    lanes.limiter.prune({"d1", "d2", "c2"})
    d1 = kinesis_record("d1", name=b"d1")
    lanes.limiter.put(d1)
    assert list(lanes.gate.retired) == ["p", "c1"]
    assert lanes.lane("c1").held
    assert lanes.lane("d1").held
    assert lanes.admitted == [p]
    lanes.limiter.settle(p, None)
    assert lanes.admitted == [p, c1]  # c1 freed; d1 still waits for c1
    assert lanes.lane("d1").held
    lanes.limiter.settle(c1, None)
    assert lanes.admitted == [p, c1, d1]
    assert not lanes.gate.retired


def test_a_retired_lane_whose_records_all_expire_frees_the_lanes_it_held() -> None:
    lanes = Lanes(
        {"p": ShardRange("p", 0, HALF - 1), "c": ShardRange("c", 0, HALF - 1)}, margin=0.045
    )
    in_flight = kinesis_record("p", name=b"p1")
    last = kinesis_record("p", expires_at=1.0, name=b"p2")
    lanes.limiter.put(in_flight)
    lanes.limiter.put(last)
    lanes.limiter.prune({"c"})
    child = kinesis_record("c", name=b"c")
    lanes.limiter.put(child)
    lanes.now = 0.99
    lanes.limiter.settle(in_flight, None)  # "p2" is too close to its TTL to go
    assert lanes.admitted == [in_flight]
    lanes.now = 1.0
    lanes.limiter.on_due(lanes.now)  # the scheduled drain: "p2" expires, "p" is empty
    assert lanes.expired == [last]
    assert not lanes.gate.retired
    assert lanes.admitted == [in_flight, child]


def test_a_lane_whose_range_is_unknown_waits_for_every_retired_lane() -> None:
    lanes = Lanes({"p": ShardRange("p", 0, HALF - 1)})
    p = kinesis_record("p")
    lanes.limiter.put(p)
    lanes.limiter.prune({"x"})
    x = kinesis_record("x")  # its range is not known: it might overlap
    lanes.limiter.put(x)
    assert lanes.admitted == [p]
    lanes.limiter.settle(p, None)
    assert lanes.admitted == [p, x]


def test_the_lane_of_unpredicted_records_holds_every_shard_lane() -> None:
    lanes = Lanes({"a": ShardRange("a", 0, MAX_HASH_KEY)})
    first, queued = kinesis_record(None, name=b"1"), kinesis_record(None, name=b"2")
    lanes.limiter.put(first)
    lanes.limiter.put(queued)
    # A map loads: what is queued without a prediction goes back to be aggregated.
    assert lanes.limiter.take_unmapped() == [queued]
    predicted = kinesis_record("a", name=b"a")
    lanes.limiter.put(predicted)
    assert lanes.lane("a").held
    assert lanes.admitted == [first]
    assert in_flight(lanes.limiter) == 1
    lanes.limiter.settle(first, None)
    assert lanes.admitted == [first, predicted]
    # Empty already when the map loads: nothing is held.
    lanes = Lanes()
    lone = kinesis_record(None)
    lanes.limiter.put(lone)
    lanes.limiter.settle(lone, None)
    assert lanes.limiter.take_unmapped() == []
    lanes.limiter.put(kinesis_record("b"))
    assert not lanes.lane("b").held


def test_unpredicted_records_taken_back_when_none_is_in_flight_free_the_shard_lanes() -> None:
    lanes = Lanes()
    unmapped = lanes.limiter.shard_limiter(None)
    unmapped.bucket.try_take((1000, 0), 0.0)  # rate limited: both wait, none in flight
    lanes.limiter.put(kinesis_record(None))
    lanes.limiter.put(kinesis_record(None))
    predicted = kinesis_record("a")
    lanes.limiter.put(predicted)
    assert not lanes.admitted
    assert len(lanes.limiter.take_unmapped()) == 2
    assert lanes.admitted == [predicted]


# --- the producer ---------------------------------------------------------------------------------

ORDERED = Config(region="us-east-1", ordering="shard")


async def warm_up(producer: Producer) -> None:
    outcome = await producer.put_record(stream="s", partition_key="warm-up", data=b"")
    assert (await outcome).success


def sequence(result: RecordResult) -> int:
    assert result.success, result
    assert result.sequence_number is not None
    return int(result.sequence_number)


class SlowPuts(FakeKinesis):
    """A FakeKinesis whose next ``PutRecords`` calls wait first, one delay per call."""

    def __init__(self) -> None:
        super().__init__()
        self.put_delays: list[float] = []

    async def put_records(self, **kwargs: Any) -> dict[str, Any]:
        if self.put_delays:
            await anyio.sleep(self.put_delays.pop(0))
        return await super().put_records(**kwargs)


@pytest.mark.anyio
async def test_a_batch_of_a_shard_the_new_map_dropped_goes_before_its_childrens_records() -> None:
    # "first" waits in an open batch of shard 0 when a new map (shard 0 split) is installed;
    # "second", same hash key, is predicted for the lower child and closes its batch at once
    # (too large to aggregate). The dropped shard's batch must reach its lane first, or the
    # child's record would be sent before it (here: ahead of it in the same request).
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = ORDERED.replace(aggregation_max_size=200)
    async with Producer(config, client=fake) as producer:
        await warm_up(producer)
        fake.split("s", SHARD_0, HALF)
        first = await producer.put_record(
            stream="s", partition_key="k", data=b"first", explicit_hash_key=LOW
        )
        refreshed = anyio.Event()
        running(producer).streams.pipelines["s"].shard_map.after_refresh(refreshed.set)
        await refreshed.wait()
        second = await producer.put_record(
            stream="s", partition_key="k", data=b"second" * 50, explicit_hash_key=LOW
        )
        first_result, second_result = await first, await second
    assert sequence(first_result) < sequence(second_result)


@pytest.mark.anyio
async def test_a_lane_stays_closed_while_its_aggregate_is_judged_after_a_refresh() -> None:
    # An aggregate predicted for shard 0 lands on a child the map does not know yet; its
    # upper record is retried once the refresh says where it belongs. "third", put behind it
    # in the same lane, must land after that retry.
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = ORDERED.replace(aggregation_max_count=2)
    async with Producer(config, client=fake) as producer:
        await warm_up(producer)
        lower, upper = fake.split("s", SHARD_0, HALF)
        outcomes = [
            await producer.put_record(
                stream="s", partition_key="k", data=data, explicit_hash_key=ehk
            )
            for data, ehk in ((b"first", LOW), (b"second", HIGH), (b"third", HIGH))
        ]
        first, second, third = [await outcome for outcome in outcomes]
    assert first.shard_id == lower
    assert [a.error_code for a in second.attempts] == ["Wrong Shard", None]
    assert second.shard_id == third.shard_id == upper
    assert sequence(second) < sequence(third)


@pytest.mark.anyio
async def test_a_lane_stays_closed_while_its_record_is_resent_in_a_narrowed_request() -> None:
    # One entry too large for the stream makes it refuse the whole request: the producer
    # resends each half alone. "b1", in the good half, fails once more; "b2", behind it in
    # its lane, must not be sent before "b1" is stored.
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2, max_record_size=1000)
    config = ORDERED.replace(aggregation_enabled=False)
    async with Producer(config, client=fake) as producer:
        await warm_up(producer)
        bad = await producer.put_record(
            stream="s", partition_key="a", data=b"x" * 2000, explicit_hash_key=LOW
        )
        b1 = await producer.put_record(
            stream="s", partition_key="b", data=b"b1", explicit_hash_key=HIGH
        )
        b2 = await producer.put_record(
            stream="s", partition_key="b", data=b"b2", explicit_hash_key=HIGH
        )
        # The halves: [bad] is refused (no script consumed), [b1] is the next call served.
        fake.script_records([("InternalFailure", "Internal service failure.")])
        bad_result, b1_result, b2_result = await bad, await b1, await b2
    assert bad_result.error_code == "InvalidArgumentException"
    assert [a.error_code for a in b1_result.attempts] == [
        "InvalidArgumentException",
        "InternalFailure",
        None,
    ]
    assert sequence(b1_result) < sequence(b2_result)


@pytest.mark.anyio
async def test_a_record_that_expires_waiting_for_a_connection_frees_its_lane() -> None:
    # One connection, held 1.5 s by shard 0's request: shard 1's record expires waiting for
    # it. Its lane must be freed then, or the next record of shard 1 would wait forever.
    fake = SlowPuts()
    fake.add_stream("s", shard_count=2)
    config = ORDERED.replace(max_connections=1, collection_max_count=1, record_ttl_ms=1_000)
    async with Producer(config, client=fake) as producer:
        await warm_up(producer)
        fake.put_delays = [1.5]
        slow = await producer.put_record(
            stream="s", partition_key="a", data=b"a", explicit_hash_key=LOW
        )
        await anyio.sleep(0.05)
        doomed = await producer.put_record(
            stream="s", partition_key="b", data=b"b1", explicit_hash_key=HIGH
        )
        await anyio.sleep(0.9)
        later = await producer.put_record(
            stream="s", partition_key="b", data=b"b2", explicit_hash_key=HIGH
        )
        slow_result, doomed_result, later_result = await slow, await doomed, await later
    assert slow_result.success
    assert doomed_result.error_code == "Expired"
    assert "sender queue" in (doomed_result.error_message or "")
    assert later_result.success


@pytest.mark.anyio
async def test_records_sent_before_any_map_go_before_those_predicted_with_the_first() -> None:
    # No map at first (ListShards and DescribeStream denied): "first" goes unpredicted, fails
    # once, and its second attempt is still in flight when the map loads. "second", predicted
    # with that map, must wait for it.
    fake = SlowPuts()
    fake.add_stream("s", shard_count=2)
    fake.deny("ListShards")
    fake.deny("DescribeStream")
    fake.put_delays = [0.0, 2.0]
    config = ORDERED.replace(aggregation_enabled=False)
    async with Producer(config, client=fake) as producer:
        fake.script_records([("InternalFailure", "Internal service failure.")])
        first = await producer.put_record(stream="s", partition_key="k", data=b"first")
        await anyio.sleep(0.01)
        fake.allow("ListShards")
        fake.allow("DescribeStream")
        loaded = anyio.Event()
        # After its backoff:
        running(producer).streams.pipelines["s"].shard_map.after_refresh(loaded.set)
        await loaded.wait()
        assert not first.done()
        second = await producer.put_record(stream="s", partition_key="k", data=b"second")
        first_result, second_result = await first, await second
    assert [a.error_code for a in first_result.attempts] == ["InternalFailure", None]
    assert sequence(first_result) < sequence(second_result)


@pytest.mark.anyio
async def test_the_exit_flush_sends_nothing_past_a_record_in_flight() -> None:
    # Leaving the block flushes: records queued behind a request still in flight must wait
    # for its answer, not be sent alongside it (they would be stored first).
    fake = SlowPuts()
    fake.add_stream("s", shard_count=1)
    async with Producer(ORDERED, client=fake) as producer:
        await warm_up(producer)
        fake.put_delays = [2.0]
        outcomes = [await producer.put_record(stream="s", partition_key="k", data=b"0")]
        await anyio.sleep(0.2)  # sent, and in flight for 2 s
        for data in (b"1", b"2"):
            outcomes.append(await producer.put_record(stream="s", partition_key="k", data=data))
    numbers = [sequence(outcome.result()) for outcome in outcomes]
    assert numbers[0] < numbers[1] <= numbers[2]

"""The stream's router (``StreamPipeline``), built directly and driven event by event.

The router runs with its real stages and ledger; around it, the producer's parts it talks to
are the test's: the scheduler is served by hand (:class:`Deadlines`: :meth:`Rig.advance` moves
the clock the router reads to each deadline in turn and runs what is due, in a step, as
``Scheduler.run`` does), the sender only records what it is handed (:class:`Wire`), and
answers are built as the sender hands them over (read at the SDK boundary, ``answer_of``).
The control plane (shard map, stream summary) is real, against a ``FakeKinesis`` whose
``ListShards`` the test can hold: it runs in a task group, on asyncio and trio under a virtual
clock (see conftest), and tells the router what it learns as the producer's would.

Outcomes are read through the ledger: which records resolved, with what code, and when
(inside a step, nothing resolves until it ends).

The tests after those are end to end, through ``Producer`` and ``FakeKinesis``: a
done-callback runs after the step that resolved its record, never inside it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
import pytest

from aiokpl import Config, Outcome, Producer, RecordResult
from aiokpl._core.answers import Answer, RequestFailed
from aiokpl._core.hashing import MAX_HASH_KEY
from aiokpl._core.records import KinesisRecord
from aiokpl._core.retry_policy import FAIL_FAST
from aiokpl._kinesis import answer_of
from aiokpl._pipeline.ledger import ResultLedger
from aiokpl._pipeline.placement import ORDERING_ON_AUTO
from aiokpl._pipeline.scheduler import DueTarget, Scheduler
from aiokpl._pipeline.sender import Sender
from aiokpl._pipeline.stream import StreamPipeline
from aiokpl._record import UserRecord
from aiokpl.testing import FakeKinesis
from stages import admit, stamped

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1")
THROTTLED = "ProvisionedThroughputExceededException"
FAIL_FAST_CODE = sorted(FAIL_FAST)[0]
SHARD_0 = "shardId-000000000000"
SHARD_1 = "shardId-000000000001"
HALF = (MAX_HASH_KEY + 1) // 2  # two shards: shard 0 owns the keys below, shard 1 the rest
LOW, HIGH = 1, MAX_HASH_KEY - 1


class Clock:
    """The producer's clock, as the test moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Deadlines:
    """The producer's scheduler, served by hand: what is due runs when the test says."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, DueTarget]] = []
        self._counter = itertools.count()

    def call_at(self, when: float, target: DueTarget) -> None:
        heapq.heappush(self._heap, (when, next(self._counter), target))

    def next_due(self, until: float) -> tuple[float, DueTarget] | None:
        """The earliest entry due by ``until`` (removed), if any."""
        if self._heap and self._heap[0][0] <= until:
            when, _, target = heapq.heappop(self._heap)
            return when, target
        return None


class Wire:
    """The producer's sender as the router sees it: the requests it was handed, in order."""

    def __init__(self) -> None:
        self.requests: list[tuple[list[KinesisRecord], bool]] = []

    def submit(
        self, destination: object, records: list[KinesisRecord], *, alone: bool = False
    ) -> None:
        self.requests.append((records, alone))

    def take(self) -> list[list[KinesisRecord]]:
        """The requests handed over since the last look."""
        taken, self.requests = self.requests, []
        return [records for records, _ in taken]


class HeldMaps(FakeKinesis):
    """A ``FakeKinesis`` whose ``ListShards`` waits while ``hold`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.hold: anyio.Event | None = None

    async def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        if self.hold is not None:
            await self.hold.wait()
        return await super().list_shards(**kwargs)


class Rig:
    """One stream's router and what surrounds it in a producer."""

    def __init__(self, config: Config, fake: HeldMaps, task_group: Any) -> None:
        self.config = config
        self.fake = fake
        self.clock = Clock()
        self.ledger = ResultLedger(config, None, self.clock)
        self.deadlines = Deadlines()
        self.wire = Wire()
        self.pipeline = StreamPipeline(
            "s",
            config,
            client=fake,
            task_group=task_group,
            scheduler=cast("Scheduler", self.deadlines),
            clock=self.clock,
            sender=cast("Sender", self.wire),
            ledger=self.ledger,
            metrics=None,
            coordinator=None,
            random_value=lambda: 0.5,
        )
        # The map's first load has just started: told when it ends, as the router is.
        self.map_attempted = False
        self.pipeline.shard_map.after_refresh(self._map_attempted)

    def _map_attempted(self) -> None:
        self.map_attempted = True

    def put(self, data: bytes = b"x", *, ehk: int | None = LOW, key: str = "k") -> UserRecord:
        """A record put now (a step of its own if it closes anything, as the put path's)."""
        now = self.clock.now
        config = self.config
        record = UserRecord("s", key, data, None if ehk is None else str(ehk), len(key) + len(data))
        stamped(
            record,
            now,
            now + config.record_max_buffered_time_ms / 1000,
            now + config.record_ttl_ms / 1000,
        )
        admit(self.ledger, record)
        self.pipeline.put(record, record.hash_key)
        return record

    def advance(self, to: float) -> None:
        """Move the clock to ``to``, serving each deadline at its time on the way, each in a
        step (as the scheduler's task does)."""
        while (due := self.deadlines.next_due(to)) is not None:
            when, target = due
            self.clock.now = max(self.clock.now, when)
            with self.ledger.step():
                target.on_due(self.clock.now)
        self.clock.now = max(self.clock.now, to)

    def flush(self) -> None:
        self.pipeline.flush(self.clock.now)

    def answer(self, request: list[KinesisRecord], answer: Answer, started: float) -> None:
        """The sender's answer to ``request``, sent at ``started``, read now (in its task's
        step)."""
        with self.ledger.step():
            self.pipeline.handle_result(request, answer, started, self.clock.now)

    async def control_plane(self, done: Callable[[], bool]) -> None:
        """Let the control plane's tasks run until ``done()``."""
        with anyio.fail_after(60):
            while not done():  # noqa: ASYNC110 - the stages have no event to wait on
                await anyio.sleep(0.01)

    def started(self) -> bool:
        """The first map load and the first summary have ended."""
        return self.map_attempted and not self.pipeline.distribution.first_pending


@asynccontextmanager
async def rig(config: Config = CONFIG, *, held: bool = False, **stream: Any) -> AsyncIterator[Rig]:
    """A router for stream ``"s"`` (two shards unless ``stream`` says otherwise), its control
    plane started (with ``held``: its map load waits for ``rig.fake.hold``)."""
    fake = HeldMaps()
    fake.add_stream("s", **{"shard_count": 2, **stream})
    if held:
        fake.hold = anyio.Event()
    async with anyio.create_task_group() as task_group:
        rig = Rig(config, fake, task_group)
        if not held:
            await rig.control_plane(rig.started)
        yield rig
        rig.pipeline.close()
        task_group.cancel_scope.cancel()


def ok(kinesis_record: KinesisRecord, sequence: int = 1) -> dict[str, Any]:
    """A record's entry in an answer: stored where it was predicted."""
    return {"ShardId": kinesis_record.predicted_shard, "SequenceNumber": str(sequence)}


def refused(code: str, message: str = "refused") -> dict[str, Any]:
    return {"ErrorCode": code, "ErrorMessage": message}


def answered(*entries: dict[str, Any]) -> Answer:
    """A PutRecords response as the sender hands it over: read at the SDK boundary."""
    failed = sum(1 for entry in entries if "ErrorCode" in entry)
    return answer_of({"FailedRecordCount": failed, "Records": list(entries)}, len(entries))


def users(request: list[KinesisRecord]) -> list[UserRecord]:
    """The user records of ``request``, in order."""
    return [
        cast("UserRecord", record)
        for kinesis_record in request
        for record in kinesis_record.records
    ]


def in_pipeline(r: Rig) -> int:
    """Kinesis records held by the stream's stages (not handed to the sender)."""
    stream = r.pipeline.statistics()
    return stream.aggregating + stream.rate_limited + stream.collecting


def codes(*records: UserRecord) -> list[str | None]:
    """The result of each record: ``"ok"``, its error code, or ``None`` if unresolved."""
    return [
        None
        if not record.done()
        else "ok"
        if record.result().success
        else record.result().error_code
        for record in records
    ]


# --- puts ---------------------------------------------------------------------------------


async def test_puts_join_their_shards_batches_which_go_at_their_deadline() -> None:
    async with rig() as r:
        first, second = r.put(b"1", ehk=LOW), r.put(b"2", ehk=LOW)
        other = r.put(b"3", ehk=HIGH)
        assert r.pipeline.statistics().aggregating == 3
        r.advance(0.099)
        assert r.wire.take() == []
        r.advance(1.0)
        (request,) = r.wire.take()
        assert [kinesis_record.predicted_shard for kinesis_record in request] == [SHARD_0, SHARD_1]
        assert users(request) == [first, second, other]
        assert r.pipeline.statistics().aggregating == 0


async def test_a_put_that_fills_a_batch_seals_it_at_once() -> None:
    async with rig(CONFIG.replace(aggregation_max_count=2, collection_max_count=1)) as r:
        first = r.put(b"1")
        assert r.wire.take() == []
        second = r.put(b"2")  # seals the batch; the request is full: handed over in the put
        (request,) = r.wire.take()
        assert users(request) == [first, second]
        assert r.ledger.depth == 0


async def test_a_put_before_the_first_map_is_held_and_predicted_once_it_installs() -> None:
    async with rig(held=True) as r:
        await r.control_plane(lambda: not r.pipeline.distribution.first_pending)
        low, high = r.put(b"1", ehk=LOW), r.put(b"2", ehk=HIGH)
        assert r.pipeline.statistics().waiting_for_shard_map == 2
        r.advance(0.5)  # past their buffered deadline: still held for the map
        assert r.wire.take() == []
        assert r.fake.hold is not None
        r.fake.hold.set()
        await r.control_plane(r.started)
        assert r.pipeline.statistics().waiting_for_shard_map == 0
        r.advance(1.0)
        (request,) = r.wire.take()
        assert [(kr.predicted_shard, users([kr])) for kr in request] == [
            (SHARD_0, [low]),
            (SHARD_1, [high]),
        ]


async def test_a_flush_sends_open_batches_and_the_open_request_at_once() -> None:
    async with rig() as r:
        first, second = r.put(b"1", ehk=LOW), r.put(b"2", ehk=HIGH)
        r.flush()
        (request,) = r.wire.take()
        assert users(request) == [first, second]
        r.advance(1.0)
        assert r.wire.take() == []  # the batches' and the request's deadlines find nothing
        assert r.ledger.depth == 0


# --- answers ------------------------------------------------------------------------------


async def test_a_delivered_answer_resolves_every_record_after_the_step() -> None:
    async with rig() as r:
        first, second = r.put(b"1", ehk=LOW), r.put(b"2", ehk=HIGH)
        r.flush()
        (request,) = r.wire.take()
        seen: list[int] = []
        second.add_done_callback(lambda _: seen.append(r.ledger.depth))
        r.clock.now = 0.2
        with r.ledger.step():  # the sender's task's step
            r.pipeline.handle_result(
                request, answered(ok(request[0], 7), ok(request[1], 8)), 0.1, 0.2
            )
            assert codes(first, second) == [None, None]
        assert seen == [0]  # its callback ran once no step was open
        assert codes(first, second) == ["ok", "ok"]
        assert (first.result().shard_id, first.result().sequence_number) == (SHARD_0, "7")
        assert (second.result().shard_id, second.result().sequence_number) == (SHARD_1, "8")
        assert (r.ledger.succeeded, r.ledger.failed, len(r.ledger.outstanding)) == (2, 0, 0)


async def test_a_partly_failed_answer_retries_through_the_aggregator_and_fails_the_rest() -> None:
    config = CONFIG.replace(aggregation_enabled=False)
    async with rig(config) as r:
        good, retried, doomed = r.put(b"1"), r.put(b"2"), r.put(b"3")
        r.flush()
        (request,) = r.wire.take()
        r.clock.now = 0.2
        answer = answered(ok(request[0]), refused("InternalFailure"), refused(FAIL_FAST_CODE))
        r.answer(request, answer, started=0.1)
        assert codes(good, retried, doomed) == ["ok", None, FAIL_FAST_CODE]
        # The retried record is back in the pipeline (through the aggregator), to go again.
        assert in_pipeline(r) == 1
        assert r.pipeline.statistics().retries == 1
        r.advance(2.0)
        (again,) = r.wire.take()
        assert users(again) == [retried]
        assert [a.error_code for a in retried.attempts] == ["InternalFailure"]


async def test_a_throttled_shard_is_slowed_and_its_records_retried() -> None:
    config = CONFIG.replace(aggregation_enabled=False)
    async with rig(config) as r:
        throttled, fine = r.put(b"1", ehk=LOW), r.put(b"2", ehk=HIGH)
        r.flush()
        (request,) = r.wire.take()
        rates = r.pipeline.statistics().rates_by_shard
        r.clock.now = 0.2
        r.answer(request, answered(refused(THROTTLED, "Rate exceeded"), ok(request[1])), 0.1)
        after = r.pipeline.statistics().rates_by_shard
        assert after[SHARD_0] < rates[SHARD_0]  # feedback: the throttled shard's rate is cut
        assert after[SHARD_1] == rates[SHARD_1]
        assert codes(throttled, fine) == [None, "ok"]
        r.advance(5.0)
        (again,) = r.wire.take()
        assert users(again) == [throttled]


async def test_a_request_that_failed_whole_retries_every_record() -> None:
    config = CONFIG.replace(aggregation_enabled=False)
    async with rig(config) as r:
        records = [r.put(b"1"), r.put(b"2")]
        r.flush()
        (request,) = r.wire.take()
        r.clock.now = 0.2
        r.answer(request, RequestFailed.of("InternalFailure", "boom"), started=0.1)
        assert codes(*records) == [None, None]
        r.advance(5.0)
        (again,) = r.wire.take()
        assert users(again) == records


async def test_with_shard_order_a_throttled_record_goes_again_before_those_behind_it() -> None:
    config = CONFIG.replace(aggregation_enabled=False, ordering="shard")
    async with rig(config) as r:
        first = r.put(b"1")
        r.flush()
        (request,) = r.wire.take()
        second = r.put(b"2")  # same shard: waits in the lane behind the one in flight
        r.flush()
        assert r.wire.take() == []
        r.clock.now = 0.2
        r.answer(request, answered(refused(THROTTLED, "Rate exceeded")), started=0.1)
        r.advance(5.0)
        (again,) = r.wire.take()
        assert users(again) == [first]  # back at its lane's head; the lane is busy again
        r.clock.now = 5.2
        r.answer(again, answered(ok(again[0])), started=5.0)
        r.advance(10.0)
        (then,) = r.wire.take()
        assert users(then) == [second]
        assert codes(first, second) == ["ok", None]


# --- expiry -------------------------------------------------------------------------------


async def test_records_queued_in_the_limiter_past_their_ttl_fail_in_the_deadlines_step() -> None:
    config = CONFIG.replace(
        aggregation_enabled=False, rate_limit_records_per_sec_per_shard=1.0, record_ttl_ms=1000
    )
    async with rig(config) as r:
        sent, late, later = r.put(b"1"), r.put(b"2"), r.put(b"3")
        r.advance(0.5)
        (request,) = r.wire.take()
        assert users(request) == [sent]  # the shard's one token; the others wait for more
        assert r.pipeline.statistics().rate_limited == 2
        r.advance(0.999)
        assert codes(late, later) == [None, None]
        r.advance(2.0)
        assert codes(sent, late, later) == [None, "Expired", "Expired"]
        assert "rate limiter" in (late.result().error_message or "")
        assert r.wire.take() == []
        assert r.pipeline.statistics().expired_unsent == 2


async def test_records_the_sender_found_expired_fail_and_their_tokens_are_refunded() -> None:
    config = CONFIG.replace(aggregation_enabled=False)
    async with rig(config) as r:
        record = r.put(b"1")
        r.flush()
        (request,) = r.wire.take()
        shard = r.pipeline.limiter.limiter_of(request[0])
        assert shard is not None
        assert shard.refunded == 0
        r.clock.now = 0.2
        with r.ledger.step():  # the step of whatever event the sender found them in
            r.pipeline.found_expired(request, r.clock.now)
            assert codes(record) == [None]
        assert codes(record) == ["Expired"]
        assert "sender queue" in (record.result().error_message or "")
        assert shard.refunded == 1  # it took the shard's tokens, and never reached the wire
        assert r.pipeline.statistics().expired_unsent == 1


async def test_a_record_retried_past_its_ttl_fails_expired_and_is_not_sent_again() -> None:
    config = CONFIG.replace(aggregation_enabled=False, record_ttl_ms=1000)
    async with rig(config) as r:
        record = r.put(b"1")
        r.flush()
        (request,) = r.wire.take()
        r.clock.now = 1.5  # answered after the record's TTL
        r.answer(request, answered(refused(THROTTLED, "Rate exceeded")), started=0.1)
        assert codes(record) == ["Expired"]
        r.advance(5.0)
        assert r.wire.take() == []


async def test_records_held_for_the_first_map_go_unpredicted_once_their_patience_ends() -> None:
    async with rig(held=True) as r:
        await r.control_plane(lambda: not r.pipeline.distribution.first_pending)
        low, high = r.put(b"1", ehk=LOW), r.put(b"2", ehk=HIGH)
        r.advance(2.0)
        assert r.wire.take() == []
        r.advance(3.0)  # at most 2 s past their buffered deadline: released, each alone
        (request,) = r.wire.take()
        assert [(kr.predicted_shard, users([kr])) for kr in request] == [
            (None, [low]),
            (None, [high]),
        ]
        assert r.pipeline.statistics().waiting_for_shard_map == 0


# --- shard map changes ----------------------------------------------------------------------


async def test_an_aggregate_stored_on_a_new_child_is_judged_once_the_map_is_refreshed() -> None:
    """A split the map does not know yet: the answer names a child; the router waits for the
    refresh it starts, then delivers the aggregate, which that child holds whole."""
    async with rig() as r:
        records = [r.put(b"1", ehk=LOW), r.put(b"2", ehk=LOW + 1)]
        r.flush()
        (request,) = r.wire.take()
        lower, _ = r.fake.split("s", SHARD_0, HALF // 2)
        r.clock.now = 0.2
        r.answer(request, answered({"ShardId": lower, "SequenceNumber": "9"}), started=0.1)
        assert codes(*records) == [None, None]  # undecided until the map says
        await r.control_plane(lambda: r.pipeline.shard_map.hash_range(lower) is not None)
        assert codes(*records) == ["ok", "ok"]
        assert {record.result().shard_id for record in records} == {lower}
        r.advance(60.0)  # the verdict's own deadline (the records' expiry) finds it judged
        assert r.wire.take() == []
        assert r.ledger.succeeded == 2


async def test_an_aggregate_a_new_child_holds_in_part_goes_again_predicted_with_the_new_map() -> (
    None
):
    async with rig() as r:
        inside, outside = r.put(b"1", ehk=LOW), r.put(b"2", ehk=HALF - 1)
        r.flush()
        (request,) = r.wire.take()
        lower, upper = r.fake.split("s", SHARD_0, HALF // 2)
        r.clock.now = 0.2
        r.answer(request, answered({"ShardId": lower, "SequenceNumber": "9"}), started=0.1)
        await r.control_plane(lambda: r.pipeline.shard_map.hash_range(lower) is not None)
        # A KCL consumer drops an aggregate whole if one record is outside its shard.
        assert codes(inside, outside) == [None, None]
        r.advance(5.0)
        (again,) = r.wire.take()
        assert [(kr.predicted_shard, users([kr])) for kr in again] == [
            (lower, [inside]),
            (upper, [outside]),
        ]
        assert [a.error_code for a in outside.attempts] == ["Wrong Shard"]


async def test_with_shard_order_a_new_map_closes_the_batches_of_shards_it_dropped() -> None:
    """An open batch of a shard that split goes before the children's records."""
    async with rig(CONFIG.replace(ordering="shard")) as r:
        parent = r.put(b"1", ehk=LOW)
        lower, _ = r.fake.split("s", SHARD_0, HALF // 2)
        r.pipeline.shard_map.after_refresh(lambda: None)  # refresh now
        await r.control_plane(lambda: r.pipeline.shard_map.hash_range(lower) is not None)
        # The parent's batch is closed, on its way (in the collector), no longer open.
        assert r.pipeline.statistics().aggregating == 0
        child = r.put(b"2", ehk=LOW)
        r.advance(1.0)
        (request,) = r.wire.take()
        assert [(kr.predicted_shard, users([kr])) for kr in request] == [
            (SHARD_0, [parent]),
        ]
        r.answer(request, answered(ok(request[0])), started=1.0)
        r.advance(2.0)
        (then,) = r.wire.take()
        assert [(kr.predicted_shard, users([kr])) for kr in then] == [(lower, [child])]


# --- streams whose records the service places (AUTO) ------------------------------------------


AUTO: dict[str, Any] = {"on_demand": True, "record_distribution": "AUTO"}


async def test_on_a_stream_that_places_records_itself_each_goes_alone_unpredicted() -> None:
    async with rig(**AUTO) as r:
        assert r.pipeline.placement.by_service
        first, second = r.put(b"1", ehk=LOW), r.put(b"2", ehk=LOW)
        r.advance(1.0)
        (request,) = r.wire.take()
        assert [(kr.predicted_shard, users([kr])) for kr in request] == [
            (None, [first]),
            (None, [second]),
        ]


async def test_on_a_stream_that_places_records_itself_shard_order_is_refused_at_the_put() -> None:
    async with rig(CONFIG.replace(ordering="shard"), **AUTO) as r:
        record = r.put(b"1")
        assert codes(record) == [ORDERING_ON_AUTO]
        assert r.wire.take() == []
        assert (r.ledger.failed, len(r.ledger.outstanding)) == (1, 0)


async def test_open_aggregates_go_again_one_by_one_when_the_service_starts_placing() -> None:
    config = CONFIG.replace(record_distribution_check_ms=1000)
    async with rig(config, on_demand=True) as r:
        first, second = r.put(b"1", ehk=LOW), r.put(b"2", ehk=LOW)
        r.fake.set_record_distribution("s", "AUTO")
        await r.control_plane(lambda: r.pipeline.placement.by_service)
        r.advance(1.0)
        (request,) = r.wire.take()
        assert [(kr.predicted_shard, users([kr])) for kr in request] == [
            (None, [first]),
            (None, [second]),
        ]


# --- end to end: done-callbacks run after the step ---------------------------------------


async def test_a_done_callback_that_puts_records_works() -> None:
    """A chain of records, each put by the done-callback of the one before; the first fails
    (a code no retry fixes), the others are delivered, in put order."""
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    seen: list[tuple[int, bool]] = []
    last = 12
    finished = anyio.Event()
    async with Producer(CONFIG, client=fake) as producer:

        def chain(n: int) -> Callable[[Outcome[RecordResult]], None]:
            def on_done(outcome: Outcome[RecordResult]) -> None:
                seen.append((n, outcome.result().success))
                if n == last:
                    finished.set()
                    return
                follow = producer.put_record_nowait(
                    stream="s", partition_key="k", data=b"%d" % (n + 1)
                )
                follow.add_done_callback(chain(n + 1))

            return on_done

        await producer.put_record(stream="s", partition_key="warm-up", data=b"")
        await producer.flush()
        fake.script_records([(FAIL_FAST_CODE, "refused")])
        first = await producer.put_record(stream="s", partition_key="k", data=b"0")
        first.add_done_callback(chain(0))
        with anyio.fail_after(60):
            await finished.wait()
    assert seen == [(0, False)] + [(n, True) for n in range(1, last + 1)]
    stored = [record.data for record in fake.stored_records("s") if record.data]
    assert stored == [b"%d" % n for n in range(1, last + 1)]


async def test_a_done_callback_runs_after_the_answer_is_carried_out() -> None:
    """One request, two records: the first is delivered, the second throttled and retried.
    When the first's done-callback runs, the retried record is back in the stream's pipeline
    (not half way, owned by no stage), and a record the callback puts goes after it."""
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(aggregation_enabled=False)
    in_pipeline: list[int] = []
    async with Producer(config, client=fake) as producer:
        await producer.put_record(stream="s", partition_key="warm-up", data=b"")
        await producer.flush()
        fake.script_records([None, (THROTTLED, "Rate exceeded")])

        def on_done(outcome: Outcome[RecordResult]) -> None:
            stream = producer.statistics().streams[0]
            in_pipeline.append(stream.aggregating + stream.rate_limited + stream.collecting)
            producer.put_record_nowait(stream="s", partition_key="k", data=b"from the callback")

        delivered = await producer.put_record(stream="s", partition_key="k", data=b"delivered")
        retried = await producer.put_record(stream="s", partition_key="k", data=b"retried")
        delivered.add_done_callback(on_done)
        assert (await delivered).success
        assert (await retried).success
        await producer.flush()
    assert in_pipeline == [1]
    stored = [record.data for record in fake.stored_records("s") if record.data]
    assert stored == [b"delivered", b"retried", b"from the callback"]

"""Steps (issue 34): every event runs as one pipeline step, opened by its source, and the
records it resolves are resolved after it, when every component is consistent again.

A done-callback sees the producer as the step left it, from wherever the resolution came: an
expiry the sender found when a parked lane woke (the scheduler's step), or an answer (the
sending task's step). It may put records and read ``statistics()``; nothing it puts is sent
twice or left behind. Through a real ``Producer`` and the in-process ``FakeKinesis``, under a
virtual clock (see conftest).
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from aiokpl import Config, Producer, ProducerStatistics, RecordResult
from aiokpl._outcome import Outcome
from aiokpl._pipeline.ledger import ResultLedger
from aiokpl.testing import FakeKinesis, FaultPlan

pytestmark = pytest.mark.anyio

# One record per request, sent as soon as it is put.
CONFIG = Config(
    region="us-east-1",
    aggregation_enabled=False,
    collection_max_count=1,
    record_max_buffered_time_ms=100,
    record_ttl_ms=1000,
    max_connections=2,
)


def assert_counts_add_up(statistics: ProducerStatistics) -> None:
    """Every record put is outstanding, delivered or failed: in one of them, once."""
    assert statistics.records_put == (
        statistics.outstanding_records + statistics.records_succeeded + statistics.records_failed
    )


def seen_by(
    producer: Producer, puts: list[Outcome[RecordResult]], data: bytes
) -> tuple[list[ProducerStatistics], Callable[[Outcome[RecordResult]], None]]:
    """A done-callback that reads the statistics and puts one record of ``data``; and what
    it saw."""
    seen: list[ProducerStatistics] = []

    def callback(outcome: Outcome[RecordResult]) -> None:
        seen.append(producer.statistics())
        puts.append(producer.put_record_nowait(stream="s", partition_key="again", data=data))

    return seen, callback


async def test_a_callback_of_a_record_expired_at_a_lane_wake_sees_the_lane_whole() -> None:
    """The stream backs off; its first record expires while the lane is parked, a younger one
    still waits in it. Run inside the sender's update (between taking the lane's requests out
    and putting the live ones back), the callback saw no request backing off."""
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    fake.faults = FaultPlan(request_failure_rate=1.0)
    async with Producer(CONFIG, client=fake) as producer:
        puts: list[Outcome[RecordResult]] = []
        old = await producer.put_record(stream="s", partition_key="old", data=b"old")
        seen, callback = seen_by(producer, puts, b"from the expiry")
        old.add_done_callback(callback)
        await anyio.sleep(0.5)
        young = await producer.put_record(stream="s", partition_key="young", data=b"young")
        before = producer.statistics()
        assert before.requests_backing_off == 2  # both wait while the stream backs off
        await anyio.sleep(0.55)  # past the first record's TTL, not the second's
        assert (await old).error_code == "Expired"
        assert len(seen) == 1
        # The young record's request still backs off; the expired one is counted failed.
        assert seen[0].requests_backing_off == 1
        assert seen[0].records_failed == 1
        assert seen[0].outstanding_records == 1  # the young one
        assert_counts_add_up(seen[0])
        fake.faults = FaultPlan()  # the stream heals: what is left goes (or expires), once
        (again,) = puts
        results = {b"young": await young, b"from the expiry": await again}
    # Nothing sent twice, nothing delivered unseen: the stream holds the records that
    # succeeded, each once (one may expire first: the stream backs off up to its TTL).
    assert all(result.success or result.error_code == "Expired" for result in results.values())
    delivered = sorted(data for data, result in results.items() if result.success)
    assert sorted(record.data for record in fake.stored_records("s")) == delivered


async def test_a_callback_of_an_answered_record_sees_its_connection_free() -> None:
    """Run inside the sending task (before the answer was booked), the callback saw the
    answered request still in flight and its connection taken."""
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    fake.latency = 0.01
    async with Producer(CONFIG, client=fake) as producer:
        puts: list[Outcome[RecordResult]] = []
        first = await producer.put_record(stream="s", partition_key="k", data=b"first")
        seen, callback = seen_by(producer, puts, b"from the answer")
        first.add_done_callback(callback)
        assert (await first).success
        results = [await put for put in puts]
        assert len(seen) == 1
        assert seen[0].requests_sent == 1
        assert seen[0].requests_in_flight == 0
        assert seen[0].records_succeeded == 1
        assert seen[0].outstanding_records == 0
        assert_counts_add_up(seen[0])
    assert all(result.success for result in results)
    stored = [record.data for record in fake.stored_records("s")]
    assert sorted(stored) == [b"first", b"from the answer"]


def test_steps_nest_and_resolve_once_the_outermost_ends() -> None:
    ledger = ResultLedger(CONFIG, None, lambda: 0.0)
    with ledger.step():
        with ledger.step():
            assert ledger.depth == 2
        assert ledger.depth == 1
    assert ledger.depth == 0

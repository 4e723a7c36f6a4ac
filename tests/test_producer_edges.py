"""Edge paths of the pipeline: expiry in the limiter, request size limits, cancellation during
exit, a put waiting for room when the producer closes, and Outcome's corners."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable

import anyio
import pytest

from aiokpl import Config, Outcome, Producer, ProducerClosedError, RecordResult
from aiokpl._backend import current_clock
from aiokpl.testing import FakeKinesis
from running import running

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1")


async def test_records_expire_while_queued_in_the_rate_limiter() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    config = CONFIG.replace(
        aggregation_enabled=False,
        rate_limit_records_per_sec_per_shard=5.0,
        record_ttl_ms=500,
        record_max_buffered_time_ms=0,
    )
    async with Producer(config, client=fake) as producer:
        warm = await producer.put_record(stream="s", partition_key="warm", data=b"")
        await producer.flush()
        await warm
        await anyio.sleep(2)  # the bucket is full again: 5 tokens
        t0 = anyio.current_time()
        outcomes = [
            await producer.put_record(stream="s", partition_key="k", data=b"%d" % i)
            for i in range(10)
        ]
        results = [await outcome for outcome in outcomes]
    delivered = [r for r in results if r.success]
    expired = [r for r in results if not r.success]
    # 5 at once, then one every 200 ms: by the 500 ms TTL two more; the rest expire queued.
    assert len(delivered) == 7
    assert len(expired) == 3
    for result in expired:
        (attempt,) = result.attempts
        assert attempt.error_code == "Expired"
        assert attempt.error_message == "record_ttl_ms elapsed while waiting in the rate limiter"
        # At the TTL exactly: a drain is due then, not only every 25 ms.
        assert attempt.ended_at == pytest.approx(t0 + 0.5, abs=1e-6)


async def test_a_request_is_sent_before_it_would_pass_collection_max_size() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    config = CONFIG.replace(aggregation_enabled=False, collection_max_size=60_000)
    async with Producer(config, client=fake) as producer:
        for i in range(6):
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"x" * 25_000)
    sizes = [
        sum(len(r["Data"]) + len(r["PartitionKey"]) for r in kwargs["Records"])
        for operation, kwargs in fake.requests
        if operation == "PutRecords"
    ]
    assert sizes == [50_004, 50_004, 50_004]
    assert all(size <= 60_000 for size in sizes)


async def test_cancellation_while_exit_waits_resolves_everything() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.latency = 60.0  # answers never come in time
    outcomes: list[Outcome[RecordResult]] = []
    with anyio.move_on_after(5.0) as scope:
        async with Producer(CONFIG, client=fake) as producer:
            outcomes.extend(
                [
                    await producer.put_record(stream="s", partition_key="k", data=b"d")
                    for _ in range(3)
                ]
            )
        # exit waits for the results: the scope's deadline cancels that wait
    assert scope.cancelled_caught
    assert [o.result().error_code for o in outcomes] == ["Cancelled"] * 3


async def test_a_put_waiting_for_room_fails_when_the_producer_closes() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.latency = 0.5
    errors: list[BaseException] = []
    config = CONFIG.replace(max_outstanding_records=2)

    async def late_put(producer: Producer) -> None:
        try:
            await producer.put_record(stream="s", partition_key="late", data=b"d")
        except ProducerClosedError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg, Producer(config, client=fake) as producer:
        first = [
            await producer.put_record(stream="s", partition_key="k", data=b"d") for _ in range(2)
        ]
        tg.start_soon(late_put, producer)
        while running(producer).ledger.room is None:  # noqa: ASYNC110 (no event says "a put is waiting")
            await anyio.sleep(0.001)
        assert producer.outstanding_records == 2  # the late put is waiting for room
        # Exit closes the producer first, then waits: as results free room, the late put wakes
        # and finds the producer closed.
    assert all(o.result().success for o in first)
    assert len(errors) == 1
    assert "closed while this put waited" in str(errors[0])


@pytest.mark.parametrize("group", [False, True], ids=["put_record", "put_records"])
async def test_a_put_that_yields_when_exit_starts_is_refused_not_accepted(
    group: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put passes the closed check, then yields (put_record's periodic checkpoint, or
    put_records' checkpoint) and exit starts meanwhile: it must raise, not enqueue a record
    that exit no longer waits for."""
    fake = FakeKinesis()
    fake.add_stream("s")
    reached, gate = anyio.Event(), anyio.Event()
    real_checkpoint = anyio.lowlevel.checkpoint
    errors: list[BaseException] = []
    outcomes: list[object] = []

    async def gated_checkpoint() -> None:
        reached.set()
        await gate.wait()

    async def late_put(producer: Producer) -> None:
        try:
            if group:
                outcomes.extend(await producer.put_records(stream="s", records=[("late", b"d")]))
            else:
                outcomes.append(
                    await producer.put_record(stream="s", partition_key="late", data=b"d")
                )
        except ProducerClosedError as exc:
            errors.append(exc)

    async def open_the_gate_later() -> None:
        await anyio.sleep(0.01)  # by then the producer's exit has begun
        gate.set()

    async with anyio.create_task_group() as tg, Producer(CONFIG, client=fake) as producer:
        await (await producer.put_record(stream="s", partition_key="k", data=b"d"))
        producer._puts = 255  # the next put_record takes its periodic checkpoint
        monkeypatch.setattr(anyio.lowlevel, "checkpoint", gated_checkpoint)
        tg.start_soon(late_put, producer)
        await reached.wait()
        monkeypatch.setattr(anyio.lowlevel, "checkpoint", real_checkpoint)
        tg.start_soon(open_the_gate_later)
    assert not outcomes
    assert len(errors) == 1
    assert "closed while this put waited" in str(errors[0])


async def test_outcome_corners(caplog: pytest.LogCaptureFixture) -> None:
    outcome: Outcome[int] = Outcome()
    assert repr(outcome) == "<Outcome pending>"

    def broken(_: Outcome[int]) -> None:
        raise RuntimeError("callback bug")

    seen: list[int] = []
    outcome.add_done_callback(broken)
    outcome.add_done_callback(lambda o: seen.append(o.result()))
    with caplog.at_level(logging.ERROR, logger="aiokpl"):
        assert outcome._resolve(7)
    assert seen == [7]  # a broken callback does not stop the others
    assert "done-callback raised" in caplog.text
    assert not outcome._resolve(8)  # resolved exactly once
    assert outcome.result() == 7
    assert await outcome.wait() == 7  # already done: returns at once
    assert await outcome == 7
    outcome.add_done_callback(broken)  # already done: called now, and still logged
    assert caplog.text.count("done-callback raised") == 2


async def test_waiting_on_an_outcome_can_be_cancelled_without_effect() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.latency = 1.0
    async with Producer(CONFIG, client=fake) as producer:
        outcome = await producer.put_record(stream="s", partition_key="k", data=b"d")
        with anyio.move_on_after(0.05):
            await outcome
        assert not outcome.done()
        assert (await outcome).success


async def test_sleeping_forever_is_never_needed_by_the_scheduler() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    async with Producer(CONFIG, client=fake) as producer:
        await anyio.sleep(3600)  # idle for an hour of virtual time: nothing to do, no spin
        assert producer.statistics().requests_sent == 0


async def test_a_held_outcome_does_not_keep_the_payload_alive() -> None:
    import gc
    import sys

    fake = FakeKinesis()
    fake.add_stream("s")
    payload = bytes(range(256)) * 400  # one distinct object, only ever referenced here
    baseline = sys.getrefcount(payload)
    async with Producer(CONFIG.replace(aggregation_enabled=False), client=fake) as producer:
        outcome = await producer.put_record(stream="s", partition_key="k", data=payload)
        assert sys.getrefcount(payload) > baseline  # held while in flight
    fake.remove_stream("s")  # the fake's own copies go too: its store
    fake.requests.clear()  # and its log of calls
    gc.collect()
    referrers = [type(r).__name__ for r in gc.get_referrers(payload)]
    assert outcome.done()
    assert sys.getrefcount(payload) == baseline, referrers  # the resolved outcome holds no data
    assert outcome.result().success  # built on demand, from plain values


async def test_the_producer_reads_the_clock_of_the_running_loop() -> None:
    # Under the test's virtual clock (a loop with its own time, or trio's MockClock), the
    # producer's clock is that clock: fake time still drives every deadline.
    async with Producer(CONFIG, client=FakeKinesis()) as producer:
        before = running(producer).clock()
        await anyio.sleep(5)
        assert running(producer).clock() - before == pytest.approx(5)
        assert running(producer).clock() == anyio.current_time()


def test_a_stock_asyncio_loop_gives_time_monotonic_itself() -> None:
    class OwnClock(asyncio.SelectorEventLoop):
        def time(self) -> float:
            return 42.0

    async def clock() -> Callable[[], float]:
        return current_clock()

    def clock_on(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
        try:
            return loop.run_until_complete(clock())
        finally:
            loop.close()

    assert asyncio.run(clock()) is time.monotonic  # what BaseEventLoop.time returns
    own = clock_on(OwnClock())
    assert own() == 42.0
    patched = asyncio.SelectorEventLoop()
    patched.time = lambda: 7.0  # type: ignore[method-assign]
    own = clock_on(patched)
    assert own() == 7.0


@pytest.mark.parametrize("foreign", ["asyncio", "trio"])
async def test_a_put_from_another_thread_is_refused_naming_sync_producer(foreign: str) -> None:
    """Another thread's event loop calling the producer gets a clear error at once, on either
    backend, and the producer keeps working for its own loop."""
    fake = FakeKinesis()
    fake.add_stream("s")
    errors: list[BaseException] = []

    async with Producer(CONFIG, client=fake) as producer:

        async def from_elsewhere() -> None:
            try:
                await producer.put_record(stream="s", partition_key="k", data=b"d")
            except RuntimeError as exc:
                errors.append(exc)
            try:
                await producer.flush()
            except RuntimeError as exc:
                errors.append(exc)

        thread = threading.Thread(
            target=anyio.run, args=(from_elsewhere,), kwargs={"backend": foreign}
        )
        thread.start()
        thread.join(10)  # it fails at once, before any await
        assert not thread.is_alive()
        result = await (await producer.put_record(stream="s", partition_key="k", data=b"ok"))
    assert len(errors) == 2
    for error in errors:
        assert "another thread" in str(error)
        assert "aiokpl.SyncProducer" in str(error)
    assert result.success
    assert producer.statistics().records_put == 1


class FixedDraws(random.Random):
    """A generator whose every uniform draw is ``value``; counts the draws."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value
        self.draws = 0

    def random(self) -> float:
        self.draws += 1
        return self.value


async def test_backoff_jitter_is_drawn_from_the_jitter_source() -> None:
    waits: dict[float, float] = {}
    for value in (0.0, 0.5):
        fake = FakeKinesis()
        fake.add_stream("s")
        fake.fail_requests(1)  # an InternalFailure answer: the stream backs off, with jitter
        source = FixedDraws(value)
        config = CONFIG.replace(aggregation_enabled=False)
        async with Producer(config, client=fake, jitter_source=source) as producer:
            outcome = await producer.put_record(stream="s", partition_key="k", data=b"d")
            first, second = (await outcome).attempts
        assert (first.error_code, second.success) == ("InternalFailure", True)
        # Two draws: the phase of the stream's limiter batches when its pipeline was made,
        # then the backoff's jitter.
        assert source.draws == 2
        waits[value] = second.started_at - first.ended_at
    # The first backoff is 100 ms, of which up to half is jitter: a draw of 0.5 takes 25 ms off.
    assert waits[0.0] - waits[0.5] == pytest.approx(0.025, abs=1e-9)


def test_the_jitter_source_must_be_a_random_generator() -> None:
    with pytest.raises(TypeError, match=r"^jitter_source must be a random\.Random, not function"):
        Producer(CONFIG, jitter_source=lambda: 0.5)  # type: ignore[arg-type]

"""The result ledger on its own: built directly (a ``Config``, no metrics or a real recorder, a
clock the test sets), records entered as a put enters them (``stages.admit``) and resolved
with ``finish``. Synchronous where the ledger is; what waits (for room, for a flush, for a held
record's async ``on_record_failure``) runs on asyncio and trio under a virtual clock (see
conftest). Observations made inside done-callbacks are collected and asserted after: the
outcome logs what a callback raises, it does not propagate."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest

from aiokpl import Config, RecordResult
from aiokpl._core.metrics import MetricsTable
from aiokpl._core.records import KinesisRecord
from aiokpl._core.results import Attempt
from aiokpl._metrics.recorder import MetricsRecorder
from aiokpl._outcome import Outcome
from aiokpl._pipeline.ledger import ResultLedger
from aiokpl._record import UserRecord
from stages import admit, stamped

CONFIG = Config(region="us-east-1")
THROTTLED = "ProvisionedThroughputExceededException"


class Clock:
    """The producer's clock, as the test sets it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def ledger_of(config: Config = CONFIG, clock: Clock | None = None) -> ResultLedger:
    return ResultLedger(config, None, clock if clock is not None else Clock())


def put(ledger: ResultLedger, data: bytes = b"x", *, stream: str = "s") -> UserRecord:
    """A record put now: of the ledger's current flush generation, entered outstanding."""
    record = stamped(UserRecord(stream, "k", data, None, 1 + len(data)))
    return admit(ledger, record)


def delivered(record: UserRecord) -> UserRecord:
    """``record`` as the retrier leaves a delivered one: its successful request noted."""
    record.delivered = (0.5, 0.6, "shardId-000000000000", "49590")
    return record


def failed(record: UserRecord, code: str = "InternalFailure") -> UserRecord:
    """``record`` as the retrier leaves a failed one: its last attempt says why."""
    record.add_attempt(Attempt(0.5, 0.6, 0.5, False, code, "went wrong"))
    return record


def counts(ledger: ResultLedger) -> tuple[int, int, int, int]:
    """(succeeded, failed, outstanding records, outstanding bytes)."""
    return ledger.succeeded, ledger.failed, len(ledger.outstanding), ledger.outstanding_bytes


def result_of(record: UserRecord) -> str | None:
    """``"ok"``, the error code of a failed record, or ``None`` if it is not resolved."""
    if not record.done():
        return None
    result = record.result()
    return "ok" if result.success else result.error_code


def noting(seen: list[str], name: str) -> Callable[[Outcome[RecordResult]], None]:
    def callback(outcome: Outcome[RecordResult]) -> None:
        seen.append(name)

    return callback


# --- records in ---------------------------------------------------------------------------


def balanced(ledger: ResultLedger) -> bool:
    """The ledger's invariant: every record put is outstanding, delivered or failed (a held
    record counts as failed and outstanding until its callback returns)."""
    return ledger.records_put == (
        len(ledger.outstanding) + ledger.succeeded + ledger.failed - len(ledger.held)
    )


def test_records_enter_with_the_current_flush_generation_and_their_counts() -> None:
    ledger = ledger_of()
    first = stamped(UserRecord("s", "k", b"ab", None, 3))
    ledger.add(first)
    ledger.epoch += 1  # a flush began
    group = [stamped(UserRecord("s", "k", data, None, 1 + len(data))) for data in (b"c", b"de")]
    ledger.add_group(group)
    assert [record.epoch for record in (first, *group)] == [0, 1, 1]
    assert list(ledger.outstanding) == [first, *group]
    assert (ledger.records_put, ledger.outstanding_bytes) == (3, 3 + 2 + 3)
    assert balanced(ledger)
    ledger.add_group([])  # an empty group counts nothing
    assert (ledger.records_put, ledger.outstanding_bytes) == (3, 8)


@pytest.mark.anyio
async def test_the_counts_balance_at_every_resolution_a_callback_sees() -> None:
    seen: list[bool] = []
    ledger = ledger_of(CONFIG.replace(on_record_failure=holding([])))
    records = [put(ledger) for _ in range(4)]

    def look(_: Outcome[RecordResult]) -> None:
        seen.append(balanced(ledger))

    for record in records:
        record.add_done_callback(look)
    with ledger.step():
        ledger.finish([delivered(records[0]), delivered(records[1])], True)
        ledger.finish([failed(records[2])], False)  # held for its async callback
    assert balanced(ledger)
    ledger.fail_outstanding("Cancelled", "the producer closed", ())
    await ledger.failures.drain(10)
    assert seen == [True] * 4
    assert balanced(ledger)
    assert (ledger.records_put, ledger.succeeded, ledger.failed) == (4, 2, 2)


# --- steps --------------------------------------------------------------------------------


def test_outside_a_step_finish_resolves_at_once() -> None:
    ledger = ledger_of()
    record = delivered(put(ledger))
    ledger.finish([record], True)
    assert record.done()
    assert record.result().success
    assert counts(ledger) == (1, 0, 0, 0)


def test_a_step_defers_resolution_until_the_outermost_step_ends() -> None:
    ledger = ledger_of()
    outer, inner = delivered(put(ledger, b"outer")), failed(put(ledger, b"inner"))
    with ledger.step():
        ledger.finish([outer], True)
        with ledger.step():
            ledger.finish([inner], False)
        # The inner step is over, the outer is not: nothing resolved, nothing counted.
        assert not outer.done()
        assert not inner.done()
        assert counts(ledger) == (0, 0, 2, outer.size + inner.size)
    assert outer.done()
    assert inner.done()
    assert outer.result().success
    assert inner.result().error_code == "InternalFailure"
    assert counts(ledger) == (1, 1, 0, 0)
    assert ledger.depth == 0


def test_a_step_resolves_in_the_order_finish_was_called() -> None:
    ledger = ledger_of()
    first, second, third = (put(ledger, data) for data in (b"1", b"2", b"3"))
    seen: list[str] = []
    for record, name in ((first, "first"), (second, "second"), (third, "third")):
        record.add_done_callback(noting(seen, name))
    with ledger.step():
        ledger.finish([failed(second)], False)
        with ledger.step():
            ledger.finish([delivered(third), delivered(first)], True)
        assert seen == []
    assert seen == ["second", "third", "first"]


def test_a_callback_finishing_records_outside_any_step_resolves_them_at_once() -> None:
    """When the outermost step resolves, its depth is 0 again: a callback that resolves
    another record (as one that puts a record, which is then refused, does) sees it done."""
    ledger = ledger_of()
    first, second = put(ledger, b"1"), put(ledger, b"2")
    seen: list[bool] = []

    def finish_second(outcome: Outcome[RecordResult]) -> None:
        ledger.finish([failed(second)], False)
        seen.append(second.done())

    first.add_done_callback(finish_second)
    with ledger.step():
        ledger.finish([delivered(first)], True)
    assert seen == [True]
    assert counts(ledger) == (1, 1, 0, 0)


# --- finish -------------------------------------------------------------------------------


def test_a_done_callback_sees_the_counts_of_its_own_resolution() -> None:
    """A record leaves the outstanding (and its bytes the outstanding bytes) before its
    outcome resolves, and is counted delivered or failed by then: as a callback sees it,
    every record is in exactly one of outstanding, succeeded and failed."""
    ledger = ledger_of()
    records = [put(ledger, b"x" * n) for n in range(1, 5)]
    seen: list[tuple[int, int, int, int]] = []
    for record in records:
        record.add_done_callback(lambda _: seen.append(counts(ledger)))
    left = sum(record.size for record in records)
    with ledger.step():
        ledger.finish([delivered(records[0]), delivered(records[1])], True)
        ledger.finish([failed(records[2])], False)
    assert seen == [
        (1, 0, 3, left - records[0].size),
        (2, 0, 2, left - records[0].size - records[1].size),
        (2, 1, 1, records[3].size),
    ]
    for succeeded, failures, outstanding, _ in seen:
        assert succeeded + failures + outstanding == len(records)


def test_a_record_finished_twice_resolves_once() -> None:
    ledger = ledger_of()
    record = delivered(put(ledger))
    seen: list[str] = []
    record.add_done_callback(noting(seen, "done"))
    with ledger.step():
        ledger.finish([record], True)
        ledger.finish([record], False)  # e.g. expired, found again elsewhere
    ledger.finish([record], False)
    assert seen == ["done"]
    assert record.result().success
    assert counts(ledger) == (1, 0, 0, 0)


def test_finishing_a_record_never_entered_changes_nothing() -> None:
    ledger = ledger_of()
    stranger = failed(stamped(UserRecord("s", "k", b"x", None, 2)))
    kept = put(ledger)
    ledger.finish([stranger], False)
    assert not stranger.done()
    assert counts(ledger) == (0, 0, 1, kept.size)


def test_a_delivery_notes_when_it_happened() -> None:
    clock = Clock(7.0)
    ledger = ledger_of(clock=clock)
    record = put(ledger)
    ledger.finish([failed(record)], False)
    assert ledger.delivered_at == -float("inf")  # a failure is no progress
    other = put(ledger)
    clock.now = 9.0
    ledger.finish([delivered(other)], True)
    assert ledger.delivered_at == 9.0


def test_failed_records_are_counted_in_the_metrics_once_not_when_finished_again() -> None:
    recorder = MetricsRecorder(MetricsTable("detailed", "shard"))
    ledger = ResultLedger(CONFIG, recorder, Clock(1.0))
    first, second = put(ledger, b"1"), put(ledger, b"2")
    ledger.finish([failed(first)], False)
    ledger.finish([first, failed(second)], False)  # first again: not counted again
    ledger.finish([second], False)
    (puts,) = [
        metric
        for metric in recorder.table.window(1.0, 1)
        if (metric.name, metric.stream, metric.shard_id) == ("UserRecordsPut", "s", None)
    ]
    assert (puts.count, puts.sum) == (2, 0)  # two records, none put successfully


def test_on_resolved_hears_each_resolution_once_it_is_done_in_order() -> None:
    ledger = ledger_of()
    heard: list[tuple[list[UserRecord], bool, bool]] = []
    first, second = put(ledger, b"1"), put(ledger, b"2")

    def on_resolved(records: list[UserRecord], success: bool) -> None:
        heard.append((list(records), success, all(record.done() for record in records)))

    ledger.on_resolved = on_resolved
    with ledger.step():
        ledger.finish([failed(second)], False)
        ledger.finish([delivered(first)], True)
        assert heard == []
    assert heard == [([second], False, True), ([first], True, True)]


# --- failure callbacks that hold records ----------------------------------------------------


def holding(calls: list[RecordResult]) -> Callable[[RecordResult], Awaitable[None]]:
    """An async ``on_record_failure``: the record is held until it returns."""

    async def on_record_failure(result: RecordResult) -> None:
        await anyio.sleep(1)
        calls.append(result)

    return on_record_failure


@pytest.mark.anyio
async def test_a_record_held_for_its_async_failure_callback_stays_outstanding() -> None:
    calls: list[RecordResult] = []
    ledger = ledger_of(CONFIG.replace(on_record_failure=holding(calls)))
    record = failed(put(ledger))
    other = put(ledger)
    # Looked at before the callbacks are drained, asserted after: a failed assertion must
    # not leave their coroutines unawaited (the warning would fail a later test).
    ledger.finish([record], False)
    # Resolved and counted failed, but held (outstanding, its bytes too) for the callback.
    first = (result_of(record), set(ledger.held), counts(ledger))
    # Finished again meanwhile: still held, counted once; at exit, it keeps its result (the
    # other record fails, and is held for its own callback).
    ledger.finish([record], False)
    at_exit = ledger.fail_outstanding("Cancelled", "the producer closed", ())
    second = (result_of(record), result_of(other), set(ledger.held), counts(ledger))
    # The callbacks run (here: drained at exit) and return: the records are released.
    await ledger.failures.drain(10)
    assert first == ("InternalFailure", {record}, (0, 1, 2, record.size + other.size))
    assert at_exit == (1, 0)
    assert second == (
        "InternalFailure",
        "Cancelled",
        {record, other},
        (0, 2, 2, record.size + other.size),
    )
    assert sorted(result.error_code or "" for result in calls) == ["Cancelled", "InternalFailure"]
    assert ledger.held == set()
    assert counts(ledger) == (0, 2, 0, 0)


@pytest.mark.anyio
async def test_a_flush_and_a_wait_for_room_wait_until_a_held_record_is_released() -> None:
    calls: list[RecordResult] = []
    ledger = ledger_of(CONFIG.replace(on_record_failure=holding(calls)))
    record = failed(put(ledger))
    events: list[str] = []

    async def flush() -> None:
        await ledger.wait_flushed(None)
        events.append("flushed")

    async def room() -> None:
        await ledger.wait_for_room()
        events.append("room")

    async with anyio.create_task_group() as task_group:
        ledger.failures.task_group = task_group  # as the running producer's
        ledger.finish([record], False)
        task_group.start_soon(flush)
        task_group.start_soon(room)
        await anyio.wait_all_tasks_blocked()
        # The callback is running (a second long): the record is held, nobody woken.
        assert (events, calls, ledger.held) == ([], [], {record})
    assert sorted(events) == ["flushed", "room"]
    assert len(calls) == 1
    assert ledger.held == set()
    assert counts(ledger) == (0, 1, 0, 0)


def test_a_plain_failure_callback_holds_nothing() -> None:
    calls: list[str | None] = []
    ledger = ledger_of(CONFIG.replace(on_record_failure=lambda r: calls.append(r.error_code)))
    record = failed(put(ledger))
    ledger.finish([record], False)
    assert calls == ["InternalFailure"]
    assert ledger.held == set()
    assert counts(ledger) == (0, 1, 0, 0)


# --- flushes ------------------------------------------------------------------------------


async def finished_after(
    ledger: ResultLedger, stream: str | None, done: list[str], name: str
) -> None:
    await ledger.wait_flushed(stream)
    done.append(name)


@pytest.mark.anyio
async def test_a_flush_waits_only_for_the_records_put_before_it() -> None:
    ledger = ledger_of()
    before = put(ledger, b"before")
    done: list[str] = []
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(finished_after, ledger, None, done, "first flush")
        await anyio.wait_all_tasks_blocked()
        after = put(ledger, b"after")  # the next generation
        task_group.start_soon(finished_after, ledger, None, done, "second flush")
        await anyio.wait_all_tasks_blocked()
        ledger.finish([delivered(after)], True)
        await anyio.wait_all_tasks_blocked()
        assert done == []  # the first flush does not count a record put after it
        ledger.finish([delivered(before)], True)
        await anyio.wait_all_tasks_blocked()
        assert sorted(done) == ["first flush", "second flush"]
    assert before.epoch < after.epoch


@pytest.mark.anyio
async def test_a_flush_of_one_stream_waits_for_that_streams_records_only() -> None:
    ledger = ledger_of()
    mine, theirs = put(ledger, stream="a"), put(ledger, stream="b")
    done: list[str] = []
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(finished_after, ledger, "a", done, "a")
        task_group.start_soon(finished_after, ledger, "b", done, "b")
        await anyio.wait_all_tasks_blocked()
        ledger.finish([failed(mine)], False)
        await anyio.wait_all_tasks_blocked()
        assert done == ["a"]
        ledger.finish([delivered(theirs)], True)
    assert done == ["a", "b"]
    assert ledger.flush_waiters == []


@pytest.mark.anyio
async def test_a_flush_with_nothing_outstanding_returns_at_once() -> None:
    ledger = ledger_of()
    put(ledger, stream="b")
    epoch = ledger.epoch
    with anyio.fail_after(1):
        await ledger.wait_flushed("a")
    assert ledger.epoch == epoch  # no generation spent
    assert ledger.flush_waiters == []


@pytest.mark.anyio
async def test_a_cancelled_flush_leaves_no_waiter() -> None:
    ledger = ledger_of()
    record = put(ledger)
    with anyio.move_on_after(1):
        await ledger.wait_flushed(None)
    assert ledger.flush_waiters == []
    ledger.finish([delivered(record)], True)
    assert counts(ledger) == (1, 0, 0, 0)


# --- failing what is left -----------------------------------------------------------------


def test_fail_outstanding_fails_every_record_and_says_which_may_be_in_the_stream() -> None:
    clock = Clock(5.0)
    ledger = ledger_of(clock=clock)
    queued = put(ledger, b"queued")
    in_flight = put(ledger, b"in flight")
    retried = failed(put(ledger, b"retried"), THROTTLED)
    unanswered = KinesisRecord([in_flight], in_flight.data, "k", "1", None, 0.1, 30.0, 1)
    seen: list[tuple[int, int, int, int]] = []
    queued.add_done_callback(lambda _: seen.append(counts(ledger)))
    with ledger.step():
        assert ledger.fail_outstanding("Cancelled", "closed", [unanswered]) == (3, 1)
        assert not queued.done()  # inside a step: resolved when it ends
    assert counts(ledger) == (0, 3, 0, 0)
    assert seen == [(0, 1, 2, in_flight.size + retried.size)]
    for record in (queued, in_flight, retried):
        result = record.result()
        assert result.error_code == "Cancelled"
        assert result.attempts[-1].ended_at == 5.0
    assert not queued.result().outcome_unknown
    assert queued.result().error_message == "closed"
    assert in_flight.result().outcome_unknown
    assert "may be in the stream" in (in_flight.result().error_message or "")
    assert not retried.result().outcome_unknown
    # A record that failed before says what with (its last attempt's cause).
    assert "went wrong" in (retried.result().error_message or "")
    assert [attempt.error_code for attempt in retried.result().attempts] == [
        THROTTLED,
        "Cancelled",
    ]


def test_fail_outstanding_with_nothing_outstanding_fails_nothing() -> None:
    ledger = ledger_of()
    assert ledger.fail_outstanding("Cancelled", "closed", ()) == (0, 0)
    assert counts(ledger) == (0, 0, 0, 0)


# --- room ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_resolution_wakes_the_tasks_waiting_for_room() -> None:
    ledger = ledger_of()
    record = put(ledger)
    woken: list[tuple[int, int]] = []

    async def wait(name: int) -> None:
        await ledger.wait_for_room()
        woken.append((name, ledger.outstanding_bytes))

    async with anyio.create_task_group() as task_group:
        task_group.start_soon(wait, 1)
        task_group.start_soon(wait, 2)
        await anyio.wait_all_tasks_blocked()
        with ledger.step():
            ledger.finish([delivered(record)], True)
            await anyio.wait_all_tasks_blocked()
            assert woken == []  # not inside the step: nothing resolved yet
    assert sorted(woken) == [(1, 0), (2, 0)]
    assert ledger.room is None  # the next wait gets a new event


@pytest.mark.anyio
async def test_wake_room_wakes_the_waiters_without_a_resolution() -> None:
    ledger = ledger_of()
    put(ledger)
    woken: list[str] = []

    async def wait() -> None:
        await ledger.wait_for_room()
        woken.append("woken")

    async with anyio.create_task_group() as task_group:
        task_group.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        ledger.wake_room()
    assert woken == ["woken"]


def test_nobody_waiting_for_room_costs_no_event() -> None:
    ledger = ledger_of()
    ledger.finish([delivered(put(ledger))], True)
    ledger.wake_room()
    assert ledger.room is None


# --- introspection ------------------------------------------------------------------------


def test_outstanding_by_stream_and_busy_streams() -> None:
    ledger = ledger_of()
    a1, a2, b = put(ledger, stream="a"), put(ledger, stream="a"), put(ledger, stream="b")
    assert ledger.outstanding_by_stream(["a", "b", "c"]) == {"a": 2, "b": 1, "c": 0}
    assert ledger.streams_busy() == {"a", "b"}
    ledger.finish([delivered(b)], True)
    assert ledger.outstanding_by_stream(["a", "b"]) == {"a": 2, "b": 0}
    assert ledger.streams_busy() == {"a"}
    # One stream (the producer's common case): its count is the ledger's length.
    assert ledger.outstanding_by_stream(["a"]) == {"a": 2}
    ledger.finish([failed(a1), failed(a2)], False)
    assert ledger.outstanding_by_stream(["a"]) == {"a": 0}
    assert ledger.streams_busy() == set()

"""Dead letters: ``Config.return_record_on_failure`` and ``Config.on_record_failure``.

Every failing path (expiry, a code no retry can fix, a throttle with ``fail_if_throttled``,
cancellation at exit) must call the callback exactly once per failed record and never for a
delivered one, with sync and async callbacks alike; a raising callback must not disturb the
pipeline; the record rides on the result only when asked for. Async tests run on asyncio and
trio under the virtual clocks of conftest, so the times asserted are exact.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from aiokpl import (
    BufferFullError,
    Config,
    FailedRecord,
    Producer,
    RecordResult,
)
from aiokpl._core.results import Attempt
from aiokpl._failures import MAX_CONCURRENT_CALLBACKS, FailureHandler
from aiokpl._outcome import Outcome
from aiokpl._record import UserRecord
from aiokpl.testing import FakeKinesis
from running import running
from stages import stamped

CONFIG = Config(region="us-east-1", aggregation_enabled=False)
EPS = 1e-6


# --- the pure parts ------------------------------------------------------------------------


def _user_record(ehk: str | None = None) -> UserRecord:
    return stamped(UserRecord("s", "key", b"payload", ehk, 10))


def _released(record: UserRecord) -> None:
    raise AssertionError("no async callback: nothing is held, nothing released")


def test_failed_result_carries_the_record_and_the_attempts() -> None:
    record = _user_record("12345")
    record.add_attempt(Attempt(0.1, 0.2, 0.1, False, "InternalFailure", "boom"))
    handler = FailureHandler(CONFIG.replace(return_record_on_failure=True), _released)
    assert not handler.resolve(record)  # resolved, nothing held
    result = record.result()
    failed = FailedRecord("s", "key", b"payload", "12345")
    assert result == RecordResult(False, None, None, record.attempts, failed)
    assert result.error_code == "InternalFailure"
    assert record.data == b""  # the outcome itself lets go of the data; the result has it
    # Without the option, the same kind of record's result has no payload.
    other = _user_record()
    other.add_attempt(Attempt(0.1, 0.2, 0.1, False, "InternalFailure", "boom"))
    assert not FailureHandler(CONFIG, _released).resolve(other)
    assert other.result().record is None


def test_failed_record_repr_shows_the_size_not_the_payload() -> None:
    failed = FailedRecord("s", "key", b"secret" * 1000)
    assert repr(failed) == (
        "FailedRecord(stream='s', partition_key='key', data=<6000 bytes>, explicit_hash_key=None)"
    )


def _dead_letter(result: RecordResult) -> None:
    """Does nothing; a named function for the Config tests."""


def test_config_validates_the_fields() -> None:
    with pytest.raises(TypeError, match=r"on_record_failure must be a callable .*got str"):
        Config(on_record_failure="store")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="return_record_on_failure must be a bool, not int"):
        Config(return_record_on_failure=1)  # type: ignore[arg-type]
    config = Config(return_record_on_failure=True, on_record_failure=_dead_letter)
    assert config.on_record_failure is _dead_letter
    assert Config().on_record_failure is None
    assert Config().return_record_on_failure is False


def test_config_repr_equality_and_hash_with_a_callable() -> None:
    config = Config(region="eu-west-1", on_record_failure=_dead_letter)
    # The function's name, not its address (which changes from run to run).
    assert repr(config) == "Config(region='eu-west-1', on_record_failure=_dead_letter)"
    assert config == Config(region="eu-west-1", on_record_failure=_dead_letter)
    assert config != Config(region="eu-west-1", on_record_failure=print)
    assert hash(config) == hash(Config(region="eu-west-1", on_record_failure=_dead_letter))
    assert config.replace(on_record_failure=None) == Config(region="eu-west-1")
    # A callable object without a name of its own shows its type's.
    assert repr(Config(on_record_failure=functools.partial(_dead_letter))) == (
        "Config(on_record_failure=partial)"
    )


# --- through the producer ------------------------------------------------------------------


class Recorder:
    """A callback, plain or async, that records every result it is called with."""

    def __init__(self, kind: str, *, delay: float = 0.0) -> None:
        self.kind = kind
        self.delay = delay
        self.results: list[RecordResult] = []
        self.running = 0
        self.most_running = 0

    def _record(self, result: RecordResult) -> None:
        self.results.append(result)

    def callback(self) -> Callable[[RecordResult], Any]:
        if self.kind == "sync":
            return self._record

        async def record_async(result: RecordResult) -> None:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            try:
                await anyio.sleep(self.delay)
                self._record(result)
            finally:
                self.running -= 1

        return record_async


def assert_called_once_per_failure(
    recorder: Recorder, outcomes: list[Outcome[RecordResult]]
) -> list[RecordResult]:
    failed = [outcome.result() for outcome in outcomes if not outcome.result().success]
    assert failed, "the scenario must fail some records"
    assert len(recorder.results) == len(failed)
    # The very result objects of the failed outcomes, each once, and no delivered one.
    assert sorted(map(id, recorder.results)) == sorted(map(id, failed))
    return failed


async def put_many(producer: Producer, n: int, stream: str = "s") -> list[Outcome[RecordResult]]:
    return [
        await producer.put_record(stream=stream, partition_key=f"k{i}", data=b"%d" % i)
        for i in range(n)
    ]


KINDS = pytest.mark.parametrize("kind", ["sync", "async"])


@pytest.mark.anyio
@KINDS
async def test_expired_records_are_reported_once(kind: str) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    recorder = Recorder(kind)
    config = CONFIG.replace(record_ttl_ms=1000, on_record_failure=recorder.callback())
    async with Producer(config, client=fake) as producer:
        delivered = await put_many(producer, 3)
        await producer.flush()
        fake.fail_requests(1000, code="InternalFailure", message="down", http_status=500)
        expiring = await put_many(producer, 4)
    assert all(outcome.result().success for outcome in delivered)
    failed = assert_called_once_per_failure(recorder, delivered + expiring)
    assert len(failed) == 4
    assert {result.error_code for result in failed} == {"Expired"}


@pytest.mark.anyio
@KINDS
async def test_fail_fast_and_throttled_records_are_reported_once(kind: str) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    recorder = Recorder(kind)
    config = CONFIG.replace(fail_if_throttled=True, on_record_failure=recorder.callback())
    async with Producer(config, client=fake) as producer:
        fake.script_records(
            [
                None,
                ("KMSAccessDeniedException", "no access to the key"),
                None,
                ("ProvisionedThroughputExceededException", "Rate exceeded for shard"),
                None,
            ]
        )
        outcomes = await put_many(producer, 5)
        await producer.flush()
        # The whole request refused with a code no retry can fix: every record fails.
        missing = await put_many(producer, 2, stream="missing")
    failed = assert_called_once_per_failure(recorder, outcomes + missing)
    assert sorted(result.error_code or "" for result in failed) == [
        "KMSAccessDeniedException",
        "ProvisionedThroughputExceededException",
        "ResourceNotFoundException",
        "ResourceNotFoundException",
    ]
    assert sum(outcome.result().success for outcome in outcomes) == 3
    assert producer.statistics().failure_callback_errors == 0


@pytest.mark.anyio
@KINDS
async def test_records_cancelled_at_exit_are_reported_once(kind: str) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.latency = 30.0  # requests never answer before the cancellation
    recorder = Recorder(kind, delay=0.5)
    config = CONFIG.replace(on_record_failure=recorder.callback())
    outcomes: list[Outcome[RecordResult]] = []
    with anyio.move_on_after(1.0) as scope:
        async with Producer(config, client=fake) as producer:
            outcomes += await put_many(producer, 5)
            await anyio.sleep(math.inf)
    assert scope.cancelled_caught
    # Async callbacks of records failed by the exit still ran (shielded) before exit returned.
    failed = assert_called_once_per_failure(recorder, outcomes)
    assert {result.error_code for result in failed} == {"Cancelled"}
    assert producer.outstanding_records == 0
    assert producer.statistics().failure_callbacks_pending == 0


@pytest.mark.anyio
@pytest.mark.parametrize("opted_in", [False, True])
async def test_the_record_is_attached_only_when_opted_in(opted_in: bool) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    recorder = Recorder("sync")
    config = CONFIG.replace(
        return_record_on_failure=opted_in, on_record_failure=recorder.callback()
    )
    async with Producer(config, client=fake) as producer:
        fake.script_records([("KMSDisabledException", "key disabled"), None])
        failing = await producer.put_record(
            stream="s", partition_key="pk", data=bytearray(b"payload"), explicit_hash_key=42
        )
        delivered = await producer.put_record(stream="s", partition_key="ok", data=b"fine")
    result = failing.result()
    assert not result.success
    assert recorder.results == [result]
    if opted_in:
        assert result.record == FailedRecord("s", "pk", b"payload", "42")
        assert type(result.record.data) is bytes
    else:
        assert result.record is None
    assert delivered.result().success
    assert delivered.result().record is None


@pytest.mark.anyio
@KINDS
async def test_a_raising_callback_does_not_disturb_delivery(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    calls: list[RecordResult] = []

    def fail(result: RecordResult) -> None:
        calls.append(result)
        raise (KeyError if len(calls) % 2 else LookupError)("dead-letter store is down")

    async def fail_async(result: RecordResult) -> None:
        await anyio.sleep(0.01)
        fail(result)

    config = CONFIG.replace(on_record_failure=fail if kind == "sync" else fail_async)
    with caplog.at_level(logging.WARNING, logger="aiokpl"):
        async with Producer(config, client=fake) as producer:
            fake.script_records([("KMSNotFoundException", "no key")] * 6)
            failing = await put_many(producer, 6)
            await producer.flush()
            delivered = await put_many(producer, 20)
            await producer.flush()
            assert producer.statistics().failure_callback_errors == 6
    assert all(outcome.result().success for outcome in delivered)
    assert not any(outcome.result().success for outcome in failing)
    assert len(calls) == 6
    assert len(fake.stored_records("s")) == 20
    # Logged once per exception type, with a summary at exit; not once per record.
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage().split(";")[0] for r in errors] == [
        "on_record_failure raised KeyError",
        "on_record_failure raised LookupError",
    ]
    assert "on_record_failure raised 6 time(s) in all" in caplog.text


@pytest.mark.anyio
async def test_async_callbacks_run_a_few_at_a_time_and_hold_their_records() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    recorder = Recorder("async", delay=1.0)
    count = 2 * MAX_CONCURRENT_CALLBACKS + 1
    config = CONFIG.replace(on_record_failure=recorder.callback())
    async with Producer(config, client=fake) as producer:
        fake.script_records([("KMSOptInRequired", "opt in")] * count)
        outcomes = await put_many(producer, count)
        while not all(outcome.done() for outcome in outcomes):  # noqa: ASYNC110
            await anyio.sleep(0.001)  # outcomes resolve before their callbacks finish
        failed_at = outcomes[0].result().attempts[-1].ended_at
        assert producer.outstanding_records == count  # held until their callbacks return
        assert producer.statistics().failure_callbacks_pending == count
        await producer.flush()
        # Three rounds of one second: 16, 16, then 1.
        assert anyio.current_time() == pytest.approx(failed_at + 3.0, abs=EPS)
        assert producer.outstanding_records == 0
    assert recorder.most_running == MAX_CONCURRENT_CALLBACKS
    assert len(recorder.results) == count


@pytest.mark.anyio
async def test_records_held_by_slow_callbacks_apply_back_pressure() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    release = anyio.Event()

    async def slow(result: RecordResult) -> None:
        await release.wait()

    config = CONFIG.replace(max_outstanding_records=2, on_record_failure=slow)
    async with Producer(config, client=fake) as producer:
        fake.script_records([("KMSInvalidStateException", "bad")] * 2)
        await put_many(producer, 2)
        with anyio.fail_after(1):
            while producer.statistics().failure_callbacks_pending < 2:  # noqa: ASYNC110
                await anyio.sleep(0.001)
        with pytest.raises(BufferFullError):
            producer.put_record_nowait(stream="s", partition_key="k", data=b"d")
        release.set()
        outcome = await producer.put_record(stream="s", partition_key="k", data=b"d")
    assert outcome.result().success


@pytest.mark.anyio
async def test_exit_waits_for_callbacks_then_gives_up_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.latency = 30.0
    started: list[float] = []

    async def never_finishes(result: RecordResult) -> None:
        started.append(anyio.current_time())
        await anyio.sleep(math.inf)

    config = CONFIG.replace(on_record_failure=never_finishes, request_timeout_ms=2000)
    with caplog.at_level(logging.ERROR, logger="aiokpl"):
        with anyio.move_on_after(1.0):
            async with Producer(config, client=fake) as producer:
                outcomes = await put_many(producer, MAX_CONCURRENT_CALLBACKS + 4)
                await anyio.sleep(math.inf)
        # Cancelled at t=1; callbacks for the cancelled records got request_timeout_ms.
        assert anyio.current_time() == pytest.approx(3.0, abs=EPS)
    # As many as may run at once started; the others never did (and warn of nothing).
    assert started == [pytest.approx(1.0, abs=EPS)] * MAX_CONCURRENT_CALLBACKS
    assert all(outcome.result().error_code == "Cancelled" for outcome in outcomes)
    assert producer.outstanding_records == 0
    assert producer.statistics().failure_callbacks_pending == 0
    lost = MAX_CONCURRENT_CALLBACKS + 4
    assert f"on_record_failure did not complete for {lost} failed record(s)" in caplog.text


def test_the_dead_letters_example_in_the_docs_runs() -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "results.md").read_text()
    section = page.split("## Dead letters", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1
    exec(compile(blocks[0], "docs/results.md#dead-letters", "exec"), {"__name__": "__docs__"})


@pytest.mark.anyio
async def test_a_held_record_finished_again_is_not_reported_twice() -> None:
    # The producer tolerates a second verdict on a finished record (its _finish guard); a
    # record held for its async callback must tolerate it too.
    fake = FakeKinesis()
    fake.add_stream("s")
    release = anyio.Event()
    calls: list[RecordResult] = []

    async def slow(result: RecordResult) -> None:
        calls.append(result)
        await release.wait()

    async with Producer(CONFIG.replace(on_record_failure=slow), client=fake) as producer:
        fake.script_records([("KMSNotFoundException", "gone")])
        outcome = await producer.put_record(stream="s", partition_key="k", data=b"d")
        with anyio.fail_after(1):
            while not calls:  # noqa: ASYNC110
                await anyio.sleep(0.001)
        (held,) = running(producer).ledger.outstanding
        running(producer).ledger.finish([held], False)  # a late second verdict
        running(producer).ledger.finish([held], True)
        assert producer.outstanding_records == 1
        assert producer.statistics().records_failed == 1
        assert outcome.result().error_code == "KMSNotFoundException"
        release.set()
        await producer.flush()
        assert producer.outstanding_records == 0
    assert calls == [outcome.result()]


@pytest.mark.anyio
async def test_aggregated_records_expiring_in_the_limiter_keep_their_data_for_the_result() -> None:
    """With ``return_record_on_failure``, records in an aggregate keep their own data while it
    waits (see KinesisRecord.seal): an aggregate expiring in the limiter is never
    decoded, and each failed result must still carry its record's bytes."""
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = Config(
        region="us-east-1",
        return_record_on_failure=True,
        rate_limit_bytes_per_sec_per_shard=1000.0,  # one aggregate of ~1.1 KB drains the bucket
        record_ttl_ms=500,
    )
    async with Producer(config, client=fake) as producer:
        await producer.put_record(stream="s", partition_key="warm-up", data=b"")
        await producer.flush()
        first = [
            await producer.put_record(stream="s", partition_key=f"a{i}", data=bytes([i]) * 100)
            for i in range(10)
        ]
        await anyio.sleep(0.2)  # its deadline passes: sent, taking the whole byte budget
        second = [
            await producer.put_record(stream="s", partition_key=f"b{i}", data=bytes([i]) * 100)
            for i in range(10)
        ]
        # No flush (it would force the limiter open): the second aggregate waits for bytes
        # until its records' TTL passes, under the virtual clock.
        await anyio.sleep(1.0)
        assert all(outcome.done() for outcome in second)
    assert all(outcome.result().success for outcome in first)
    for i, outcome in enumerate(second):
        result = outcome.result()
        assert result.error_code == "Expired"
        assert "rate limiter" in (result.error_message or "")
        assert result.record == FailedRecord("s", f"b{i}", bytes([i]) * 100)

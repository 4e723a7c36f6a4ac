"""SyncProducer: the blocking API, from many threads, on an asyncio or a trio background loop.

These tests are not async: they call the producer from ordinary threads, as Django views or
Celery tasks would, and the producer runs a real event loop in its own thread. So they wait
in real time; every wait is bounded, and nothing asserts on elapsed time. Each runs with the
background loop on asyncio and on trio.
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.thread
import gc
import logging
import re
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import anyio
import pytest

import aiokpl._blocking.executor
import aiokpl._blocking.exit
import aiokpl._blocking.producer
from aiokpl import (
    BufferFullError,
    Config,
    InvalidRecordError,
    InvalidRecordTypeError,
    Producer,
    ProducerClosedError,
    RecordResult,
    SyncProducer,
)
from aiokpl._blocking.executor import ExitSafeExecutor
from aiokpl._producer.port import ProducerPort
from aiokpl.aggregation import deaggregate
from aiokpl.testing import FakeKinesis, read_stream

CONFIG = Config(region="us-east-1")
WAIT = 30.0  # bound on every wait for the background thread (seconds); never reached
Backend = Literal["asyncio", "trio"]


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    before = set(threading.enumerate())
    yield request.param
    # Garbage: every producer a test opened is closed by then, and took its thread with it.
    assert set(threading.enumerate()) <= before


def stored(fake: FakeKinesis, stream: str) -> Counter[tuple[str | None, bytes]]:
    """(partition key, data) of every user record the stream holds, read back and counted."""
    records = anyio.run(read_stream, fake, stream)
    return Counter(
        (user.partition_key, user.data) for _, record in records for user in deaggregate(record)
    )


def test_eight_threads_put_at_once(backend: Backend) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=4)
    threads, per_thread = 8, 500
    start = threading.Barrier(threads)
    futures: dict[int, list[Future[RecordResult]]] = {}

    def work(n: int) -> None:
        start.wait(WAIT)
        futures[n] = [
            producer.put_record(stream="s", partition_key=f"t{n}-{i}", data=b"%d:%d" % (n, i))
            for i in range(per_thread)
        ]

    with SyncProducer(CONFIG, client=fake, backend=backend) as producer:
        workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(WAIT)
        results = [f.result(WAIT) for n in range(threads) for f in futures[n]]
        statistics = producer.statistics()
    assert len(results) == threads * per_thread
    assert all(result.success for result in results)
    assert statistics.records_put == threads * per_thread
    expected = Counter(
        (f"t{n}-{i}", b"%d:%d" % (n, i)) for n in range(threads) for i in range(per_thread)
    )
    assert stored(fake, "s") == expected  # every record, exactly once


def test_close_resolves_every_future_and_is_idempotent(backend: Backend) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.latency = 0.05
    producer = SyncProducer(CONFIG, client=fake, backend=backend)
    futures = [producer.put_record(stream="s", partition_key=f"k{i}", data=b"d") for i in range(50)]
    closers = [threading.Thread(target=producer.close) for _ in range(3)]
    for closer in closers:
        closer.start()
    for closer in closers:
        closer.join(WAIT)
    assert all(future.done() and future.result().success for future in futures)
    producer.close()  # once more: nothing to do
    assert producer.outstanding_records == 0
    assert producer.statistics().records_succeeded == 50  # the last snapshot, once closed
    assert "closed" in repr(producer)
    with pytest.raises(ProducerClosedError):
        producer.put_record(stream="s", partition_key="k", data=b"late")
    producer.flush()  # nothing outstanding: returns at once


def test_health_is_asked_on_the_producers_loop_from_any_thread(backend: Backend) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.deny("PutRecords", code="UnrecognizedClientException", message="token invalid")
    with SyncProducer(CONFIG, client=fake, backend=backend) as producer:
        assert producer.health().status == "healthy"
        future = producer.put_record(stream="s", partition_key="k", data=b"x")
        assert future.result(WAIT).error_code == "UnrecognizedClientException"
        with ThreadPoolExecutor(4) as pool:  # any thread may ask
            verdicts = list(pool.map(lambda _: producer.health(window_s=30), range(8)))
        assert {verdict.codes for verdict in verdicts} == {("credentials_failing",)}
        asked_in_callback: Future[object] = Future()
        later = producer.put_record(stream="s", partition_key="k", data=b"y")
        # From the producer's own thread (a done-callback) too: answered there, directly.
        later.add_done_callback(lambda _: asked_in_callback.set_result(producer.health()))
        assert asked_in_callback.result(WAIT).status == "failing"  # type: ignore[attr-defined]
        with pytest.raises(ValueError, match="window_s must be a number of seconds"):
            producer.health(window_s=0)
    closed = producer.health()
    assert (closed.status, closed.codes) == ("failing", ("not_running",))


def test_close_with_a_timeout_fails_the_rest_as_cancelled_and_says_so(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.latency = 3600.0  # no answer before the timeout
    producer = SyncProducer(CONFIG, client=fake, backend=backend)
    futures = [producer.put_record(stream="s", partition_key=f"k{i}", data=b"d") for i in range(20)]
    with caplog.at_level(logging.WARNING, logger="aiokpl"):
        producer.close(timeout=0.2)
        producer.close(timeout=0.2)  # closed already: said once
    assert all(future.done() for future in futures)
    results = [future.result() for future in futures]
    assert {result.error_code for result in results} == {"Cancelled"}
    assert producer.outstanding_records == 0
    # One line, as the async producer's cancelled exit says (before: nothing was logged).
    [line] = [record.getMessage() for record in caplog.records]
    unknown = sum(result.outcome_unknown for result in results)
    assert line == (
        "SyncProducer.close(timeout=0.2) ran out of time and cancelled the rest: of 20 records "
        f"put, 0 were delivered and 20 were cancelled ({unknown} of them sent and not answered: "
        "they may be in the stream); each future holds its record's result and error code "
        '("Cancelled" for those the exit stopped)'
    )


def test_flush_waits_for_the_results_of_earlier_puts(backend: Backend) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    config = CONFIG.replace(record_max_buffered_time_ms=3_600_000, record_ttl_ms=7_200_000)
    with SyncProducer(config, client=fake, backend=backend) as producer:
        futures = [
            producer.put_record(stream="s", partition_key=f"k{i}", data=b"d") for i in range(300)
        ]
        producer.flush(timeout=WAIT)  # without it they would wait an hour to be sent
        assert all(future.done() and future.result().success for future in futures)
        assert producer.outstanding_records == 0
        assert producer.outstanding_bytes == 0
        assert sum(stored(fake, "s").values()) == 300


def test_flush_raises_timeout_error_and_records_go_on(backend: Backend) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.latency = 3600.0
    with SyncProducer(CONFIG, client=fake, backend=backend) as producer:
        future = producer.put_record(stream="s", partition_key="k", data=b"d")
        with pytest.raises(TimeoutError, match=r"flush\(\) timed out after 0.1 s: 1 of the"):
            producer.flush(timeout=0.1)
        assert not future.done()
        producer.close(timeout=0)
    assert future.result().error_code == "Cancelled"


def test_bad_input_raises_in_the_callers_thread_and_changes_nothing(backend: Backend) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    with SyncProducer(CONFIG, client=fake, backend=backend) as producer:
        with pytest.raises(InvalidRecordError, match="partition_key"):
            producer.put_record(stream="s", partition_key="", data=b"d")
        with pytest.raises(InvalidRecordTypeError, match="data"):
            producer.put_record(stream="s", partition_key="k", data="text")  # type: ignore[arg-type]
        with pytest.raises(InvalidRecordTypeError, match="stream must be a str, not list"):
            producer.put_record(stream=["s"], partition_key="k", data=b"d")  # type: ignore[arg-type]
        with pytest.raises(InvalidRecordError, match="stream must be 1"):
            producer.put_record(stream="bad name", partition_key="k", data=b"d")
        with pytest.raises(InvalidRecordError, match="max_record_size"):
            producer.put_record(stream="s", partition_key="k", data=bytes(1024 * 1024))
        assert producer.outstanding_records == 0
        future = producer.put_record(stream="s", partition_key="k", data=b"fine")
        assert future.result(WAIT).success


def test_constructor_errors(backend: Backend) -> None:
    with pytest.raises(TypeError, match=r"config must be an aiokpl\.Config, not dict"):
        SyncProducer({"region": "us-east-1"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="backend must be 'asyncio' or 'trio'; got 'curio'"):
        SyncProducer(CONFIG, client=FakeKinesis(), backend="curio")  # type: ignore[arg-type]


def test_a_failure_to_start_is_raised_by_the_constructor(backend: Backend) -> None:
    # No region anywhere (conftest clears AWS_*) and no client: the producer cannot start.
    with pytest.raises(Exception, match="region"):
        SyncProducer(Config(), backend=backend)


def test_back_pressure_blocks_the_calling_thread(backend: Backend) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.latency = 0.2
    config = CONFIG.replace(max_outstanding_records=4, record_max_buffered_time_ms=0)
    with SyncProducer(config, client=fake, backend=backend) as producer:
        first = [
            producer.put_record(stream="s", partition_key=f"k{i}", data=b"d") for i in range(4)
        ]
        assert producer.outstanding_records == 4
        # Full: the fifth put waits for a result to make room.
        fifth = producer.put_record(stream="s", partition_key="k4", data=b"d")
        assert sum(future.done() for future in first) >= 1  # room came from a result
        assert fifth.result(WAIT).success


def test_back_pressure_counts_bytes_to_the_byte(backend: Backend) -> None:
    # A put counts its room without a call under the hand-over's lock: the bound on bytes holds
    # there as Admission states it (up to max_outstanding_bytes, not one byte more).
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.latency = 3600.0
    config = CONFIG.replace(max_record_size=50, max_outstanding_bytes=100)
    producer = SyncProducer(config, client=fake, backend=backend)
    futures = [producer.put_record(stream="s", partition_key="k", data=bytes(49)) for _ in "ab"]
    assert producer.outstanding_bytes == 100  # two of 50 bytes: exactly the bound
    with pytest.raises(BufferFullError, match="holds 2 records / 100 bytes"):
        producer.put_record(stream="s", partition_key="k", data=b"", timeout=0.01)
    producer.close(timeout=0)
    assert {future.result().error_code for future in futures} == {"Cancelled"}


def test_back_pressure_timeout_and_close_while_waiting(backend: Backend) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.latency = 3600.0
    config = CONFIG.replace(max_outstanding_records=2)
    producer = SyncProducer(config, client=fake, backend=backend)
    futures = [producer.put_record(stream="s", partition_key=f"k{i}", data=b"d") for i in range(2)]
    with pytest.raises(BufferFullError, match=r"no room for the record within timeout=0.05 s"):
        producer.put_record(stream="s", partition_key="k", data=b"d", timeout=0.05)
    errors: list[BaseException] = []

    def blocked_put() -> None:
        try:
            producer.put_record(stream="s", partition_key="waits", data=b"d")
        except BaseException as exc:
            errors.append(exc)

    waiter = threading.Thread(target=blocked_put)
    waiter.start()
    while producer._handover.room.waiters == 0:  # the thread is waiting for room (private)
        assert waiter.is_alive(), errors
        waiter.join(0.001)
    producer.close(timeout=0)
    waiter.join(WAIT)
    assert [type(error) for error in errors] == [ProducerClosedError]
    assert {future.result().error_code for future in futures} == {"Cancelled"}


def test_calls_that_would_wait_on_the_loop_from_the_loop_raise(backend: Backend) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    raised: list[BaseException] = []
    done = threading.Event()
    config = CONFIG.replace(max_outstanding_records=1)
    with SyncProducer(config, client=fake, backend=backend) as producer:

        def callback(future: Future[RecordResult]) -> None:
            # Runs in the producer's loop thread, where waiting would deadlock.
            for call in (producer.flush, producer.close):
                try:
                    call()
                except RuntimeError as exc:
                    raised.append(exc)
            try:  # its record counts until its callbacks have run: the producer is full
                producer.put_record(stream="s", partition_key="full", data=b"d")
            except BufferFullError as exc:
                raised.append(exc)
            assert producer.statistics().records_put >= 1
            done.set()

        producer.put_record(stream="s", partition_key="k", data=b"d").add_done_callback(callback)
        assert done.wait(WAIT)
    assert [type(exc) for exc in raised] == [RuntimeError, RuntimeError, BufferFullError]
    assert "flush() waits for the producer's own thread" in str(raised[0])
    assert "close() waits for the producer's own thread" in str(raised[1])
    assert "called from its own thread" in str(raised[2])


def test_dead_letters_through_the_sync_producer(backend: Backend) -> None:
    fake = FakeKinesis()
    failed: list[RecordResult] = []
    config = CONFIG.replace(return_record_on_failure=True, on_record_failure=failed.append)
    with SyncProducer(config, client=fake, backend=backend) as producer:
        future = producer.put_record(stream="missing", partition_key="k", data=b"lost")
    result = future.result()
    assert failed == [result]
    assert result.error_code == "ResourceNotFoundException"
    assert result.record is not None
    assert result.record.data == b"lost"


@pytest.mark.parametrize("close_timeout", [0.1, None])
def test_records_waiting_in_the_hand_over_at_close_fail_once(
    backend: Backend, close_timeout: float | None
) -> None:
    # An async failure callback that never returns holds its records, so the producer's own
    # bound stops the pump and later records wait in the hand-over queue at close.
    fake = FakeKinesis()
    for _ in range(2):  # the two records may go in one request or in two
        fake.script_records([("KMSDisabledException", "off")] * 2)
    fake.add_stream("s")
    seen: list[RecordResult] = []

    async def hold(result: RecordResult) -> None:
        seen.append(result)
        await anyio.sleep_forever()

    config = CONFIG.replace(
        max_outstanding_records=2,
        record_max_buffered_time_ms=0,
        request_timeout_ms=100,
        record_ttl_ms=100,  # close() without a timeout is bounded by it
        on_record_failure=hold,
    )
    producer = SyncProducer(config, client=fake, backend=backend)
    held = [producer.put_record(stream="s", partition_key=f"k{i}", data=b"d") for i in range(2)]
    for future in held:
        assert future.result(WAIT).error_code == "KMSDisabledException"
    queued = [producer.put_record(stream="s", partition_key=f"q{i}", data=b"d") for i in range(2)]
    producer.close(timeout=close_timeout)
    assert {future.result().error_code for future in queued} == {"Cancelled"}
    assert producer.outstanding_records == 0
    # Every failed record's callback was called once (those of the queued ones at the exit).
    assert sorted(id(r) for r in seen) == sorted(id(f.result()) for f in held + queued)


def test_a_closed_producer_is_garbage(backend: Backend) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    producer = SyncProducer(CONFIG, client=fake, backend=backend)
    producer.put_record(stream="s", partition_key="k", data=b"d").result(WAIT)
    producer.close()
    ref = weakref.ref(producer)
    del producer
    gc.collect()
    assert ref() is None


def test_the_examples_in_the_docs_run(backend: Backend) -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "sync.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.DOTALL)
    assert len(blocks) >= 3
    for n, block in enumerate(blocks):
        code = block.replace('backend="asyncio"', f"backend={backend!r}")
        exec(compile(code, f"docs/sync.md#{n}", "exec"), {"__name__": "__docs__"})


def test_the_futures_behave_as_concurrent_futures(backend: Backend) -> None:
    # SyncProducer's futures create their lock only when needed: every Future method must
    # still work, before and after the result, from other threads too.
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.latency = 1.0  # long enough to look at pending futures, even on a loaded machine
    config = CONFIG.replace(record_max_buffered_time_ms=0)
    called: list[Future[RecordResult]] = []
    with SyncProducer(config, client=fake, backend=backend) as producer:
        waited = producer.put_record(stream="s", partition_key="a", data=b"1")
        watched = producer.put_record(stream="s", partition_key="b", data=b"2")
        polled = producer.put_record(stream="s", partition_key="c", data=b"3")
        assert isinstance(waited, Future)
        assert waited.running()
        assert not waited.cancel()  # a record in the pipeline cannot be taken back
        assert not waited.cancelled()
        assert not polled.done()  # asked before the result: the lazy path
        assert "state=running" in repr(watched)
        watched.add_done_callback(called.append)
        results: list[RecordResult] = []
        blocked = threading.Thread(target=lambda: results.append(waited.result(WAIT)))
        blocked.start()  # a thread blocked in result() is woken by the resolution
        done, pending = concurrent.futures.wait([waited, watched, polled], timeout=WAIT)
        blocked.join(WAIT)
        assert (len(done), pending) == (3, set())
        assert results == [waited.result()]
        assert called == [watched]
        late: list[Future[RecordResult]] = []
        watched.add_done_callback(late.append)  # already resolved: called at once
        assert late == [watched]
        assert watched.exception() is None
        assert list(concurrent.futures.as_completed([polled], timeout=WAIT)) == [polled]
        assert "state=finished returned RecordResult" in repr(polled)
        untouched = producer.put_record(stream="s", partition_key="d", data=b"4")
        producer.flush(timeout=WAIT)
    # Resolved without anyone waiting (the unlocked path), read afterwards.
    assert untouched.done()
    assert untouched.result().success
    assert untouched.result() is untouched.result()  # built once
    with pytest.raises(concurrent.futures.InvalidStateError):
        untouched.set_result(untouched.result())


def test_a_producer_left_open_is_closed_at_interpreter_exit(backend: Backend) -> None:
    # Registered before aiokpl is imported, the check runs after aiokpl's own exit hook.
    script = f"""
import atexit

def check():
    print("resolved:", all(f.done() and f.result().success for f in futures), flush=True)

atexit.register(check)

from aiokpl import Config, SyncProducer
from aiokpl.testing import FakeKinesis

fake = FakeKinesis()
fake.add_stream("s")
config = Config(region="us-east-1", record_max_buffered_time_ms=3_600_000, record_ttl_ms=7_200_000)
producer = SyncProducer(config, client=fake, backend={backend!r})
futures = [producer.put_record(stream="s", partition_key=str(i), data=b"d") for i in range(50)]
print("pending:", sum(not f.done() for f in futures), flush=True)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["pending: 50", "resolved: True"]


def test_a_producer_closed_at_interpreter_exit_says_what_failed(backend: Backend) -> None:
    script = f"""
from aiokpl import Config, SyncProducer
from aiokpl.testing import FakeKinesis

fake = FakeKinesis()
fake.add_stream("s")
fake.fail_requests(10**6, code="InternalFailure", message="down", http_status=500)
config = Config(region="us-east-1", record_ttl_ms=1_000)
producer = SyncProducer(config, client=fake, backend={backend!r})
futures = [producer.put_record(stream="s", partition_key=str(i), data=b"d") for i in range(7)]
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "SyncProducer still open at interpreter exit was closed" in done.stderr
    assert "of 7 records put, 0 were delivered and 7 failed" in done.stderr


def test_a_failing_loop_still_resolves_every_future(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A bug in the hand-over (simulated) stops the loop: nothing may be left pending.
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(ProducerPort, "put", broken)
    fake = FakeKinesis()
    fake.add_stream("s")
    config = CONFIG.replace(return_record_on_failure=True)
    producer = SyncProducer(config, client=fake, backend=backend)
    futures: list[Future[RecordResult]] = []
    with caplog.at_level(logging.ERROR, logger="aiokpl"):
        # The loop fails on the first record it takes: puts are refused from then on.
        for i in range(3):
            try:
                futures.append(producer.put_record(stream="s", partition_key=f"k{i}", data=b"d"))
            except ProducerClosedError:
                break
        results = [future.result(WAIT) for future in futures]
        producer.close()
    assert results  # the first put always comes before the failure
    assert {(r.error_code, r.error_message) for r in results} == {
        ("Internal", "the SyncProducer's event loop stopped")
    }
    keys = [r.record.partition_key if r.record else None for r in results]
    assert keys == [f"k{i}" for i in range(len(results))]
    assert "the SyncProducer's event loop failed" in caplog.text
    with pytest.raises(ProducerClosedError):
        producer.put_record(stream="s", partition_key="k", data=b"d")


def test_a_stream_arn_in_another_region_is_refused_at_put_as_the_async_put_does(
    backend: Backend,
) -> None:
    fake = FakeKinesis()
    fake.add_stream("events")
    here = "arn:aws:kinesis:us-east-1:123456789012:stream/events"
    there = "arn:aws:kinesis:eu-west-1:123456789012:stream/events"
    with SyncProducer(CONFIG, client=fake, backend=backend) as producer:
        for _ in range(2):  # refused every time, not only when the stream is new
            with pytest.raises(InvalidRecordError, match="is in region 'eu-west-1'"):
                producer.put_record(stream=there, partition_key="k", data=b"x")
        assert producer.outstanding_records == 0
        future = producer.put_record(stream=here, partition_key="k", data=b"x")
        assert future.result(timeout=WAIT).success


# --- interruptions (Ctrl-C) -------------------------------------------------------------------


class Interrupter:
    """Sends SIGINT from another thread, as Ctrl-C would, and waits until the handler (which
    Python runs in the main thread, the test's) has taken it: the test knows where the
    interruption landed.

    Sent to the main thread, the signal cuts its wait short. Sent to the interrupter's own
    thread (``elsewhere``), it does not: it stands for a SIGINT the kernel delivered to another
    thread of the process, and for one that came just before the main thread began to wait
    (its C handler has run, the wait blocks after it). Either way the main thread runs the
    handler only when it next runs Python code: its waits must be in slices.
    """

    def __init__(self) -> None:
        self.taken = threading.Semaphore(0)
        self.count = 0

    def handler(self, signum: int, frame: object) -> None:
        self.count += 1
        self.taken.release()
        raise KeyboardInterrupt

    def interrupt(self, when: Callable[[], bool] = lambda: True, elsewhere: bool = False) -> None:
        """Interrupt the main thread once ``when()`` holds; return once it took it."""
        wait_until(when)
        thread = threading.get_ident() if elsewhere else threading.main_thread().ident
        assert thread is not None
        signal.pthread_kill(thread, signal.SIGINT)
        assert self.taken.acquire(timeout=WAIT)


@pytest.fixture
def interrupter() -> Iterator[Interrupter]:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only, and this test does not run there")
    interrupter = Interrupter()
    previous = signal.signal(signal.SIGINT, interrupter.handler)
    try:
        yield interrupter
    finally:
        signal.signal(signal.SIGINT, previous)


def in_thread(target: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=target)
    thread.start()
    return thread


def wait_until(condition: Callable[[], bool]) -> None:
    """Wait (bounded, in real time) until ``condition()`` holds."""
    for _ in range(int(WAIT / 0.001)):
        if condition():
            return
        time.sleep(0.001)
    raise AssertionError("the condition did not hold in time")


@pytest.mark.parametrize("elsewhere", [False, True], ids=["to-main", "elsewhere"])
def test_an_interrupted_close_cancels_the_rest_and_resolves_every_future(
    backend: Backend, interrupter: Interrupter, caplog: pytest.LogCaptureFixture, elsewhere: bool
) -> None:
    # The first Ctrl-C left the `with` block, whose close() waits for delivery; a second one
    # interrupts that wait: the records in flight are cancelled, every future resolved, and the
    # interruption raised. (Before: raised at once, futures unresolved, no summary. A SIGINT
    # that did not cut the wait short was acted on only once the close was over.)
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.latency = 3600.0  # the request stays in flight until cancelled
    producer = SyncProducer(CONFIG, client=fake, backend=backend)
    futures = [producer.put_record(stream="s", partition_key=f"k{i}", data=b"d") for i in range(50)]
    wait_until(lambda: producer.statistics().requests_in_flight == 1)
    second = in_thread(lambda: interrupter.interrupt(lambda: producer._handover.closing, elsewhere))
    with caplog.at_level(logging.WARNING, logger="aiokpl"), pytest.raises(KeyboardInterrupt):
        producer.close()
    second.join(WAIT)
    assert interrupter.count == 1
    assert all(future.done() for future in futures)
    results = [future.result() for future in futures]
    assert {result.error_code for result in results} == {"Cancelled"}
    assert all(result.outcome_unknown for result in results)  # sent, never answered
    assert (
        "SyncProducer.close() was interrupted: of 50 records put, 0 were delivered and 50 were "
        "cancelled (50 of them sent and not answered: they may be in the stream); each future "
        'holds its record\'s result and error code ("Cancelled" for those the exit stopped)'
    ) in caplog.text
    producer.close()  # closed already: returns at once, raises nothing
    assert producer.statistics().records_failed == 50
    assert not producer._thread.is_alive()


def test_interruptions_during_the_abandon_are_held_back(
    backend: Backend, interrupter: Interrupter
) -> None:
    # A third Ctrl-C, while the cancelled records' failure callbacks still run: held back, so
    # that the caller's `except` finds every future resolved; one KeyboardInterrupt is raised.
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.latency = 3600.0
    calling, go = threading.Event(), threading.Event()
    called: list[RecordResult] = []

    async def dead_letter(result: RecordResult) -> None:
        calling.set()
        with anyio.fail_after(WAIT):
            # A threading.Event set by the test thread; not to_thread: its idle worker would
            # outlive the test.
            while not go.is_set():  # noqa: ASYNC110
                await anyio.sleep(0.001)
        called.append(result)

    config = CONFIG.replace(on_record_failure=dead_letter)
    producer = SyncProducer(config, client=fake, backend=backend)
    futures = [producer.put_record(stream="s", partition_key=f"k{i}", data=b"d") for i in range(5)]

    def interrupt_twice() -> None:
        interrupter.interrupt(
            when=lambda: producer._handover.closing
        )  # the second Ctrl-C: the close abandons the records
        assert calling.wait(WAIT)  # their callbacks run: close() waits for them
        interrupter.interrupt()  # the third: held back
        go.set()

    thread = in_thread(interrupt_twice)
    with pytest.raises(KeyboardInterrupt):
        producer.close()
    thread.join(WAIT)
    assert interrupter.count == 2
    assert {future.result().error_code for future in futures} == {"Cancelled"}
    assert sorted(id(result) for result in called) == sorted(id(f.result()) for f in futures)


def test_an_abandon_that_cannot_finish_gives_up_and_says_so(
    backend: Backend,
    interrupter: Interrupter,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A plain failure callback that blocks the loop's thread: the interrupted close cannot see
    # the records resolved, and gives up after request_timeout_ms (+ a margin, 0 here) saying
    # how many have no result, rather than hold Ctrl-C back for ever.
    monkeypatch.setattr(aiokpl._blocking.producer, "_ABANDON_MARGIN", 0.0)
    fake = FakeKinesis()
    fake.add_stream("s")
    fake.latency = 3600.0
    go = threading.Event()
    config = CONFIG.replace(request_timeout_ms=100, on_record_failure=lambda _: go.wait(WAIT))
    producer = SyncProducer(config, client=fake, backend=backend)
    futures = [producer.put_record(stream="s", partition_key=f"k{i}", data=b"d") for i in range(3)]
    thread = in_thread(lambda: interrupter.interrupt(when=lambda: producer._handover.closing))
    with caplog.at_level(logging.ERROR, logger="aiokpl"), pytest.raises(KeyboardInterrupt):
        producer.close()
    thread.join(WAIT)
    unresolved = sum(not future.done() for future in futures)  # the loop is blocked: still
    assert unresolved >= 1  # (the record whose callback blocks is resolved; the others wait)
    assert (
        "SyncProducer.close() was interrupted and the producer's thread did not stop within "
        f"0.1 s: {unresolved} futures still have no result"
    ) in caplog.text
    go.set()  # the callback returns: the producer ends, every future resolved
    producer.close()
    assert {future.result().error_code for future in futures} == {"Cancelled"}


def test_ctrl_c_during_the_close_at_exit_abandons_every_open_producer(
    backend: Backend, interrupter: Interrupter, caplog: pytest.LogCaptureFixture
) -> None:
    # The exit function, called here as the interpreter would: Ctrl-C during the close of one
    # producer abandons its records and closes the other at once; each says what failed, and
    # nothing is raised (there is nobody left to raise it to).
    fakes = [FakeKinesis(), FakeKinesis()]
    for fake in fakes:
        fake.add_stream("s")
        fake.latency = 3600.0
    producers = [SyncProducer(CONFIG, client=fake, backend=backend) for fake in fakes]
    futures = [
        producer.put_record(stream="s", partition_key=f"k{i}", data=b"d")
        for producer in producers
        for i in range(4)
    ]
    thread = in_thread(
        lambda: interrupter.interrupt(when=lambda: any(p._handover.closing for p in producers))
    )
    with caplog.at_level(logging.WARNING, logger="aiokpl"):
        aiokpl._blocking.exit.close_forgotten()
    thread.join(WAIT)
    assert interrupter.count == 1
    assert {future.result().error_code for future in futures} == {"Cancelled"}
    # One line per producer: the one whose close was interrupted, then the other, closed at
    # once (with no time left).
    assert [record.getMessage().split(": of ")[0] for record in caplog.records] == [
        "closing a SyncProducer at interpreter exit was interrupted",
        "closing a SyncProducer at interpreter exit ran out of time and cancelled the rest",
    ]
    assert all(
        "of 4 records put, 0 were delivered and 4 were cancelled (" in record.getMessage()
        for record in caplog.records
    )
    assert not any(producer._thread.is_alive() for producer in producers)


def test_the_loop_executor_still_runs_work_once_thread_pools_refuse_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # At exit, concurrent.futures refuses new work to every ThreadPoolExecutor (its own exit
    # hook sets this flag before any atexit function runs): the loop's executor then runs each
    # call in a thread of its own, with the call's result or exception.
    executor = ExitSafeExecutor()
    assert executor.submit(pow, 2, 5).result(WAIT) == 32  # before exit: the pool
    monkeypatch.setattr(concurrent.futures.thread, "_shutdown", True)
    with pytest.raises(RuntimeError, match="after interpreter shutdown"):
        ThreadPoolExecutor().submit(pow, 2, 5)  # what a plain pool does at exit
    assert executor.submit(pow, 2, 6).result(WAIT) == 64
    with pytest.raises(ZeroDivisionError):
        executor.submit(divmod, 1, 0).result(WAIT)
    cancelled: Future[int] = Future()
    cancelled.cancel()
    aiokpl._blocking.executor._run(cancelled, pow, (2, 7), {})  # cancelled before it ran: not run
    assert cancelled.cancelled()
    monkeypatch.undo()
    executor.shutdown()
    with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
        executor.submit(pow, 2, 5)  # shut down (its loop ended): refused, as by any pool


def slow_start(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """The producer's start waits (up to WAIT) until cancelled: (starting, cancelled)."""
    starting, cancelled = threading.Event(), threading.Event()

    async def slow_enter(self: Producer) -> Producer:
        starting.set()
        try:
            await anyio.sleep(WAIT)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        raise AssertionError("the start was not cancelled")

    monkeypatch.setattr(Producer, "__aenter__", slow_enter)
    return starting, cancelled


@pytest.mark.parametrize("elsewhere", [False, True], ids=["to-main", "elsewhere"])
def test_ctrl_c_while_the_constructor_starts_the_loop_stops_it(
    backend: Backend, interrupter: Interrupter, monkeypatch: pytest.MonkeyPatch, elsewhere: bool
) -> None:
    # The constructor waits for the loop to start the producer (opening a client can take a
    # while); Ctrl-C then cancels the start and raises. (Before: it waited for the start, then
    # for a thread that nobody would stop. A SIGINT that did not cut the wait short was acted
    # on only once the start was over: the start was not cancelled.)
    starting, cancelled = slow_start(monkeypatch)
    thread = in_thread(lambda: interrupter.interrupt(starting.is_set, elsewhere))
    with pytest.raises(KeyboardInterrupt):
        SyncProducer(CONFIG, client=FakeKinesis(), backend=backend)
    thread.join(WAIT)
    wait_until(cancelled.is_set)
    wait_until(lambda: not any(t.name == "aiokpl SyncProducer" for t in threading.enumerate()))


def test_ctrl_c_while_the_constructor_starts_the_thread_stops_the_loop(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Thread.start() waits for the new thread to run: a Ctrl-C that lands there (the loop is
    # already starting the producer) cancels the start too. (Before: raised without a word to
    # the loop, which went on starting the producer for as long as that took.)
    starting, cancelled = slow_start(monkeypatch)

    class InterruptedStart(threading.Thread):
        def start(self) -> None:
            super().start()
            if self.name == "aiokpl SyncProducer":
                assert starting.wait(WAIT)
                raise KeyboardInterrupt  # as if Ctrl-C came in start()'s wait, that late

    monkeypatch.setattr(threading, "Thread", InterruptedStart)
    with pytest.raises(KeyboardInterrupt):
        SyncProducer(CONFIG, client=FakeKinesis(), backend=backend)
    monkeypatch.undo()
    wait_until(cancelled.is_set)
    wait_until(lambda: not any(t.name == "aiokpl SyncProducer" for t in threading.enumerate()))


def test_the_exit_function_closes_a_producer_left_open_and_delivers(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    # In this process (the subprocess tests show the same at a real exit): nothing failed, so
    # nothing is logged.
    fake = FakeKinesis()
    fake.add_stream("s")
    config = CONFIG.replace(record_max_buffered_time_ms=3_600_000, record_ttl_ms=7_200_000)
    producer = SyncProducer(config, client=fake, backend=backend)
    futures = [producer.put_record(stream="s", partition_key=f"k{i}", data=b"d") for i in range(9)]
    with caplog.at_level(logging.WARNING, logger="aiokpl"):
        aiokpl._blocking.exit.close_forgotten()
    assert all(future.result().success for future in futures)
    assert sum(stored(fake, "s").values()) == 9
    assert not producer._thread.is_alive()
    assert caplog.text == ""


def _main_thread_in(function_name: str) -> bool:
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    while frame is not None:
        if frame.f_code.co_name == function_name:
            return True
        frame = frame.f_back
    return False


@pytest.mark.parametrize("elsewhere", [False, True], ids=["to-main", "elsewhere"])
def test_a_ctrl_c_during_wait_durable_is_acted_on_at_once(
    backend: Backend,
    interrupter: Interrupter,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    elsewhere: bool,
) -> None:
    # The spool's flush is held: wait_durable() would wait for ever. A Ctrl-C cuts it short,
    # also one that does not interrupt the wait (elsewhere): its wait is in slices.
    from aiokpl import _spooling

    gate = threading.Event()

    async def held(function: Callable[..., object], *args: object) -> object:
        # Inline on the loop (no worker thread: trio keeps its idle ones a while, and the
        # backend fixture counts threads); a flush waits for the gate.
        while function is _spooling._flush and not gate.is_set():  # noqa: ASYNC110 - a threading.Event
            await anyio.sleep(0.01)
        return function(*args)

    monkeypatch.setattr(_spooling, "run_sync", held)
    fake = FakeKinesis()
    fake.add_stream("s")
    config = CONFIG.replace(spool_directory=str(tmp_path))
    producer = SyncProducer(config, client=fake, backend=backend)
    try:
        future = producer.put_record(stream="s", partition_key="k", data=b"d")
        signal_sent = in_thread(
            lambda: interrupter.interrupt(
                lambda: _main_thread_in("wait_durable_from_thread"), elsewhere
            )
        )
        with pytest.raises(KeyboardInterrupt):
            producer.wait_durable()
        signal_sent.join(WAIT)
        assert interrupter.count == 1
        assert not gate.is_set()  # cut short, not ended by the flush
    finally:
        gate.set()
        producer.close()
    assert future.result(WAIT).success

"""Start-up that fails part-way releases exactly what it started, on asyncio and trio.

The producer's ``__aenter__`` pushes each part on an exit stack as it starts (the owned client,
the metrics sinks, the task group, the coordinator): an exception at any step unwinds those
parts, last first, and propagates unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import pytest

from aiokpl import Config, MetricStatistics, ProducerClosedError
from aiokpl._producer.producer import Producer
from aiokpl.coordination import Coordination
from aiokpl.testing import FakeKinesis
from test_coordination import MemoryStore

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1", metrics_level="summary")


class StartUpError(Exception):
    """What the injected failure raises."""


class Opener:
    """A ``create_client`` stand-in that records whether its client was closed."""

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.opened = 0
        self.closed = 0

    @contextlib.asynccontextmanager
    async def __call__(self, config: Config) -> AsyncIterator[FakeKinesis]:
        if self.fail:
            raise StartUpError("the client could not open")
        fake = FakeKinesis()
        fake.add_stream("events")
        self.opened += 1
        try:
            yield fake
        finally:
            self.closed += 1


class Sink:
    """A metrics sink that records its calls, and can fail to open."""

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[str] = []

    async def open(self, config: Config) -> None:
        self.calls.append("open")
        if self.fail:
            raise StartUpError("the sink could not open")

    async def publish(self, metrics: Sequence[MetricStatistics]) -> None:
        self.calls.append("publish")

    async def aclose(self) -> None:
        self.calls.append("aclose")


def running_tasks() -> int:
    return len(anyio.get_running_tasks())


def fail_the_coordinator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make a producer's start fail when it builds its coordinator (``StartUpError``)."""

    def failing_coordinator(*args: Any) -> Any:
        raise StartUpError("the coordinator could not start")

    monkeypatch.setattr("aiokpl._producer.producer.ProducerCoordinator", failing_coordinator)


async def test_a_client_that_fails_to_open_starts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    opener = Opener(fail=True)
    monkeypatch.setattr("aiokpl._producer.producer.create_client", opener)
    sink = Sink()
    before = running_tasks()
    producer = Producer(CONFIG, metrics_sinks=[sink])
    with pytest.raises(StartUpError, match="client"):
        await producer.__aenter__()
    assert sink.calls == []
    assert running_tasks() == before


async def test_a_sink_that_fails_to_open_closes_the_sinks_opened_and_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opener = Opener()
    monkeypatch.setattr("aiokpl._producer.producer.create_client", opener)
    first, failing, never = Sink(), Sink(fail=True), Sink()
    before = running_tasks()
    producer = Producer(CONFIG, metrics_sinks=[first, failing, never])
    with pytest.raises(StartUpError, match="sink"):
        await producer.__aenter__()
    assert (opener.opened, opener.closed) == (1, 1)
    assert first.calls == ["open", "aclose"]
    assert failing.calls == ["open"]  # it did not open: nothing to close
    assert never.calls == []
    assert running_tasks() == before


async def test_a_coordinator_that_fails_to_start_unwinds_the_task_group_and_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opener = Opener()
    monkeypatch.setattr("aiokpl._producer.producer.create_client", opener)

    fail_the_coordinator(monkeypatch)
    sink = Sink()
    before = running_tasks()
    producer = Producer(
        CONFIG, coordination=Coordination(store=MemoryStore()), metrics_sinks=[sink]
    )
    with pytest.raises(StartUpError, match="coordinator"):
        await producer.__aenter__()
    assert (opener.opened, opener.closed) == (1, 1)
    # The parts are built before the sinks open (their runner samples the built parts): a
    # part that fails to build leaves no sink to close.
    assert sink.calls == []
    assert running_tasks() == before  # the task group ended, no task left
    with pytest.raises(ProducerClosedError):
        await producer.put_record(stream="events", partition_key="k", data=b"x")


async def test_a_given_client_is_left_open_when_start_up_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fail_the_coordinator(monkeypatch)
    fake = FakeKinesis()
    before = running_tasks()
    producer = Producer(CONFIG, client=fake, coordination=Coordination(store=MemoryStore()))
    with pytest.raises(StartUpError):
        await producer.__aenter__()
    assert running_tasks() == before
    # The fake was given: the producer neither closed it nor needs it any more.
    fake.add_stream("events")
    assert fake.calls("PutRecords") == 0


async def test_exit_unwinds_in_order_a_last_upload_then_the_sinks_then_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opener = Opener()
    monkeypatch.setattr("aiokpl._producer.producer.create_client", opener)
    sink = Sink()
    before = running_tasks()
    async with Producer(CONFIG, metrics_sinks=[sink]) as producer:
        outcome = await producer.put_record(stream="events", partition_key="k", data=b"x")
    assert (await outcome).success
    assert sink.calls[0] == "open"
    assert sink.calls[-2:] == ["publish", "aclose"]
    assert (opener.opened, opener.closed) == (1, 1)
    assert running_tasks() == before


async def test_a_producer_that_never_ran_says_so_at_every_entry_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Its running parts exist only once it has started: before (not started) and after a
    # start that failed (closed), every entry point says which, and nothing is counted.
    fail_the_coordinator(monkeypatch)
    fake = FakeKinesis()
    for started, error, state in (
        (False, RuntimeError, "not started"),
        (True, ProducerClosedError, "closed"),
    ):
        producer = Producer(CONFIG, client=fake, coordination=Coordination(store=MemoryStore()))
        if started:
            with pytest.raises(StartUpError):
                await producer.__aenter__()
        with pytest.raises(error, match=state):
            await producer.put_record(stream="events", partition_key="k", data=b"x")
        with pytest.raises(error, match=state):
            producer.put_record_nowait(stream="events", partition_key="k", data=b"x")
        with pytest.raises(error, match=state):
            await producer.put_records(stream="events", records=[("k", b"x")])
        await producer.flush()  # nothing was put: nothing to wait for
        assert producer.metrics() == []
        assert repr(producer) == (
            f"<Producer {state} streams=0 outstanding_records=0 outstanding_bytes=0>"
        )
        statistics = producer.statistics()
        assert (statistics.records_put, statistics.requests_sent, statistics.streams) == (0, 0, ())
        assert (producer.outstanding_records, producer.outstanding_bytes) == (0, 0)
        assert state in producer.health().reasons[0].message
    assert fake.calls("PutRecords") == 0

"""``producer.health()`` and the unreachable endpoint's log lines, through a real ``Producer`` and
the in-process ``FakeKinesis`` (its faults, and a wrapper that refuses connections as botocore
reports it) under a virtual clock, on asyncio and trio (see conftest): every time below is
exact, read from the producer's clock, never waited for in real time."""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from botocore.exceptions import EndpointConnectionError

from aiokpl import Config, Health, Outcome, Producer, RecordResult, _spooling
from aiokpl.testing import FakeKinesis
from aiokpl.testing._spool_files import MemoryFiles

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1")
ENDPOINT = "http://127.0.0.1:9"


class Refusing:
    """A :class:`FakeKinesis` behind an endpoint that refuses connections while ``down``: each
    call then raises what botocore raises for a refused connection (a connection error whose
    cause is the refusal), as a producer pointed at the wrong port sees it."""

    def __init__(self, fake: FakeKinesis) -> None:
        self.fake = fake
        self.down = True
        self.refused = 0
        self.meta = SimpleNamespace(endpoint_url=ENDPOINT, region_name="us-east-1")

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.fake, name)

        async def call(**kwargs: Any) -> Any:
            await anyio.lowlevel.checkpoint()
            if self.down:
                self.refused += 1
                raise EndpointConnectionError(
                    endpoint_url=ENDPOINT + "/", error=ConnectionRefusedError(111, "refused")
                )
            return await method(**kwargs)

        return call


class Lines(logging.Handler):
    """The ``aiokpl`` logger's lines, each with the producer's clock when it was logged."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[float, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((anyio.current_time(), record.levelno, record.getMessage()))

    def warnings(self, fragment: str) -> list[tuple[float, str]]:
        return [
            (at, text)
            for at, level, text in self.lines
            if level >= logging.WARNING and fragment in text
        ]


@pytest.fixture
def lines() -> Any:
    handler = Lines()
    logger = logging.getLogger("aiokpl")
    saved = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(saved)


def stream_fake(*streams: str) -> FakeKinesis:
    fake = FakeKinesis()
    for stream in streams or ("s",):
        fake.add_stream(stream, shard_count=2)
    return fake


async def put(producer: Producer, stream: str, count: int) -> list[Outcome[RecordResult]]:
    return [
        await producer.put_record(stream=stream, partition_key=f"k{i}", data=b"%d" % i)
        for i in range(count)
    ]


async def test_a_producer_not_started_or_closed_is_not_running() -> None:
    producer = Producer(CONFIG, client=stream_fake())
    before = producer.health()
    assert (before.status, before.codes) == ("failing", ("not_running",))
    assert before.reasons[0].message == "the producer is not started: enter it (async with)"
    async with producer:
        assert producer.health() == Health("healthy")
        await (await producer.put_record(stream="s", partition_key="k", data=b"x"))
        assert producer.health() == Health("healthy")
        with pytest.raises(ValueError, match="window_s must be a number of seconds"):
            producer.health(window_s=0)
    after = producer.health()
    assert (after.status, after.reasons[0].message) == ("failing", "the producer is closed")


async def test_an_unreachable_endpoint_is_said_once_fails_the_health_and_is_said_again_when_it_answers(  # noqa: E501
    lines: Lines,
) -> None:
    client = Refusing(stream_fake())
    async with Producer(CONFIG, client=client) as producer:
        start = anyio.current_time()
        outcomes = await put(producer, "s", 10)
        while producer.health().status != "failing":  # noqa: ASYNC110 - as a probe polls
            await anyio.sleep(0.01)
        failing_after = anyio.current_time() - start
        [(said_at, said)] = lines.warnings("cannot connect")
        assert said == (
            f"cannot connect to {ENDPOINT} (EndpointConnectionError: Could not connect to the "
            f'endpoint URL: "{ENDPOINT}/"): records are kept and retried until record_ttl_ms '
            "(30000 ms) passes. Said once; a line follows when it answers again"
        )
        # The first request's failure, at the records' deadline: the issue's targets are a
        # line within 5 s and a failing verdict within 10 s.
        assert said_at - start == pytest.approx(0.1)
        assert failing_after == pytest.approx(0.1, abs=0.011)
        await anyio.sleep(20 - failing_after)
        health = producer.health()
        # 20 s in, the oldest record has waited past the window, nothing delivered.
        assert health.codes == ("endpoint_unreachable", "no_progress")
        assert health.reasons[0].message == (
            f"cannot connect to {ENDPOINT} for 19.9 s (EndpointConnectionError: Could not "
            f'connect to the endpoint URL: "{ENDPOINT}/"); records are kept and retried until '
            "record_ttl_ms"
        )
        assert client.refused > 10  # many retries, one line: not one per retry
        assert len(lines.warnings("cannot connect")) == 1
        assert not lines.warnings("could not load the shard map")  # its retries are debug
        client.down = False
        results = [await outcome for outcome in outcomes]
        assert all(result.success for result in results)
        [(_, again)] = lines.warnings("answers again, after")
        assert again.startswith(f"{ENDPOINT} answers again, after ")
        assert producer.health() == Health("healthy")


async def test_a_record_that_expires_unreachable_names_the_refusal() -> None:
    async with Producer(CONFIG.replace(record_ttl_ms=3000), client=Refusing(stream_fake())) as p:
        [outcome] = await put(p, "s", 1)
        result = await outcome
    assert result.error_code == "Expired"
    assert result.error_message is not None
    assert result.error_message.startswith("record_ttl_ms elapsed ")
    assert result.error_message.endswith(
        f", the last failed with EndpointConnectionError: Could not connect to the endpoint "
        f'URL: "{ENDPOINT}/"'
    )
    assert f"after {len(result.attempts) - 1} attempts" in result.error_message


async def test_a_record_cancelled_at_exit_names_what_its_attempts_failed_with() -> None:
    with anyio.CancelScope() as scope:
        async with Producer(CONFIG, client=Refusing(stream_fake())) as producer:
            [outcome] = await put(producer, "s", 1)
            await anyio.sleep(2)
            scope.cancel()
    result = outcome.result()
    assert result.error_code == "Cancelled"
    assert result.error_message is not None
    assert result.error_message.startswith("the producer was cancelled before delivery; after ")
    assert "the last failed with EndpointConnectionError" in result.error_message


async def test_credentials_refused_fail_the_health_until_a_request_is_accepted() -> None:
    fake = stream_fake()
    fake.deny(
        "PutRecords",
        code="UnrecognizedClientException",
        message="The security token included in the request is invalid.",
    )
    async with Producer(CONFIG, client=fake) as producer:
        [outcome] = await put(producer, "s", 1)
        assert (await outcome).error_code == "UnrecognizedClientException"  # at once
        health = producer.health()
        assert (health.status, health.codes) == ("failing", ("credentials_failing",))
        assert health.reasons[0].message == (
            "requests fail for their credentials for 0.0 s (UnrecognizedClientException: The "
            "security token included in the request is invalid.)"
        )
        await anyio.sleep(60)  # nothing sent since: the last word stands
        assert producer.health().codes == ("credentials_failing",)
        fake.allow("PutRecords")
        [outcome] = await put(producer, "s", 1)
        assert (await outcome).success
        assert producer.health() == Health("healthy")


async def test_a_stream_whose_requests_fail_degrades_the_producer_while_others_deliver() -> None:
    fake = stream_fake("good", "bad")
    fake.fail_requests(10**9, stream="bad")
    async with Producer(CONFIG, client=fake) as producer:
        [bad] = await put(producer, "bad", 1)
        for _ in range(15):
            [good] = await put(producer, "good", 1)
            assert (await good).success
            await anyio.sleep(1)
        health = producer.health()
        assert (health.status, health.codes) == ("degraded", ("stream_failing",))
        reason = health.reasons[0]
        assert reason.stream == "bad"
        assert reason.message.startswith("the last ")
        assert reason.message.endswith("with InternalFailure: Internal service failure.")
        assert not (await bad).success  # its TTL
        await anyio.sleep(11)  # no failure within the window any more
        assert producer.health() == Health("healthy")


async def test_requests_that_hang_are_no_progress_then_a_failing_stream() -> None:
    fake = stream_fake()
    fake.latency = 1000.0  # every call hangs: each times out (6 s)
    # A TTL that outlasts the hangs, so the records are delivered once the server answers.
    async with Producer(CONFIG.replace(record_ttl_ms=60_000), client=fake) as producer:
        start = anyio.current_time()
        outcomes = await put(producer, "s", 3)
        await anyio.sleep(9.9)
        assert producer.health() == Health("healthy")  # the oldest waited 9.9 s
        await anyio.sleep(0.2)
        health = producer.health()
        assert health.codes == ("no_progress",)
        assert health.reasons[0].message == (
            "3 records outstanding, the oldest for 10.1 s, and none delivered yet"
        )
        # The records waited for the shard map (ListShards, then DescribeStream, each timed
        # out: 12 s); their first request timed out at 18 s, their second at 24 s.
        await anyio.sleep(start + 24.2 - anyio.current_time())
        assert producer.health().codes == ("no_progress", "stream_failing")
        assert producer.health(window_s=30).codes == ("stream_failing",)  # a longer look
        fake.latency = 0.0
        results = [await outcome for outcome in outcomes]
        assert all(result.success for result in results)
        assert producer.health() == Health("healthy")


async def test_a_full_spool_fails_the_health_until_writes_succeed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files = MemoryFiles()

    async def inline(function: Callable[..., Any], *args: Any) -> Any:
        await anyio.lowlevel.checkpoint()
        return function(*args)

    monkeypatch.setattr(_spooling, "spool_files", lambda config: files)
    monkeypatch.setattr(_spooling, "run_sync", inline)
    config = CONFIG.replace(spool_directory="/spool")
    async with Producer(config, client=stream_fake()) as producer:
        files.capacity_bytes = sum(len(f.content) for f in files.files.values())
        await put(producer, "s", 1)
        await anyio.sleep(0.5)  # the flush fails: the disk is full
        health = producer.health()
        assert (health.status, health.codes) == ("failing", ("spool_full",))
        assert health.reasons[0].message == (
            "the spool's disk is full (/spool): puts wait until a write succeeds"
        )
        files.capacity_bytes = None
        await producer.wait_durable()
        assert producer.health() == Health("healthy")


async def test_the_health_is_a_metric() -> None:
    config = CONFIG.replace(metrics_level="summary")
    async with Producer(config, client=Refusing(stream_fake())) as producer:
        await anyio.sleep(3.5)  # sampled once a second
        [healthy] = producer.metrics("ProducerHealth")
        assert (healthy.count, healthy.min, healthy.max) == (3, 0, 0)
        await put(producer, "s", 1)
        await anyio.sleep(2)
        [health] = producer.metrics("ProducerHealth", window_s=2)
        assert (health.count, health.min, health.max) == (2, 2, 2)  # failing

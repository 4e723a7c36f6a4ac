"""The sender on its own: its lanes' backoff, with a scripted client and destination.

The end-to-end behaviour (isolation, probes, the connection budget) is proven through the
producer in ``test_isolation.py``; these tests reach the lane directly.
"""

from __future__ import annotations

import math
from typing import Any, cast

import anyio
import pytest

from aiokpl._core.answers import Answered, Malformed, RequestFailed
from aiokpl._core.records import KinesisRecord
from aiokpl._kinesis import client_error
from aiokpl._pipeline.lane_states import Lane
from aiokpl._pipeline.scheduler import Scheduler
from aiokpl._pipeline.sender import Sender

EPS = 1e-9
OK = {"Records": [{"SequenceNumber": "1", "ShardId": "shardId-000000000000"}]}


class _Record:
    """What the sender reads of a Kinesis record: its entry and its expiry."""

    def __init__(self, expires_at: float = math.inf) -> None:
        self.expires_at = expires_at

    def entry(self) -> dict[str, Any]:
        return {"Data": b"x", "PartitionKey": "k"}


def records(count: int = 1, expires_at: float = math.inf) -> list[KinesisRecord]:
    return cast("list[KinesisRecord]", [_Record(expires_at) for _ in range(count)])


class _Client:
    """Answers ``PutRecords`` from a script (an exception is raised), noting when it was called."""

    def __init__(self, answers: list[object]) -> None:
        self.answers = answers
        self.called_at: list[float] = []

    async def put_records(self, **kwargs: Any) -> object:
        self.called_at.append(anyio.current_time())
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class _Limits:
    """A collector's limits: what one request may hold."""

    def __init__(self, max_count: int = 500, max_size: int = 5 * 1024 * 1024) -> None:
        self.max_count = max_count
        self.max_size = max_size


class _Destination:
    """A stream's router as the sender sees it; ``then`` runs inside ``handle_result``, as the
    router's resends and retries would."""

    stream = "s"
    collector = _Limits()

    def __init__(self) -> None:
        self.results: list[object] = []
        self.then: Any = None
        self.expired: list[list[KinesisRecord]] = []  # what the sender found expired, unsent

    def found_expired(self, sent: list[KinesisRecord], now: float) -> None:
        self.expired.append(sent)

    def handle_result(self, sent: Any, result: object, started: float, ended: float) -> None:
        self.results.append(result)
        then, self.then = self.then, None
        if then is not None:
            then()


def failed(code: str = "InternalFailure") -> RequestFailed:
    return RequestFailed.of(code, "x")


ANSWERED = Answered([("shardId-000000000000", "1")])


def test_the_lane_backs_off_after_request_failures_and_resets_when_answered() -> None:
    lane = Lane(_Destination())
    draw = lambda: 0.0  # noqa: E731 (no jitter: the nominal delays)
    assert lane.resume_at == -math.inf
    lane.back_off(failed(), 10.0, draw)
    assert lane.resume_at == pytest.approx(10.1)
    lane.back_off(failed("Internal"), 11.0, draw)
    assert lane.resume_at == pytest.approx(11.2)
    # A code no retry can fix fails its records at once: no backoff, and none grows.
    lane.back_off(failed("AccessDeniedException"), 12.0, draw)
    assert lane.resume_at == pytest.approx(11.2)
    # A malformed answer backs off like a failure.
    lane.back_off(Malformed("RecordCountMismatch", "x"), 13.0, draw)
    assert lane.resume_at == pytest.approx(13.4)
    for _ in range(10):
        lane.back_off(failed(), 20.0, draw)
    assert lane.resume_at == pytest.approx(25.0)  # capped at 5 s
    lane.back_off(ANSWERED, 30.0, draw)  # an answered request: from 100 ms again
    lane.back_off(failed(), 31.0, draw)
    assert lane.resume_at == pytest.approx(31.1)
    # The jitter takes up to half of the nominal delay.
    lane.back_off(ANSWERED, 40.0, draw)
    lane.back_off(failed(), 40.0, lambda: 1.0)
    assert lane.resume_at == pytest.approx(40.05)


@pytest.mark.anyio
async def test_a_request_submitted_while_a_failure_resolves_waits_for_the_backoff() -> None:
    # The backoff starts before the failed request's records resolve: a request their
    # callbacks submit is held by it, not sent into the failing stream at once.
    client = _Client([client_error("InternalFailure", "down", "PutRecords", http_status=500), OK])
    destination = _Destination()
    scheduler = Scheduler()
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(scheduler.run)
        sender = Sender(
            client,  # type: ignore[arg-type]
            task_group,
            anyio.current_time,
            scheduler,
            max_connections=2,
            request_timeout=6.0,
            random_value=lambda: 0.0,
        )
        destination.then = lambda: sender.submit(destination, records())
        t0 = anyio.current_time()
        sender.submit(destination, records())
        await anyio.sleep(1)
        task_group.cancel_scope.cancel()
    assert client.called_at == pytest.approx([t0, t0 + 0.1], abs=EPS)
    assert destination.results[1] == ANSWERED


@pytest.mark.anyio
async def test_a_bug_reading_an_answer_propagates_instead_of_failing_the_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Only the client call is caught: an exception from our own code reading its answer is
    # a bug to see, not an "Internal" failure retried until the records expire.
    def broken(response: object, count: int) -> Answered:
        raise RuntimeError("bug in the parser")

    monkeypatch.setattr("aiokpl._pipeline.sender.answer_of", broken)
    client = _Client([OK])
    destination = _Destination()
    scheduler = Scheduler()
    with pytest.RaisesGroup(pytest.RaisesExc(RuntimeError, match="bug in the parser")):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(scheduler.run)
            sender = Sender(
                client,  # type: ignore[arg-type]
                task_group,
                anyio.current_time,
                scheduler,
                max_connections=2,
                request_timeout=6.0,
            )
            sender.submit(destination, records())
            await anyio.sleep(1)
    assert destination.results == []


@pytest.mark.anyio
async def test_what_the_call_raises_is_a_typed_failure() -> None:
    client = _Client(
        [
            client_error("ProvisionedThroughputExceededException", "slow", "PutRecords"),
            ConnectionResetError("reset"),
            {"Records": []},
        ]
    )
    destination = _Destination()
    scheduler = Scheduler()
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(scheduler.run)
        sender = Sender(
            client,  # type: ignore[arg-type]
            task_group,
            anyio.current_time,
            scheduler,
            max_connections=1,
            request_timeout=6.0,
        )
        for _ in range(3):
            sender.submit(destination, records())
        await anyio.sleep(60)
        task_group.cancel_scope.cancel()
    assert destination.results == [
        RequestFailed("ProvisionedThroughputExceededException", "slow", False),
        RequestFailed("Internal", "ConnectionResetError: reset", True),
        Malformed("RecordCountMismatch", "PutRecords answered with 0 results for 1 records"),
    ]
    assert sender.statistics().requests_failed == 3


@pytest.mark.anyio
async def test_a_probe_whose_records_expired_passes_the_probe_to_the_next_request() -> None:
    client = _Client([client_error("InternalFailure", "down", "PutRecords", http_status=500), OK])
    destination = _Destination()
    scheduler = Scheduler()
    t0 = anyio.current_time()
    b, c = records(expires_at=t0 + 0.05), records()  # b expires during the backoff
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(scheduler.run)
        sender = Sender(
            client,  # type: ignore[arg-type]
            task_group,
            anyio.current_time,
            scheduler,
            max_connections=2,
            request_timeout=6.0,
            random_value=lambda: 0.0,
        )

        def submit_two() -> None:  # while the failure resolves: both wait for the backoff
            sender.submit(destination, b)
            sender.submit(destination, c)
            assert sender.statistics().backing_off == 2

        destination.then = submit_two
        sender.submit(destination, records())
        await anyio.sleep(1)
        assert sender.statistics().backing_off == sender.statistics().queued == 0
        task_group.cancel_scope.cancel()
    # The next request went as the probe, alone, when the backoff ended.
    assert client.called_at == pytest.approx([t0, t0 + 0.1], abs=EPS)
    assert destination.expired == [b]
    assert destination.results[1] == ANSWERED

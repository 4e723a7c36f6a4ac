"""The sender merges requests that queue (``_pipeline/requests.py``): with a scripted client.

Requests queue behind a busy connection; when it frees, the next request goes out with those
queued behind it that fit in one call of the stream collector's limits. The halves of a request
refused as a whole go apart (they are how the bad record is found); so does a probe.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, cast

import anyio
import pytest

from aiokpl._core.records import KinesisRecord
from aiokpl._kinesis import client_error
from aiokpl._pipeline.requests import Request, merged
from aiokpl._pipeline.scheduler import Scheduler
from aiokpl._pipeline.sender import Sender


class _Record:
    """What the sender reads of a Kinesis record: its entry, size and expiry."""

    expires_at = math.inf

    def __init__(self, size: int = 10) -> None:
        self.size = size

    def entry(self) -> dict[str, Any]:
        return {"Data": b"x", "PartitionKey": "k"}


def records(count: int, size: int = 10) -> list[KinesisRecord]:
    return cast("list[KinesisRecord]", [_Record(size) for _ in range(count)])


class _Limits:
    def __init__(self, max_count: int, max_size: int) -> None:
        self.max_count = max_count
        self.max_size = max_size


class _Client:
    """Answers each call after ``delay`` s: every record stored, or the scripted exception."""

    def __init__(self, delay: float, errors: list[Exception] | None = None) -> None:
        self.delay = delay
        self.errors = errors or []
        self.calls: list[int] = []  # records per call, in call order

    async def put_records(self, **kwargs: Any) -> object:
        self.calls.append(len(kwargs["Records"]))
        await anyio.sleep(self.delay)
        if self.errors:
            raise self.errors.pop(0)
        entry = {"SequenceNumber": "1", "ShardId": "shardId-000000000000"}
        return {"Records": [entry] * len(kwargs["Records"])}


class _Destination:
    stream = "s"

    def __init__(self, limits: _Limits) -> None:
        self.collector = limits
        self.answers = 0
        self.then: Any = None

    def found_expired(self, sent: list[KinesisRecord], now: float) -> None:
        raise AssertionError("no record here expires")

    def handle_result(self, sent: Any, result: object, started: float, ended: float) -> None:
        self.answers += 1
        then, self.then = self.then, None
        if then is not None:
            then()


async def _run(client: _Client, destination: _Destination, script: Any) -> Sender:
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
            random_value=lambda: 0.0,
        )
        script(sender)
        await anyio.sleep(30)
        task_group.cancel_scope.cancel()
    return sender


@pytest.mark.anyio
async def test_requests_that_queue_go_out_merged_within_the_collectors_limits() -> None:
    """One connection, busy 1 s: the requests submitted meanwhile go in as few calls as the
    limits allow (5 records, 1,000 bytes), in order; a lone request goes as it is."""
    client = _Client(delay=1.0)
    destination = _Destination(_Limits(max_count=5, max_size=1_000))

    def script(sender: Sender) -> None:
        sender.submit(destination, records(2))  # goes at once
        for request in (records(2), records(2), records(2), records(1, 500), records(1, 500)):
            sender.submit(destination, request)  # these queue behind it

    sender = await _run(client, destination, script)
    # 2+2 (a third 2 would be 6 records); 2+1 (500 more bytes would be 1,020); the last alone.
    assert client.calls == [2, 4, 3, 1]
    assert destination.answers == 4
    assert sender.requests_merged == 2
    assert sender.statistics().requests_sent == 4


@pytest.mark.anyio
async def test_the_halves_of_a_request_refused_as_a_whole_go_apart() -> None:
    """A request refused as a whole (``ValidationException``) comes back as two halves, sent
    apart so the bad record fails alone: merged, they were the refused request again."""
    error = client_error("ValidationException", "bad", "PutRecords", http_status=400)
    client = _Client(delay=1.0, errors=[error])
    destination = _Destination(_Limits(max_count=500, max_size=5 * 1024 * 1024))
    halves = records(2), records(2)

    def script(sender: Sender) -> None:
        sender.submit(destination, records(4))

        def resend() -> None:  # as the router resends the retrier's halves: alone
            for half in halves:
                sender.submit(destination, half, alone=True)

        destination.then = resend

    await _run(client, destination, script)
    assert client.calls == [4, 2, 2]


def test_merging_stops_at_a_request_that_goes_alone() -> None:
    limits = _Limits(max_count=500, max_size=10_000)
    first = Request(records(1))
    queued = deque([Request(records(1)), Request(records(1), alone=True), Request(records(1))])
    assert len(merged(first, queued, limits)) == 2
    assert [len(request.records) for request in queued] == [1, 1]
    alone = Request(records(1), alone=True)
    assert merged(alone, queued, limits) is alone.records
    assert len(queued) == 2  # a request going alone takes nothing with it


def test_merging_takes_the_whole_queue_when_it_fits() -> None:
    limits = _Limits(max_count=500, max_size=10_000)
    first = Request(records(2))
    queued = deque([Request(records(1)), Request(records(3))])
    joined = merged(first, queued, limits)
    assert len(joined) == 6
    assert not queued
    assert len(first.records) == 2  # a new list: the request's own is left as it was


@pytest.mark.anyio
async def test_requests_submitted_while_a_failed_answer_is_handled_merge_unless_alone() -> None:
    """'Alone' is the request's own, as data: requests submitted while a failed answer is
    handled (records retried by other routes, or put by a callback) merge like any other; a
    sender-wide flag once made every one of them go alone."""
    error = client_error("ValidationException", "bad", "PutRecords", http_status=400)
    client = _Client(delay=1.0, errors=[error])
    destination = _Destination(_Limits(max_count=500, max_size=5 * 1024 * 1024))

    def script(sender: Sender) -> None:
        sender.submit(destination, records(4))
        sender.submit(destination, records(1))  # waits behind it for the connection

        def submit_two() -> None:
            for _ in range(2):
                sender.submit(destination, records(2))

        destination.then = submit_two

    await _run(client, destination, script)
    # The waiting request went next, taking the two submitted meanwhile along.
    assert client.calls == [4, 1 + 2 + 2]

"""Sender: one ``PutRecords`` call per collected request, at most ``max_connections`` at once.

Requests beyond the limit wait in a FIFO queue; each sending task takes the next request when
its call completes, so there is never more than one task per connection and none per record.

Errors become data here, never exceptions: whatever the call raises (a service error, a
connection reset, a malformed response) is mapped once by ``_kinesis.error_of`` to
``(code, message)``; a call that outlives ``request_timeout_ms`` becomes ``("Internal",
"request timed out …")``. The SDK's own retries are off: the retrier owns retries.

Two checks the KPL does not make: a request whose stream is backing off after request-level
failures waits out the backoff first (so a dead endpoint does not spin), and records whose TTL
passed while they queued here fail as ``"Expired"`` instead of being sent.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from .._core.records import KinesisRecord
from .._kinesis import error_of

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from .._kinesis import KinesisClient

__all__ = ("Sender",)


class Destination(Protocol):
    """What the sender needs from a stream's pipeline (its retrier)."""

    stream: str
    resume_at: float

    def expire_before_send(
        self, records: list[KinesisRecord], now: float
    ) -> list[KinesisRecord]: ...

    def handle_result(
        self,
        records: list[KinesisRecord],
        result: dict[str, Any] | tuple[str, str],
        started: float,
        ended: float,
    ) -> None: ...


class Sender:
    """Sends requests for every stream of a producer."""

    def __init__(
        self,
        client: KinesisClient,
        task_group: TaskGroup,
        clock: Callable[[], float],
        *,
        max_connections: int,
        request_timeout: float,
    ) -> None:
        self._client = client
        self._task_group = task_group
        self._clock = clock
        self._max_connections = max_connections
        self._request_timeout = request_timeout
        self._queue: deque[tuple[Destination, list[KinesisRecord]]] = deque()
        self.in_flight = 0
        self.requests_sent = 0
        self.requests_failed = 0

    @property
    def queued(self) -> int:
        return len(self._queue)

    def submit(self, destination: Destination, records: list[KinesisRecord]) -> None:
        """Send ``records`` to ``destination.stream`` as soon as a connection is free."""
        if self.in_flight < self._max_connections:
            self.in_flight += 1
            self._task_group.start_soon(self._run, destination, records)
        else:
            self._queue.append((destination, records))

    async def _run(self, destination: Destination, records: list[KinesisRecord]) -> None:
        try:
            item: tuple[Destination, list[KinesisRecord]] | None = (destination, records)
            while item is not None:
                await self._send(*item)
                item = self._queue.popleft() if self._queue else None
        finally:
            self.in_flight -= 1

    async def _send(self, destination: Destination, records: list[KinesisRecord]) -> None:
        while True:
            # Records whose TTL passes while the stream backs off fail at their TTL, not
            # when the backoff ends.
            now = self._clock()
            records = destination.expire_before_send(records, now)
            if not records:
                return
            resume_at = destination.resume_at
            if resume_at <= now:
                break
            earliest_expiry = min(record.expires_at for record in records)
            await anyio.sleep(min(resume_at, earliest_expiry) - now)
        entries = [record.entry() for record in records]
        started = self._clock()
        answer: object = ("Internal", f"request timed out after {self._request_timeout:g} s")
        with anyio.move_on_after(self._request_timeout):
            try:
                answer = await self._client.put_records(
                    StreamName=destination.stream, Records=entries
                )
            except Exception as exc:
                answer = error_of(exc)
        self.requests_sent += 1
        result: dict[str, Any] | tuple[str, str]
        if isinstance(answer, dict):
            result = answer
        else:
            self.requests_failed += 1
            result = (
                answer
                if isinstance(answer, tuple)
                else ("Internal", f"malformed PutRecords response: {type(answer).__name__}")
            )
        destination.handle_result(records, result, started, self._clock())

"""Sender: one ``PutRecords`` call per collected request, at most ``max_connections`` at once.

Every stream has its own FIFO queue of requests (a *lane*). Lanes with requests ready to go
wait in a ring, served round-robin: whenever a connection frees, the next lane in the ring
sends the request at its head and, if it has more, goes to the back of the ring. So a stream
with a backlog takes one connection in turn with every other stream that has requests, never
all of them while another waits. A sending task takes the next request from the ring when its
call completes, so there is never more than one task per connection and none per record or
per request.

Errors become data here, never exceptions: whatever the call raises (a service error, a
connection reset, a malformed response) is mapped once by ``_kinesis.error_of`` to
``(code, message)``; a call that outlives ``request_timeout_ms`` becomes ``("Internal",
"request timed out …")``. The SDK's own retries are off: the retrier owns retries.

Backoff (invariants):

* a stream backing off after request-level failures (its destination's ``resume_at`` lies in
  the future) holds **no connection and no task**: its lane is *parked* off the ring, and the
  producer's scheduler wakes it when the backoff ends. Other streams' requests go on at once;
* records whose TTL passes while parked fail as ``"Expired"`` at their TTL (the scheduler wakes
  the lane at ``min(resume_at, earliest expiry)``), not when the backoff ends;
* a lane coming out of backoff sends **one probe request** first; the rest of its queue waits,
  still off the ring, for the probe's answer. An answer that does not back the stream off again
  releases the queue to the ring; a failed probe parks the lane for the next, longer, backoff.

Why a probe rather than everything at once: the retrier grows the backoff once per failed
request, so releasing a backlog of N requests into a still-dead endpoint would fail N requests
per backoff period, grow the delay N steps at once, and hold up to N connections for up to
``request_timeout_ms`` each when the endpoint hangs rather than refuses. With one probe, a dead
stream costs one request and at most one connection per backoff period (100 ms doubling to
5 s), the backoff grows one step per period as designed, and a recovered stream loses one
request's round trip before its backlog flows again.

The KPL (``pipeline.h``, ``send_put_records_request``) hands every request to the SDK's
client at once; its pool of ``MaxConnections`` serves them first come, first served, whatever
their stream, and nothing backs off. Three things we do that it does not: the lanes and their
turns, the backoff above, and records whose TTL passed while they queued here fail as
``"Expired"`` instead of being sent.

What round-robin cannot do: take back a connection already in use. A stream whose requests
hang holds the connections it took until ``request_timeout_ms``; from its first failure on it
is held to one probe at a time. Reserving connections per stream would cap a lone stream's
throughput, so we do not.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from .._core.records import KinesisRecord
from .._core.statistics import SenderStatistics
from .._kinesis import error_of, stream_argument

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from .._kinesis import KinesisClient
    from .scheduler import Scheduler

__all__ = ("Sender",)


class Destination(Protocol):
    """What the sender needs from a stream's pipeline (its retrier).

    ``resume_at`` is when the stream's backoff ends (``-inf`` when it is not backing off); it
    changes only in ``handle_result``, which the sender calls.
    """

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


# Lane states.
_READY = 0  # sends when its turn comes (in the ring while it has requests)
_PARKED = 1  # its stream backs off: off the ring, woken by the scheduler
_PROBING = 2  # its probe is in flight: the rest waits, off the ring, for the answer


class _Request:
    """Records to send in one call, and (once asked) the earliest of their expiries."""

    __slots__ = ("_expiry", "records")

    def __init__(self, records: list[KinesisRecord]) -> None:
        self.records = records
        self._expiry: float | None = None

    def expiry(self) -> float:
        # Computed only for requests held by a backoff, once: their lane's wake-ups read it.
        expiry = self._expiry
        if expiry is None:
            expiry = self._expiry = min(record.expires_at for record in self.records)
        return expiry

    def narrow(self, records: list[KinesisRecord]) -> None:
        """Keep only ``records`` (the others expired)."""
        self.records = records
        self._expiry = None


class _Lane:
    """One stream's requests waiting to be sent, in FIFO order."""

    __slots__ = ("destination", "in_ring", "probe", "probing", "requests", "state", "wake")

    def __init__(self, destination: Destination) -> None:
        self.destination = destination
        self.requests: deque[_Request] = deque()
        self.state = _READY
        self.in_ring = False
        self.probe = False  # the next request sent is a probe (the lane was parked)
        self.probing: list[KinesisRecord] | None = None  # the probe in flight
        self.wake: _Wake | None = None  # the scheduler entry that counts; older ones are stale


class _Wake:
    """A scheduler entry for a parked (or probing) lane; stale once the lane has a newer one."""

    __slots__ = ("lane", "sender", "when")

    def __init__(self, sender: Sender, lane: _Lane, when: float) -> None:
        self.sender = sender
        self.lane = lane
        self.when = when

    def on_due(self, now: float) -> None:
        lane = self.lane
        if lane.wake is self:
            lane.wake = None
            self.sender._on_wake(lane, now)


def _earliest_expiry(requests: deque[_Request]) -> float:
    return min(request.expiry() for request in requests)


class Sender:
    """Sends requests for every stream of a producer."""

    def __init__(
        self,
        client: KinesisClient,
        task_group: TaskGroup,
        clock: Callable[[], float],
        scheduler: Scheduler,
        *,
        max_connections: int,
        request_timeout: float,
    ) -> None:
        self._client = client
        self._task_group = task_group
        self._clock = clock
        self._scheduler = scheduler
        self._max_connections = max_connections
        self._request_timeout = request_timeout
        # One lane per stream, kept for the producer's life (as its stream pipelines are).
        self._lanes: dict[Destination, _Lane] = {}
        self._ring: deque[_Lane] = deque()
        # Requests sent and not answered yet, by id: what is left here when the sending
        # tasks are cancelled was in flight, its outcome unknown.
        self._unanswered: dict[int, list[KinesisRecord]] = {}
        self.in_flight = 0
        self.requests_sent = 0
        self.requests_failed = 0

    @property
    def queued(self) -> int:
        """Requests waiting for a free connection (not those held back by a backoff)."""
        return sum(len(lane.requests) for lane in self._lanes.values() if lane.state == _READY)

    @property
    def backing_off(self) -> int:
        """Requests held back while their stream backs off (or waits for its probe)."""
        return sum(len(lane.requests) for lane in self._lanes.values() if lane.state != _READY)

    def __repr__(self) -> str:
        return (
            f"<Sender in_flight={self.in_flight}/{self._max_connections} queued={self.queued} "
            f"backing_off={self.backing_off} streams={len(self._lanes)}>"
        )

    def forget(self, destination: Destination) -> None:
        """Drop the lane of a stream whose idle pipeline was released (it holds nothing)."""
        lane = self._lanes.get(destination)
        if lane is not None and not lane.requests and lane.probing is None:
            del self._lanes[destination]
            lane.wake = None  # a pending wake-up finds itself stale

    def unanswered(self) -> list[KinesisRecord]:
        """Kinesis records of requests sent and not answered: after the sending tasks were
        cancelled (the producer's exit), those whose outcome is unknown."""
        return [record for records in self._unanswered.values() for record in records]

    def submit(self, destination: Destination, records: list[KinesisRecord]) -> None:
        """Send ``records`` to ``destination.stream`` when a connection is free for its turn."""
        lane = self._lanes.get(destination)
        if lane is None:
            lane = self._lanes[destination] = _Lane(destination)
        request = _Request(records)
        lane.requests.append(request)
        if lane.state != _READY:
            # Parked or probing: its wake-up must come by the new records' TTL.
            wake = lane.wake
            earliest = request.expiry()
            if wake is None or earliest < wake.when:
                self._wake_at(lane, earliest)
            return
        if not lane.in_ring:
            lane.in_ring = True
            self._ring.append(lane)
        if self.in_flight < self._max_connections:
            self._dispatch(self._clock())

    # --- choosing what to send (synchronous) ---------------------------------------------
    def _dispatch(self, now: float) -> None:
        """Start a sending task for each free connection that has a request to take."""
        while self.in_flight < self._max_connections:
            item = self._next(now)
            if item is None:
                return
            self.in_flight += 1
            self._task_group.start_soon(self._run, *item)

    def _next(self, now: float) -> tuple[_Lane, list[KinesisRecord]] | None:
        """The next request in round-robin order, or ``None``; parks lanes backing off."""
        ring = self._ring
        while ring:
            lane = ring.popleft()
            lane.in_ring = False
            destination = lane.destination
            if destination.resume_at > now:
                self._park(lane)
                continue
            records = lane.requests.popleft().records
            if lane.probe:
                lane.probe = False
                lane.state = _PROBING
            elif lane.requests:
                lane.in_ring = True
                ring.append(lane)
            # The lane is consistent before any outcome resolves (a callback may put again).
            records = destination.expire_before_send(records, now)
            if records:
                if lane.state == _PROBING:
                    lane.probing = records
                    if lane.requests:  # held behind the probe, they still expire on time
                        self._wake_at(lane, _earliest_expiry(lane.requests))
                return lane, records
            if lane.state == _PROBING:  # nothing left to probe with: the next one is
                lane.state = _READY
                lane.probe = True
                if lane.requests and not lane.in_ring:
                    lane.in_ring = True
                    ring.append(lane)
        return None

    def _park(self, lane: _Lane) -> None:
        """Hold ``lane`` off the ring until its stream's backoff ends (or a record's TTL)."""
        lane.state = _PARKED
        lane.probe = True
        resume_at = lane.destination.resume_at
        if lane.requests:
            resume_at = min(resume_at, _earliest_expiry(lane.requests))
        self._wake_at(lane, resume_at)

    def _wake_at(self, lane: _Lane, when: float) -> None:
        wake = lane.wake = _Wake(self, lane, when)
        self._scheduler.call_at(when, wake)

    def _on_wake(self, lane: _Lane, now: float) -> None:
        """The scheduler's call for a parked or probing lane: expire, then release or re-park."""
        if lane.state == _READY:
            return
        destination = lane.destination
        held = list(lane.requests)
        lane.requests.clear()
        live = []
        for request in held:
            if request.expiry() <= now:
                records = destination.expire_before_send(request.records, now)
                if not records:
                    continue
                request.narrow(records)
            live.append(request)
        # Requests submitted by callbacks of the records just expired come after the older.
        lane.requests.extendleft(reversed(live))
        if lane.state == _PROBING:
            if lane.requests:
                self._wake_at(lane, _earliest_expiry(lane.requests))
            return
        if destination.resume_at > now:
            when = destination.resume_at
            if lane.requests:
                when = min(when, _earliest_expiry(lane.requests))
            self._wake_at(lane, when)
            return
        lane.state = _READY
        lane.wake = None
        if lane.requests and not lane.in_ring:
            lane.in_ring = True
            self._ring.append(lane)
            # Not a fresh clock reading: ``now`` is at least ``resume_at``, so the lane is not
            # parked again for a rounding error (which would spin the scheduler).
            self._dispatch(now)

    def _answered(self, lane: _Lane, records: list[KinesisRecord], now: float) -> None:
        """After ``records`` of ``lane`` were answered: end its probe, park it if it backs off."""
        if lane.probing is records:
            lane.probing = None
            lane.state = _READY
            lane.wake = None
        if lane.destination.resume_at > now:
            if lane.state == _READY and lane.requests:
                if lane.in_ring:
                    self._ring.remove(lane)
                    lane.in_ring = False
                self._park(lane)
            elif lane.state == _READY:
                lane.probe = True  # whatever the stream sends next after its backoff
        elif lane.state == _READY and lane.requests and not lane.in_ring:
            lane.in_ring = True
            self._ring.append(lane)

    # --- sending (async) -----------------------------------------------------------------
    async def _run(self, lane: _Lane, records: list[KinesisRecord]) -> None:
        try:
            item: tuple[_Lane, list[KinesisRecord]] | None = (lane, records)
            while item is not None:
                lane, records = item
                await self._send(lane.destination, records)
                now = self._clock()
                self._answered(lane, records, now)
                item = self._next(now)
                if item is not None and self._ring and self.in_flight < self._max_connections:
                    self._dispatch(now)  # a probe's success may have released a backlog
        finally:
            self.in_flight -= 1

    async def _send(self, destination: Destination, records: list[KinesisRecord]) -> None:
        entries = [record.entry() for record in records]
        started = self._clock()
        answer: object = ("Internal", f"request timed out after {self._request_timeout:g} s")
        unanswered = self._unanswered
        key = id(records)
        unanswered[key] = records  # stays there if this task is cancelled in the call
        with anyio.move_on_after(self._request_timeout):
            try:
                answer = await self._client.put_records(
                    **stream_argument(destination.stream), Records=entries
                )
            except Exception as exc:
                answer = error_of(exc)
        del unanswered[key]
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

    def statistics(self) -> SenderStatistics:
        """A snapshot of the requests: answered or failed so far, under way, waiting."""
        return SenderStatistics(
            requests_sent=self.requests_sent,
            requests_failed=self.requests_failed,
            in_flight=self.in_flight,
            queued=self.queued,
            backing_off=self.backing_off,
        )

"""Sender: one ``PutRecords`` call per collected request, at most ``max_connections`` at once.

Every stream has its own FIFO queue of requests (a *lane*). Lanes with requests ready to go
wait in a ring, served round-robin: whenever a connection frees, the next lane in the ring
sends the request at its head and, if it has more, goes to the back of the ring. So a stream
with a backlog takes one connection in turn with every other stream that has requests, never
all of them while another waits. A sending task takes the next request from the ring when its
call completes, so there is never more than one task per connection and none per record or
per request.

Errors become data here, never exceptions: whatever the call raises (a service error, a
connection reset) is mapped once by ``_kinesis.failure_of`` to a typed ``RequestFailed``, and
its response is read once by ``_kinesis.answer_of`` (answered record by record, or
``Malformed``); a call that outlives ``request_timeout_ms`` fails as ``"Internal"``, "request
timed out …". Only the call is caught: an exception from our own code propagates. The SDK's
own retries are off: the retrier owns retries.

Requests that queue are merged: when a connection frees, the request taken goes out with those
queued behind it in its lane, as many as fit in one call (why, and what never merges, in
``requests.py``).

Backoff (invariants):

* a stream backs off after each request that failed as a whole (exponential with jitter,
  100 ms doubling to 5 s, reset by the next answered request), except with a code no retry
  can fix (``FAIL_FAST``: those records fail at once). The backoff is its lane's;
* a stream backing off (its lane's ``resume_at`` lies in the future) holds **no connection
  and no task**: its lane is *parked* off the ring, and the producer's scheduler wakes it
  when the backoff ends. Other streams' requests go on at once;
* records whose TTL passes while parked fail as ``"Expired"`` at their TTL (the scheduler wakes
  the lane at ``min(resume_at, earliest expiry)``), not when the backoff ends;
* a lane coming out of backoff sends **one probe request** first; the rest of its queue waits,
  still off the ring, for the probe's answer. An answer that does not back the stream off again
  releases the queue to the ring; a failed probe parks the lane for the next, longer, backoff.

A lane's state (ready, probe next, parked, probing) changes only through the transition table
of ``lane_states``, which raises on a transition it does not list.

Why a probe rather than everything at once: the backoff grows once per failed
request, so releasing a backlog of N requests into a still-dead endpoint would fail N requests
per backoff period, grow the delay N steps at once, and hold up to N connections for up to
``request_timeout_ms`` each when the endpoint hangs rather than refuses. With one probe, a dead
stream costs one request and at most one connection per backoff period (100 ms doubling to
5 s), the backoff grows one step per period as designed, and a recovered stream loses one
request's round trip before its backlog flows again.

The connection budget (invariants):

* **fair share**: with S streams *having work*, a stream takes a new connection only while it
  holds fewer than ``ceil(max_connections / S)``. A stream has work while it has requests
  queued (ready, parked or behind a probe) or in flight, and for ``active_window`` after its
  last answer (1 s plus the buffered time: a stream with steady traffic sends at least once
  per buffered time, so it keeps its share between two requests). A lane at its share leaves
  the ring until one of its own requests is answered (or it submits another); connections its
  share leaves free stay free for the others. A lone stream (S = 1) uses every connection;
* **overdue requests are given up for others**: a request is *overdue* once it has been under
  way longer than its stream's round trips predict: ``srtt + 4 * rttvar`` (RFC 6298's
  retransmission timeout, from the stream's answered requests), at least 1 s (the floor, and
  the whole estimate before the first answer) and at most ``request_timeout_ms``. When every
  connection is taken and a stream within its share waits, the oldest overdue request of the
  stream holding the most connections beyond its share is cancelled; it fails as
  ``("Internal", "request given up …")``, an unknown outcome like a timeout, and its records
  are retried after the stream's backoff. One such request at a time; with none overdue yet,
  the scheduler looks again when the first one will be.

Why both: connections in use cannot be taken back without cancelling, and HTTP connections are
the real limit (the SDK's pool has ``max_connections`` of them), so a slot "released" while its
request goes on would only queue the next request in the pool. The fair share keeps a stream
that starts hanging from taking more than its share in the first place, at the cost of
reserving connections for streams that had work within the window; giving up overdue requests
covers a stream that took every connection while it was alone, and costs only requests that are
late by their own stream's standard. A stream whose requests hang is thus held to its share
(and to one probe per backoff period once its requests time out), and a healthy stream beside
it is not delayed.

The KPL (``pipeline.h``, ``send_put_records_request``) hands every request to the SDK's
client at once; its pool of ``MaxConnections`` serves them first come, first served, whatever
their stream, and nothing backs off. What we do that it does not: the lanes and their turns,
the backoff above, the connection budget, and records whose TTL passed while they queued here
fail as ``"Expired"`` instead of being sent.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from itertools import islice
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from .._core.answers import INTERNAL, Answer, Answered, RequestFailed
from .._core.records import KinesisRecord
from .._core.statistics import SenderStatistics
from .._kinesis import answer_of, failure_of, stream_argument
from .lane_states import OFF_RING, PROBING, Flight, Lane, Wake, split_expired
from .requests import Destination, Request

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from .._kinesis import KinesisClient
    from .scheduler import Scheduler

__all__ = ("SendTracing", "Sender")


class SendTracing(Protocol):
    """What the sender asks of the producer's tracing (``aiokpl._tracing.Tracing``)."""

    def send(self, stream: str, records: Sequence[KinesisRecord]) -> Any: ...

    def sent(self, span: Any, answer: Answer) -> None: ...


# A request is overdue, at the earliest, this long after it was sent (before its stream's
# first answer, it is the whole estimate): RFC 6298's minimum retransmission timeout.
_OVERDUE_FLOOR = 1.0


def _earliest_expiry(requests: deque[Request]) -> float:
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
        active_window: float = 1.0,
        random_value: Callable[[], float] = random.random,
        on_answer: Callable[[str, Answer, float], None] | None = None,
        step: Callable[[], AbstractContextManager[None]] = nullcontext,
        tracing: SendTracing | None = None,
    ) -> None:
        self._client = client
        self._tracing = tracing  # a "send" span per request (Config.tracing), or None
        # A pipeline step (the producer's ledger's) around what a sending task does with an
        # answer: what it resolves resolves once the sender is consistent again.
        self._step = step
        self._task_group = task_group
        self._clock = clock
        self._scheduler = scheduler
        self._max_connections = max_connections
        self._request_timeout = request_timeout
        self._active_window = active_window
        self._random = random_value  # the backoffs' jitter
        self._on_answer = on_answer  # told of each answer (stream, answer, when): the health's
        self._preempting = 0  # requests given up whose tasks have not finished yet
        self._recheck_at = math.inf  # when on_due is due next, if it is scheduled
        self.requests_preempted = 0
        # One lane per stream, kept while its stream pipeline is (see forget).
        self._lanes: dict[Destination, Lane] = {}
        self._holding: dict[Lane, None] = {}  # those holding connections, oldest holder first
        self._ring: deque[Lane] = deque()
        # Requests sent and not answered yet, by id: what is left here when the sending
        # tasks are cancelled was in flight, its outcome unknown.
        self._unanswered: dict[int, list[KinesisRecord]] = {}
        self.in_flight = 0
        self.requests_sent = 0
        self.requests_failed = 0
        self.requests_merged = 0  # requests sent as part of an earlier one
        # Records found expired during an update, each with its stream: told to it once the
        # update is over (see _route_expired).
        self._found: list[tuple[Destination, list[KinesisRecord]]] = []

    @property
    def queued(self) -> int:
        """Requests waiting for a free connection (not those held back by a backoff)."""
        return sum(
            len(lane.requests) for lane in self._lanes.values() if lane.state not in OFF_RING
        )

    @property
    def backing_off(self) -> int:
        """Requests held back while their stream backs off (or waits for its probe)."""
        return sum(len(lane.requests) for lane in self._lanes.values() if lane.state in OFF_RING)

    def __repr__(self) -> str:
        return (
            f"<Sender in_flight={self.in_flight}/{self._max_connections} queued={self.queued} "
            f"backing_off={self.backing_off} streams={len(self._lanes)}>"
        )

    def forget(self, destination: Destination) -> None:
        """Drop the lane of a stream whose idle pipeline was released (it holds nothing)."""
        lane = self._lanes.get(destination)
        if lane is not None and not lane.requests and lane.probing is None and not lane.held:
            del self._lanes[destination]
            lane.forget()  # a pending wake-up finds itself stale

    def unanswered(self) -> list[KinesisRecord]:
        """Kinesis records of requests sent and not answered: after the sending tasks were
        cancelled (the producer's exit), those whose outcome is unknown."""
        return [record for records in self._unanswered.values() for record in records]

    def submit(
        self, destination: Destination, records: list[KinesisRecord], *, alone: bool = False
    ) -> None:
        """Send ``records`` to ``destination.stream`` when a connection is free for its turn;
        ``alone``: never merged with another request (the halves of a request refused as a
        whole, resent apart to find the bad record)."""
        lane = self._lanes.get(destination)
        if lane is None:
            lane = self._lanes[destination] = Lane(destination)
        request = Request(records, alone)
        lane.add(request)
        if lane.state in OFF_RING:
            # Parked or probing: its wake-up must come by the new records' TTL.
            wake = lane.wake
            earliest = request.expiry()
            if wake is None or earliest < wake.when:
                self._wake_at(lane, earliest)
            return
        self._enter_ring(lane)
        now = self._clock()
        self._dispatch(now)
        self._route_expired(now)

    def _route_expired(self, now: float) -> None:
        """Tell each stream of the records found expired during the update that just ended
        (their stream refunds and fails them, and may submit again meanwhile: what it
        submits is a new update, whose finds join this list)."""
        found = self._found
        while found:
            destination, records = found.pop(0)
            destination.found_expired(records, now)

    # --- choosing what to send (synchronous) ---------------------------------------------
    def _dispatch(self, now: float) -> None:
        """Start a sending task for each free connection that has a request to take; with
        none free and streams waiting, give up a request over its stream's share."""
        while self.in_flight < self._max_connections:
            item = self._next(now)
            if item is None:
                return
            self.in_flight += 1
            self._task_group.start_soon(self._run, *item)
        if self._ring:
            self._preempt(now)

    # --- the budget ----------------------------------------------------------------------
    def _share(self, now: float) -> int:
        """Connections each stream with work may hold: ``ceil(max_connections / S)``, where S
        counts the streams with requests queued or in flight, or answered within the active
        window (so a stream between two requests keeps its share). Counted up to
        ``max_connections`` only (the share is 1 past it), not over every lane at each turn."""
        most = self._max_connections
        lanes = self._lanes.values()
        working = (1 for lane in lanes if lane.requests or lane.held or lane.active_until > now)
        return -(-most // max(sum(islice(working, most)), 1))

    def _within_share(self, lane: Lane, now: float) -> bool:
        """Whether ``lane`` may take one more connection."""
        held = lane.held
        # Counting the streams with work only when it can matter: S is at most the lanes.
        if held < -(-self._max_connections // len(self._lanes)):
            return True
        return held < self._share(now)

    def _preempt(self, now: float) -> None:
        """With every connection taken and a stream within its share waiting: give up the
        oldest overdue request of the stream holding the most beyond its share, if any; if
        none is overdue yet, look again when the first may be."""
        if (
            self._preempting
            or self.in_flight < self._max_connections
            or len(self._lanes) == 1  # a lone stream is never its own victim
        ):
            return  # (or a freed connection is on its way to the waiting stream)
        share = self._share(now)
        if not any(
            lane.state not in OFF_RING and lane.held < share and lane.resume_at <= now
            for lane in self._ring
        ):
            return
        victim: Flight | None = None
        most = share
        recheck = math.inf
        for lane in self._holding:  # only they can give one up
            if lane.held <= most or not lane.flights:
                continue
            oldest = next(iter(lane.flights.values()))
            due = oldest.started + lane.overdue_after(_OVERDUE_FLOOR, self._request_timeout)
            if due <= now:
                victim, most = oldest, lane.held
            else:
                recheck = min(recheck, due)
        if victim is not None:
            victim.preempted = True
            victim.scope.cancel()
            self._preempting += 1
            self.requests_preempted += 1
        elif recheck < self._recheck_at:
            self._recheck_at = recheck
            self._scheduler.call_at(recheck, self)

    def on_due(self, now: float) -> None:
        """The scheduler's call, once a request may be overdue: look again for one to give
        up. Scheduled at the earliest such time known; an entry that comes due after an
        earlier one only looks again, which changes nothing if nothing is due."""
        self._recheck_at = math.inf
        self._preempt(now)

    def _next(self, now: float) -> tuple[Lane, list[KinesisRecord]] | None:
        """The next request in round-robin order, or ``None``; parks lanes backing off."""
        ring = self._ring
        while ring:
            lane = ring.popleft()
            lane.leave_ring()
            if lane.resume_at > now:
                self._park(lane)
                continue
            if lane.held and not self._within_share(lane, now):
                continue  # off the ring until one of its requests is answered
            # Requests waiting behind it go with it, as far as they fit (not behind a probe).
            records, joined, probing = lane.take()
            self.requests_merged += joined
            if not probing and lane.requests:
                self._enter_ring(lane)
            records = self._unexpired(lane, records, now)
            if records:
                lane.sent(records, probing)
                if probing and lane.requests:  # held behind the probe, they expire on time
                    self._wake_at(lane, _earliest_expiry(lane.requests))
                self._holding[lane] = None  # where it was, if it holds one already
                return lane, records
            if probing:  # nothing left to probe with: the next one is
                lane.probe_empty()
                if lane.requests:
                    self._enter_ring(lane)
        return None

    def _unexpired(
        self, lane: Lane, records: list[KinesisRecord], now: float
    ) -> list[KinesisRecord]:
        """``records`` whose TTL has not passed; the others are found expired (their stream is
        told once the update is over: ``_route_expired``)."""
        if all(record.expires_at > now for record in records):
            return records
        live, expired = split_expired(records, now)
        self._found.append((lane.destination, expired))
        return live

    def _enter_ring(self, lane: Lane) -> None:
        """Give ``lane`` a turn, if it has none yet."""
        if lane.join_ring():
            self._ring.append(lane)

    def _park(self, lane: Lane) -> None:
        """Hold ``lane`` off the ring until its stream's backoff ends (or a record's TTL)."""
        lane.park()
        resume_at = lane.resume_at
        if lane.requests:
            resume_at = min(resume_at, _earliest_expiry(lane.requests))
        self._wake_at(lane, resume_at)

    def _wake_at(self, lane: Lane, when: float) -> None:
        wake = Wake(self._on_wake, lane, when)
        lane.wait(wake)
        self._scheduler.call_at(when, wake)

    def _on_wake(self, lane: Lane, now: float) -> None:
        """The scheduler's call for a parked or probing lane: expire, then release or re-park."""
        if lane.state not in OFF_RING:
            return
        destination = lane.destination
        self._found += [(destination, expired) for expired in lane.expire(now)]
        self._wake_lane(lane, now)
        self._route_expired(now)

    def _wake_lane(self, lane: Lane, now: float) -> None:
        """A parked or probing lane, its expired requests gone: release it or park it again."""
        if lane.state is PROBING:
            if lane.requests:
                self._wake_at(lane, _earliest_expiry(lane.requests))
            return
        if lane.resume_at > now:
            when = lane.resume_at
            if lane.requests:
                when = min(when, _earliest_expiry(lane.requests))
            self._wake_at(lane, when)
            return
        lane.resume()
        if lane.requests and not lane.in_ring:
            self._enter_ring(lane)
            # Not a fresh clock reading: ``now`` is at least ``resume_at``, so the lane is not
            # parked again for a rounding error (which would spin the scheduler).
            self._dispatch(now)

    def _answered(self, lane: Lane, records: list[KinesisRecord], now: float) -> None:
        """After ``records`` of ``lane`` were answered: end its probe, park it if it backs off."""
        lane.answered(records, now, self._active_window)
        if not lane.held:
            del self._holding[lane]
        if lane.state in OFF_RING:
            return  # parked, or probing with another request: the wake-up or probe decides
        if lane.resume_at > now:
            if lane.requests:
                if lane.in_ring:
                    self._ring.remove(lane)
                    lane.leave_ring()
                self._park(lane)
            else:  # whatever the stream sends next after its backoff is a probe
                lane.backed_off()
        elif lane.requests:
            self._enter_ring(lane)

    # --- sending (async) -----------------------------------------------------------------
    async def _run(self, lane: Lane, records: list[KinesisRecord]) -> None:
        released = False  # the connection, once this task has nothing more to send
        try:
            item: tuple[Lane, list[KinesisRecord]] | None = (lane, records)
            while item is not None:
                lane, records = item
                answer, started, ended, preempted = await self._send(lane, records)
                with self._step():
                    item = self._answer(lane, records, answer, started, ended, preempted)
                    if item is None:  # free before the step's records resolve
                        self.in_flight -= 1
                        released = True
        finally:
            if not released:  # cancelled in the call, or a bug of ours propagates
                self.in_flight -= 1

    def _answer(
        self,
        lane: Lane,
        records: list[KinesisRecord],
        answer: Answer,
        started: float,
        ended: float,
        preempted: bool,
    ) -> tuple[Lane, list[KinesisRecord]] | None:
        """One answer, in a sending task's step: the lane backs off (or not), its stream
        judges the answer, the connection goes to the next request; what this task sends
        next, if anything. The records the step resolves resolve after it, with the sender
        consistent (their callbacks see this connection free and the backoff in force)."""
        lane.back_off(answer, ended, self._random)
        if self._on_answer is not None:
            self._on_answer(lane.destination.stream, answer, ended)
        lane.destination.handle_result(records, answer, started, ended)
        now = self._clock()
        self._answered(lane, records, now)
        item = self._next(now)
        if preempted:
            self._preempting -= 1  # its connection is passed on
        if item is not None and self._ring:
            # A probe's success may have released a backlog; or every connection is taken and
            # a stream waits.
            self._dispatch(now)
        while self._found:
            self._route_expired(now)
            if item is None:
                # What the expired records' streams submitted (a strict lane's next record)
                # waits for a connection: this one, still held, is it.
                item = self._next(now)
        return item

    async def _send(
        self, lane: Lane, records: list[KinesisRecord]
    ) -> tuple[Answer, float, float, bool]:
        """Send one request: its answer, when it started and ended, and whether it was given
        up (to free its connection for another stream)."""
        destination = lane.destination
        arguments = {**stream_argument(destination.stream), "Records": [r.entry() for r in records]}
        started = self._clock()
        answer: Answer = RequestFailed.of(
            INTERNAL, f"request timed out after {self._request_timeout:g} s"
        )
        unanswered = self._unanswered
        key = id(records)
        unanswered[key] = records  # stays there if this task is cancelled in the call
        scope = anyio.CancelScope(deadline=anyio.current_time() + self._request_timeout)
        flight = Flight(started, scope)
        lane.fly(key, flight)
        tracing = self._tracing
        span = tracing.send(destination.stream, records) if tracing is not None else None
        try:
            with scope:
                # Only the call is caught: what it raises is the service's or the network's
                # doing; what reading its answer raises would be ours, and propagates.
                try:
                    response = await self._client.put_records(**arguments)
                except Exception as exc:
                    answer = failure_of(exc)
                else:
                    answer = answer_of(response, len(records))
        except BaseException:
            if tracing is not None:  # cancelled from outside (an exit): the span ends too
                tracing.sent(span, RequestFailed.of("Cancelled", "the request was cancelled"))
            raise
        del unanswered[key]
        lane.land(key)
        if not scope.cancelled_caught:
            lane.sample(self._clock() - started)
        elif flight.preempted:
            answer = RequestFailed.of(
                INTERNAL,
                f"request given up after {self._clock() - started:.3g} s, past what its "
                "stream's round trips predict, to free its connection for another stream",
            )
        self.requests_sent += 1
        if type(answer) is not Answered:
            self.requests_failed += 1
        if tracing is not None:
            tracing.sent(span, answer)
        return answer, started, self._clock(), flight.preempted

    def statistics(self) -> SenderStatistics:
        """A snapshot of the requests: answered or failed so far, under way, waiting."""
        return SenderStatistics(
            requests_sent=self.requests_sent,
            requests_failed=self.requests_failed,
            in_flight=self.in_flight,
            queued=self.queued,
            backing_off=self.backing_off,
        )

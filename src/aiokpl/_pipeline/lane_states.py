"""A stream's lane in the sender: its fields, its states, and the only transitions of both.

A :class:`Lane` is one stream's queue of requests. Its state says whether its requests may go
when its turn comes, and every change of state is an event looked up in :data:`TRANSITIONS`;
an event the table does not allow in the current state raises :class:`LaneStateError` (a bug
in the sender, never a condition of the service), as h11's ``_state.py`` does for a
connection. The lane's other fields change only in its own methods, each one event of the
sender's (a request queued, one sent, an answer, a wake-up), beside the state they go with:
the sender reads a lane and calls its transitions, and writes none of its fields. The table,
row by row:

==============  ===================================================  ==============
state           event                                                next state
==============  ===================================================  ==============
``READY``       ``SEND`` a request                                   ``READY``
``READY``       ``PARK``: the stream backs off, requests queued      ``PARKED``
``READY``       ``BACKED_OFF``: it backs off with nothing queued     ``PROBE_NEXT``
``PROBE_NEXT``  ``SEND`` the probe                                   ``PROBING``
``PROBE_NEXT``  ``PARK``                                             ``PARKED``
``PROBE_NEXT``  ``BACKED_OFF``                                       ``PROBE_NEXT``
``PARKED``      ``RESUME``: the wake-up finds the backoff over       ``PROBE_NEXT``
``PROBING``     ``PROBE_ANSWERED`` (whatever the answer)             ``READY``
``PROBING``     ``PROBE_EMPTY``: every record of it expired before   ``PROBE_NEXT``
                it left, so the next request is the probe
==============  ===================================================  ==============

``READY`` and ``PROBE_NEXT`` lanes take turns in the ring while they have requests; a
``PARKED`` lane waits off the ring for the scheduler's wake-up, a ``PROBING`` one for its
probe's answer (or a record's TTL). A lane answered into a backoff while ``READY`` goes to
``PARKED`` (or ``PROBE_NEXT``) in two steps: ``PROBE_ANSWERED``, then ``PARK``.

The other fields, and the events that change them (the methods of :class:`Lane`):

==================  ============================================================================
field               changed by
==================  ============================================================================
``requests``        :meth:`~Lane.add` (queued), :meth:`~Lane.take` (sent: ``SEND``),
                    :meth:`~Lane.expire` (a wake-up drops what its TTL passed)
``in_ring``         :meth:`~Lane.join_ring`, :meth:`~Lane.leave_ring` (the sender's ring holds
                    the lane exactly while it is set)
``probing``         :meth:`~Lane.sent` (a probe's records), :meth:`~Lane.answered` (its answer)
``wake``            :meth:`~Lane.wait` (a new wake-up; older ones are stale), :meth:`~Lane.woken`,
                    :meth:`~Lane.resume`, :meth:`~Lane.answered` (a probe's), :meth:`~Lane.forget`
``held``            connections held (not the limiter's lanes' ``held``): :meth:`~Lane.sent`,
                    :meth:`~Lane.answered`
``flights``         :meth:`~Lane.fly`, :meth:`~Lane.land`
``active_until``    :meth:`~Lane.answered`
``resume_at``,      :meth:`~Lane.back_off` (the stream's backoff)
``backoff``
``srtt``,           :meth:`~Lane.sample` (its round trips)
``rttvar``
==================  ============================================================================

Pure data: no clock (every transition is given ``now``), no stage.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING

from .._core.answers import Answer, Answered
from .._core.backoff import Backoff
from .._core.retry_policy import FAIL_FAST
from .requests import Destination, Request, merged

if TYPE_CHECKING:
    import anyio

    from .._core.records import KinesisRecord

__all__ = (
    "OFF_RING",
    "TRANSITIONS",
    "Flight",
    "Lane",
    "LaneEvent",
    "LaneState",
    "LaneStateError",
    "Wake",
    "split_expired",
    "step",
)


class LaneState(Enum):
    READY = "READY"  # sends when its turn comes
    PROBE_NEXT = "PROBE_NEXT"  # sends when its turn comes; the next request is a probe
    PARKED = "PARKED"  # its stream backs off: off the ring, woken by the scheduler
    PROBING = "PROBING"  # its probe is in flight: the rest waits, off the ring, for the answer


class LaneEvent(Enum):
    SEND = "SEND"
    PARK = "PARK"
    BACKED_OFF = "BACKED_OFF"
    RESUME = "RESUME"
    PROBE_ANSWERED = "PROBE_ANSWERED"
    PROBE_EMPTY = "PROBE_EMPTY"


READY = LaneState.READY
PROBE_NEXT = LaneState.PROBE_NEXT
PARKED = LaneState.PARKED
PROBING = LaneState.PROBING
SEND = LaneEvent.SEND
PARK = LaneEvent.PARK
BACKED_OFF = LaneEvent.BACKED_OFF
RESUME = LaneEvent.RESUME
PROBE_ANSWERED = LaneEvent.PROBE_ANSWERED
PROBE_EMPTY = LaneEvent.PROBE_EMPTY

TRANSITIONS: dict[tuple[LaneState, LaneEvent], LaneState] = {
    (READY, SEND): READY,
    (READY, PARK): PARKED,
    (READY, BACKED_OFF): PROBE_NEXT,
    (PROBE_NEXT, SEND): PROBING,
    (PROBE_NEXT, PARK): PARKED,
    (PROBE_NEXT, BACKED_OFF): PROBE_NEXT,
    (PARKED, RESUME): PROBE_NEXT,
    (PROBING, PROBE_ANSWERED): READY,
    (PROBING, PROBE_EMPTY): PROBE_NEXT,
}
"""``(state, event) → next state``: every transition a lane may make."""

OFF_RING = frozenset({PARKED, PROBING})
"""The states whose requests are held back by a backoff (not queued for a connection)."""


class LaneStateError(RuntimeError):
    """An event the lane's state does not allow: a bug in the sender."""


def step(state: LaneState, event: LaneEvent) -> LaneState:
    """The state after ``event`` in ``state``.

    Raises:
        LaneStateError: ``TRANSITIONS`` has no such transition.
    """
    try:
        return TRANSITIONS[state, event]
    except KeyError:
        raise LaneStateError(f"a lane cannot {event.value} while {state.value}") from None


class Flight:
    """One request in flight: when it started, and how to give it up."""

    __slots__ = ("preempted", "scope", "started")

    def __init__(self, started: float, scope: anyio.CancelScope) -> None:
        self.started = started
        self.scope = scope
        self.preempted = False  # cancelled to free its connection for another stream


class Wake:
    """A scheduler entry for a parked (or probing) lane; stale once the lane has a newer one."""

    __slots__ = ("call", "lane", "when")

    def __init__(self, call: Callable[[Lane, float], None], lane: Lane, when: float) -> None:
        self.call = call
        self.lane = lane
        self.when = when

    def on_due(self, now: float) -> None:
        lane = self.lane
        if lane.woken(self):
            self.call(lane, now)


def split_expired(
    records: list[KinesisRecord], now: float
) -> tuple[list[KinesisRecord], list[KinesisRecord]]:
    """``records`` whose TTL has not passed at ``now``, and those whose TTL has."""
    live: list[KinesisRecord] = []
    expired: list[KinesisRecord] = []
    for record in records:
        (live if record.expires_at > now else expired).append(record)
    return live, expired


class Lane:
    """One stream's requests waiting to be sent, in FIFO order, and those in flight.

    The sender reads its fields; only its methods (the transitions in the module's tables)
    write them.
    """

    __slots__ = (
        "active_until",
        "backoff",
        "destination",
        "flights",
        "held",
        "in_ring",
        "probing",
        "requests",
        "resume_at",
        "rttvar",
        "srtt",
        "state",
        "wake",
    )

    def __init__(self, destination: Destination) -> None:
        self.destination = destination
        self.requests: deque[Request] = deque()
        self.state = READY
        self.in_ring = False
        self.probing: list[KinesisRecord] | None = None  # the probe in flight
        self.wake: Wake | None = None  # the scheduler entry that counts; older ones are stale
        # The budget's state: connections held (requests taken off the queue, not answered),
        # those under way, oldest first (by id), and until when the stream counts as having
        # work once it has nothing queued or in flight.
        self.held = 0
        self.flights: dict[int, Flight] = {}
        self.active_until = -math.inf
        # Smoothed round trip and its mean deviation (RFC 6298), NaN before the first answer.
        self.srtt = math.nan
        self.rttvar = math.nan
        # The stream's backoff after requests that failed as a whole: until when it holds.
        self.backoff = Backoff(0.1, 2.0, 5.0, jitter=0.5)
        self.resume_at = -math.inf

    # --- the queue and the ring --------------------------------------------------------------
    def add(self, request: Request) -> None:
        """``request`` is submitted: at the tail."""
        self.requests.append(request)

    def join_ring(self) -> bool:
        """The lane takes a turn: whether it was not in the ring yet (then the sender puts it
        at the back)."""
        if self.in_ring:
            return False
        self.in_ring = True
        return True

    def leave_ring(self) -> None:
        """The sender took the lane off its ring (its turn came, or it parks)."""
        self.in_ring = False

    def take(self) -> tuple[list[KinesisRecord], int, bool]:
        """``SEND``: the request at the head goes, with those queued behind it that fit in
        one call (not behind a probe). Returns its records, how many queued requests joined
        it, and whether it is a probe."""
        requests = self.requests
        request = requests.popleft()
        self.state = step(self.state, SEND)
        if self.state is PROBING:
            return request.records, 0, True
        waiting = len(requests)
        records = merged(request, requests, self.destination.collector)
        return records, waiting - len(requests), False

    def sent(self, records: list[KinesisRecord], probing: bool) -> None:
        """``records`` (what of the request taken had not expired) are under way: one more
        connection held; if a probe, they are the probe."""
        if probing:
            self.probing = records
        self.held += 1

    def probe_empty(self) -> None:
        """``PROBE_EMPTY``: every record of the probe taken had expired."""
        self.state = step(self.state, PROBE_EMPTY)

    def expire(self, now: float) -> list[list[KinesisRecord]]:
        """Drop the records of queued requests whose TTL has passed at ``now`` (and the
        requests left empty); returns them, request by request."""
        found: list[list[KinesisRecord]] = []
        live: deque[Request] = deque()
        for request in self.requests:
            if request.expiry() <= now:
                records, expired = split_expired(request.records, now)
                found.append(expired)
                if not records:
                    continue
                request.narrow(records)
            live.append(request)
        self.requests = live
        return found

    # --- backing off ----------------------------------------------------------------------
    def park(self) -> None:
        """``PARK``: off the ring until its wake-up (see :meth:`wait`)."""
        self.state = step(self.state, PARK)

    def backed_off(self) -> None:
        """``BACKED_OFF``: the stream backs off with nothing queued."""
        self.state = step(self.state, BACKED_OFF)

    def wait(self, wake: Wake) -> None:
        """``wake`` is the scheduler entry that counts now; older ones are stale."""
        self.wake = wake

    def woken(self, wake: Wake) -> bool:
        """``wake`` came due: whether it counts (it is spent)."""
        if self.wake is not wake:
            return False
        self.wake = None
        return True

    def resume(self) -> None:
        """``RESUME``: the backoff is over; the next request is a probe."""
        self.state = step(self.state, RESUME)
        self.wake = None

    def forget(self) -> None:
        """The sender drops the lane: a pending wake-up finds itself stale."""
        self.wake = None

    # --- answers ------------------------------------------------------------------------------
    def fly(self, key: int, flight: Flight) -> None:
        """A request (``key``: its records' id) is under way."""
        self.flights[key] = flight

    def land(self, key: int) -> None:
        """The request ``key`` is no longer under way (answered, failed or given up)."""
        del self.flights[key]

    def answered(self, records: list[KinesisRecord], now: float, active_window: float) -> None:
        """``records`` were answered at ``now``: their connection is free, the stream counts
        as having work for ``active_window``; if they were the probe, ``PROBE_ANSWERED``."""
        self.held -= 1
        self.active_until = now + active_window
        if self.probing is records:
            self.probing = None
            self.state = step(self.state, PROBE_ANSWERED)
            self.wake = None

    def back_off(self, answer: Answer, now: float, draw: Callable[[], float]) -> None:
        """Reset the stream's backoff after an answered request; grow it after one that failed
        as a whole or was answered malformed (not with a code no retry can fix)."""
        if isinstance(answer, Answered):
            self.backoff.reset()
        elif answer.code not in FAIL_FAST:
            self.resume_at = now + self.backoff.next_delay(draw())

    def overdue_after(self, floor: float, ceiling: float) -> float:
        """Seconds after which a request of this stream is past what its round trips predict:
        ``srtt + 4 * rttvar`` (RFC 6298's retransmission timeout), within ``floor`` …
        ``ceiling``; ``floor`` before the first answer."""
        srtt = self.srtt
        if srtt != srtt:  # NaN: nothing answered yet
            return min(floor, ceiling)
        return min(max(srtt + 4.0 * self.rttvar, floor), ceiling)

    def sample(self, rtt: float) -> None:
        """Fold one answered request's round trip into the estimate (RFC 6298, §2)."""
        srtt = self.srtt
        if srtt != srtt:
            self.srtt = rtt
            self.rttvar = rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(srtt - rtt)
            self.srtt = 0.875 * srtt + 0.125 * rtt

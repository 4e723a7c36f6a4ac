"""The states of a stream's lane in the sender, and the only transitions between them.

A lane (``sender._Lane``) is one stream's queue of requests. Its state says whether its
requests may go when its turn comes, and every change of state is an event looked up in
:data:`TRANSITIONS`; an event the table does not allow in the current state raises
:class:`LaneStateError` (a bug in the sender, never a condition of the service), as h11's
``_state.py`` does for a connection. The table, row by row:

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
"""

from __future__ import annotations

from enum import Enum

__all__ = ("OFF_RING", "TRANSITIONS", "LaneEvent", "LaneState", "LaneStateError", "step")


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

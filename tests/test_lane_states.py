"""The sender's lane states: the transition table, pure and synchronous.

The sender's behaviour with these states (parking, probes, wake-ups) is proven through the
producer in ``test_isolation.py``; this checks the table itself: each transition the sender
may make, and that every other one raises.
"""

from __future__ import annotations

import itertools

import pytest

from aiokpl._pipeline.lane_states import (
    OFF_RING,
    TRANSITIONS,
    LaneEvent,
    LaneState,
    LaneStateError,
    step,
)

READY, PROBE_NEXT, PARKED, PROBING = (
    LaneState.READY,
    LaneState.PROBE_NEXT,
    LaneState.PARKED,
    LaneState.PROBING,
)
E = LaneEvent

LEGAL = [
    (READY, E.SEND, READY),
    (READY, E.PARK, PARKED),
    (READY, E.BACKED_OFF, PROBE_NEXT),
    (PROBE_NEXT, E.SEND, PROBING),
    (PROBE_NEXT, E.PARK, PARKED),
    (PROBE_NEXT, E.BACKED_OFF, PROBE_NEXT),
    (PARKED, E.RESUME, PROBE_NEXT),
    (PROBING, E.PROBE_ANSWERED, READY),
    (PROBING, E.PROBE_EMPTY, PROBE_NEXT),
]


@pytest.mark.parametrize(("state", "event", "after"), LEGAL)
def test_each_legal_transition(state: LaneState, event: LaneEvent, after: LaneState) -> None:
    assert step(state, event) is after


def test_the_table_holds_the_legal_transitions_and_nothing_else() -> None:
    assert {(state, event): after for state, event, after in LEGAL} == TRANSITIONS


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (state, event)
        for state, event in itertools.product(LaneState, LaneEvent)
        if (state, event) not in {(s, e) for s, e, _ in LEGAL}
    ],
)
def test_every_other_transition_raises(state: LaneState, event: LaneEvent) -> None:
    with pytest.raises(LaneStateError, match=f"cannot {event.value} while {state.value}"):
        step(state, event)


def test_a_lane_is_off_the_ring_while_parked_or_probing() -> None:
    assert {PARKED, PROBING} == OFF_RING


def test_a_backoff_cycle() -> None:
    # Requests queued when a failure backs the stream off: parked, woken, one probe; its
    # answer releases the queue; a probe whose records all expired passes the turn on.
    state = READY
    for event in (E.SEND, E.PARK, E.RESUME, E.SEND, E.PROBE_EMPTY, E.SEND, E.PROBE_ANSWERED):
        state = step(state, event)
    assert state is READY
    # A probe answered into a longer backoff: parked again, in two steps.
    assert step(step(PROBING, E.PROBE_ANSWERED), E.PARK) is PARKED

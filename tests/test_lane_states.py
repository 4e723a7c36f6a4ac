"""The sender's lane: the transition table and the lane's fields, pure and synchronous.

The sender's behaviour with these states (parking, probes, wake-ups) is proven through the
producer in ``test_isolation.py``; this checks the table itself (each transition the sender
may make, and that every other one raises) and the lane's own transitions of its fields,
with explicit ``now``.
"""

from __future__ import annotations

import itertools

import pytest

from aiokpl._core.answers import Answer
from aiokpl._core.records import KinesisRecord
from aiokpl._pipeline.lane_states import (
    OFF_RING,
    TRANSITIONS,
    Flight,
    Lane,
    LaneEvent,
    LaneState,
    LaneStateError,
    Wake,
    step,
)
from aiokpl._pipeline.requests import Request

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


# --- the lane's fields and their transitions (lane_states.Lane), with explicit ``now`` -----------


class _Limits:
    max_count = 500
    max_size = 5 * 1024 * 1024


class _Destination:
    """A stream as the lane sees it: only its collector's limits are read (when merging)."""

    stream = "s"
    collector = _Limits()

    def found_expired(self, records: list[KinesisRecord], now: float) -> None:
        raise AssertionError("a lane tells no stream anything")

    def handle_result(
        self, records: list[KinesisRecord], answer: Answer, started: float, ended: float
    ) -> None:
        raise AssertionError("a lane tells no stream anything")


def fields(lane: Lane) -> tuple[object, ...]:
    """The probe, the wake-up, the state and the connections held (read afresh: mypy keeps
    fields narrowed across the transitions)."""
    return lane.probing, lane.wake, lane.state, lane.held


def record(expires_at: float = 30.0) -> KinesisRecord:
    return KinesisRecord([], b"x", "k", "1", "shardId-0", expires_at, expires_at, 1)


def test_a_request_taken_goes_with_those_queued_behind_it_and_holds_a_connection() -> None:
    lane = Lane(_Destination())
    first, second, third = [record()], [record()], [record()]
    lane.add(Request(first))
    lane.add(Request(second))
    lane.add(Request(third, alone=True))
    records, joined, probing = lane.take()
    assert (records, joined, probing) == (first + second, 1, False)
    assert lane.state is READY
    assert [request.records for request in lane.requests] == [third]  # alone: not merged
    lane.sent(records, probing)
    assert lane.held == 1
    assert lane.probing is None
    lane.answered(records, 5.0, 1.5)
    assert lane.held == 0
    assert lane.active_until == 6.5
    assert lane.state is READY


def test_a_lane_takes_a_turn_in_the_ring_once() -> None:
    lane = Lane(_Destination())
    assert lane.join_ring()
    assert not lane.join_ring()  # already there: the sender appends it once
    assert lane.in_ring
    lane.leave_ring()
    assert not bool(lane.in_ring)  # bool(): mypy would keep the field narrowed
    assert lane.join_ring()


def test_a_parked_lane_resumes_with_a_probe_sent_alone_and_answered() -> None:
    lane = Lane(_Destination())
    lane.park()
    assert lane.state is PARKED
    calls: list[float] = []
    wake = Wake(lambda woken, now: calls.append(now), lane, 2.0)
    lane.wait(wake)
    assert lane.wake is wake
    wake.on_due(2.0)
    assert calls == [2.0]
    assert bool(lane.wake is None)  # spent (bool(): mypy would keep the field narrowed)
    lane.resume()
    assert lane.state is PROBE_NEXT
    probe, behind = [record()], [record()]
    lane.add(Request(probe))
    lane.add(Request(behind))
    records, joined, probing = lane.take()
    assert (records, joined, probing) == (probe, 0, True)  # a probe goes alone
    assert lane.state is PROBING
    lane.sent(records, probing)
    assert lane.probing is records
    lane.wait(Wake(lambda woken, now: None, lane, 3.0))  # for the requests behind it
    lane.answered(records, 3.0, 1.0)
    # The probe is over, and its answer decides, not that wake-up: none is pending.
    assert fields(lane) == (None, None, READY, 0)


def test_a_stale_wake_up_does_nothing() -> None:
    lane = Lane(_Destination())
    calls: list[float] = []
    old = Wake(lambda woken, now: calls.append(now), lane, 1.0)
    lane.wait(old)
    lane.wait(Wake(lambda woken, now: calls.append(-now), lane, 2.0))  # a newer one counts
    old.on_due(1.0)
    assert calls == []
    assert lane.wake is not None
    lane.forget()  # the sender drops the lane: its pending wake-up is stale too
    assert lane.wake is None


def test_a_probe_whose_records_expired_passes_the_probe_on() -> None:
    lane = Lane(_Destination())
    lane.backed_off()  # backed off with nothing queued
    assert lane.state is PROBE_NEXT
    lane.add(Request([record()]))
    lane.take()
    lane.probe_empty()
    assert lane.state is PROBE_NEXT
    assert lane.held == 0  # nothing was sent


def test_a_wake_up_drops_the_expired_records_request_by_request() -> None:
    lane = Lane(_Destination())
    early, late = record(expires_at=1.0), record(expires_at=9.0)
    gone = record(expires_at=0.5)
    lane.add(Request([early, late]))
    lane.add(Request([gone]))
    kept = Request([record(expires_at=9.0)])
    lane.add(kept)
    assert lane.expire(1.0) == [[early], [gone]]
    assert [request.records for request in lane.requests] == [[late], kept.records]
    assert lane.expire(1.0) == []


def test_flights_are_the_lanes_requests_under_way() -> None:
    lane = Lane(_Destination())
    flight = Flight(1.0, object())  # type: ignore[arg-type]  # (a scope: never touched here)
    lane.fly(7, flight)
    assert lane.flights == {7: flight}
    lane.land(7)
    assert lane.flights == {}


def test_a_transition_the_table_does_not_list_raises_on_the_lane() -> None:
    lane = Lane(_Destination())
    with pytest.raises(LaneStateError, match="cannot RESUME while READY"):
        lane.resume()
    lane.park()
    with pytest.raises(LaneStateError, match="cannot PARK while PARKED"):
        lane.park()

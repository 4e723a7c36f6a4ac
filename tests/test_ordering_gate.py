"""The gate of strict order (``shard_limiter.OrderGate``) on its own: which lanes an older lane
holds, pure and synchronous (the limiter it is composed into is ``tests/test_ordering.py``'s)."""

from __future__ import annotations

from aiokpl._core.shards import ShardRange
from aiokpl._pipeline.shard_limiter import OrderedShardLimiter, OrderGate
from stages import kinesis_record

RANGES = {
    "parent": ShardRange("parent", 0, 99),
    "left": ShardRange("left", 0, 49),
    "right": ShardRange("right", 50, 99),
    "other": ShardRange("other", 100, 199),
}


def lane(*shards: str | None) -> OrderedShardLimiter:
    """A lane with one record queued for each of ``shards`` (none: empty)."""
    new = OrderedShardLimiter(1000.0, 1_000_000.0)
    for shard in shards:
        new.queue.append(kinesis_record(shard))
    return new


def held(*lanes: OrderedShardLimiter) -> tuple[bool, ...]:
    """The lanes' holds, read afresh (mypy keeps a field narrowed across the gate's calls)."""
    return tuple(lane.held for lane in lanes)


def test_a_new_lane_is_held_while_unpredicted_records_wait_or_an_older_lane_overlaps() -> None:
    gate = OrderGate(RANGES.get)
    fresh = lane()
    gate.open("left", fresh, None)
    assert held(fresh) == (False,)
    gate.open("left", fresh, lane(None))
    assert held(fresh) == (True,)  # unpredicted records go first, wherever they land
    gate.open("left", fresh, lane())  # the lane of unpredicted records, empty: nothing waits
    assert held(fresh) == (False,)
    gate.retire("parent", lane("parent"))
    child, stranger = lane(), lane()
    gate.open("left", child, None)
    gate.open("other", stranger, None)
    assert child.held  # its parent still has records
    assert not stranger.held  # no overlap


def test_an_update_frees_the_lanes_an_emptied_retired_lane_held_and_names_those_to_drain() -> None:
    gate = OrderGate(RANGES.get)
    parent = lane()
    parent.in_flight = kinesis_record("parent")
    gate.retire("parent", parent)
    assert parent.span == RANGES["parent"]
    left, right, other = lane("left"), lane(), lane("other")
    lanes = {"parent": parent, "left": left, "right": right, "other": other}
    assert gate.update(lanes, None) == []
    assert held(parent, left, right, other) == (False, True, True, False)
    # The parent's record is settled: its lane is empty, forgotten, and its children free.
    parent.in_flight = None
    assert gate.emptied("parent", lanes)
    assert gate.retired == {}
    del lanes["parent"]
    assert gate.update(lanes, None) == ["left"]  # the one freed with a record to admit
    assert held(left, right, other) == (False, False, False)


def test_a_retired_lane_is_held_only_by_those_retired_before_it() -> None:
    gate = OrderGate(RANGES.get)
    parent, left = lane("parent"), lane("left")
    gate.retire("parent", parent)
    gate.retire("left", left)  # retired later (it split again, say)
    assert gate.update({"parent": parent, "left": left}, None) == []
    assert not parent.held  # the oldest goes first
    assert left.held


def test_the_unpredicted_lane_emptied_changes_the_holds_only_if_a_lane_is_held() -> None:
    gate = OrderGate(RANGES.get)
    free, held = lane(), lane()
    assert not gate.emptied(None, {"left": free})
    held.held = True
    assert gate.emptied(None, {"left": free, "right": held})
    assert not gate.emptied("left", {"left": free})  # not retired: nothing changes

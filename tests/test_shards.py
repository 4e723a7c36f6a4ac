"""Shard ranges and lookup by hash key (pure, synchronous)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokpl._core.hashing import MAX_HASH_KEY
from aiokpl._core.shards import ShardRange, ShardTable


def even_split(count: int) -> list[ShardRange]:
    """``count`` shards splitting the key space evenly, as CreateStream does."""
    step = (MAX_HASH_KEY + 1) // count
    ranges = []
    for i in range(count):
        end = MAX_HASH_KEY if i == count - 1 else (i + 1) * step - 1
        ranges.append(ShardRange(f"shardId-{i:012d}", i * step, end))
    return ranges


def covers_key_space(table: ShardTable) -> bool:
    """Whether the ranges are contiguous from 0 to 2**128 - 1 (a complete open-shard set)."""
    expected = 0
    for shard in table:
        if shard.starting_hash_key != expected:
            return False
        expected = shard.ending_hash_key + 1
    return expected == MAX_HASH_KEY + 1


def test_lookup_boundaries() -> None:
    table = ShardTable(even_split(4))
    quarter = (MAX_HASH_KEY + 1) // 4
    assert table.lookup(0) == "shardId-000000000000"
    assert table.lookup(quarter - 1) == "shardId-000000000000"
    assert table.lookup(quarter) == "shardId-000000000001"
    assert table.lookup(MAX_HASH_KEY) == "shardId-000000000003"
    assert covers_key_space(table)


@given(st.integers(min_value=1, max_value=64), st.integers(min_value=0, max_value=MAX_HASH_KEY))
def test_lookup_finds_the_range_that_contains_the_key(count: int, key: int) -> None:
    ranges = even_split(count)
    table = ShardTable(reversed(ranges))  # any input order
    owner = table.lookup(key)
    assert owner is not None
    shard = table.get(owner)
    assert shard is not None
    assert key in shard
    assert sum(key in r for r in ranges) == 1


def test_gaps_have_no_owner() -> None:
    table = ShardTable([ShardRange("a", 10, 19), ShardRange("b", 30, 39)])
    assert table.lookup(5) is None
    assert table.lookup(25) is None
    assert table.lookup(40) is None
    assert table.lookup(30) == "b"
    assert not covers_key_space(table)
    assert not covers_key_space(
        ShardTable([ShardRange("a", 0, 19), ShardRange("b", 30, MAX_HASH_KEY)])
    )
    assert not covers_key_space(ShardTable([ShardRange("a", 0, 19)]))
    assert ShardTable().lookup(0) is None


def test_overlap_and_duplicates_are_rejected() -> None:
    with pytest.raises(ValueError, match="overlapping"):
        ShardTable([ShardRange("a", 0, 20), ShardRange("b", 20, 30)])
    with pytest.raises(ValueError, match="appears twice"):
        ShardTable([ShardRange("a", 0, 20), ShardRange("a", 21, 30)])


@pytest.mark.parametrize(("start", "end"), [(-1, 5), (6, 5), (0, MAX_HASH_KEY + 1)])
def test_bad_range(start: int, end: int) -> None:
    with pytest.raises(ValueError, match="hash key range"):
        ShardRange("s", start, end)


def test_from_list_shards_response() -> None:
    shards = [
        {
            "ShardId": "shardId-000000000001",
            "HashKeyRange": {"StartingHashKey": str(2**127), "EndingHashKey": str(MAX_HASH_KEY)},
            "SequenceNumberRange": {"StartingSequenceNumber": "1"},
        },
        {
            "ShardId": "shardId-000000000000",
            "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": str(2**127 - 1)},
        },
    ]
    table = ShardTable.from_shards(shards)
    assert [r.shard_id for r in table] == ["shardId-000000000000", "shardId-000000000001"]
    assert len(table) == 2
    assert "shardId-000000000001" in table
    assert "shardId-9" not in table
    assert table == ShardTable.from_shards(reversed(shards))
    assert hash(table) == hash(ShardTable.from_shards(shards))
    assert table != ShardTable()
    assert table.__eq__(object()) is NotImplemented
    assert repr(table) == "<ShardTable shards=2>"


@pytest.mark.parametrize(
    "shard",
    [
        {"ShardId": "x"},
        {"HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "1"}},
        {"ShardId": "x", "HashKeyRange": None},
    ],
)
def test_malformed_shard_description(shard: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="malformed shard description"):
        ShardRange.from_shard(shard)


def test_range_contains_only_ints() -> None:
    shard = ShardRange("s", 0, 10)
    assert 10 in shard
    assert 11 not in shard
    assert "5" not in shard

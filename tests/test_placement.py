"""``KeylessPlacer``, the choice of shard for records put without a key (pure, no clock)."""

from __future__ import annotations

from aiokpl._core.hashing import MAX_HASH_KEY
from aiokpl._core.placement import KeylessPlacer
from aiokpl._core.shards import ShardRange, ShardTable

QUARTER = (MAX_HASH_KEY + 1) // 4
TABLE = ShardTable(ShardRange(f"shard-{i}", i * QUARTER, (i + 1) * QUARTER - 1) for i in range(4))


def test_a_target_is_kept_for_its_budget_then_the_roomiest_shard_is_chosen() -> None:
    rooms = {"shard-0": 10.0, "shard-1": 30.0, "shard-2": 20.0, "shard-3": 30.0}
    placer = KeylessPlacer(budget=100)
    shard, key = placer.place(TABLE, 60, rooms.__getitem__)
    # The most room; of the two with 30, the first in turn from shard 0.
    assert shard == "shard-1"
    assert key == (QUARTER + 2 * QUARTER - 1) // 2  # the middle of its range
    assert placer.place(TABLE, 40, rooms.__getitem__) == (shard, key)  # 100 bytes: the budget
    # Spent: chosen again, from the shard after the last target on.
    rooms["shard-1"] = 0.0
    assert placer.place(TABLE, 1, rooms.__getitem__)[0] == "shard-3"


def test_equal_rooms_go_round_the_shards_in_turn() -> None:
    placer = KeylessPlacer(budget=1)
    chosen = [placer.place(TABLE, 1, lambda shard: 0.0)[0] for _ in range(6)]
    assert chosen == ["shard-0", "shard-1", "shard-2", "shard-3", "shard-0", "shard-1"]


def test_a_target_gone_from_the_map_is_replaced_at_once() -> None:
    placer = KeylessPlacer(budget=1_000)
    assert placer.place(TABLE, 1, lambda shard: 0.0)[0] == "shard-0"
    split = ShardTable(
        [
            ShardRange("shard-4", 0, QUARTER // 2 - 1),
            ShardRange("shard-5", QUARTER // 2, QUARTER - 1),
            *list(TABLE)[1:],
        ]
    )
    shard, key = placer.place(split, 1, lambda shard: 5.0 if shard == "shard-5" else 0.0)
    assert shard == "shard-5"
    assert QUARTER // 2 <= key <= QUARTER - 1

"""Where a record put without a partition key goes, on a stream that places records by key.

Kinesis itself needs a key there (only a stream that places records itself, ``AUTO``, takes a
record without one). The producer gives such a record a shard, and with it an explicit hash
key inside that shard's range and the partition key ``"-"`` (``hashing.PLACED_PARTITION_KEY``),
so that it is aggregated like any record and a KCL consumer keeps it (its hash key lies in the
range of the shard that holds it).

Which shard: the one with the most *room*, the bytes the caller says it could take now (the
router: the shard's token bucket, less its open aggregate). Rules (invariants):

* one target at a time, kept for ``budget`` bytes of such records (one aggregate's worth,
  ``aggregation_max_size``), so that they fill aggregates rather than scatter one record per
  shard; then the next target is chosen. A target gone from the map is chosen again at once;
* the choice looks at every shard (O(shards), once a budget: for 100-byte records and the
  default 51,200-byte aggregates, once every 512 records), and among equal rooms takes the
  next shard after the last target, so an idle stream is filled in turn;
* the explicit hash key is the middle of the shard's range: records placed on one shard share
  it, one entry in an aggregate's key table.

Kafka's sticky partitioner (KIP-480) and its adaptive successor (KIP-794) are the nearest idea:
stick to a partition for a batch, then choose by how loaded each is. Here the load is what the
producer's own limiter sees, so a throttled shard (its rate cut) gets less.

Pure: no clock, no I/O; ``room`` is the caller's.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .shards import ShardTable

__all__ = ("KeylessPlacer",)


class KeylessPlacer:
    """The shards records without a key go to, on one stream.

    Args:
        budget: bytes placed on a target before the next is chosen.
    """

    __slots__ = ("_budget", "_key", "_left", "_shard", "_turn")

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._shard: str | None = None
        self._key = 0
        self._left = 0
        self._turn = 0

    def place(self, table: ShardTable, size: int, room: Callable[[str], float]) -> tuple[str, int]:
        """The shard and explicit hash key of the next record without a key, of ``size``
        bytes. *Mutates* the placer (its target and what it has left)."""
        shard = self._shard
        if shard is None or self._left <= 0 or shard not in table:
            shard = self._choose(table, room)
        self._left -= size
        return shard, self._key

    def _choose(self, table: ShardTable, room: Callable[[str], float]) -> str:
        ranges = list(table)
        count = len(ranges)
        turn = self._turn % count
        best_index, best_room = turn, -math.inf
        for step in range(count):
            index = (turn + step) % count
            candidate = room(ranges[index].shard_id)
            if candidate > best_room:
                best_index, best_room = index, candidate
        best = ranges[best_index]
        self._turn = best_index + 1
        self._shard = best.shard_id
        self._key = (best.starting_hash_key + best.ending_hash_key) // 2
        self._left = self._budget
        return best.shard_id

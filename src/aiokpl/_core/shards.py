"""Shard hash-key ranges, and the lookup from a hash key to the shard that owns it.

A stream's open shards partition the key space 0 … 2**128 - 1 into contiguous ranges. A
:class:`ShardTable` is an immutable snapshot of some ranges, sorted by ending hash key, so the
shard owning a key is found by one binary search.

Invariants:

* a table's ranges never overlap (construction fails otherwise), so a key has at most one
  owner; a key in a gap has none (``lookup`` returns ``None``);
* tables are immutable: the shard map swaps in a new table on refresh, and a prediction made
  with the old one stays valid for as long as the caller holds it.

Mirrors the KPL's ``ShardMap`` lookup (``aws/kinesis/core/shard_map.cc``: ``lower_bound`` on the
ending hash keys). Differences: the table is a separate pure value, so the async shard map can
keep predicting with the previous table while a refresh is under way.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from .hashing import MAX_HASH_KEY

__all__ = ("ShardRange", "ShardTable")


@dataclass(frozen=True, slots=True)
class ShardRange:
    """One shard and the inclusive range of hash keys it owns."""

    shard_id: str
    starting_hash_key: int
    ending_hash_key: int

    def __post_init__(self) -> None:
        if not 0 <= self.starting_hash_key <= self.ending_hash_key <= MAX_HASH_KEY:
            raise ValueError(
                f"shard {self.shard_id!r}: hash key range must satisfy 0 <= start <= end <= "
                f"2**128-1; got {self.starting_hash_key} … {self.ending_hash_key}"
            )

    def __contains__(self, hash_key: object) -> bool:
        return isinstance(hash_key, int) and (
            self.starting_hash_key <= hash_key <= self.ending_hash_key
        )

    @classmethod
    def from_shard(cls, shard: Mapping[str, Any]) -> ShardRange:
        """Build from one entry of a ``ListShards`` (or ``DescribeStream``) response.

        Raises:
            ValueError: a field is missing or not a decimal hash key.
        """
        try:
            key_range = shard["HashKeyRange"]
            return cls(
                shard["ShardId"],
                int(key_range["StartingHashKey"]),
                int(key_range["EndingHashKey"]),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed shard description: {exc!r}") from exc


class ShardTable:
    """An immutable set of non-overlapping shard ranges with lookup by hash key.

    Args:
        ranges: the shards; any order. Overlapping ranges raise ``ValueError``.
    """

    __slots__ = ("_by_id", "_ends", "_ranges")

    def __init__(self, ranges: Iterable[ShardRange] = ()) -> None:
        ordered = sorted(ranges, key=lambda r: r.ending_hash_key)
        for before, after in pairwise(ordered):
            if after.starting_hash_key <= before.ending_hash_key:
                raise ValueError(
                    f"shards {before.shard_id!r} and {after.shard_id!r} have overlapping "
                    "hash key ranges"
                )
        self._ranges: tuple[ShardRange, ...] = tuple(ordered)
        self._ends: list[int] = [r.ending_hash_key for r in ordered]
        self._by_id: dict[str, ShardRange] = {r.shard_id: r for r in ordered}
        if len(self._by_id) != len(self._ranges):
            raise ValueError("a shard id appears twice")

    @classmethod
    def from_shards(cls, shards: Iterable[Mapping[str, Any]]) -> ShardTable:
        """Build from the ``Shards`` entries of one or more ``ListShards`` pages."""
        return cls(ShardRange.from_shard(shard) for shard in shards)

    def lookup(self, hash_key: int) -> str | None:
        """The id of the shard owning ``hash_key``, or ``None`` if no shard here owns it."""
        index = bisect_left(self._ends, hash_key)
        if index < len(self._ranges):
            candidate = self._ranges[index]
            if candidate.starting_hash_key <= hash_key:
                return candidate.shard_id
        return None

    def get(self, shard_id: str) -> ShardRange | None:
        """The range of ``shard_id``, or ``None`` if the table does not hold it."""
        return self._by_id.get(shard_id)

    def __len__(self) -> int:
        return len(self._ranges)

    def __iter__(self) -> Iterator[ShardRange]:
        return iter(self._ranges)

    def __contains__(self, shard_id: object) -> bool:
        return shard_id in self._by_id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ShardTable):
            return NotImplemented
        return self._ranges == other._ranges

    def __hash__(self) -> int:
        return hash(self._ranges)

    def __repr__(self) -> str:
        return f"<ShardTable shards={len(self._ranges)}>"

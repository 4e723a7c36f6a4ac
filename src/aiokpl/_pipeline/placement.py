"""The placement policy the router consults: who places a stream's records, and so where a
record goes that the shard map does not predict.

A stream places its records by key (``USER_PARTITION_KEY``, every stream before 2025), or the
service places them itself (``AUTO``, on-demand streams; ``distribution.py`` says which, and
when that is known). The router predicts a record's shard only in the first case, and asks
:meth:`Placement.route` for every record it does not predict:

=========================================  ==========================================
the stream, the record                     route
=========================================  ==========================================
by the service, ``ordering="shard"``       refuse: ``"OrderingOnAutoStream"`` (the
                                           service keeps no order among records)
by the service,                            aggregate, with no predicted shard: one
``Config.aggregation_on_auto_streams``     aggregate for the whole stream
by the service, a record with tags         refuse: ``"TagsOnAutoStream"`` (only an
                                           aggregate carries tags, and a KCL consumer
                                           drops an aggregate the service placed)
by the service, any other record           alone, unpredicted, keys as put (none for a
                                           record put without)
by key, a record without a key, a map      placed: aggregate on the shard
                                           ``_core.placement.KeylessPlacer`` chooses,
                                           with the partition key ``"-"`` and an
                                           explicit hash key in that shard's range
by key, without a key, no map              alone, at a random explicit hash key
by key, any other record (no map)          alone, unpredicted
=========================================  ==========================================

A record refused fails at once, with a message saying why (:func:`refusal`); the first of each
code is logged as a warning. The policy decides and touches no stage: the router acts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._core.hashing import KEYLESS, MAX_HASH_KEY
from .._core.placement import KeylessPlacer

if TYPE_CHECKING:
    from .._core.shards import ShardTable
    from .._record import UserRecord

__all__ = (
    "AGGREGATE",
    "ALONE",
    "ORDERING_ON_AUTO",
    "TAGS_ON_AUTO",
    "Placement",
    "refusal",
)

ALONE = "alone"
"""Route: the record goes alone (``Aggregator.single``), with the hash key given."""
AGGREGATE = "aggregate"
"""Route: the record is aggregated (``Aggregator.put``) with the hash key and shard given."""

TAGS_ON_AUTO = "TagsOnAutoStream"
"""Route, and the code of a record with tags put to a stream that places records itself
(without ``Config.aggregation_on_auto_streams``)."""

ORDERING_ON_AUTO = "OrderingOnAutoStream"
"""Route, and the code of a record put with ``ordering="shard"`` to a stream that places
records itself."""


class Placement:
    """The placement of one stream's records.

    Args:
        ordered: ``Config.ordering == "shard"``.
        anywhere: ``Config.aggregation_on_auto_streams``.
        budget: bytes of records without a key placed on one shard before the next is
            chosen (``Config.aggregation_max_size``).
        random_value: the producer's jitter source (a record without a key before a map).

    Attributes:
        by_service: the service places the stream's records (the router sets it, as
            ``Distribution.service_places`` changes).
    """

    __slots__ = ("_anywhere", "_ordered", "_placer", "_random", "by_service")

    def __init__(
        self,
        *,
        ordered: bool,
        anywhere: bool,
        budget: int,
        random_value: Callable[[], float],
    ) -> None:
        self._ordered = ordered
        self._anywhere = anywhere
        self._placer = KeylessPlacer(budget)
        self._random = random_value
        self.by_service = False

    @property
    def keeps_aggregates(self) -> bool:
        """Aggregates built for a shard may still go as they are once the service places
        records (``aggregation_on_auto_streams``, without ``ordering="shard"``, whose records
        fail there): the router does not take them apart at the switch."""
        return self._anywhere and not self._ordered

    def route(
        self,
        record: UserRecord,
        hash_key: int,
        table: ShardTable | None,
        room: Callable[[str], float],
    ) -> tuple[str, int, str | None]:
        """Where ``record`` (hash key ``hash_key``, not predicted) goes: ``(ALONE, hash key,
        None)``, ``(AGGREGATE, hash key, shard or None)``, or ``(code, 0, None)`` to refuse it
        with that code. ``table``: the map's, if the stream places records by key and has one;
        ``room``: the bytes a shard could take now (for records without a key). *Mutates* a
        record without a key that it places (``UserRecord.place``)."""
        if self.by_service:
            if self._ordered:
                return ORDERING_ON_AUTO, 0, None
            if self._anywhere:
                return AGGREGATE, max(hash_key, 0), None
            if record.encoded_tags:
                return TAGS_ON_AUTO, 0, None
            return ALONE, hash_key, None
        if hash_key != KEYLESS:
            return ALONE, hash_key, None
        if table is not None:
            shard, hash_key = self._placer.place(table, record.size, room)
            record.place(hash_key)
            return AGGREGATE, hash_key, shard
        # No map: a key of its own, at random, so that it may be sent at all.
        hash_key = int(self._random() * MAX_HASH_KEY)
        record.place(hash_key)
        return ALONE, hash_key, None


def refusal(code: str, stream: str) -> str:
    """Why a record cannot go to ``stream``, which places records itself: the message of a
    record refused with ``code`` (:data:`TAGS_ON_AUTO` or :data:`ORDERING_ON_AUTO`)."""
    placed = f"stream {stream!r} places records itself (RecordDistributionStrategy AUTO)"
    if code == TAGS_ON_AUTO:
        return (
            f"{placed}: a record with tags travels as an aggregate, which a KCL consumer drops "
            "there; set Config.aggregation_on_auto_streams=True if no consumer checks hash key "
            "ranges"
        )
    return f"{placed} and keeps no order among them: ordering='shard' cannot be kept"

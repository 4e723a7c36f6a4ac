"""The ordering policy the stream's router consults: where a retried record goes, and more.

``Config.ordering`` picks one of two policies (the rules, and why, are in
``_core/ordering.py``), each a small class of the :class:`Ordering` protocol the router types
against. The router asks the policy and does what it says; no stage branches on the mode, and
the only stage that differs is the limiter, which the policy builds (with
``ordering="shard"``, with a gate: ``shard_limiter.OrderGate``).

================================  ==========================  ===============================
the router asks                   ``"aggregate"`` (default)   ``"shard"``
================================  ==========================  ===============================
``limiter(...)``                  ``limiter.Limiter``          ``limiter.Limiter`` with a gate
``grace(record, now, grace)``     the collector's grace       none for a record already late
``closes_batches_on_new_map``     no                          yes: old predictions go first
``keeps_shard_order``             no                          yes: a stream that places
                                                              records itself fails them
``after_answer(sent, d)``         retried → the aggregator    each sent record settles its
                                                              lane; retried → the lane's head
``after_placed(record, d)``       retried → the aggregator    the record settles its lane
``after_unsent(record)``          nothing                     the record settles its lane
================================  ==========================  ===============================

A *settlement* ``(record, again)`` frees the lane of ``record`` (in flight until then) and puts
``again`` (what of it is retried, as Kinesis records in order: see ``_core.ordering.regroup``)
back at its head.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, cast

from .._core.ordering import regroup
from .limiter import Limiter, Limits, OrderGate

if TYPE_CHECKING:
    from .._core.records import KinesisRecord
    from .._core.retry_policy import Decisions
    from .._core.shards import ShardRange
    from .._record import UserRecord
    from .scheduler import Deadlines

__all__ = ("AggregateOrder", "Ordering", "Route", "ShardOrder", "ordering_of")

Settlement = tuple["KinesisRecord", "Sequence[KinesisRecord]"]
Route = tuple[Sequence["UserRecord"], Sequence[Settlement]]
"""Where retried records go: user records back to the aggregator, and lane settlements."""

_NOWHERE: Route = ((), ())


class Ordering(Protocol):
    """What the router asks of ``Config.ordering`` (see the module's table)."""

    closes_batches_on_new_map: bool
    """A new map closes the open batches (their predictions go first)."""
    keeps_shard_order: bool
    """Records keep put order per shard (a stream that places records itself fails them)."""

    def limiter(
        self,
        deadlines: Deadlines,
        clock: Callable[[], float],
        hash_range: Callable[[str], ShardRange | None],
        limits: Limits,
    ) -> Limiter:
        """The stream's limiter (``hash_range``: a shard id's, from the map)."""
        ...

    def grace(self, record: KinesisRecord, now: float, grace: float) -> float:
        """The grace ``record`` gets in the collector (``grace``: the stream's)."""
        ...

    def after_answer(self, sent: Sequence[KinesisRecord], decisions: Decisions) -> Route:
        """Where the records retried after an answer to ``sent`` go."""
        ...

    def after_placed(self, sent: KinesisRecord, decisions: Decisions) -> Route:
        """Where the records retried after a delayed verdict on ``sent`` go."""
        ...

    def after_unsent(self, record: KinesisRecord) -> Sequence[Settlement]:
        """What ``record``, expired before it was sent, settles."""
        ...


class AggregateOrder:
    """``ordering="aggregate"``: put order within an aggregate, as the KPL keeps it."""

    closes_batches_on_new_map = False
    keeps_shard_order = False

    def limiter(
        self,
        deadlines: Deadlines,
        clock: Callable[[], float],
        hash_range: Callable[[str], ShardRange | None],
        limits: Limits,
    ) -> Limiter:
        return Limiter(deadlines, clock, limits)

    def grace(self, record: KinesisRecord, now: float, grace: float) -> float:
        """The grace ``record`` gets in the collector: the stream's."""
        return grace

    def after_answer(self, sent: Sequence[KinesisRecord], decisions: Decisions) -> Route:
        """Where the records retried after an answer go: back to the aggregator, whose
        prediction may have changed since."""
        if not decisions.retry:
            return _NOWHERE
        return cast("list[UserRecord]", decisions.retry), ()

    def after_placed(self, sent: KinesisRecord, decisions: Decisions) -> Route:
        """Where the records retried after a delayed verdict go: as after an answer."""
        return self.after_answer((sent,), decisions)

    def after_unsent(self, record: KinesisRecord) -> Sequence[Settlement]:
        """``record`` expired before it was sent: nothing to settle."""
        return ()


class ShardOrder:
    """``ordering="shard"``: put order per shard (lanes; see ``_core/ordering.py``)."""

    closes_batches_on_new_map = True
    keeps_shard_order = True

    def limiter(
        self,
        deadlines: Deadlines,
        clock: Callable[[], float],
        hash_range: Callable[[str], ShardRange | None],
        limits: Limits,
    ) -> Limiter:
        return Limiter(deadlines, clock, limits, OrderGate(hash_range))

    def grace(self, record: KinesisRecord, now: float, grace: float) -> float:
        """None for a record already past its deadline: it waited for its shard's previous
        request to be answered, and every moment it waits in the collector is a moment its
        shard sends nothing. The records that one answer frees are admitted together, so they
        still share the next request."""
        return 0.0 if record.deadline <= now else grace

    def after_answer(self, sent: Sequence[KinesisRecord], decisions: Decisions) -> Route:
        """Each Kinesis record of the answered request settles its lane, its retried records
        going back to the lane's head; not those resent, nor those whose verdict waits for
        the map (they are still in flight)."""
        pending: set[int] = set()
        for group in decisions.resend:
            pending.update(map(id, group))
        pending.update(id(kinesis_record) for kinesis_record, _, _ in decisions.undecided)
        retried = {id(record) for record in decisions.retry}
        settlements: list[Settlement] = []
        for kinesis_record in sent:
            if id(kinesis_record) in pending:
                continue
            again: list[KinesisRecord] = []
            if retried:
                retry = [record for record in kinesis_record.records if id(record) in retried]
                again = regroup(kinesis_record, retry)
            settlements.append((kinesis_record, again))
        return (), settlements

    def after_placed(self, sent: KinesisRecord, decisions: Decisions) -> Route:
        """The record whose verdict waited settles its lane, its retried records first."""
        return (), [(sent, regroup(sent, decisions.retry))]

    def after_unsent(self, record: KinesisRecord) -> Sequence[Settlement]:
        """``record`` expired before it was sent: its lane is free."""
        return [(record, ())]


def ordering_of(mode: str) -> Ordering:
    """The policy of ``Config.ordering``."""
    return ShardOrder() if mode == "shard" else AggregateOrder()

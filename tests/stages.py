"""Helpers of the per-stage tests (``tests/test_stage_*.py``): records and a deadline recorder;
and how the ledger's and the router's tests (``tests/test_ledger.py``, ``tests/test_router.py``)
enter a record into a ledger (:func:`admit`).

The stages are synchronous and read no clock: each test gives ``now`` and plays the router,
handing a stage's due deadlines back to it by hand.
"""

from __future__ import annotations

from typing import Any, TypeVar

from aiokpl._core.records import KinesisRecord
from aiokpl._pipeline.ledger import ResultLedger
from aiokpl._pipeline.shard_limiter import Flow
from aiokpl._record import UserRecord

R = TypeVar("R", bound=UserRecord)


class Recorder:
    """A stage's :class:`~aiokpl._pipeline.scheduler.Deadlines`: remembers what it is asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, Any]] = []

    def call_at(self, when: float, item: Any) -> None:
        self.calls.append((when, item))

    def due(self, now: float) -> list[Any]:
        """The items due at ``now`` (removed), in the order they were asked for."""
        due = [item for when, item in self.calls if when <= now]
        self.calls = [(when, item) for when, item in self.calls if when > now]
        return due


def collect(flow: Flow, admitted: list[KinesisRecord], expired: list[KinesisRecord]) -> None:
    """What a shard's ``put`` or ``drain`` returned, appended to ``admitted`` and ``expired``."""
    admitted.extend(flow[0])
    expired.extend(flow[1])


def user_record(
    data: bytes = b"x",
    *,
    key: str = "k",
    deadline: float = 0.1,
    expires_at: float = 30.0,
    ehk: int | None = None,
) -> UserRecord:
    record = UserRecord("s", key, data, None if ehk is None else str(ehk), len(key) + len(data))
    return stamped(record, 0.0, deadline, expires_at)


def stamped(record: R, arrival: float = 0.0, deadline: float = 0.1, expires_at: float = 30.0) -> R:
    """``record`` as if it had entered a producer at ``arrival`` (its flush generation 0), to
    be sent by ``deadline`` (never past ``expires_at``, as the intake stamps it)."""
    record.last_end = arrival
    record.deadline = min(deadline, expires_at)
    record.expires_at = expires_at
    record.epoch = 0
    return record


def kinesis_record(
    shard: str | None = "a",
    *,
    size: int = 10,
    deadline: float = 0.1,
    expires_at: float = 30.0,
) -> KinesisRecord:
    """A raw Kinesis record of ``size`` bytes (key "k" and data) predicted for ``shard``."""
    user = user_record(b"x" * (size - 1), deadline=deadline, expires_at=expires_at)
    return KinesisRecord([user], user.data, "k", "1", shard, deadline, expires_at, 1)


def admit(ledger: ResultLedger, record: UserRecord) -> UserRecord:
    """Enter ``record`` into ``ledger``, outstanding, as the producer's intake does: the one
    place the ledger and router tests do it."""
    ledger.add(record)
    return record

"""A request waiting in the sender, the stream it goes to, and how requests that queue merge.

Requests queue in a stream's lane (``lane_states.Lane``) when every connection is busy, which is
when calls take long: a slow or serialising server. A producer with a backlog sends small
requests often (a starved shard admits a batch every buffered time), and a fleet of them sent
the server more calls than it could serve: 8 producers at 5× offered, ~20 calls a second each,
to a server answering one call in 10 ms. The calls queued there for seconds, throttle feedback
came seconds late, and the shards' rates overshot (30% of attempts throttled;
``tests/test_fleet_feedback.py``). So the sender sends a request together with those queued
behind it, as many as fit in one call (:func:`merged`): the calls carry what the queue holds,
and the server's queue drains. Never merged: a request marked ``alone`` (the halves of a
request refused as a whole, resent apart to find the bad record) and a probe (it tests a
stream that failed; the sender does not merge it).

Pure data: no clock, no stage.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Protocol

from .._core.records import KinesisRecord

if TYPE_CHECKING:
    from .._core.answers import Answer

__all__ = ("Destination", "Request", "RequestLimits", "merged")


class RequestLimits(Protocol):
    """The most one call of a stream may hold: its collector's limits."""

    @property
    def max_count(self) -> int: ...

    @property
    def max_size(self) -> int: ...


class Destination(Protocol):
    """What the sender needs from a stream's pipeline (its retrier, its collector's limits).

    The sender tells it what it found (records whose TTL passed before they were sent, an
    answer) once its own state is consistent again, inside the step of the event that found
    them: never in the middle of its own update.
    """

    stream: str

    @property
    def collector(self) -> RequestLimits: ...

    def found_expired(self, records: list[KinesisRecord], now: float) -> None: ...

    def handle_result(
        self,
        records: list[KinesisRecord],
        answer: Answer,
        started: float,
        ended: float,
    ) -> None: ...


class Request:
    """Records to send in one call, and (once asked) the earliest of their expiries.

    Attributes:
        records: the Kinesis records, in put order.
        alone: never merged with another request.
    """

    __slots__ = ("_expiry", "alone", "records")

    def __init__(self, records: list[KinesisRecord], alone: bool = False) -> None:
        self.records = records
        self.alone = alone
        self._expiry: float | None = None

    def expiry(self) -> float:
        # Computed only for requests held by a backoff, once: their lane's wake-ups read it.
        expiry = self._expiry
        if expiry is None:
            expiry = self._expiry = min(record.expires_at for record in self.records)
        return expiry

    def narrow(self, records: list[KinesisRecord]) -> None:
        """Keep only ``records`` (the others expired)."""
        self.records = records
        self._expiry = None


def merged(first: Request, queued: deque[Request], limits: RequestLimits) -> list[KinesisRecord]:
    """``first``'s records, then those of the requests queued behind it that fit with them in
    one call of ``limits``, taken off ``queued`` in order; stops at the first that does not
    fit, or that goes alone. ``first.records`` itself when nothing joins it."""
    records = first.records
    if first.alone or not queued or queued[0].alone:
        return records
    max_count, max_size = limits.max_count, limits.max_size
    count = len(records)
    size = sum(record.size for record in records)
    joined: list[KinesisRecord] | None = None
    while queued:
        following = queued[0]
        more = following.records
        more_size = sum(record.size for record in more)
        if following.alone or count + len(more) > max_count or size + more_size > max_size:
            break
        queued.popleft()
        if joined is None:
            joined = records.copy()
        joined.extend(more)
        count += len(more)
        size += more_size
    return records if joined is None else joined

"""Retrier: carries out the decisions of ``_core.retry_policy`` for one stream.

For each answered request it asks the pure :func:`~aiokpl._core.retry_policy.classify` what to
do, then does it: resolves finished records, sends retried ones back to the aggregator (whose
prediction may have changed since), tells the shard map about records that landed elsewhere,
and tells the limiter about throttled shards. The stream's backoff after request-level
failures is the sender's (its lane's). Mirrors the KPL's ``retrier.cc``.

Better than the KPL: an aggregate delivered to a shard the map does not know yet (a child
created by a split or merge since the map loaded) is not retried whole. Its verdict waits for
the refresh that this news starts; then the records the new shard holds are delivered and only
the others are retried, predicted with the new map. The KPL retries them all, which writes
duplicates of the records that had landed correctly.

With ``ordering="shard"`` (``_core/ordering.py``) retried records do not go back to the
aggregator: each answered Kinesis record is *settled* with its lane in the
:class:`~aiokpl._pipeline.limiter.OrderedLimiter`, and what of it is retried goes back to the
head of that lane, as one Kinesis record (``regroup``), before any later record. A Kinesis
record stays in flight, its lane closed to later records, while it is resent as part of a
narrowed request or while its verdict waits for a refreshed map; one that expires before it
is sent is settled as it fails.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, cast

from .._core.ordering import regroup
from .._core.records import KinesisRecord
from .._core.retry_policy import (
    MISSING,
    Decisions,
    RetryPolicy,
    classify,
    expire,
    place,
)
from .._core.statistics import RetrierStatistics
from .._record import UserRecord
from .limiter import OrderedLimiter

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._core.answers import Answer
    from .._metrics.recorder import MetricsRecorder
    from .aggregator import Aggregator
    from .limiter import Limiter
    from .scheduler import Scheduler
    from .shard_map import ShardMap

__all__ = ("Retrier",)


class _PendingVerdict:
    """A decision that runs once, on whichever comes first: a refresh attempt or a deadline."""

    __slots__ = ("_decide",)

    def __init__(self, decide: Callable[[], None]) -> None:
        self._decide: Callable[[], None] | None = decide

    def decide(self) -> None:
        decide, self._decide = self._decide, None
        if decide is not None:
            decide()

    def on_due(self, now: float) -> None:
        self.decide()


class Retrier:
    """The retrier of one stream."""

    def __init__(
        self,
        stream: str,
        shard_map: ShardMap,
        aggregator: Aggregator,
        limiter: Limiter,
        scheduler: Scheduler,
        finish: Callable[[list[UserRecord], bool], None],
        clock: Callable[[], float],
        policy: RetryPolicy,
        *,
        metrics: MetricsRecorder | None = None,
        resend: Callable[[list[KinesisRecord]], None],
    ) -> None:
        self.stream = stream
        self._shard_map = shard_map
        self._aggregator = aggregator
        self._limiter = limiter
        self._scheduler = scheduler
        self._finish = finish
        self._clock = clock
        self._policy = policy
        self._metrics = metrics
        # Sends a group of Kinesis records as a request of its own (the sender's submit).
        self._resend = resend
        # With ordering="shard": the lanes that answered records are settled with.
        self._lanes = limiter if isinstance(limiter, OrderedLimiter) else None
        self.retries = 0
        self.expired = 0

    def handle_result(
        self,
        records: list[KinesisRecord],
        answer: Answer,
        started: float,
        ended: float,
    ) -> None:
        now = self._clock()
        decisions = classify(
            records, answer, started, ended, now, self._policy, self._shard_map.hash_range
        )
        error = decisions.request_error
        counted = 0  # delivered user records whose metrics request_done has recorded
        if self._metrics is not None:
            counted = self._metrics.request_done(self.stream, records, answer, started, ended, now)
        if error is not None and error[0] == MISSING:
            # The stream is gone: its map must not outlive it (it may come back another).
            self._shard_map.missing(started)
        for seen_at, predicted in decisions.invalidate:
            self._shard_map.invalidate(seen_at, predicted)
        for shard, (count, size) in decisions.accepted.items():
            self._limiter.accepted(shard, count, size, now)
        for shard in decisions.throttled_shards:
            self._limiter.throttled(shard, now, started)
        for kinesis_record, shard_id, sequence_number in decisions.undecided:
            verdict = _PendingVerdict(
                partial(self._place, kinesis_record, shard_id, sequence_number, started, ended)
            )
            # Decided by the next refresh attempt, or at the records' expiry if that is sooner.
            self._shard_map.after_refresh(verdict.decide)
            self._scheduler.call_at(kinesis_record.expires_at, verdict)
        self._apply(decisions, counted)
        if self._lanes is not None:
            self._settle(records, decisions)

    def _place(
        self,
        kinesis_record: KinesisRecord,
        shard_id: str,
        sequence_number: str,
        started: float,
        ended: float,
    ) -> None:
        """Judge an aggregate delivered to a then-unknown shard, with the refreshed map."""
        decisions = Decisions()
        place(
            decisions,
            kinesis_record,
            shard_id,
            sequence_number,
            self._shard_map.hash_range(shard_id),
            started,
            ended,
            self._clock(),
            self._policy,
        )
        self._apply(decisions)
        if self._lanes is not None:
            self._lanes.settle(kinesis_record, regroup(kinesis_record, decisions.retry))

    def _apply(self, decisions: Decisions, counted: int = 0) -> None:
        # The core's decisions hold the very records the pipeline gave it: UserRecords.
        succeeded = cast("list[UserRecord]", decisions.succeeded)
        if succeeded:
            if self._metrics is not None and len(succeeded) > counted:
                # Those that landed on another shard than predicted (rare); before they are
                # resolved, as a resolved record has let go of its data.
                self._metrics.delivered_elsewhere(self.stream, succeeded, self._clock())
            self._finish(succeeded, True)
        if decisions.failed:
            self._finish(cast("list[UserRecord]", decisions.failed), False)
        for group in decisions.resend:
            self._resend(group)
        if decisions.retry:
            self.retries += len(decisions.retry)
            if self._lanes is not None:
                return  # back to the heads of their lanes: see _settle
            put = self._aggregator.put
            for record in cast("list[UserRecord]", decisions.retry):
                put(record, record.hash_key)

    def _settle(self, sent: Sequence[KinesisRecord], decisions: Decisions) -> None:
        """Settle each Kinesis record of an answered request with its lane, its retried
        records going back to the lane's head; not those resent, nor those whose verdict
        waits for the map (they are still in flight)."""
        lanes = self._lanes
        assert lanes is not None
        pending: set[int] = set()
        for group in decisions.resend:
            pending.update(map(id, group))
        pending.update(id(kinesis_record) for kinesis_record, _, _ in decisions.undecided)
        retried = {id(record) for record in decisions.retry}
        for kinesis_record in sent:
            if id(kinesis_record) in pending:
                continue
            again = None
            if retried:
                retry = [record for record in kinesis_record.records if id(record) in retried]
                again = regroup(kinesis_record, retry)
            lanes.settle(kinesis_record, again)

    def expire(self, record: KinesisRecord, where: str) -> None:
        """Fail every user record of ``record`` as ``"Expired"`` (from the limiter or sender)."""
        now = self._clock()
        expired = cast("list[UserRecord]", expire(record, now, where))
        self.expired += len(expired)
        if self._metrics is not None:
            self._metrics.expired_unsent(expired, now)
        self._finish(expired, False)

    def expire_before_send(self, records: list[KinesisRecord], now: float) -> list[KinesisRecord]:
        """Drop (and fail) the records whose TTL passed while they waited to be sent."""
        if all(record.expires_at > now for record in records):
            return records
        live = []
        for record in records:
            if record.expires_at > now:
                live.append(record)
            else:
                # It took the shard's tokens in the limiter but never reached the wire.
                self._limiter.refund(record)
                self.expire(record, "sender queue")
                if self._lanes is not None:
                    self._lanes.settle(record, None)
        return live

    def statistics(self) -> RetrierStatistics:
        """A snapshot: user-record retries, and records expired before they were sent."""
        return RetrierStatistics(retries=self.retries, expired_unsent=self.expired)

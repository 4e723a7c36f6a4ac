"""Retrier: judges each answered request of one stream with ``_core.retry_policy``.

For each answered request it asks the pure :func:`~aiokpl._core.retry_policy.classify` what to
do and returns those :class:`~aiokpl._core.retry_policy.Decisions`: records to resolve, records
to retry, groups to resend, news for the shard map, throttled and accepting shards. The stream's
router carries them out; the retrier touches no other stage. What it keeps is its own: its
counters and the request metrics. (The stream's backoff after request-level failures is its
lane's, in the sender.) Mirrors the KPL's ``retrier.cc``.

Better than the KPL: an aggregate delivered to a shard the map does not know yet (a child
created by a split or merge since the map loaded) is not retried whole. Its verdict waits for
the refresh that this news starts (the router waits; :meth:`Retrier.place` judges); then the
records the new shard holds are delivered and only the others are retried, predicted with the
new map. The KPL retries them all, which writes duplicates of the records that had landed
correctly.

Where retried records go (back to the aggregator, or with ``ordering="shard"`` to the head of
their lane) is the ordering policy's to say: ``_pipeline/ordering.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from .._core.records import KinesisRecord
from .._core.retry_policy import (
    Decisions,
    RetryPolicy,
    classify,
    expire,
    place,
)
from .._core.statistics import RetrierStatistics
from .._record import UserRecord

if TYPE_CHECKING:
    from .._core.answers import Answer
    from .._core.shards import ShardRange
    from .._metrics.recorder import MetricsRecorder

__all__ = ("Retrier",)


class Retrier:
    """The retrier of one stream."""

    def __init__(
        self,
        stream: str,
        policy: RetryPolicy,
        *,
        metrics: MetricsRecorder | None = None,
    ) -> None:
        self.stream = stream
        self._policy = policy
        self._metrics = metrics
        self.retries = 0
        self.expired = 0
        self.billed_kib = 0
        self.put_payload_units = 0

    def handle_result(
        self,
        records: list[KinesisRecord],
        answer: Answer,
        started: float,
        ended: float,
        now: float,
        hash_range: Callable[[str], ShardRange | None],
    ) -> Decisions:
        """Judge an answered request (``hash_range``: the shard map's), count, and record the
        request's metrics. (The stream's backoff after a request-level failure is its lane's,
        in the sender.)"""
        decisions = classify(records, answer, started, ended, now, self._policy, hash_range)
        counted = 0  # delivered user records whose metrics request_done has recorded
        if self._metrics is not None:
            counted = self._metrics.request_done(self.stream, records, answer, started, ended, now)
        self._count(decisions, counted, now)
        self.billed_kib += decisions.billed_kib
        self.put_payload_units += decisions.put_payload_units
        return decisions

    def place(
        self,
        kinesis_record: KinesisRecord,
        shard_id: str,
        sequence_number: str,
        shard_range: ShardRange | None,
        started: float,
        ended: float,
        now: float,
    ) -> Decisions:
        """Judge an aggregate delivered to a then-unknown shard (``shard_range``: its range in
        the refreshed map, if it has it)."""
        decisions = Decisions()
        place(
            decisions,
            kinesis_record,
            shard_id,
            sequence_number,
            shard_range,
            started,
            ended,
            now,
            self._policy,
        )
        self._count(decisions, 0, now)
        return decisions

    def _count(self, decisions: Decisions, counted: int, now: float) -> None:
        # The core's decisions hold the very records the pipeline gave it: UserRecords.
        succeeded = cast("list[UserRecord]", decisions.succeeded)
        if self._metrics is not None and len(succeeded) > counted:
            # Those that landed on another shard than predicted (rare); before they are
            # resolved, as a resolved record has let go of its data.
            self._metrics.delivered_elsewhere(self.stream, succeeded, now)
        self.retries += len(decisions.retry)

    def expire(self, record: KinesisRecord, where: str, now: float) -> list[UserRecord]:
        """The user records of ``record``, each failed as ``"Expired"`` (from the limiter or
        the sender's queue): to resolve."""
        expired = cast("list[UserRecord]", expire(record, now, where))
        self.expired += len(expired)
        if self._metrics is not None:
            self._metrics.expired_unsent(expired, now)
        return expired

    def statistics(self) -> RetrierStatistics:
        """A snapshot: user-record retries, and records expired before they were sent."""
        return RetrierStatistics(
            retries=self.retries,
            expired_unsent=self.expired,
            billed_kib=self.billed_kib,
            put_payload_units=self.put_payload_units,
        )

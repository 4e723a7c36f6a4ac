"""What the producer tells you about each record: its attempts and its final result.

Every trip of a record through the sender ends in one :class:`Attempt`; the record's single
:class:`RecordResult` carries all of them, so a caller can tell a record that failed once from
one that spent thirty seconds throttled. Both are frozen and slotted: they cross task
boundaries and may be kept for a long time. :class:`RecordFailedError`, what
:meth:`RecordResult.raise_for_failure` raises, is here too: it carries the result, so it sits
beside it (``errors.py`` imports nothing, this module imports its base class).

Mirrors ``Attempt`` and the result the KPL hands back to its Java wrapper
(``aws/kinesis/core/attempt.h``, ``user_record.cc``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import AiokplError

if TYPE_CHECKING:
    from .wire import Tag

__all__ = (
    "CAUSE_MAX",
    "Attempt",
    "FailedRecord",
    "RecordFailedError",
    "RecordResult",
    "with_cause",
)

CAUSE_MAX = 300
"""Characters of the last cause's message that :func:`with_cause` quotes (the whole message is
in that attempt: a proxy's error page can arrive whole as one)."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt to deliver a record: a ``PutRecords`` call, or a local failure.

    Times are in seconds on the producer's clock (``anyio.current_time()``), so differences
    between them are meaningful, absolute values are not wall-clock times.

    Attributes:
        started_at: when the request carrying the record was sent.
        ended_at: when its response (or failure) arrived.
        delay: time the record waited before this attempt started: since it was put, for the
            first attempt, or since the previous attempt ended.
        success: whether Kinesis accepted the record in this attempt.
        error_code: the service's error code (e.g. ``"ProvisionedThroughputExceededException"``)
            or one of the producer's own (``"Expired"``, ``"Internal"``, ``"Cancelled"``, …);
            ``None`` on success.
        error_message: the human-readable message that came with ``error_code``.
        shard_id: the shard Kinesis put the record on (success only).
        sequence_number: the sequence number Kinesis gave the record (success only).
        outcome_unknown: the request was sent and no answer saying what became of the record
            was read (a timeout, a lost connection, a malformed answer, or the producer
            cancelled or closed while it was in flight): the record may be in the stream.
    """

    started_at: float
    ended_at: float
    delay: float
    success: bool
    error_code: str | None = None
    error_message: str | None = None
    shard_id: str | None = None
    sequence_number: str | None = None
    outcome_unknown: bool = False

    @property
    def duration(self) -> float:
        """How long the attempt took: ``ended_at - started_at``."""
        return self.ended_at - self.started_at


def with_cause(message: str, attempts: tuple[Attempt, ...]) -> str:
    """``message``, and what the last of ``attempts`` failed with, when there were any.

    For the codes that say only that time ran out (``"Expired"``, ``"Cancelled"`` at exit): a
    record that spent its TTL failing to reach the endpoint says so in its own message,
    ``record_ttl_ms elapsed …; after 14 attempts, the last failed with
    EndpointConnectionError: Could not connect to the endpoint URL: …``, not only in its
    attempts. A record that was never sent (no attempts) keeps ``message`` as it is.
    """
    if not attempts:
        return message
    last = attempts[-1]
    cause = last.error_message or ""
    if len(cause) > CAUSE_MAX:
        cause = f"{cause[:CAUSE_MAX]}…"
    count = len(attempts)
    return (
        f"{message}; after {count} attempt{'s' if count != 1 else ''}, the last failed with "
        f"{last.error_code}: {cause}"
    )


@dataclass(frozen=True, slots=True, repr=False)
class FailedRecord:
    """The record a failed :class:`RecordResult` carries, so it can be stored or put again.

    Present only when ``Config.return_record_on_failure`` is set (the KPL's
    ``ReturnUserRecordOnFailure``), and only on failed results: a delivered record's data is
    never kept.

    Attributes:
        stream: the stream it was put to.
        partition_key: its partition key; ``None`` for a record put without one (and not
            given one yet: one placed by the producer carries ``"-"`` and the explicit hash
            key of the shard chosen).
        data: its payload, as ``bytes``.
        explicit_hash_key: the explicit hash key as a decimal string, or ``None`` if the record
            was routed by its partition key.
        tags: its tags (:class:`~aiokpl.aggregation.Tag` objects, in order; ``()`` for none),
            ready to be put again with ``tags=record.tags``.
    """

    stream: str
    partition_key: str | None
    data: bytes
    explicit_hash_key: str | None = None
    tags: tuple[Tag, ...] = ()

    def __repr__(self) -> str:
        # The payload may be large or sensitive: show its size, not its bytes.
        tags = f", tags={self.tags!r}" if self.tags else ""
        return (
            f"FailedRecord(stream={self.stream!r}, partition_key={self.partition_key!r}, "
            f"data=<{len(self.data)} bytes>, explicit_hash_key={self.explicit_hash_key!r}{tags})"
        )


@dataclass(frozen=True, slots=True)
class RecordResult:
    """The final word on one record.

    Attributes:
        success: ``True`` if the record is in the stream.
        shard_id: the shard holding it (success only).
        sequence_number: its sequence number (success only). Records aggregated together share
            one sequence number.
        attempts: every attempt, oldest first. Never empty for a record that reached the
            pipeline.
        record: the failed record itself (a :class:`FailedRecord`) when
            ``Config.return_record_on_failure`` is set; ``None`` on success or when it is off.
    """

    success: bool
    shard_id: str | None = None
    sequence_number: str | None = None
    attempts: tuple[Attempt, ...] = ()
    record: FailedRecord | None = None

    @property
    def error_code(self) -> str | None:
        """The error code of the last attempt (``None`` for a success or with no attempts)."""
        if self.success or not self.attempts:
            return None
        return self.attempts[-1].error_code

    @property
    def outcome_unknown(self) -> bool:
        """Whether a failed record may be in the stream all the same.

        ``True`` when one of its attempts was sent and never answered (see
        :attr:`Attempt.outcome_unknown`): Kinesis may have stored it then. Putting such a
        record again (a dead-letter replay, say) can store it twice. ``False`` for a delivered
        record, and for a failed one that Kinesis never stored.
        """
        return not self.success and any(attempt.outcome_unknown for attempt in self.attempts)

    @property
    def error_message(self) -> str | None:
        """The error message of the last attempt (``None`` for a success or with no attempts)."""
        if self.success or not self.attempts:
            return None
        return self.attempts[-1].error_message

    def raise_for_failure(self) -> None:
        """Raise :class:`~aiokpl.RecordFailedError` if the record was not delivered.

        Raises:
            RecordFailedError: ``success`` is false; its message names the error code, the
                message and the number of attempts, and its ``result`` attribute is this result.
        """
        if not self.success:
            raise RecordFailedError(self)


class RecordFailedError(AiokplError):
    """Raised by :meth:`RecordResult.raise_for_failure` for a record that was not delivered.

    Attributes:
        result: the failed :class:`~aiokpl.RecordResult`, with every attempt.
    """

    def __init__(self, result: RecordResult) -> None:
        self.result = result
        attempts = len(result.attempts)
        super().__init__(
            f"record failed with {result.error_code}: {result.error_message} "
            f"(after {attempts} attempt{'s' if attempts != 1 else ''})"
        )

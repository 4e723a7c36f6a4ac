"""What to do with each record after a ``PutRecords`` call: finish it, fail it, or retry it.

This is the retrier's decision logic, pure: :func:`classify` takes the Kinesis records that were
sent and what came back (a typed answer, ``_core.answers``), appends one
:class:`~aiokpl.Attempt` per user record, and returns :class:`Decisions` for the async shell to
carry out. It never reads a clock (``now`` is passed in) and does no I/O.

The table, row by row (KPL ``retrier.cc``):

====================================================================  ==========================
outcome                                                               action
====================================================================  ==========================
request error ``ValidationException`` or ``InvalidArgumentException``  resend each half of the
(``NARROWED``) on a request of several Kinesis records: one bad entry  request as it is, alone
may be the cause
request error whose code cannot succeed on retry (``FAIL_FAST``)      fail every record
request error ``ProvisionedThroughputExceededException``, and         fail every record
``fail_if_throttled``
any other request error (including a malformed response or a          retry every record
count mismatch, ``RecordCountMismatch``, and a request that never
left: ``EndpointConnectionError`` …, whose outcome stays known)
record succeeded on the predicted shard, or with no prediction        succeed
record succeeded elsewhere, every user record's hash key inside the   succeed; invalidate the
actual shard's range (a split child): the map is stale                shard map if the actual
                                                                      shard is newer
record succeeded elsewhere, on a shard whose known range does not     *evidence* (``unrouted``);
hold the key it was routed by: another stream's range (the stream     wait for the refreshed
was deleted and created again) or the service placed it (``AUTO``),   map, then as below; with
aggregation on                                                        ``service_places``, judge
                                                                      by that range at once
an aggregate succeeded elsewhere with a user record outside that      retry every user record
range (or range unknown)                                              of it ("Wrong Shard");
                                                                      invalidate the shard map
the same, ``service_places`` and ``aggregates_anywhere``              succeed
a raw record succeeded elsewhere (Kinesis routed it by its own key,   succeed; invalidate (and
or placed it itself)                                                  evidence, as above)
record failed with a ``FAIL_FAST`` code                               fail
``ExpiredTokenException`` (request or record) for the third time      fail (else retry, after
                                                                      the request backoff)
record throttled and ``fail_if_throttled``                            fail
record failed with any other code                                     retry
====================================================================  ==========================

"Retry" means *retry unless expired*: once a record's TTL has passed it fails with
``"Expired"`` instead, after the attempt that just failed is recorded. A retried record gets a
new deadline of now + ``record_max_buffered_time / 2`` and goes back to the aggregator, whose
shard prediction may have changed.

Better than the KPL, which retries every error until expiry: codes that cannot succeed on retry
(missing stream, denied access, invalid request, KMS key problems, bad credentials) fail at
once, with their code.

**An aggregate on another shard is retried whole.** A KCL consumer keeps an aggregate only if
every one of its user records has its hash key in the range of the shard that holds it: as
soon as one is outside, it drops all of them (``AggregatorUtil.deaggregate`` removes those it
took and stops). So the user records of an aggregate that landed with any record outside the
shard's range are all sent again, not only those outside (the KPL's ``retrier.cc``
``succeed_if_correct_shard`` reports those inside delivered, and a KCL consumer never sees
them). A consumer without the range check (``deaggregate()`` without ``shard=``) sees those
inside twice; :class:`aiokpl.aggregation.Deduper` drops such copies.

**Streams that place records themselves** (``RecordDistributionStrategy`` ``AUTO``): the
router sends their records unpredicted (so they succeed wherever they land) and sets
``RetryPolicy.service_places``; aggregates sent before it knew land anywhere, and are judged by
the range of the shard that stored them, at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .answers import UNKNOWN_OUTCOME, Answer, Answered, Entry, Refused, RequestFailed
from .records import KinesisRecord, UserRecordLike
from .results import Attempt, with_cause
from .shards import ShardRange

if TYPE_CHECKING:
    from .config import Config

__all__ = (
    "FAIL_FAST",
    "MISSING",
    "NARROWED",
    "THROTTLED",
    "Decisions",
    "RetryPolicy",
    "classify",
    "expire",
    "place",
)

THROTTLED = "ProvisionedThroughputExceededException"
MISSING = "ResourceNotFoundException"
EXPIRED_TOKEN = "ExpiredTokenException"
EXPIRED_TOKEN_ATTEMPTS = 3
"""Attempts a record may make that end in ``ExpiredTokenException``: refreshable credentials
(a role, SSO) are renewed by botocore as a request is signed, so a retry after a backoff can
succeed; static credentials with an expired session token never will, and fail after this
many."""
WRONG_SHARD = "Wrong Shard"
EXPIRED = "Expired"

_KIB = 1024
_PUT_PAYLOAD_UNIT = 25 * _KIB

NARROWED = frozenset({"ValidationException", "InvalidArgumentException"})
"""Request-level codes that one bad entry can cause: a request of several Kinesis records
failing with one of these is split in two and each half resent as it is, until the entry at
fault is alone in its request and fails by itself."""

FAIL_FAST = frozenset(
    {
        MISSING,
        "AccessDeniedException",
        "ValidationException",
        "InvalidArgumentException",
        "UnrecognizedClientException",
        # Credentials that signed wrongly or not at all: resending the same cannot help. A
        # clock more than 5 minutes off gives InvalidSignatureException ("Signature expired")
        # too, and botocore does not correct skew: the message says so.
        "InvalidSignatureException",
        "IncompleteSignature",
        "MissingAuthenticationTokenException",
        "NoCredentialsError",
        "KMSAccessDeniedException",
        "KMSDisabledException",
        "KMSInvalidStateException",
        "KMSNotFoundException",
        "KMSOptInRequired",
    }
)
"""Error codes that no retry can fix: the record fails at once with that code."""


class RetryPolicy:
    """The configuration :func:`classify` needs.

    Args:
        fail_if_throttled: fail throttled records instead of retrying them.
        aggregation_enabled: whether a wrong-shard aggregate must be retried.
        retry_delay: seconds from now to a retried record's new deadline.
        aggregates_anywhere: ``Config.aggregation_on_auto_streams``: the stream's consumers
            do not check hash key ranges, so an aggregate stored on any shard of a stream that
            places records itself is delivered.

    Attributes:
        service_places: the stream places records itself (as far as the router knows); the
            router sets it as that changes. *Mutable*, the only field that is.
    """

    __slots__ = (
        "aggregates_anywhere",
        "aggregation_enabled",
        "fail_if_throttled",
        "retry_delay",
        "service_places",
    )

    def __init__(
        self,
        *,
        fail_if_throttled: bool,
        aggregation_enabled: bool,
        retry_delay: float,
        aggregates_anywhere: bool = False,
    ) -> None:
        self.fail_if_throttled = fail_if_throttled
        self.aggregation_enabled = aggregation_enabled
        self.retry_delay = retry_delay
        self.aggregates_anywhere = aggregates_anywhere
        self.service_places = False

    @classmethod
    def of(cls, config: Config) -> RetryPolicy:
        """The policy a stream's retrier follows under ``config``."""
        return cls(
            fail_if_throttled=config.fail_if_throttled,
            aggregation_enabled=config.aggregation_enabled,
            retry_delay=config.record_max_buffered_time_ms / 1000 / 2,
            aggregates_anywhere=config.aggregation_on_auto_streams,
        )


class Decisions:
    """What :func:`classify` decided; the shell carries it out.

    Attributes:
        succeeded: user records now in the stream (their last attempt says where).
        failed: user records that failed for good (their last attempt says why).
        retry: user records to put back into the aggregator (deadline already moved).
        invalidate: ``(seen_at, predicted_shard)`` pairs for the shard map.
        throttled_shards: predicted shards that answered with throttling (``None`` for
            records sent without a prediction: the stream-level limit).
        accepted: predicted shard → [Kinesis records, bytes] stored where predicted (the
            throttle feedback measures what each shard accepts).
        undecided: Kinesis records delivered to a shard the map does not know yet, as
            ``(record, shard_id, sequence_number)``; judge them with :func:`place` once the
            map has been refreshed.
        resend: groups of Kinesis records to send again as they are, each as a request of
            its own (the halves of a request refused as a whole for one bad entry).
        request_error: the request-level ``(code, message)``, if the call failed as a whole.
        unrouted: evidence that the service placed a record itself: one was stored on a shard
            whose known range does not hold the key it was routed by.
        billed_kib: the Kinesis records stored, each rounded up to a whole KiB (on-demand
            billing); ``put_payload_units`` the same in 25 KiB units (provisioned billing).
    """

    __slots__ = (
        "accepted",
        "billed_kib",
        "failed",
        "invalidate",
        "put_payload_units",
        "request_error",
        "resend",
        "retry",
        "succeeded",
        "throttled_shards",
        "undecided",
        "unrouted",
    )

    def __init__(self) -> None:
        self.succeeded: list[UserRecordLike] = []
        self.failed: list[UserRecordLike] = []
        self.retry: list[UserRecordLike] = []
        self.invalidate: list[tuple[float, str | None]] = []
        self.throttled_shards: set[str | None] = set()
        self.accepted: dict[str | None, list[int]] = {}
        self.undecided: list[tuple[KinesisRecord, str, str]] = []
        self.resend: list[list[KinesisRecord]] = []
        self.request_error: tuple[str, str] | None = None
        self.unrouted = False
        self.billed_kib = 0
        self.put_payload_units = 0


def _fail_or_retry(
    decisions: Decisions,
    record: UserRecordLike,
    code: str,
    message: str,
    unknown: bool,
    started: float,
    ended: float,
    now: float,
    policy: RetryPolicy,
) -> None:
    record.add_attempt(
        Attempt(
            started,
            ended,
            started - record.last_end,
            False,
            code,
            message,
            outcome_unknown=unknown,
        )
    )
    if (
        code in FAIL_FAST
        or (code == THROTTLED and policy.fail_if_throttled)
        or (code == EXPIRED_TOKEN and _expired_token_attempts(record) >= EXPIRED_TOKEN_ATTEMPTS)
    ):
        decisions.failed.append(record)
    elif now >= record.expires_at:
        said = with_cause("record_ttl_ms elapsed before delivery", record.attempts)
        record.add_attempt(Attempt(now, now, now - ended, False, EXPIRED, said))
        decisions.failed.append(record)
    else:
        record.set_deadline(now + policy.retry_delay)
        decisions.retry.append(record)


def _expired_token_attempts(record: UserRecordLike) -> int:
    return sum(1 for attempt in record.attempts if attempt.error_code == EXPIRED_TOKEN)


def classify(
    sent: Sequence[KinesisRecord],
    answer: Answer,
    started: float,
    ended: float,
    now: float,
    policy: RetryPolicy,
    hash_range: Callable[[str], ShardRange | None],
) -> Decisions:
    """Decide the fate of every user record in ``sent``.

    Args:
        sent: the Kinesis records of the request, in request order.
        answer: what the call came to: answered record by record, failed as a whole, or
            malformed (``_core.answers``).
        started: when the request was sent.
        ended: when its answer arrived.
        now: the current time (for expiry and new deadlines).
        policy: the settings that shape the decisions.
        hash_range: the known hash-key range of a shard id (open, or recently closed).
    """
    decisions = Decisions()
    if isinstance(answer, Answered):
        _judge_entries(decisions, sent, answer.entries, started, ended, now, policy, hash_range)
        return decisions
    code, message = answer.code, answer.message
    decisions.request_error = (code, message)
    if code in NARROWED and len(sent) > 1:
        _split(decisions, sent, code, message, started, ended, now)
        return decisions
    # A malformed answer is an answer to nothing: the outcome is unknown, as for a timeout.
    unknown = answer.outcome_unknown if isinstance(answer, RequestFailed) else True
    for kinesis_record in sent:
        kinesis_record.restore_data()
        for record in kinesis_record.records:
            _fail_or_retry(decisions, record, code, message, unknown, started, ended, now, policy)
    return decisions


def _judge_entries(
    decisions: Decisions,
    sent: Sequence[KinesisRecord],
    entries: Sequence[Entry],
    started: float,
    ended: float,
    now: float,
    policy: RetryPolicy,
    hash_range: Callable[[str], ShardRange | None],
) -> None:
    """Judge each Kinesis record of an answered request by its own entry."""
    for kinesis_record, entry in zip(sent, entries, strict=True):
        if type(entry) is Refused:
            code, message = entry
            if code == THROTTLED:
                decisions.throttled_shards.add(kinesis_record.predicted_shard)
            kinesis_record.restore_data()
            unknown = code in UNKNOWN_OUTCOME
            for record in kinesis_record.records:
                _fail_or_retry(
                    decisions, record, code, message, unknown, started, ended, now, policy
                )
            continue
        shard_id, sequence_number = entry
        # Stored, so billed: on demand by the KiB, provisioned by the 25 KiB unit.
        size = kinesis_record.size
        decisions.billed_kib += -(-size // _KIB)
        decisions.put_payload_units += -(-size // _PUT_PAYLOAD_UNIT)
        predicted = kinesis_record.predicted_shard
        if predicted is None or predicted == shard_id:
            # One tuple of plain values for all of them: it is what their results are built
            # from, on first use (UserRecord.result()).
            delivered = (started, ended, shard_id, sequence_number)
            records = kinesis_record.records
            for record in records:
                record.delivered = delivered
            decisions.succeeded += records
            tally = decisions.accepted.get(predicted)
            if tally is None:
                decisions.accepted[predicted] = [1, size]
            else:
                tally[0] += 1
                tally[1] += size
            continue
        # It landed on another shard than predicted: the shard map is stale, or the service
        # placed it itself.
        decisions.invalidate.append((started, predicted))
        known = hash_range(shard_id)
        actual_range = _range_that_routed(kinesis_record, known)
        if known is not None and actual_range is None:
            decisions.unrouted = True
            if policy.service_places:
                actual_range = known  # the shard's own range: it judges what a KCL keeps
        if actual_range is None and policy.aggregation_enabled and len(kinesis_record.records) > 1:
            # A shard the map does not know yet (a new child), or one whose known range is
            # not the one that routed it: which of these records it holds can only be told
            # once the map has been refreshed.
            decisions.undecided.append((kinesis_record, shard_id, sequence_number))
            continue
        place(
            decisions,
            kinesis_record,
            shard_id,
            sequence_number,
            actual_range,
            started,
            ended,
            now,
            policy,
        )


def _split(
    decisions: Decisions,
    sent: Sequence[KinesisRecord],
    code: str,
    message: str,
    started: float,
    ended: float,
    now: float,
) -> None:
    """A request of several Kinesis records was refused as a whole (``NARROWED``): resend it
    in two halves, so one bad entry fails alone instead of failing its neighbours."""
    live = []
    for kinesis_record in sent:
        expired = now >= kinesis_record.expires_at
        for record in kinesis_record.records:
            record.add_attempt(
                Attempt(started, ended, started - record.last_end, False, code, message)
            )
            if expired:
                said = with_cause("record_ttl_ms elapsed before delivery", record.attempts)
                record.add_attempt(Attempt(now, now, now - ended, False, EXPIRED, said))
        if expired:
            decisions.failed += kinesis_record.records
        else:
            live.append(kinesis_record)
    half = (len(live) + 1) // 2
    decisions.resend = [group for group in (live[:half], live[half:]) if group]


def _range_that_routed(
    kinesis_record: KinesisRecord, actual_range: ShardRange | None
) -> ShardRange | None:
    """``actual_range`` if it can be the range of the shard that stored ``kinesis_record``.

    Kinesis routes a Kinesis record by its explicit hash key, so the shard that stored it owns
    that key. A range known here that does not is another stream's (the stream was deleted and
    created again, its shard ids numbered from 0 again over other ranges): it cannot judge the
    records, and the shard counts as unknown until the map is refreshed.
    """
    if actual_range is None:
        return None
    try:
        routed_by = int(kinesis_record.explicit_hash_key)
    except ValueError:  # not a decimal key (only hand-made records): nothing to check
        return actual_range
    return actual_range if routed_by in actual_range else None


def place(
    decisions: Decisions,
    kinesis_record: KinesisRecord,
    shard_id: str,
    sequence_number: str,
    actual_range: ShardRange | None,
    started: float,
    ended: float,
    now: float,
    policy: RetryPolicy,
) -> None:
    """Judge a Kinesis record that landed on ``shard_id``, not on its predicted shard.

    A raw record is delivered: Kinesis routed it by its own key (or placed it itself), and a
    consumer takes it wherever it is. An aggregate is delivered if every user record of it
    has its hash key in ``actual_range``, or if the stream places records itself and its
    consumers take aggregates anywhere (``aggregates_anywhere``); otherwise a KCL consumer
    drops all of it, and every user record of it is retried as ``"Wrong Shard"``. A range
    that is not one that holds the record's explicit hash key is another stream's, or the
    service placed the record: it counts as unknown (evidence, ``unrouted``), unless the
    stream is known to place records itself (``service_places``): then it is the range a
    KCL consumer judges by.
    """
    routed = _range_that_routed(kinesis_record, actual_range)
    if actual_range is not None and routed is None:
        decisions.unrouted = True
        if policy.service_places:
            routed = actual_range
    records = kinesis_record.records
    if (
        len(records) == 1
        or not policy.aggregation_enabled
        or (policy.service_places and policy.aggregates_anywhere)
        or (routed is not None and all(record.hash_key in routed for record in records))
    ):
        delivered = (started, ended, shard_id, sequence_number)
        for record in records:
            record.delivered = delivered
        decisions.succeeded += records
        return
    kinesis_record.restore_data()  # they are retried
    message = (
        f"record landed on {shard_id}, whose hash key range does not hold all of its "
        f"aggregate, which a KCL consumer then drops whole (predicted "
        f"{kinesis_record.predicted_shard})"
    )
    for record in records:
        _fail_or_retry(decisions, record, WRONG_SHARD, message, False, started, ended, now, policy)


def expire(kinesis_record: KinesisRecord, now: float, where: str) -> list[UserRecordLike]:
    """Fail every user record of ``kinesis_record`` with ``"Expired"``, at ``now``; the message
    of one that had attempts names what the last of them failed with."""
    records = kinesis_record.records
    message = f"record_ttl_ms elapsed while waiting in the {where}"
    for record in records:
        attempts = record.attempts
        said = with_cause(message, attempts) if attempts else message
        record.add_attempt(Attempt(now, now, now - record.last_end, False, EXPIRED, said))
    return records

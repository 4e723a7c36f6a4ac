"""Who places a stream's records: its record distribution, read from ``DescribeStreamSummary``.

Since 2025-26 an on-demand stream can place records itself (``RecordDistributionStrategy``
``AUTO``, switched with ``UpdateStreamRecordDistributionStrategy`` at any time, without telling
producers): the service then ignores partition keys and explicit hash keys and stores each
record on a shard of its own choosing. There a KPL aggregate lands on a shard whose hash key
range does not hold its user records, and a KCL consumer drops them (its de-aggregation keeps
an aggregate only if every user record's hash key lies in the range of the shard that holds
it). The stream's router (``stream.py``) asks :attr:`Distribution.service_places` and sends
each user record alone, unpredicted, while it is true.

What is known, and when (invariants):

* the summary is asked when the stream's pipeline starts, beside the first ``ListShards``
  (records put meanwhile are held, as for the first map: ``first_pending``), then every
  ``check_interval`` seconds (``Config.record_distribution_check_ms``), and at once on
  *evidence*: an answer showing a Kinesis record stored on a shard whose hash key range does
  not hold the key it was sent with (:meth:`Distribution.evidence`), at most once a second;
* evidence makes ``service_places`` true at once, before the summary answers: every
  aggregate sent meanwhile would land misplaced too. An answer to a summary asked after the
  evidence decides; one asked before it does not (the stream may have switched in between),
  and the summary is asked again;
* a stream whose summary cannot be asked (``AccessDeniedException``: the policy lacks
  ``kinesis:DescribeStreamSummary``; or a client without the method) is taken to place
  records by key, as every stream did before 2025, until evidence says otherwise; then it is
  taken to place them itself until a summary answers. That choice is the safe one: records a
  KCL consumer would drop are sent again from the evidence on (``retry_policy.place``), and
  nothing is aggregated while the evidence stands; a denial is logged once, as a warning
  naming the permission, and asked again every 10 minutes (policies get fixed without
  restarts). Other failures are asked again after a backoff (1 s, ×2, up to 60 s, jitter);
  a stream found missing is not asked again until its map loads again
  (:meth:`Distribution.stream_found`).

The same answer gives the capacity mode (``PROVISIONED``, ``ON_DEMAND``), the open shard
count and the stream id, kept here for the statistics and the stream-level limits. The KPL's
newest release reads the strategy from the same call, every 5 minutes, and stops aggregating
on ``AUTO`` streams; it has no evidence path, so a switch costs it up to 5 minutes of
misplaced aggregates.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

import anyio

from .._core.backoff import Backoff
from .._core.listings import AUTO, MALFORMED, UnusableAnswer, summary_of
from .._kinesis import call_control, stream_argument
from .shard_map_logs import brief

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from .._kinesis import KinesisClient

__all__ = ("EVIDENCE_SPACING", "Distribution")

logger = logging.getLogger("aiokpl.shard_map")

EVIDENCE_SPACING = 1.0
"""Seconds between two summaries asked because of evidence (``DescribeStreamSummary`` is
limited to 20 calls a second per account)."""

DENIED_RETRY_AFTER = 600.0
"""Seconds before a denied summary (or a client without the method) is asked again."""

_DENIED = "AccessDeniedException"
_MISSING = "ResourceNotFoundException"


class Distribution:
    """The record distribution of one stream, kept fresh in a task of its own.

    Attributes:
        strategy: ``RecordDistributionStrategy`` as the last summary said (``"AUTO"`` or
            ``"USER_PARTITION_KEY"``), ``None`` until one answers.
        capacity_mode: ``"PROVISIONED"`` or ``"ON_DEMAND"``, ``None`` until known.
        open_shards: the summary's ``OpenShardCount``, ``None`` until known.
        stream_id: the summary's ``StreamId``, if the service gave one. Kept, not sent: the
            service reserves the member "for future use", and botocore sends a request that
            carries a well-formed one to that stream's own endpoint
            (``https://<id>.data-kinesis.<region>.amazonaws.com``) whatever ``endpoint_url``
            says, so passing it on would take a producer pointed at a local server or a VPC
            endpoint to AWS.
        first_pending: the first summary has not been answered (or refused) yet.
        checks: summaries answered so far.
        last_error: ``(code, message)`` of the last failed ask, ``None`` after an answer.
        malformed_answers: summaries that came back unusable.
        on_change: called when :attr:`service_places` changes.
        on_first: called once the first ask has ended, whatever its outcome.
    """

    def __init__(
        self,
        stream: str,
        client: KinesisClient,
        task_group: TaskGroup,
        *,
        check_interval: float = 300.0,
        request_timeout: float = 6.0,
        random_value: Callable[[], float] = random.random,
        step: Callable[[], AbstractContextManager[None]] = nullcontext,
        on_change: Callable[[], None] | None = None,
        on_first: Callable[[], None] | None = None,
    ) -> None:
        self.stream = stream
        self._step = step
        self._client = client
        self._task_group = task_group
        self._check_interval = check_interval
        self._request_timeout = request_timeout
        self._random = random_value
        self._backoff = Backoff(1.0, 2.0, 60.0, jitter=0.5)
        self.strategy: str | None = None
        self.capacity_mode: str | None = None
        self.open_shards: int | None = None
        self.stream_id: str | None = None
        self.first_pending = True
        self.checks = 0
        self.last_error: tuple[str, str] | None = None
        self.malformed_answers = 0
        self.on_change = on_change
        self.on_first = on_first
        # Evidence that the service placed a record itself, not yet answered by a summary
        # asked after it: when it came (None: no such evidence).
        self._evidence_at: float | None = None
        self._asked_at = -math.inf  # when the last ask started
        self._next_at = -math.inf  # when the next ask is due
        self._denied = False  # the last ask was refused (denied, or no such method)
        self._warned_denied = False
        self._wake: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None

    @property
    def service_places(self) -> bool:
        """Whether the service places this stream's records (as far as is known): the
        summary says ``AUTO``, or evidence says so and no summary has contradicted it."""
        return self.strategy == AUTO or self._evidence_at is not None

    # --- events -----------------------------------------------------------------------------
    def start(self) -> None:
        """Ask the first summary (in the background) and keep asking."""
        self._scope = anyio.CancelScope()
        self._task_group.start_soon(self._run, name=f"aiokpl stream summary {self.stream}")

    def evidence(self, now: float, *, presume: bool = True) -> None:
        """A record was stored on a shard whose hash key range does not hold the key it was
        sent with: the service placed it, or the stream was deleted and created again with
        other ranges. The summary is asked at once; with ``presume``, the service is taken
        to place the stream's records until a summary asked after now says otherwise."""
        if self.strategy == AUTO and self._evidence_at is None:
            return  # known: the records judged were sent before the router knew
        if not self._denied:
            self._due(max(now, self._asked_at + EVIDENCE_SPACING))
        if not presume:
            return
        first = self._evidence_at is None
        self._evidence_at = now
        if not first:
            return
        logger.log(
            logging.WARNING if self._denied else logging.INFO,
            "stream %r stored a record on a shard whose hash key range does not hold it: it "
            "may now place records itself (RecordDistributionStrategy AUTO). Records go one "
            "per Kinesis record until %s, and those of misplaced aggregates are sent again",
            self.stream,
            "a DescribeStreamSummary is allowed and says otherwise"
            if self._denied
            else "DescribeStreamSummary says otherwise",
        )
        if self.on_change is not None:
            self.on_change()

    def stream_found(self) -> None:
        """The stream's map loaded: a summary waiting because the stream was missing is due."""
        if self._next_at == math.inf:
            self._due(anyio.current_time())

    def close(self) -> None:
        """Stop asking for good (the producer released the stream's pipeline)."""
        if self._scope is not None:
            self._scope.cancel()
        self.on_change = None
        self.on_first = None

    def _due(self, when: float) -> None:
        """Ask at ``when`` at the latest."""
        if when < self._next_at:
            self._next_at = when
            if self._wake is not None:
                self._wake.set()

    # --- the task ---------------------------------------------------------------------------
    async def _run(self) -> None:
        assert self._scope is not None
        with self._scope:
            while True:
                wait = self._next_at - anyio.current_time()
                if wait > 0:
                    self._wake = anyio.Event()
                    with anyio.move_on_after(wait):
                        await self._wake.wait()
                    self._wake = None
                    continue  # due now, or sooner than planned: look again
                await self._ask()

    async def _ask(self) -> None:
        started = self._asked_at = anyio.current_time()
        self._next_at = math.inf  # set below, whatever happens
        try:
            response = await call_control(
                self._client,
                "describe_stream_summary",
                self._request_timeout,
                **stream_argument(self.stream),
            )
            summary = summary_of(response)
        except UnusableAnswer as failure:
            self._failed(failure, started)
        else:
            self._answered(summary.record_distribution, started)
            self.capacity_mode = summary.capacity_mode
            self.open_shards = summary.open_shards
            self.stream_id = summary.stream_id
        if self.first_pending:
            self.first_pending = False
            if self.on_first is not None:
                with self._step():
                    self.on_first()

    def _answered(self, strategy: str, started: float) -> None:
        before = self.service_places
        previous = self.strategy
        self.strategy = strategy
        self.checks += 1
        self.last_error = None
        self._denied = False
        self._backoff.reset()
        now = anyio.current_time()
        self._next_at = now + self._check_interval
        evidence_at = self._evidence_at
        if evidence_at is not None:
            if started >= evidence_at or strategy == AUTO:
                self._evidence_at = None  # asked after the evidence: this answer decides
            else:
                self._next_at = min(self._next_at, started + EVIDENCE_SPACING)
        if strategy != previous:
            logger.info(
                "stream %r %s %s (RecordDistributionStrategy %s)%s",
                self.stream,
                "now places" if previous is not None else "places",
                "records itself" if strategy == AUTO else "records by partition key",
                strategy,
                ": records go one per Kinesis record, unaggregated" if strategy == AUTO else "",
            )
        if self.service_places != before and self.on_change is not None:
            with self._step():
                self.on_change()

    def _failed(self, failure: UnusableAnswer, started: float) -> None:
        code, message = failure.code, failure.message
        self.last_error = (code, message)
        now = anyio.current_time()
        if code == _DENIED or isinstance(failure.__cause__, AttributeError):
            self._denied = True
            self._next_at = now + DENIED_RETRY_AFTER
            if not self._warned_denied:
                self._warned_denied = True
                logger.warning(
                    "DescribeStreamSummary is denied for stream %r (%s: %s): the IAM policy "
                    "lacks kinesis:DescribeStreamSummary, so the producer cannot tell whether "
                    "the stream places records itself (RecordDistributionStrategy AUTO). It "
                    "aggregates until a record lands where its key does not route, then stops "
                    "and sends again what a KCL consumer would drop; asked again every %.0f "
                    "minutes. Grant kinesis:DescribeStreamSummary to the producer's role.",
                    self.stream,
                    code,
                    brief(message),
                    DENIED_RETRY_AFTER / 60,
                )
            return
        if code == _MISSING:
            return  # asked again once the stream's map loads (stream_found)
        if code == MALFORMED:
            self.malformed_answers += 1
            logger.warning(
                "DescribeStreamSummary answered malformed for stream %r (%s): the answer is "
                "not used",
                self.stream,
                brief(message),
            )
        delay = self._backoff.next_delay(self._random())
        self._next_at = now + delay
        logger.debug(
            "DescribeStreamSummary failed for stream %r (%s: %s); asked again in %.1f s",
            self.stream,
            code,
            brief(message),
            delay,
        )

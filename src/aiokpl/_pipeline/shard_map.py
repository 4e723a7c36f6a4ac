"""Which shard owns which hash key, per stream, kept fresh with ListShards or DescribeStream.

States, as in the KPL (``shard_map.cc``): ``INVALID`` (no usable map, a refresh will be tried
after a backoff), ``UPDATING`` (a refresh is running) and ``READY``.

Invariants:

* a prediction never blocks and never does I/O: the aggregator reads ``table`` (the last
  table that loaded) and looks the hash key up in it;
* one refresh at a time; refresh failures back off 1 s, ×1.5, up to 30 s, with jitter;
* an invalidation starts a refresh only if it is news: it was seen after the last refresh
  completed, and the shard it blames is still open in the current table. A burst of
  wrong-shard results after a split therefore causes one refresh, not a storm;
* the ranges of shards that closed stay known for about 60 s after the refresh that dropped
  them, so a record predicted for a parent that lands on a child can be checked;
* whoever asks (:meth:`ShardMap.after_refresh`) is told when the first load attempt ends, loaded
  or failed: the router holds records meanwhile instead of sending them unpredicted.

One attempt asks ``ListShards`` (``AT_LATEST``, pages of 1000). If that fails with anything but
``ResourceNotFoundException`` (the stream is missing: nothing else would know better), the same
attempt asks ``DescribeStream`` (pages of 100, ``ExclusiveStartShardId``, ``HasMoreShards``;
closed shards dropped as above; a stream neither ``ACTIVE`` nor ``UPDATING`` is a failure), the
API the KPL's ``shard_map.cc`` used before ``ListShards`` existed. When ``ListShards`` was
*denied* (``AccessDeniedException``: the IAM policy lacks ``kinesis:ListShards``), later
attempts go to ``DescribeStream`` directly for 10 minutes, then try ``ListShards`` once more:
policies get fixed without restarting producers, and ``DescribeStream`` is limited to 10 calls
per second per account, shared with every other caller, so the producer returns to
``ListShards`` as soon as it may; one denied call every 10 minutes at most costs nothing. Other
``ListShards`` failures (throttling, 5xx, timeouts) are not remembered. A denial is logged once
per stream, as a warning naming the missing permission (both, if ``DescribeStream`` is denied
too); the retries it causes then log at debug level. So do failures to connect
(``_core.answers.UNREACHABLE``): the producer says once that the endpoint cannot be reached
(``_health.Connectivity``), not once per stream and retry.

Errors: only the client calls are caught (:meth:`ShardMap._call`), as ``(code, message)`` by
``_kinesis.error_of``. An answer that came back but cannot make a map (``_core.listings``:
``"MalformedResponse"``, ``"StreamNotActive"``) fails the attempt like a failed call, and a
malformed one is also logged as such and counted (``malformed_answers``). An exception from
our own code reading an answer propagates: a bug is not an outage to retry.

Better than the KPL: while a refresh is running, predictions keep using the previous table, so
aggregation and rate limiting continue (the KPL predicts nothing until the refresh completes).

A stream known to be missing has no map. When a load attempt, or a ``PutRecords`` sent after
the table loaded (:meth:`ShardMap.missing`), answers ``ResourceNotFoundException``, the table
is dropped (state ``INVALID``, no open shard) with the closed shards' ranges, and the stream's
per-shard state goes with it (``on_drop``): records go unpredicted, each alone, and fail fast
while the stream is missing. A stream deleted and created again under the same name is
another stream: the service numbers its shards from 0 again, with other ranges, so an id of the
old map can name another range in the new one. Each table installed is compared with the one
before it: a shard id in both with another range means another stream (the ranges of one
stream's shards never change), and then nothing of the old map is kept, neither closed
ranges nor the state of shards whose id came back (``on_install``'s ``replaced``). The KPL
keeps its map until a refresh succeeds.

The stream is named as the producer was given it: a name goes as ``StreamName``, a stream ARN as
``StreamARN`` (the pages after the first carry ``NextToken`` alone either way).

The stream's record distribution and capacity mode (``DescribeStreamSummary``) are
``distribution.py``'s.

On-demand streams reshard on their own, often. That costs what any reshard costs here, nothing
more: records predicted for a closed parent still land (the service routes them to the child
that owns their keys), the first answer naming a shard the map does not know starts one
refresh (later ones share it), and only the user records of an aggregate that fall outside the
child it landed on are retried (``"Wrong Shard"``), with the refreshed map. Per-shard rate
limits stay as configured: each shard of an on-demand stream has the same 1 MiB/s and 1000
records/s as a provisioned one, and new children get fresh per-shard state.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from enum import Enum
from typing import TYPE_CHECKING, Any

import anyio

from .._core.answers import UNREACHABLE
from .._core.backoff import Backoff
from .._core.listings import (
    MALFORMED,
    UnusableAnswer,
    describe_stream_page,
    list_shards_page,
    open_shards_table,
)
from .._core.shards import ShardRange, ShardTable
from .._core.statistics import ShardMapStatistics
from .._kinesis import call_control, stream_argument
from .shard_map_logs import MissingStreamsLog, brief, described

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from .._kinesis import KinesisClient

__all__ = ("MissingStreamsLog", "ShardMap", "ShardMapState")

logger = logging.getLogger("aiokpl.shard_map")

CLOSED_SHARD_TTL = 60.0
PAGE_SIZE = 1000
# DescribeStream answers at most 100 shards a page, whatever Limit asks for.
DESCRIBE_PAGE_SIZE = 100
# After ListShards was denied, refreshes use DescribeStream alone for this long.
LIST_SHARDS_RETRY_AFTER = 600.0

LIST_SHARDS = "ListShards"
DESCRIBE_STREAM = "DescribeStream"
PUT_RECORDS = "PutRecords"

_DENIED = "AccessDeniedException"
_MISSING = "ResourceNotFoundException"


def _replaced(previous: ShardTable | None, table: ShardTable) -> frozenset[str]:
    """The ids of ``table`` that ``previous`` held with another range: if any, ``table`` is
    another stream's (a shard's range never changes), and then every id both hold."""
    if previous is None:
        return frozenset()
    both = [shard for shard in table if shard.shard_id in previous]
    if all(previous.get(shard.shard_id) == shard for shard in both):
        return frozenset()
    return frozenset(shard.shard_id for shard in both)


class ShardMapState(Enum):
    INVALID = "INVALID"
    UPDATING = "UPDATING"
    READY = "READY"


class ShardMap:
    """The shard map of one stream.

    Attributes:
        source: the API that loaded the current table (``"ListShards"`` or
            ``"DescribeStream"``), ``None`` before one loads.
        last_error: ``(operation, code, message)`` of the failure that explains the state: why
            the last attempt failed, or, when the table came from ``DescribeStream``, why
            ``ListShards`` could not be used; ``None`` after a load with ``ListShards``.
        malformed_answers: answers of the three APIs that came back malformed.
    """

    def __init__(
        self,
        stream: str,
        client: KinesisClient,
        task_group: TaskGroup,
        *,
        request_timeout: float = 6.0,
        random_value: Callable[[], float] = random.random,
        missing_log: MissingStreamsLog | None = None,
        step: Callable[[], AbstractContextManager[None]] = nullcontext,
        on_install: Callable[[ShardTable, frozenset[str]], None] | None = None,
        on_drop: Callable[[], None] | None = None,
    ) -> None:
        self.stream = stream
        self._step = step
        self._missing_log = missing_log if missing_log is not None else MissingStreamsLog(None)
        self._client = client
        self._task_group = task_group
        self._random = random_value
        self._request_timeout = request_timeout
        self.state = ShardMapState.INVALID
        self.table: ShardTable | None = None
        self.updated_at = -float("inf")
        self.refreshes = 0
        self.source: str | None = None
        self.last_error: tuple[str, str, str] | None = None
        # A missing stream's map is not refreshed in the background: the next record that
        # needs a prediction tries again, no sooner than the backoff allows.
        self.dormant = False
        self._retry_at = -float("inf")
        self._closed: dict[str, tuple[ShardRange, float]] = {}
        # The table dropped when the stream went missing: the next one is compared with it.
        self._dropped: ShardTable | None = None
        self._backoff = Backoff(1.0, 1.5, 30.0, jitter=0.5)
        self._running = False
        self._scope: anyio.CancelScope | None = None  # the running refresh's
        self._after_refresh: list[Callable[[], None]] = []
        # Called with each new table as it is installed, and the ids of its shards whose state
        # must go although the id was in the previous table: another stream's shards (the
        # stream's pipeline adjusts).
        self.on_install = on_install
        # Called when the table is dropped: the stream is missing.
        self.on_drop = on_drop
        # When ListShards was denied: its error, and until when DescribeStream is used alone.
        self._list_shards_denial: tuple[str, str] | None = None
        self._list_shards_denied_until = -float("inf")
        self._warned: frozenset[str] = frozenset()
        self.malformed_answers = 0  # answers that came back unusable (logged, retried)

    # --- queries (synchronous, hot path) ------------------------------------------------
    def hash_range(self, shard_id: str) -> ShardRange | None:
        """The range of an open shard, or of one closed less than about 60 s ago."""
        table = self.table
        if table is not None:
            found = table.get(shard_id)
            if found is not None:
                return found
        closed = self._closed.get(shard_id)
        return closed[0] if closed is not None else None

    # --- updates ------------------------------------------------------------------------
    def start(self) -> None:
        """Load the map for the first time (in the background)."""
        self._spawn_refresh()

    def invalidate(self, seen_at: float, predicted_shard: str | None) -> None:
        """A result contradicted the map: refresh it, unless that is already known."""
        if seen_at <= self.updated_at or self.state is not ShardMapState.READY:
            return
        table = self.table
        if predicted_shard is not None and table is not None and predicted_shard not in table:
            return
        logger.info(
            "refreshing the shard map of %r: a record did not land where predicted", self.stream
        )
        self._spawn_refresh()

    def missing(self, seen_at: float) -> None:
        """A request sent at ``seen_at`` answered ``ResourceNotFoundException``: the stream
        is gone. Drop the table, unless it loaded after that request left (the stream exists
        again) or a refresh is running (its answer decides)."""
        if seen_at < self.updated_at or self.table is None or self._running:
            return
        self._drop()
        self.state = ShardMapState.INVALID
        self.last_error = (PUT_RECORDS, _MISSING, "the stream was not found")
        self.dormant = True
        self._retry_at = anyio.current_time()
        self._missing_log.report(self.stream, described(self.last_error))

    def _drop(self) -> None:
        """Forget the table and the closed shards' ranges: the stream is missing."""
        had_table = self.table is not None
        if had_table:
            self._dropped = self.table
        self.table = None
        self._closed = {}
        if had_table and self.on_drop is not None:
            with self._step():
                self.on_drop()

    def after_refresh(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the next refresh attempt ends, starting one if none runs.

        Used for records delivered to a shard the map does not know: only the refreshed map
        can say which of them that shard holds. The refresh is news in itself (an unknown shard
        id), and callbacks arriving while one runs share it, so this cannot cause a storm. If
        the attempt fails, the callbacks run anyway, with the map as it is.
        """
        self._after_refresh.append(callback)
        self._spawn_refresh()

    def wanted(self) -> None:
        """A record needs a prediction: wake a dormant map once its backoff has passed."""
        if self.dormant and anyio.current_time() >= self._retry_at:
            self.dormant = False
            self._spawn_refresh()

    def _spawn_refresh(self) -> None:
        if self._running:
            return
        self.dormant = False
        self._running = True
        self.state = ShardMapState.UPDATING
        self._task_group.start_soon(
            self._refresh_until_done, name=f"aiokpl shard map {self.stream}"
        )

    def close(self) -> None:
        """Stop refreshing for good (the producer released this stream's idle pipeline)."""
        if self._scope is not None:
            self._scope.cancel()
        self._after_refresh = []
        self.on_install = None

    async def _refresh_until_done(self) -> None:
        try:
            with anyio.CancelScope() as self._scope:
                await self._refresh_loop()
        finally:
            self._scope = None
            self._running = False

    async def _refresh_loop(self) -> None:
        while True:
            self.state = ShardMapState.UPDATING
            table, explained = await self._attempt()
            if table is None:
                # Whoever waits for this refresh decides with what is known: a verdict
                # never waits longer than one attempt (and the records' TTL still runs).
                self._run_after_refresh()
                self.state = ShardMapState.INVALID
                delay = self._backoff.next_delay(self._random())
                assert self.last_error is not None
                if self.last_error[1] == _MISSING:
                    # No map for a missing stream; and nothing to refresh until someone puts a
                    # record to it again.
                    self._drop()
                    self.dormant = True
                    self._retry_at = anyio.current_time() + delay
                    # One line for all the streams found missing in a while, not one each.
                    self._missing_log.report(self.stream, described(self.last_error))
                    return
                logger.log(
                    # A denial already warned about once, an endpoint that cannot be reached
                    # (the producer says so once, _health.Connectivity): retries say nothing new.
                    logging.DEBUG
                    if explained or self.last_error[1] in UNREACHABLE
                    else logging.WARNING,
                    "could not load the shard map of %r (%s); retrying in %.1f s",
                    self.stream,
                    described(self.last_error),
                    delay,
                )
                await anyio.sleep(delay)
                continue
            self._install(table, anyio.current_time())
            return

    async def _attempt(self) -> tuple[ShardTable | None, bool]:
        """One load attempt: ``ListShards``, or else ``DescribeStream``.

        Returns the table (``None`` if the attempt failed, ``last_error`` then says why) and
        whether the failure is an IAM denial of both APIs that was already logged.
        """
        now = anyio.current_time()
        listed: tuple[str, str] | None = None
        if now >= self._list_shards_denied_until:
            try:
                table = await self._list_open_shards()
            except UnusableAnswer as failure:
                listed = self._unusable(LIST_SHARDS, failure)
                if listed[0] == _MISSING:
                    # The stream does not exist: DescribeStream would only say so again.
                    self.last_error = (LIST_SHARDS, *listed)
                    return None, False
                if listed[0] == _DENIED:
                    self._list_shards_denial = listed
                    self._list_shards_denied_until = now + LIST_SHARDS_RETRY_AFTER
            else:
                if self._list_shards_denial is not None:
                    logger.info("ListShards is allowed again for stream %r", self.stream)
                    self._list_shards_denial = None
                self.source = LIST_SHARDS
                self.last_error = None
                return table, False
        else:
            listed = self._list_shards_denial
        assert listed is not None
        try:
            table = await self._describe_open_shards()
        except UnusableAnswer as failure:
            described = self._unusable(DESCRIBE_STREAM, failure)
            self.last_error = (DESCRIBE_STREAM, *described)
            return None, self._note_denials(listed, described)
        self._note_denials(listed, None)
        self.source = DESCRIBE_STREAM
        self.last_error = (LIST_SHARDS, *listed)
        return table, False

    def _unusable(self, operation: str, failure: UnusableAnswer) -> tuple[str, str]:
        """``(code, message)`` of a failed call or an answer that cannot make a map; a
        malformed answer is counted and logged as one (a failed call is logged by the retry)."""
        if failure.code == MALFORMED:
            self.malformed_answers += 1
            logger.warning(
                "%s answered malformed for stream %r (%s): the answer is not used",
                operation,
                self.stream,
                brief(failure.message),
            )
        return failure.code, failure.message

    def _note_denials(self, listed: tuple[str, str], described: tuple[str, str] | None) -> bool:
        """Warn, once per stream, that ``ListShards`` (and ``DescribeStream``) are denied.

        ``described`` is ``DescribeStream``'s error, ``None`` if it loaded the map. Returns
        whether both are denied and that was logged (now or before).
        """
        if listed[0] != _DENIED:
            return False
        both = described is not None and described[0] == _DENIED
        permissions = frozenset({LIST_SHARDS, DESCRIBE_STREAM} if both else {LIST_SHARDS})
        if permissions <= self._warned:
            return both
        self._warned |= permissions
        listed = (listed[0], brief(listed[1]))
        if described is not None:
            described = (described[0], brief(described[1]))
        if described is None:
            logger.warning(
                "ListShards is denied for stream %r (%s: %s): the IAM policy lacks "
                "kinesis:ListShards. The shard map is loaded with DescribeStream instead, which "
                "is limited to 10 calls per second per account; ListShards is tried again "
                "every %.0f minutes. Grant kinesis:ListShards to the producer's role.",
                self.stream,
                *listed,
                LIST_SHARDS_RETRY_AFTER / 60,
            )
        elif both:
            logger.warning(
                "the shard map of %r cannot be loaded: the IAM policy lacks both "
                "kinesis:ListShards and kinesis:DescribeStream (%s: %s). Without a map, records "
                "are not aggregated and no shard is predicted: each goes alone, and together "
                "they share one stream-level rate limit at one shard's rates, so the stream "
                "takes far less than its shards could. The map is retried with backoff (up to "
                "every 30 s). Grant kinesis:ListShards to the producer's role.",
                self.stream,
                *listed,
            )
        else:
            logger.warning(
                "ListShards is denied for stream %r (%s: %s): the IAM policy lacks "
                "kinesis:ListShards; DescribeStream, tried instead, failed too (%s: %s). "
                "Grant kinesis:ListShards to the producer's role.",
                self.stream,
                *listed,
                *described,
            )
        return both

    def _install(self, table: ShardTable, now: float) -> None:
        previous = self.table
        replaced = _replaced(previous if previous is not None else self._dropped, table)
        self._dropped = None
        if replaced:
            # Another stream under the same name (deleted and created again): nothing of the
            # old one's ranges may judge where a record landed.
            logger.warning(
                "stream %r was deleted and created again (its shard ids now name other hash "
                "key ranges): the shard map and per-shard state of the old stream are dropped",
                self.stream,
            )
            self._closed = {}
        elif previous is not None:
            for shard in previous:
                if shard.shard_id not in table:
                    self._closed[shard.shard_id] = (shard, now + CLOSED_SHARD_TTL)
        self._closed = {
            shard_id: entry
            for shard_id, entry in self._closed.items()
            if entry[1] > now and shard_id not in table
        }
        self.table = table
        self.updated_at = now
        self.refreshes += 1
        self._backoff.reset()
        self.state = ShardMapState.READY
        logger.info(
            "shard map of %r loaded with %s: %d open shards", self.stream, self.source, len(table)
        )
        with self._step():
            if self.on_install is not None:
                self.on_install(table, replaced)
            self._run_after_refresh()

    def _run_after_refresh(self) -> None:
        callbacks, self._after_refresh = self._after_refresh, []
        with self._step():
            for callback in callbacks:
                callback()

    async def _call(self, operation: str, **arguments: Any) -> object:
        return await call_control(self._client, operation, self._request_timeout, **arguments)

    async def _list_open_shards(self) -> ShardTable:
        response = await self._call(
            "list_shards",
            **stream_argument(self.stream),
            ShardFilter={"Type": "AT_LATEST"},
            MaxResults=PAGE_SIZE,
        )
        shards, token = list_shards_page(response)
        while token:
            # Later pages carry the token alone: the service rejects it with a stream name.
            response = await self._call("list_shards", NextToken=token, MaxResults=PAGE_SIZE)
            page, token = list_shards_page(response)
            shards += page
        return open_shards_table(shards, LIST_SHARDS)

    async def _describe_open_shards(self) -> ShardTable:
        shards: list[dict[str, Any]] = []
        arguments: dict[str, Any] = {**stream_argument(self.stream), "Limit": DESCRIBE_PAGE_SIZE}
        while True:
            response = await self._call("describe_stream", **arguments)
            page, last = describe_stream_page(self.stream, response)
            shards += page
            if last is None:
                return open_shards_table(shards, DESCRIBE_STREAM)
            arguments["ExclusiveStartShardId"] = last

    def __repr__(self) -> str:
        shards = len(self.table) if self.table is not None else 0
        return (
            f"<ShardMap stream={self.stream!r} state={self.state.value} shards={shards} "
            f"source={self.source}>"
        )

    def statistics(self) -> ShardMapStatistics:
        """A snapshot of the map: its state, size, loads and what explains them."""
        table = self.table
        return ShardMapStatistics(
            state=self.state.value,
            open_shards=len(table) if table is not None else 0,
            refreshes=self.refreshes,
            source=self.source,
            last_error=self.last_error,
        )

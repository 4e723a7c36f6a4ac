"""Reading a whole stream as ``aiokpl tail`` does: every shard at once, children after parents.

:func:`tail_stream` lists the stream's shards, reads each with ``GetShardIterator`` and a loop of
``GetRecords`` in its own task, deaggregates every Kinesis record with
:func:`aiokpl.aggregation.deaggregate`, and hands the user records of each page to a callback.

Invariants:

* **parents first.** A shard is read only once every parent it has in the listing has been read
  to its end (``GetRecords`` answering without a ``NextShardIterator``), so after a split or a
  merge the records of one partition key come out in the order they were written, as the KCL
  orders them. Starting at ``LATEST``, the shards already closed are skipped (they will never
  hold anything new) and count as read.
* **within the service's limits.** One shard is polled at most once per
  :data:`MIN_READ_INTERVAL` seconds (``GetRecords`` allows 5 calls per second per shard), and once
  per ``poll_interval`` when it is caught up (an empty page, or ``MillisBehindLatest`` of 0).
  ``ProvisionedThroughputExceededException`` and transient failures (5xx, timeouts, resets) back
  off exponentially with jitter, per shard, and retry.
* **no gap, no repeat.** An iterator that expires (``ExpiredIteratorException``, after five
  minutes) is renewed ``AFTER_SEQUENCE_NUMBER`` of the last record read, or at the original
  start position if nothing was read yet.
* **errors no retry can fix end the reader.** The codes of
  :data:`aiokpl._core.retry_policy.FAIL_FAST` (stream not found, access denied, …) raise
  :class:`TailError` out of :func:`tail_stream`, and so does any error of the first
  ``ListShards``, which checks that the stream can be read at all.

The KPL has no reader; the KCL's shard consumer (``ShardConsumer``, ``PollingRecordsPublisher``)
is the model for the parent-before-child rule and the idle wait between polls.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import anyio

from .._core.backoff import Backoff
from .._core.deaggregation import deaggregate
from .._core.errors import AggregationFormatError
from .._core.retry_policy import FAIL_FAST
from .._core.wire import DeaggregatedRecord
from .._kinesis import KinesisReader, arn_argument, error_of, stream_argument

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

__all__ = ("MIN_READ_INTERVAL", "StartPosition", "TailError", "tail_stream")

MIN_READ_INTERVAL = 0.2
"""Seconds between two ``GetRecords`` calls on one shard while it is behind (5 calls/s)."""

_EXPIRED_ITERATOR = "ExpiredIteratorException"

StartType = Literal["TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"]


@dataclass(frozen=True)
class StartPosition:
    """Where reading starts in every shard.

    Attributes:
        iterator_type: ``"TRIM_HORIZON"`` (the oldest record kept), ``"LATEST"`` (only records
            written from now on) or ``"AT_TIMESTAMP"``.
        timestamp: the instant for ``"AT_TIMESTAMP"`` (an aware ``datetime``), else ``None``.
    """

    iterator_type: StartType
    timestamp: datetime | None = None

    def __post_init__(self) -> None:
        if (self.iterator_type == "AT_TIMESTAMP") != (self.timestamp is not None):
            raise ValueError("a timestamp is given with AT_TIMESTAMP, and only then")


class TailError(Exception):
    """Kinesis refused a read with an error that retrying cannot fix.

    Attributes:
        code: the service's error code, e.g. ``"ResourceNotFoundException"``.
        message: the service's message.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


OnRecords = Callable[[str, list[DeaggregatedRecord]], None]
"""Called with a shard id and the user records of one ``GetRecords`` page, in order."""

OnWarning = Callable[[str], None]
"""Called with a message about a retried error or an undecodable aggregate."""

OnShardStarted = Callable[[str, str], None]
"""Called with a shard id and its iterator type once the shard's first iterator is obtained."""


async def tail_stream(
    client: KinesisReader,
    stream: str,
    *,
    start: StartPosition,
    on_records: OnRecords,
    follow: bool = True,
    poll_interval: float = 1.0,
    limit: int = 10_000,
    on_warning: OnWarning | None = None,
    on_shard_started: OnShardStarted | None = None,
    random_value: Callable[[], float] = random.random,
) -> None:
    """Read every shard of ``stream`` concurrently and pass each page's user records on.

    Runs until cancelled when ``follow`` is true (shards stay open for ever); otherwise returns
    once every shard read has caught up with its newest record.

    Args:
        client: an aiobotocore Kinesis client, or anything with its ``list_shards``,
            ``get_shard_iterator`` and ``get_records``.
        stream: the stream name.
        start: where reading starts in each shard.
        on_records: called synchronously with ``(shard_id, user_records)`` for each non-empty
            page; to stop early, cancel the surrounding scope from it.
        follow: keep polling for new records, like ``tail -f``.
        poll_interval: seconds to wait before polling a caught-up shard again.
        limit: ``Limit`` of each ``GetRecords`` call (1 … 10000).
        on_warning: called with a message for a record whose aggregate cannot be decoded (it
            is then passed on as it is) and for each retried error.
        on_shard_started: called with ``(shard_id, iterator_type)`` when reading a shard starts
            (after its first ``GetShardIterator``).
        random_value: the jitter source of the backoffs (a uniform draw in [0, 1)).

    Raises:
        TailError: Kinesis answered with an error that retrying cannot fix.
    """
    reader = _StreamReader(
        client,
        stream,
        start=start,
        on_records=on_records,
        follow=follow,
        poll_interval=poll_interval,
        limit=limit,
        on_warning=on_warning or (lambda message: None),
        on_shard_started=on_shard_started or (lambda shard_id, iterator_type: None),
        random_value=random_value,
    )
    await reader.run()


def _parents(shard: dict[str, Any]) -> tuple[str, ...]:
    return tuple(
        parent
        for parent in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId"))
        if parent
    )


def _is_open(shard: dict[str, Any]) -> bool:
    return "EndingSequenceNumber" not in shard.get("SequenceNumberRange", {})


class _StreamReader:
    def __init__(
        self,
        client: KinesisReader,
        stream: str,
        *,
        start: StartPosition,
        on_records: OnRecords,
        follow: bool,
        poll_interval: float,
        limit: int,
        on_warning: OnWarning,
        on_shard_started: OnShardStarted,
        random_value: Callable[[], float],
    ) -> None:
        self._client = client
        self._stream = stream
        self._start = start
        self._on_records = on_records
        self._follow = follow
        self._poll_interval = poll_interval
        self._limit = limit
        self._warn = on_warning
        self._on_shard_started = on_shard_started
        self._random = random_value
        self._shards: dict[str, dict[str, Any]] = {}
        self._started: set[str] = set()
        # Shards read to their end, or skipped because they can hold nothing to read.
        self._done: set[str] = set()
        # The first error that ended the reader: raised after the task group, not out of it,
        # so that callers see a TailError rather than an exception group.
        self._error: TailError | None = None

    async def run(self) -> None:
        # The first listing is the check that the stream can be read at all: any error there
        # (a wrong name, no access, no endpoint) ends the reader at once instead of retrying.
        await self._list_shards(retry=False)
        if self._start.iterator_type == "LATEST":
            self._done.update(i for i, shard in self._shards.items() if not _is_open(shard))
        async with anyio.create_task_group() as task_group:
            self._start_ready(task_group, from_start=True)
        if self._error is not None:
            raise self._error

    def _start_ready(self, task_group: TaskGroup, *, from_start: bool) -> None:
        """Start every shard not started yet whose parents are all read (or unknown).

        ``from_start`` is false for shards started because a parent was read to its end.
        """
        for shard_id, shard in self._shards.items():
            if shard_id in self._started or shard_id in self._done:
                continue
            if all(p in self._done or p not in self._shards for p in _parents(shard)):
                self._started.add(shard_id)
                task_group.start_soon(self._read_shard, shard_id, task_group, from_start)

    async def _list_shards(self, *, retry: bool = True) -> None:
        shards: dict[str, dict[str, Any]] = {}
        arguments: dict[str, Any] = stream_argument(self._stream)
        while True:
            page = await self._call(
                "ListShards", self._client.list_shards, retry=retry, **arguments
            )
            for shard in page["Shards"]:
                shards[shard["ShardId"]] = shard
            token = page.get("NextToken")
            if not token:
                break
            arguments = {"NextToken": token}
        self._shards = shards

    async def _call(
        self, operation: str, method: Any, *, retry: bool = True, **arguments: Any
    ) -> dict[str, Any]:
        """Call ``method``, retrying throttling and transient failures with backoff.

        Raises:
            TailError: for a fail-fast error code, ``ExpiredIteratorException`` (which the
                caller handles), or any error when ``retry`` is false.
        """
        backoff = Backoff(initial=0.5, factor=2.0, maximum=10.0)
        while True:
            try:
                response: dict[str, Any] = await method(**arguments)
            except Exception as exc:  # every client error becomes data here
                code, message = error_of(exc)
                if not retry or code in FAIL_FAST or code == _EXPIRED_ITERATOR:
                    raise TailError(code, message) from exc
                delay = backoff.next_delay(self._random())
                self._warn(f"{operation} failed ({code}: {message}); retrying in {delay:.1f} s")
                await anyio.sleep(delay)
            else:
                return response

    async def _iterator(
        self, shard_id: str, after_sequence_number: str | None, from_start: bool
    ) -> tuple[str, str]:
        """A new iterator for ``shard_id`` and its type."""
        arguments: dict[str, Any] = {**stream_argument(self._stream), "ShardId": shard_id}
        if after_sequence_number is not None:
            arguments["ShardIteratorType"] = "AFTER_SEQUENCE_NUMBER"
            arguments["StartingSequenceNumber"] = after_sequence_number
        elif self._start.iterator_type == "LATEST" and not from_start:
            # A child of a shard read from LATEST: everything in it is new.
            arguments["ShardIteratorType"] = "TRIM_HORIZON"
        else:
            arguments["ShardIteratorType"] = self._start.iterator_type
            if self._start.timestamp is not None:
                arguments["Timestamp"] = self._start.timestamp
        response = await self._call(
            "GetShardIterator", self._client.get_shard_iterator, **arguments
        )
        iterator: str = response["ShardIterator"]
        return iterator, arguments["ShardIteratorType"]

    async def _read_shard(self, shard_id: str, task_group: TaskGroup, from_start: bool) -> None:
        try:
            await self._read_shard_until_end(shard_id, task_group, from_start)
        except TailError as error:
            if self._error is None:
                self._error = error
            task_group.cancel_scope.cancel()

    async def _read_shard_until_end(
        self, shard_id: str, task_group: TaskGroup, from_start: bool
    ) -> None:
        last_sequence_number: str | None = None
        iterator: str | None
        iterator, iterator_type = await self._iterator(shard_id, None, from_start)
        self._on_shard_started(shard_id, iterator_type)
        while iterator is not None:
            arguments: dict[str, Any] = {"ShardIterator": iterator, "Limit": self._limit}
            arguments.update(arn_argument(self._stream))
            try:
                page = await self._call("GetRecords", self._client.get_records, **arguments)
            except TailError as error:
                if error.code != _EXPIRED_ITERATOR:
                    raise
                iterator, _ = await self._iterator(shard_id, last_sequence_number, from_start)
                continue
            records = page.get("Records") or []
            if records:
                last_sequence_number = records[-1]["SequenceNumber"]
                self._on_records(shard_id, self._user_records(shard_id, records))
            iterator = page.get("NextShardIterator")
            if iterator is None:
                break  # a closed shard, read to its end
            caught_up = not records or page.get("MillisBehindLatest") == 0
            if caught_up and not self._follow and _is_open(self._shards.get(shard_id, {})):
                return  # a closed shard is read to its end: its children come next
            await anyio.sleep(self._poll_interval if caught_up else MIN_READ_INTERVAL)
        self._done.add(shard_id)
        await self._list_shards()  # the children, which the earlier listing may lack
        self._start_ready(task_group, from_start=False)

    def _user_records(
        self, shard_id: str, records: list[dict[str, Any]]
    ) -> list[DeaggregatedRecord]:
        found: list[DeaggregatedRecord] = []
        for record in records:
            try:
                found += deaggregate(record)
            except AggregationFormatError as exc:
                self._warn(
                    f"{shard_id} record {record.get('SequenceNumber')}: {exc}; shown undecoded"
                )
                found.append(
                    DeaggregatedRecord(
                        record.get("PartitionKey"),  # none on a stream that places records
                        record["Data"],
                        None,
                        record.get("SequenceNumber"),
                        0,
                        False,
                        record.get("ApproximateArrivalTimestamp"),
                    )
                )
        return found

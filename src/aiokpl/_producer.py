"""The producer: the public entry point, owning one task group for every stage.

Per stream, a record flows ShardMap (prediction) → Aggregator → Limiter → Collector → Sender →
Retrier, and from the retrier either to its outcome or back to the aggregator. Everything up
to the sender is synchronous: ``put_record`` runs the record through the aggregator (and, when
a batch fills, further) in the caller's task, without locks, tasks or timers per record. The
producer's own tasks are: one scheduler serving all deadlines, one task per in-flight request
(at most ``max_connections``), and one shard-map refresh per stream while it runs.

Invariants:

* every outcome handed out is resolved exactly once, and all are resolved when ``async with``
  exits: delivered, failed by Kinesis, expired, or cancelled;
* records and bytes outstanding never exceed ``max_outstanding_records`` /
  ``max_outstanding_bytes``: ``put_record`` waits for room, ``put_record_nowait`` refuses;
* a rejected put (bad input, closed producer, full buffer) changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio

from ._core.config import Config
from ._core.errors import BufferFullError, ProducerClosedError
from ._core.hashing import check_stream_name, check_user_record
from ._core.records import KinesisRecord, UserRecord, result_of
from ._core.results import Attempt, RecordResult
from ._core.retry_policy import RetryPolicy
from ._failures import FailureHandler
from ._kinesis import KinesisClient, create_client
from ._outcome import Outcome
from ._pipeline.aggregator import Aggregator
from ._pipeline.collector import Collector
from ._pipeline.limiter import Limiter
from ._pipeline.retrier import Retrier
from ._pipeline.scheduler import Scheduler
from ._pipeline.sender import Sender
from ._pipeline.shard_map import ShardMap

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from anyio.abc import TaskGroup

__all__ = ("Producer", "ProducerStatistics", "StreamStatistics")

logger = logging.getLogger("aiokpl")


def _clock_of_running_loop() -> Callable[[], float]:
    """The clock ``anyio.current_time()`` reads, looked up once.

    anyio finds the running backend on every call, which costs about a microsecond: too much
    twice per record. The function returned is the very one it ends up calling (the asyncio
    loop's ``time``, or ``trio.current_time``), so fake clocks still control the producer.
    """
    try:
        return asyncio.get_running_loop().time
    except RuntimeError:
        trio = sys.modules.get("trio")
        return trio.current_time if trio is not None else anyio.current_time


_YIELD_EVERY_MASK = 255  # put_record yields to the event loop once every 256 calls


@dataclass(frozen=True, slots=True)
class StreamStatistics:
    """A snapshot of one stream's pipeline.

    Attributes:
        stream: the stream name.
        shard_map_state: ``"INVALID"``, ``"UPDATING"`` or ``"READY"``.
        open_shards: shards in the current map (0 before it loads).
        shard_map_refreshes: completed loads of the map.
        aggregating: user records waiting in open aggregates.
        rate_limited: Kinesis records queued in the limiter, all shards.
        queued_by_shard: Kinesis records queued in the limiter, by shard (non-empty only).
        rates_by_shard: current (records/s, bytes/s) of each shard limited so far.
        collecting: Kinesis records in the open ``PutRecords`` request.
        retries: user-record retries so far.
    """

    stream: str
    shard_map_state: str
    open_shards: int
    shard_map_refreshes: int
    aggregating: int
    rate_limited: int
    queued_by_shard: dict[str, int]
    rates_by_shard: dict[str, tuple[float, float]]
    collecting: int
    retries: int


@dataclass(frozen=True, slots=True)
class ProducerStatistics:
    """A snapshot of the producer.

    Attributes:
        outstanding_records: records between ``put_record`` and their result.
        outstanding_bytes: their partition key plus data bytes.
        records_put: records accepted by ``put_record`` so far.
        records_succeeded: records delivered.
        records_failed: records that failed (any code, ``"Expired"`` included).
        requests_sent: ``PutRecords`` calls answered or failed so far.
        requests_failed: of those, calls that failed as a whole.
        requests_in_flight: calls under way now.
        requests_queued: requests waiting for a free connection.
        streams: per-stream snapshots.
        failure_callbacks_pending: async ``Config.on_record_failure`` calls queued or running.
        failure_callback_errors: exceptions ``Config.on_record_failure`` raised so far.
    """

    outstanding_records: int
    outstanding_bytes: int
    records_put: int
    records_succeeded: int
    records_failed: int
    requests_sent: int
    requests_failed: int
    requests_in_flight: int
    requests_queued: int
    streams: tuple[StreamStatistics, ...]
    failure_callbacks_pending: int = 0
    failure_callback_errors: int = 0


class _Stream:
    """The pipeline of one stream: its shard map, aggregator, limiter, collector and retrier."""

    __slots__ = ("aggregator", "collector", "limiter", "retrier", "shard_map", "stream")

    def __init__(self, producer: Producer, stream: str) -> None:
        config = producer.config
        assert producer._task_group is not None
        self.stream = stream
        self.shard_map = ShardMap(
            stream,
            producer._client,
            producer._task_group,
            request_timeout=config.request_timeout_ms / 1000,
        )
        scheduler = producer._scheduler
        clock = producer._clock
        sender = producer._sender
        assert sender is not None
        buffered = config.record_max_buffered_time_ms / 1000
        grace = min(0.05, buffered * 0.2) if config.aggregation_enabled else 0.0
        self.collector = Collector(
            scheduler,
            # The retrier is the sender's destination: it owns the stream's backoff and verdicts.
            lambda records: sender.submit(self.retrier, records),
            clock,
            max_count=config.collection_max_count,
            max_size=config.collection_max_size,
            grace=grace,
        )
        self.limiter = Limiter(
            scheduler,
            self.collector.put,
            self._expire_in_limiter,
            clock,
            records_per_second=config.rate_limit_records_per_sec_per_shard,
            bytes_per_second=config.rate_limit_bytes_per_sec_per_shard,
            drain_interval=config.drain_interval_ms / 1000,
        )
        self.aggregator = Aggregator(
            self.shard_map,
            scheduler,
            self.limiter.put,
            enabled=config.aggregation_enabled,
            max_size=config.aggregation_max_size,
            max_count=config.aggregation_max_count,
        )
        self.retrier = Retrier(
            stream,
            self.shard_map,
            self.aggregator,
            self.limiter,
            scheduler,
            producer._finish,
            clock,
            RetryPolicy(
                fail_if_throttled=config.fail_if_throttled,
                aggregation_enabled=config.aggregation_enabled,
                retry_delay=buffered / 2,
            ),
        )
        self.shard_map.start()

    def _expire_in_limiter(self, record: KinesisRecord) -> None:
        self.retrier.expire(record, "rate limiter")

    def flush(self, now: float) -> None:
        self.aggregator.flush()
        self.limiter.drain(now, force=True)
        self.collector.flush()

    def statistics(self) -> StreamStatistics:
        table = self.shard_map.table
        limiter = self.limiter
        return StreamStatistics(
            stream=self.stream,
            shard_map_state=self.shard_map.state.value,
            open_shards=len(table) if table is not None else 0,
            shard_map_refreshes=self.shard_map.refreshes,
            aggregating=self.aggregator.buffered_records,
            rate_limited=limiter.queued,
            queued_by_shard={s: len(sl.queue) for s, sl in limiter.shards.items() if sl.queue},
            rates_by_shard={s: sl.rates for s, sl in limiter.shards.items()},
            collecting=self.collector.buffered_records,
            retries=self.retrier.retries,
        )


class _FlushWaiter:
    __slots__ = ("event", "horizon", "remaining", "stream")

    def __init__(self, horizon: int, stream: str | None, remaining: int) -> None:
        self.horizon = horizon
        self.stream = stream
        self.remaining = remaining
        self.event = anyio.Event()


class Producer:
    """An async Kinesis producer: aggregation, per-shard rate limiting, batching, retries.

    Use it as an async context manager; entering starts it, exiting flushes everything and
    waits for every record's result (at most about ``record_ttl_ms``)::

        async with Producer(Config(region="us-east-1")) as producer:
            outcome = await producer.put_record(stream="events", partition_key="k", data=b"…")
            result = await outcome

    Args:
        config: the settings.
        client: an object with the Kinesis client methods the pipeline calls (an aiobotocore
            client, or :class:`aiokpl.testing.FakeKinesis`). The producer does not close a
            client it was given. When ``None``, the producer opens its own aiobotocore client
            from ``config`` and closes it on exit.
    """

    def __init__(self, config: Config, *, client: KinesisClient | None = None) -> None:
        if not isinstance(config, Config):
            raise TypeError(f"config must be an aiokpl.Config, not {type(config).__name__}")
        self.config = config
        self._given_client = client
        self._client: Any = client
        self._client_cm: AbstractAsyncContextManager[Any] | None = None
        self._task_group: TaskGroup | None = None
        self._scheduler = Scheduler()
        self._clock: Callable[[], float] = anyio.current_time
        self._sender: Sender | None = None
        self._streams: dict[str, _Stream] = {}
        self._started = False
        self._closed = False
        self._outstanding: dict[UserRecord, None] = {}
        self._outstanding_bytes = 0
        self._seq = 0
        self._puts = 0
        self._succeeded = 0
        self._failed = 0
        self._room: anyio.Event | None = None
        self._flush_waiters: list[_FlushWaiter] = []
        self._failures = FailureHandler(config, self._release_held)
        buffered = config.record_max_buffered_time_ms / 1000
        ttl = config.record_ttl_ms / 1000
        self._buffered = buffered
        self._ttl = ttl
        self._max_records = config.max_outstanding_records
        self._max_bytes = config.max_outstanding_bytes
        self._max_record_size = config.max_record_size

    # --- lifecycle ------------------------------------------------------------------------
    async def __aenter__(self) -> Producer:
        if self._started:
            raise RuntimeError("a Producer can be entered only once; create a new one")
        self._started = True
        if self._client is None:
            self._client_cm = create_client(self.config)
            self._client = await self._client_cm.__aenter__()
        self._clock = _clock_of_running_loop()
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        self._failures.task_group = task_group
        self._sender = Sender(
            self._client,
            task_group,
            self._clock,
            max_connections=self.config.max_connections,
            request_timeout=self.config.request_timeout_ms / 1000,
        )
        task_group.start_soon(self._scheduler.run, name="aiokpl scheduler")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        self._closed = True
        task_group = self._task_group
        assert task_group is not None
        code, message = "Expired", "record_ttl_ms elapsed before the producer closed"
        try:
            if exc_type is None or not issubclass(exc_type, anyio.get_cancelled_exc_class()):
                # Every record gets its chance: at most its TTL plus one request.
                limit = self._ttl + self.config.request_timeout_ms / 1000 + 1.0
                with anyio.move_on_after(limit):
                    await self.flush()  # no put can come in now: this waits for all
        except anyio.get_cancelled_exc_class():
            code, message = "Cancelled", "the producer was cancelled before delivery"
            raise
        finally:
            if exc_type is not None and issubclass(exc_type, anyio.get_cancelled_exc_class()):
                code, message = "Cancelled", "the producer was cancelled before delivery"
            # The task group waits for its (now cancelled) tasks whatever happens outside.
            task_group.cancel_scope.cancel()
            try:
                await task_group.__aexit__(None, None, None)
            finally:
                self._failures.task_group = None
                self._fail_outstanding(code, message)
                self._scheduler.clear()
                await self._failures.drain(self.config.request_timeout_ms / 1000)
                if self._client_cm is not None:
                    with anyio.CancelScope(shield=True):
                        await self._client_cm.__aexit__(None, None, None)
        return None

    def _fail_outstanding(self, code: str, message: str) -> None:
        now = self._clock()
        for record in list(self._outstanding):
            if record.outcome.done():
                continue  # failed already; held for its on_record_failure (see _finish)
            record.add_attempt(Attempt(now, now, now - record.last_end, False, code, message))
            self._finish(record, False)

    # --- putting --------------------------------------------------------------------------
    def _accept(
        self, stream: str, partition_key: Any, data: Any, explicit_hash_key: Any
    ) -> tuple[_Stream | None, bytes, bytes, int, str | None]:
        if self._closed:
            raise ProducerClosedError("the producer is closed; create a new one to put records")
        if self._task_group is None:
            raise RuntimeError("the producer is not started: use it with `async with`")
        pipeline = self._streams.get(stream)
        if pipeline is None:
            check_stream_name(stream)
        key, payload, hash_key, ehk = check_user_record(
            partition_key, data, explicit_hash_key, self._max_record_size
        )
        return pipeline, key, payload, hash_key, ehk

    def _has_room(self, size: int) -> bool:
        return (
            len(self._outstanding) < self._max_records
            and self._outstanding_bytes + size <= self._max_bytes
        )

    def _enqueue(
        self,
        pipeline: _Stream | None,
        stream: str,
        partition_key: str,
        key: bytes,
        payload: bytes,
        hash_key: int,
        ehk: str | None,
    ) -> Outcome[RecordResult]:
        if pipeline is None:
            pipeline = self._streams[stream] = _Stream(self, stream)
        now = self._clock()
        outcome: Outcome[RecordResult] = Outcome()
        self._seq += 1
        record = UserRecord(
            stream,
            partition_key,
            key,
            payload,
            hash_key,
            ehk,
            now,
            now + self._buffered,
            now + self._ttl,
            self._seq,
            outcome,
        )
        self._outstanding[record] = None
        self._outstanding_bytes += record.size
        pipeline.aggregator.put(record)
        return outcome

    async def put_record(
        self,
        *,
        stream: str,
        partition_key: str,
        data: bytes | bytearray | memoryview,
        explicit_hash_key: str | int | None = None,
    ) -> Outcome[RecordResult]:
        """Put one record; wait only if the producer is at its outstanding bounds.

        The record is validated at once; then this returns as soon as there is room. To stay
        cheap it yields to the event loop only once every 256 calls when there is room (a
        cancellation delivered there enqueues nothing). Safe to call from any task.

        Args:
            stream: the stream name.
            partition_key: 1 … 256 characters; decides the shard unless ``explicit_hash_key``.
            data: the payload; ``len(data)`` + the key's UTF-8 length must fit
                ``Config.max_record_size``.
            explicit_hash_key: a decimal hash key (0 … 2**128 - 1) choosing the shard.

        Returns:
            An :class:`Outcome` resolving to the record's :class:`~aiokpl.RecordResult`.

        Raises:
            InvalidRecordError: a value is out of its limits (nothing was enqueued).
            InvalidRecordTypeError: an argument has the wrong type.
            ProducerClosedError: the producer has been closed.
        """
        pipeline, key, payload, hash_key, ehk = self._accept(
            stream, partition_key, data, explicit_hash_key
        )
        size = len(key) + len(payload)
        self._puts += 1
        if not self._puts & _YIELD_EVERY_MASK:
            # A tight loop of puts must let the stages run (sends, deadlines, the shard map);
            # once in a while is enough and keeps the per-record cost low.
            await anyio.lowlevel.checkpoint()
        while not self._has_room(size):
            if self._room is None:
                self._room = anyio.Event()
            await self._room.wait()
            if self._closed:
                raise ProducerClosedError("the producer closed while this put waited for room")
            pipeline = self._streams.get(stream)
        return self._enqueue(pipeline, stream, partition_key, key, payload, hash_key, ehk)

    def put_record_nowait(
        self,
        *,
        stream: str,
        partition_key: str,
        data: bytes | bytearray | memoryview,
        explicit_hash_key: str | int | None = None,
    ) -> Outcome[RecordResult]:
        """Like :meth:`put_record`, but never waits.

        Raises:
            BufferFullError: the producer is at ``max_outstanding_records`` or
                ``max_outstanding_bytes``; nothing was enqueued.
            InvalidRecordError: see :meth:`put_record`.
            InvalidRecordTypeError: see :meth:`put_record`.
            ProducerClosedError: the producer has been closed.
        """
        pipeline, key, payload, hash_key, ehk = self._accept(
            stream, partition_key, data, explicit_hash_key
        )
        if not self._has_room(len(key) + len(payload)):
            raise BufferFullError(
                f"the producer holds {len(self._outstanding)} records / "
                f"{self._outstanding_bytes} bytes (max_outstanding_records="
                f"{self._max_records}, max_outstanding_bytes={self._max_bytes})"
            )
        return self._enqueue(pipeline, stream, partition_key, key, payload, hash_key, ehk)

    def _put_validated(
        self,
        stream: str,
        partition_key: str,
        key: bytes,
        payload: bytes,
        hash_key: int,
        ehk: str | None,
        *,
        force: bool = False,
    ) -> Outcome[RecordResult] | None:
        """Put a record validated elsewhere (by ``SyncProducer``, in its caller's thread).

        Returns ``None`` (and enqueues nothing) when there is no room, unless ``force``.
        """
        if not force and not self._has_room(len(key) + len(payload)):
            return None
        pipeline = self._streams.get(stream)
        return self._enqueue(pipeline, stream, partition_key, key, payload, hash_key, ehk)

    # --- results --------------------------------------------------------------------------
    def _finish(self, record: UserRecord, success: bool) -> None:
        if self._outstanding.pop(record, False) is False:
            return  # already finished
        if success:
            if not record.outcome._resolve_from(result_of, record.outcome_parts()):
                # Failed before and held for its on_record_failure (below): still held.
                self._outstanding[record] = None
                return
            self._succeeded += 1
        elif self._hold_failed(record):
            # An async on_record_failure runs for it: the record stays outstanding
            # (back-pressure, flush() and exit wait for it) until the callback returns.
            self._outstanding[record] = None
            return
        self._release(record)

    def _hold_failed(self, record: UserRecord) -> bool:
        """Resolve a failed record once; whether it stays outstanding for its callback."""
        if record.outcome.done():
            return True  # failed again while held: it is still held
        self._failed += 1
        return self._failures.resolve(record)

    def _release_held(self, record: UserRecord) -> None:
        del self._outstanding[record]
        self._release(record)

    def _release(self, record: UserRecord) -> None:
        self._outstanding_bytes -= record.size
        if self._room is not None:
            self._room.set()
            self._room = None
        if self._flush_waiters:
            self._flush_progress(record)

    def _flush_progress(self, record: UserRecord) -> None:
        for waiter in list(self._flush_waiters):
            if record.seq <= waiter.horizon and waiter.stream in (None, record.stream):
                waiter.remaining -= 1
                if waiter.remaining <= 0:
                    waiter.event.set()
                    self._flush_waiters.remove(waiter)

    # --- flushing -------------------------------------------------------------------------
    def _flush_now(self, stream: str | None) -> None:
        now = self._clock()
        for name, pipeline in list(self._streams.items()):
            if stream is None or name == stream:
                pipeline.flush(now)

    async def flush(self, stream: str | None = None) -> None:
        """Send everything buffered now and wait for the results of all earlier puts.

        Aggregates and requests are closed without waiting for their deadlines, and records
        held back by the rate limiter are released. Returns once every record put before the
        call (to ``stream``, or to any stream) has its result; retries may make that take
        longer than one request. Bound it with ``anyio.fail_after`` if needed.
        """
        self._flush_now(stream)
        remaining = sum(
            1 for record in self._outstanding if stream is None or record.stream == stream
        )
        if not remaining:
            await anyio.lowlevel.checkpoint()
            return
        waiter = _FlushWaiter(self._seq, stream, remaining)
        self._flush_waiters.append(waiter)
        try:
            await waiter.event.wait()
        finally:
            if waiter in self._flush_waiters:
                self._flush_waiters.remove(waiter)

    # --- introspection --------------------------------------------------------------------
    @property
    def outstanding_records(self) -> int:
        """Records between ``put_record`` and their result."""
        return len(self._outstanding)

    @property
    def outstanding_bytes(self) -> int:
        """Partition key plus data bytes of the outstanding records."""
        return self._outstanding_bytes

    def statistics(self) -> ProducerStatistics:
        """A snapshot of the producer's counters and of every stream's pipeline."""
        sender = self._sender
        return ProducerStatistics(
            outstanding_records=len(self._outstanding),
            outstanding_bytes=self._outstanding_bytes,
            records_put=self._seq,
            records_succeeded=self._succeeded,
            records_failed=self._failed,
            requests_sent=sender.requests_sent if sender else 0,
            requests_failed=sender.requests_failed if sender else 0,
            requests_in_flight=sender.in_flight if sender else 0,
            requests_queued=sender.queued if sender else 0,
            streams=tuple(p.statistics() for p in self._streams.values()),
            failure_callbacks_pending=self._failures.pending,
            failure_callback_errors=self._failures.callback_errors,
        )

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running" if self._started else "not started"
        return (
            f"<Producer {state} streams={len(self._streams)} "
            f"outstanding_records={len(self._outstanding)} "
            f"outstanding_bytes={self._outstanding_bytes}>"
        )

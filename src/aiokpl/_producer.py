"""The producer: the public entry point, its lifecycle and its put paths.

Per stream, a record flows ShardMap (prediction) → Aggregator → Limiter → Collector → Sender →
Retrier, and from the retrier either to its outcome or back to the aggregator; one stream's
wiring is :mod:`aiokpl._pipeline.stream`, the result bookkeeping (outstanding records, room,
flush waiters, counters) :mod:`aiokpl._pipeline.ledger`. Everything up to the sender is
synchronous: ``put_record`` runs the record through the aggregator (and, when a batch fills,
further) in the caller's task, without locks, tasks or timers per record. The producer's own
tasks are: one scheduler serving all deadlines (a stream's backoff included), one task per
connection in use (at most ``max_connections``), and one shard-map refresh per stream while it
runs.

The lifecycle is one ``AsyncExitStack``: ``__aenter__`` pushes each part as it starts (the
owned client, the metrics runner, the result settlement, the task group), so a failure at any
step releases exactly what was started and propagates unchanged; ``__aexit__`` flushes (for at
most the TTL plus one request and a second) and unwinds the same stack.

Invariants:

* every outcome handed out is resolved exactly once, and all are resolved when ``async with``
  exits: delivered, failed by Kinesis, expired, or cancelled;
* records and bytes outstanding never exceed ``max_outstanding_records`` /
  ``max_outstanding_bytes``: ``put_record`` waits for room, ``put_record_nowait`` refuses;
* a rejected put (bad input, closed producer, full buffer) changes nothing;
* every random draw that decides timing (the jitter of the retriers', shard maps' and
  coordinator's waits) comes from the producer's one generator, ``jitter_source``, never the
  process-wide one: with it seeded, a seeded fake and a virtual clock, a run replays exactly.
  (A coordination ``producer_id`` left to chance is a ``uuid4``: a name, not a timing.)

Mirrors ``aws/kinesis/core/kinesis_producer.cc`` (the producer and its per-stream pipelines);
unlike the KPL, the producer runs in the caller's event loop, not a child process, and its
flush waits for the results.
"""

from __future__ import annotations

import logging
import math
import random
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from ._backend import current_clock
from ._coordination.coordinator import Coordination, _ProducerCoordinator
from ._core.config import Config
from ._core.encoder import check_tags
from ._core.errors import (
    BufferFullError,
    ConfigError,
    InvalidRecordError,
    InvalidRecordTypeError,
    ProducerClosedError,
)
from ._core.hashing import check_stream_name, check_user_record, parse_stream_arn
from ._core.metrics import METRICS, WINDOW_SECONDS, MetricsTable, MetricStatistics
from ._core.results import RecordResult
from ._core.statistics import ProducerStatistics, SenderStatistics, StreamStatistics
from ._core.wire import Tags
from ._kinesis import KinesisClient, RegionalClients, check_region, create_client, fixed_region
from ._metrics.recorder import MetricsRecorder, MetricsSink
from ._metrics.runner import MetricsRunner
from ._outcome import Outcome
from ._pipeline.ledger import ResultLedger
from ._pipeline.scheduler import Scheduler
from ._pipeline.sender import Sender
from ._pipeline.shard_map import MissingStreamsLog
from ._pipeline.stream import StreamPipeline
from ._record import TaggedRecord, UserRecord

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

__all__ = ("Producer", "ProducerPort", "ProducerStatistics", "StreamStatistics")

logger = logging.getLogger("aiokpl")


# Seconds: a record's arrival is the time of the first put of the millisecond it was put
# in (at most 1 ms early), so its deadline and expiry err early, never late.
_STAMP_RESOLUTION = 0.001
_thread_id = threading.get_ident
_YIELD_EVERY_MASK = 255  # put_record yields to the event loop once every 256 calls


_RECORD_SHAPES = (
    "a record is a (partition_key, data), (partition_key, data, explicit_hash_key) or "
    "(partition_key, data, explicit_hash_key, tags) sequence"
)


def _check_records_argument(records: object) -> None:
    """Refuse a ``records`` argument that is not a collection of records, naming it.

    ``None`` or a number would fail with Python's bare "not iterable"; a string, bytes or a
    mapping would be iterated into characters, ints or keys, each then refused as a record
    with a message about ``records[0]`` that hides the real mistake.
    """
    if isinstance(records, str | bytes | bytearray | memoryview | Mapping) or not isinstance(
        records, Iterable
    ):
        raise InvalidRecordTypeError(
            "records must be an iterable (a list, say) of records, where "
            f"{_RECORD_SHAPES}; got {type(records).__name__}"
        )


def _fields_of(record: Any) -> tuple[Any, Any, Any, Any]:
    """``(partition_key, data, explicit_hash_key, tags)`` of one item given to ``put_records``."""
    if isinstance(record, str | bytes | bytearray | memoryview) or not isinstance(record, Sequence):
        raise InvalidRecordTypeError(f"{_RECORD_SHAPES}, not {type(record).__name__}")
    if len(record) == 2:
        return record[0], record[1], None, None
    if len(record) == 3:
        return record[0], record[1], record[2], None
    if len(record) == 4:
        return record[0], record[1], record[2], record[3]
    raise InvalidRecordTypeError(f"{_RECORD_SHAPES}, not one of length {len(record)}")


# A stream's pipeline with no record outstanding, and none put through it between two looks
# this far apart, is released (its shard map, limiter state and connection lane): state does
# not grow with every stream name ever used. A later put builds it again.
IDLE_SWEEP_SECONDS = 60.0


# What a producer not started yet reports of its requests.
_NO_REQUESTS = SenderStatistics(
    requests_sent=0, requests_failed=0, in_flight=0, queued=0, backing_off=0
)


async def _shielded(close: Callable[..., Awaitable[Any]], *args: Any) -> None:
    """Run ``close(*args)`` shielded from cancellation (an exit that must finish)."""
    with anyio.CancelScope(shield=True):
        await close(*args)


async def _close_task_group(task_group: TaskGroup) -> None:
    """Cancel ``task_group`` and wait for its tasks (given no exception: it has its own)."""
    task_group.cancel_scope.cancel()
    await task_group.__aexit__(None, None, None)


class _IdleSweep:
    """The scheduler entry that looks for idle stream pipelines, every IDLE_SWEEP_SECONDS."""

    __slots__ = ("producer",)

    def __init__(self, producer: Producer) -> None:
        self.producer = producer

    def on_due(self, now: float) -> None:
        self.producer._release_idle_streams(now)


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
        coordination: share per-shard limits with other producer processes through a store
            (:class:`aiokpl.coordination.Coordination`); ``None`` (the default) limits each
            shard to ``config``'s rates alone.
        metrics_sinks: where to send the metrics every ``config.metrics_upload_interval_ms``
            (e.g. :class:`aiokpl.CloudWatchSink`); needs ``config.metrics_level`` other than
            ``"none"``. The producer opens and closes them.
        jitter_source: for tests: the generator of every random draw that decides the
            producer's timing (the jitter of retry, shard-map refresh and coordination waits).
            ``None`` (the default) gives each producer a new unseeded ``random.Random``; a test
            that passes ``random.Random(seed)``, with a seeded fake under a virtual clock,
            replays the same retry schedule on every run.

    Raises:
        ConfigError: ``metrics_sinks`` are given but ``config.metrics_level`` is ``"none"``.
        TypeError: ``config`` is not a ``Config``, a sink is not a ``MetricsSink``,
            ``coordination`` is not a ``Coordination``, or ``jitter_source`` is not a
            ``random.Random``.
    """

    def __init__(
        self,
        config: Config,
        *,
        client: KinesisClient | None = None,
        coordination: Coordination | None = None,
        metrics_sinks: Iterable[MetricsSink] = (),
        jitter_source: random.Random | None = None,
    ) -> None:
        if not isinstance(config, Config):
            raise TypeError(f"config must be an aiokpl.Config, not {type(config).__name__}")
        if jitter_source is not None and not isinstance(jitter_source, random.Random):
            raise TypeError(
                f"jitter_source must be a random.Random, not {type(jitter_source).__name__}"
            )
        # One generator for all of this producer's jitter: the global one is shared with the
        # rest of the process, so a schedule drawn from it could never be replayed.
        self._jitter = random.Random() if jitter_source is None else jitter_source
        if coordination is not None and not isinstance(coordination, Coordination):
            raise TypeError(
                "coordination must be an aiokpl.coordination.Coordination, "
                f"not {type(coordination).__name__}"
            )
        self._coordination = coordination
        self._coordinator: _ProducerCoordinator | None = None
        self._sinks = tuple(metrics_sinks)
        for sink in self._sinks:
            if not isinstance(sink, MetricsSink):
                raise TypeError(f"{sink!r} is not a MetricsSink (open, publish, aclose)")
        self._metrics: MetricsRecorder | None = None
        if config.metrics_level != "none":
            table = MetricsTable(config.metrics_level, config.metrics_granularity)
            self._metrics = MetricsRecorder(table)
        elif self._sinks:
            raise ConfigError(
                "metrics_sinks need Config.metrics_level 'summary' or 'detailed'; it is 'none'"
            )
        self.config = config
        self._given_client = client
        self._client: Any = client
        self._stack: AsyncExitStack | None = None  # what __aenter__ started, unwound at exit
        self._region: str | None = None  # the only region it writes to; None: any ARN's
        self._task_group: TaskGroup | None = None
        self._scheduler = Scheduler()
        self._missing_streams = MissingStreamsLog(self._scheduler)
        self._clock: Callable[[], float] = anyio.current_time
        self._sender: Sender | None = None
        self._streams: dict[str, StreamPipeline] = {}
        self._thread: int | None = None  # the event loop's thread, from __aenter__ on
        self._released_expired_unsent = 0  # of the pipelines released while idle
        self._started = False
        self._closed = False
        self._ledger = ledger = ResultLedger(config, self._metrics, self._clock)
        # Hot path: the ledger's dict, shared, so a put reaches it in one attribute lookup, not
        # two (one lookup, about 15 ns of a put, timeit).
        self._outstanding = ledger.outstanding
        self._failures = ledger.failures
        self._finish = ledger.finish
        self._exit_code = ("Expired", "record_ttl_ms elapsed before the producer closed")
        self._seq = 0
        self._puts = 0
        buffered = config.record_max_buffered_time_ms / 1000
        ttl = config.record_ttl_ms / 1000
        self._buffered = buffered
        self._ttl = ttl
        # (arrival, deadline, expiry) of the latest millisecond's puts; see _enqueue.
        self._stamps = (-math.inf, -math.inf, -math.inf)
        self._max_records = config.max_outstanding_records
        self._max_bytes = config.max_outstanding_bytes
        self._max_record_size = config.max_record_size

    # --- lifecycle ------------------------------------------------------------------------
    async def __aenter__(self) -> Producer:
        if self._started:
            raise RuntimeError("a Producer can be entered only once; create a new one")
        self._started = True
        # Each part is pushed as it starts: a failure at any step unwinds exactly those.
        stack = AsyncExitStack()
        try:
            await self._start(stack)
        except BaseException:
            self._closed = True
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def _start(self, stack: AsyncExitStack) -> None:
        if self._client is None:
            clients = RegionalClients(self.config, create_client)
            self._client = await clients.__aenter__()
            stack.push_async_callback(_shielded, clients.__aexit__, None, None, None)
        self._region = fixed_region(self.config, self._client)
        self._clock = self._ledger.clock = current_clock()
        self._thread = _thread_id()
        runner = None
        if self._metrics is not None:
            runner = MetricsRunner(
                self._metrics, self._sinks, self.config, self._clock, self._outstanding_by_stream
            )
            await stack.enter_async_context(runner)  # opens the sinks; the last upload at exit
        stack.push_async_callback(self._settle_outstanding)
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        stack.push_async_callback(_close_task_group, task_group)
        self._task_group = task_group
        self._failures.task_group = task_group
        self._sender = Sender(
            self._client,
            task_group,
            self._clock,
            self._scheduler,
            max_connections=self.config.max_connections,
            request_timeout=self.config.request_timeout_ms / 1000,
            # A stream with steady traffic sends at least once per buffered time.
            active_window=1.0 + self.config.record_max_buffered_time_ms / 1000,
        )
        task_group.start_soon(self._scheduler.run, name="aiokpl scheduler")
        self._scheduler.call_at(self._clock() + IDLE_SWEEP_SECONDS, _IdleSweep(self))
        if self._coordination is not None:
            self._coordinator = _ProducerCoordinator(
                self._coordination, self.config, self._clock, self._jitter
            )
            task_group.start_soon(self._coordinator.run, name="aiokpl coordination")
        if runner is not None:
            runner.start(task_group)

    def _outstanding_by_stream(self) -> dict[str, int]:
        return self._ledger.outstanding_by_stream(self._streams)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        self._closed = True
        stack = self._stack
        assert stack is not None
        cancelled = anyio.get_cancelled_exc_class()
        try:
            if exc_type is None or not issubclass(exc_type, cancelled):
                # Every record gets its chance: at most its TTL plus one request.
                limit = self._ttl + self.config.request_timeout_ms / 1000 + 1.0
                with anyio.move_on_after(limit):
                    await self.flush()  # no put can come in now: this waits for all
        except cancelled:
            self._exit_code = ("Cancelled", "the producer was cancelled before delivery")
            raise
        finally:
            if exc_type is not None and issubclass(exc_type, cancelled):
                self._exit_code = ("Cancelled", "the producer was cancelled before delivery")
            # Unwinds what __aenter__ started, last first: the task group is cancelled and
            # waited for, outstanding records fail with the exit code and their failure
            # callbacks drain, the metrics make their last upload, the owned client closes.
            await stack.aclose()
        return None

    async def _settle_outstanding(self) -> None:
        """At exit, once the task group has ended: fail what is outstanding, drain callbacks."""
        self._failures.task_group = None
        code, message = self._exit_code
        sender = self._sender
        self._ledger.fail_outstanding(code, message, sender.unanswered() if sender else ())
        self._missing_streams.on_due(self._clock())  # a warning still gathering streams
        self._scheduler.clear()
        await self._failures.drain(self.config.request_timeout_ms / 1000)

    # --- putting --------------------------------------------------------------------------
    def _accept_stream(self, stream: str) -> None:
        """Check that a put to ``stream`` may go ahead: at once for a stream already in use."""
        try:
            if stream in self._streams and not self._closed and _thread_id() == self._thread:
                return  # most puts
        except TypeError:  # unhashable: certainly not a stream name, as the check says
            pass
        self._check_thread()
        if self._closed:
            raise ProducerClosedError("the producer is closed; create a new one to put records")
        if self._task_group is None:
            raise RuntimeError("the producer is not started: use it with `async with`")
        check_stream_name(stream)
        arn = parse_stream_arn(stream)
        if arn is not None:
            check_region(arn, stream, self._region)

    async def _wait_for_room(self, size: int, count: int = 1) -> None:
        """Wait until ``count`` records of ``size`` bytes in all fit the outstanding bounds."""
        while not self._has_room(size, count):
            await self._ledger.wait_for_room()
            self._check_still_open()

    def _release_idle_streams(self, now: float) -> None:
        """Release the pipelines of streams idle since the last sweep; schedule the next."""
        streams = self._streams
        busy = self._ledger.streams_busy()
        for name, pipeline in list(streams.items()):
            # idle_since_last_look runs for every stream: each look records what it saw.
            if pipeline.idle_since_last_look() and name not in busy:
                del streams[name]
                pipeline.close()
                self._released_expired_unsent += pipeline.expired
                if self._sender is not None:
                    self._sender.forget(pipeline)
                if self._coordinator is not None:
                    self._coordinator.detach(name)
                logger.debug("released the idle pipeline of stream %r", name)
        if self._metrics is not None:
            self._metrics.prune(now)
        self._scheduler.call_at(now + IDLE_SWEEP_SECONDS, _IdleSweep(self))

    def _check_thread(self) -> None:
        """Refuse a call from another thread than the event loop's that entered the producer.

        Its stages are not thread-safe, and a record put from a foreign loop would never get
        its result (or crash that loop, on trio).
        """
        if self._thread is not None and _thread_id() != self._thread:
            raise RuntimeError(
                "this Producer runs on the event loop of another thread; call it only from "
                "that loop. To put records from other threads, use aiokpl.SyncProducer"
            )

    def _check_still_open(self) -> None:
        """After every await on a put path: the producer may have closed meanwhile."""
        if self._closed:
            raise ProducerClosedError("the producer closed while this put waited")

    def _client_for(self, stream: str) -> Any:
        """The client that serves ``stream``: its region's, when the producer opened them."""
        client = self._client
        return client.client_for(stream) if isinstance(client, RegionalClients) else client

    def _pipeline_of(self, stream: str) -> StreamPipeline:
        """The stream's pipeline, started on its first record."""
        pipeline = self._streams.get(stream)
        if pipeline is None:
            assert self._task_group is not None
            assert self._sender is not None
            pipeline = self._streams[stream] = StreamPipeline(
                stream,
                self.config,
                client=self._client_for(stream),
                task_group=self._task_group,
                scheduler=self._scheduler,
                clock=self._clock,
                sender=self._sender,
                ledger=self._ledger,
                metrics=self._metrics,
                coordinator=self._coordinator,
                random_value=self._jitter.random,
                missing_log=self._missing_streams,
            )
        return pipeline

    def _has_room(self, size: int, count: int = 1) -> bool:
        return (
            len(self._outstanding) + count <= self._max_records
            and self._ledger.outstanding_bytes + size <= self._max_bytes
        )

    def _check_tags(self, tags: Tags, key: str, size: int, ehk: str | None) -> tuple[bytes, int]:
        """Validate a put's ``tags`` (not ``None``): their encoding, and the record's size."""
        encoded, size = check_tags(tags, key, size, ehk, self._max_record_size)
        if encoded and not self.config.aggregation_enabled:
            raise InvalidRecordError(
                "tags need aggregation (Config.aggregation_enabled is False): a record sent "
                "raw has no place for them"
            )
        return encoded, size

    def _enqueue(
        self,
        stream: str,
        key: str,
        size: int,
        payload: bytes,
        hash_key: int,
        ehk: str | None,
        tags: bytes = b"",
    ) -> Outcome[RecordResult]:
        # Hot path: the stream's pipeline read inline, the call only for a new stream (37 ns
        # per put, 39 vs 75 ns, timeit).
        pipeline = self._streams.get(stream) or self._pipeline_of(stream)
        # Hot path: records put within the same millisecond share one arrival, deadline and
        # expiry (96 bytes less per record: four 24-byte floats with last_end, sys.getsizeof).
        now = self._clock()
        stamps = self._stamps
        if now - stamps[0] >= _STAMP_RESOLUTION:
            stamps = self._stamps = (now, now + self._buffered, now + self._ttl)
        arrival, deadline, expires_at = stamps
        self._seq += 1
        ledger = self._ledger
        if tags:
            record: UserRecord = TaggedRecord(
                stream, key, payload, ehk, size, arrival, deadline, expires_at, ledger.epoch, tags
            )
        else:
            record = UserRecord(
                stream, key, payload, ehk, size, arrival, deadline, expires_at, ledger.epoch
            )
        self._outstanding[record] = None
        ledger.outstanding_bytes += size
        pipeline.put(record, hash_key)
        return record

    async def put_record(
        self,
        *,
        stream: str,
        partition_key: str,
        data: bytes | bytearray | memoryview,
        explicit_hash_key: str | int | None = None,
        tags: Tags | None = None,
    ) -> Outcome[RecordResult]:
        """Put one record; wait only if the producer is at its outstanding bounds.

        The record is validated at once; then this returns as soon as there is room. To stay
        cheap it yields to the event loop only once every 256 calls when there is room (a
        cancellation delivered there enqueues nothing). Safe to call from any task.

        Args:
            stream: the stream name.
            partition_key: 1 … 256 UTF-16 code units (an emoji counts 2); decides the
                shard unless ``explicit_hash_key``.
            data: the payload; ``len(data)`` + the key's UTF-8 length must fit
                ``Config.max_record_size``.
            explicit_hash_key: a decimal hash key (0 … 2**128 - 1) choosing the shard.
            tags: the record's tags (the aggregation format's ``Record.tags``): a mapping of
                ``str`` keys to ``str`` or ``None`` values, or
                :class:`~aiokpl.aggregation.Tag` objects / ``(key, value)`` pairs (kept in
                order, a key may repeat). Consumers read them back with
                :func:`aiokpl.aggregation.deaggregate`. They travel inside an aggregate: a
                record that goes alone is sent as an aggregate of one; they need
                ``Config.aggregation_enabled``, and their encoded bytes count toward
                ``max_record_size``.

        Returns:
            An :class:`Outcome` resolving to the record's :class:`~aiokpl.RecordResult`.

        Raises:
            InvalidRecordError: a value is out of its limits (nothing was enqueued).
            InvalidRecordTypeError: an argument has the wrong type.
            ProducerClosedError: the producer has been closed.
            RuntimeError: called from another thread than the event loop's that entered
                the producer (use :class:`aiokpl.SyncProducer` from threads).
        """
        self._accept_stream(stream)
        key, size, payload, hash_key, ehk = check_user_record(
            partition_key, data, explicit_hash_key, self._max_record_size
        )
        encoded_tags = b""
        if tags is not None:
            encoded_tags, size = self._check_tags(tags, key, size, ehk)
        self._puts += 1
        if not self._puts & _YIELD_EVERY_MASK:
            # A tight loop of puts must let the stages run (sends, deadlines, the shard map).
            # Hot path: once every 256 puts, not every put (5.4 µs per put on asyncio, 6.3 µs
            # on trio, timeit of a loop of checkpoints).
            await anyio.lowlevel.checkpoint()
            self._check_still_open()  # exit may have started while this put yielded
        # Hot path: self._has_room(size), inlined (35 ns per put, 72 vs 107 ns, timeit).
        if (
            len(self._outstanding) >= self._max_records
            or self._ledger.outstanding_bytes + size > self._max_bytes
        ):
            await self._wait_for_room(size)
        return self._enqueue(stream, key, size, payload, hash_key, ehk, encoded_tags)

    def put_record_nowait(
        self,
        *,
        stream: str,
        partition_key: str,
        data: bytes | bytearray | memoryview,
        explicit_hash_key: str | int | None = None,
        tags: Tags | None = None,
    ) -> Outcome[RecordResult]:
        """Like :meth:`put_record`, but never waits.

        Raises:
            BufferFullError: the producer is at ``max_outstanding_records`` or
                ``max_outstanding_bytes``; nothing was enqueued.
            InvalidRecordError: see :meth:`put_record`.
            InvalidRecordTypeError: see :meth:`put_record`.
            ProducerClosedError: the producer has been closed.
            RuntimeError: called from another thread than the event loop's that entered
                the producer (use :class:`aiokpl.SyncProducer` from threads).
        """
        self._accept_stream(stream)
        key, size, payload, hash_key, ehk = check_user_record(
            partition_key, data, explicit_hash_key, self._max_record_size
        )
        encoded_tags = b""
        if tags is not None:
            encoded_tags, size = self._check_tags(tags, key, size, ehk)
        if not self._has_room(size):
            raise BufferFullError(
                f"the producer holds {len(self._outstanding)} records / "
                f"{self._ledger.outstanding_bytes} bytes (max_outstanding_records="
                f"{self._max_records}, max_outstanding_bytes={self._max_bytes})"
            )
        return self._enqueue(stream, key, size, payload, hash_key, ehk, encoded_tags)

    async def put_records(
        self,
        *,
        stream: str,
        records: Iterable[Sequence[Any]],
    ) -> list[Outcome[RecordResult]]:
        """Put many records to one stream in one call, for callers that hold them already.

        Every record is validated first: if any is rejected, nothing is enqueued. Then this
        waits until there is room for all of them (as :meth:`put_record` does for one) and
        enqueues them together, in order, without yielding in between, so a cancellation
        either enqueues all of them or none. It costs less per record than :meth:`put_record`:
        one call, one clock reading and one set of timestamps for the whole group.

        Args:
            stream: the stream name.
            records: ``(partition_key, data)``, ``(partition_key, data, explicit_hash_key)``
                or ``(partition_key, data, explicit_hash_key, tags)`` sequences (tuples, or
                anything of length 2 to 4), with the meaning and limits of
                :meth:`put_record`'s arguments.

        Returns:
            One :class:`Outcome` per record, in the order given.

        Raises:
            InvalidRecordError: a record breaks a limit (the message starts with its index,
                ``records[i]``), or the group could never fit ``max_outstanding_records`` /
                ``max_outstanding_bytes`` at once; nothing was enqueued.
            InvalidRecordTypeError: ``records`` is not an iterable of records (``None``, a
                string, bytes, a mapping), or a record or one of its fields has the wrong type.
            ProducerClosedError: the producer has been closed.
            RuntimeError: called from another thread than the event loop's that entered
                the producer (use :class:`aiokpl.SyncProducer` from threads).
        """
        self._accept_stream(stream)
        _check_records_argument(records)
        if stream not in self._streams:
            # A new stream: start loading its shard map now, before a large group takes its
            # time to be validated and enqueued, so that the group finds the map loaded (or
            # nearly) rather than reaching its deadline held for it (see Aggregator).
            self._pipeline_of(stream)
            await anyio.lowlevel.checkpoint()
            self._check_still_open()
        accepted, size, tagged = self._accept_many(stream, records)
        count = len(accepted)
        if count > self._max_records or size > self._max_bytes:
            raise InvalidRecordError(
                f"records: {count} records of {size} bytes can never be outstanding at once "
                f"(max_outstanding_records={self._max_records}, max_outstanding_bytes="
                f"{self._max_bytes}); put them in smaller groups"
            )
        await anyio.lowlevel.checkpoint()
        self._check_still_open()
        await self._wait_for_room(size, count)
        return self._enqueue_many(stream, accepted, size, tagged)

    def _accept_many(
        self, stream: str, records: Iterable[Sequence[Any]]
    ) -> tuple[list[tuple[str, int, bytes, int, str | None]], int, dict[int, bytes] | None]:
        """Validate a group of puts; returns them as ``check_user_record`` does, their size,
        and the encoded tags of those that have some, by index (``None`` if none has)."""
        self._accept_stream(stream)
        check = check_user_record
        limit = self._max_record_size
        accepted = []
        tagged: dict[int, bytes] | None = None
        size = 0
        index = 0
        try:
            for index, record in enumerate(records):
                if type(record) is tuple and len(record) == 2:
                    item = check(record[0], record[1], None, limit)
                else:
                    key, data, ehk, tags = _fields_of(record)
                    item = check(key, data, ehk, limit)
                    if tags is not None:
                        encoded, record_size = self._check_tags(tags, item[0], item[1], item[4])
                        if encoded:
                            item = (item[0], record_size, item[2], item[3], item[4])
                            if tagged is None:
                                tagged = {}
                            tagged[index] = encoded
                size += item[1]
                accepted.append(item)
        except (InvalidRecordError, InvalidRecordTypeError) as exc:
            raise type(exc)(f"records[{index}]: {exc}") from None
        return accepted, size, tagged

    def _enqueue_many(
        self,
        stream: str,
        accepted: list[tuple[str, int, bytes, int, str | None]],
        size: int,
        tagged: dict[int, bytes] | None = None,
    ) -> list[Outcome[RecordResult]]:
        pipeline = self._pipeline_of(stream)
        # Hot path: one set of timestamps for the group, shared by its records (96 bytes per
        # record, as in _enqueue, sys.getsizeof).
        now = self._clock()
        deadline = now + self._buffered
        expires_at = now + self._ttl
        epoch = self._ledger.epoch
        outstanding = self._outstanding
        put = pipeline.put
        self._seq += len(accepted)
        self._ledger.outstanding_bytes += size
        outcomes: list[Outcome[RecordResult]] = []
        if tagged is None:
            for key, record_size, payload, hash_key, ehk in accepted:
                record = UserRecord(
                    stream, key, payload, ehk, record_size, now, deadline, expires_at, epoch
                )
                outstanding[record] = None
                put(record, hash_key)
                outcomes.append(record)
            return outcomes
        for index, (key, record_size, payload, hash_key, ehk) in enumerate(accepted):
            tags = tagged.get(index)
            if tags is None:
                record = UserRecord(
                    stream, key, payload, ehk, record_size, now, deadline, expires_at, epoch
                )
            else:
                record = TaggedRecord(
                    stream, key, payload, ehk, record_size, now, deadline, expires_at, epoch, tags
                )
            outstanding[record] = None
            put(record, hash_key)
            outcomes.append(record)
        return outcomes

    def _put_validated(
        self,
        stream: str,
        key: str,
        size: int,
        payload: bytes,
        hash_key: int,
        ehk: str | None,
        tags: bytes = b"",
        *,
        force: bool = False,
    ) -> Outcome[RecordResult] | None:
        """Put a record validated elsewhere (by ``SyncProducer``, in its caller's thread).

        Returns ``None`` (and enqueues nothing) when there is no room, unless ``force``.
        """
        if not force and not self._has_room(size):
            return None
        return self._enqueue(stream, key, size, payload, hash_key, ehk, tags)

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
        self._check_thread()
        self._flush_now(stream)
        await self._ledger.wait_flushed(stream)

    # --- introspection --------------------------------------------------------------------
    @property
    def outstanding_records(self) -> int:
        """Records between ``put_record`` and their result."""
        return len(self._outstanding)

    @property
    def outstanding_bytes(self) -> int:
        """Partition key plus data bytes of the outstanding records."""
        return self._ledger.outstanding_bytes

    def metrics(
        self, name: str | None = None, window_s: int | None = None
    ) -> list[MetricStatistics]:
        """Statistics of the KPL metrics over the last ``window_s`` seconds.

        One :class:`~aiokpl.MetricStatistics` per series with values in the window: each
        metric name globally, per stream and per shard (as far as
        ``Config.metrics_granularity`` goes), sorted by name. Empty when
        ``Config.metrics_level`` is ``"none"``.

        Args:
            name: only this metric (e.g. ``"UserRecordsPut"``); ``None`` for all.
            window_s: the span, 1 … 60 whole seconds, the current one included; ``None``
                for 60.

        Raises:
            ValueError: ``window_s`` is out of range or ``name`` is not a metric name.
        """
        window = WINDOW_SECONDS if window_s is None else window_s
        if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= 60:
            raise ValueError(f"window_s must be an int, 1 … {WINDOW_SECONDS}; got {window_s!r}")
        if name is not None and name not in METRICS:
            raise ValueError(f"name must be one of the KPL metric names; got {name!r}")
        metrics = self._metrics
        if metrics is None:
            return []
        now = self._clock()
        if self._task_group is not None:
            metrics.sample(self._outstanding_by_stream(), now, pending=False)
        return metrics.table.window(now, window, name)

    def statistics(self) -> ProducerStatistics:
        """A snapshot of the producer's counters and of every stream's pipeline."""
        sender = self._sender.statistics() if self._sender is not None else _NO_REQUESTS
        streams = tuple(p.statistics() for p in self._streams.values())
        return ProducerStatistics(
            outstanding_records=len(self._outstanding),
            outstanding_bytes=self._ledger.outstanding_bytes,
            records_put=self._seq,
            records_succeeded=self._ledger.succeeded,
            records_failed=self._ledger.failed,
            requests_sent=sender.requests_sent,
            requests_failed=sender.requests_failed,
            requests_in_flight=sender.in_flight,
            requests_queued=sender.queued,
            streams=streams,
            failure_callbacks_pending=self._failures.pending,
            failure_callback_errors=self._failures.callback_errors,
            records_expired_unsent=self._released_expired_unsent
            + sum(s.expired_unsent for s in streams),
            requests_backing_off=sender.backing_off,
        )

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running" if self._started else "not started"
        return (
            f"<Producer {state} streams={len(self._streams)} "
            f"outstanding_records={len(self._outstanding)} "
            f"outstanding_bytes={self._ledger.outstanding_bytes}>"
        )


class _PutValidated(Protocol):
    def __call__(
        self,
        stream: str,
        key: str,
        size: int,
        payload: bytes,
        hash_key: int,
        ehk: str | None,
        tags: bytes = b"",
        *,
        force: bool = False,
    ) -> Outcome[RecordResult] | None: ...


@dataclass(frozen=True, slots=True)
class ProducerPort:
    """What :class:`aiokpl.SyncProducer` needs of a running producer beyond its public API.

    The bound methods themselves, not wrappers: the sync pump calls ``put_validated`` once
    per record, and a port adds no call to that (59 ns per record against a wrapper method,
    65 vs 124 ns, timeit).

    Attributes:
        put_validated: put a record validated elsewhere (in the caller's thread); ``None``
            when there is no room, unless ``force``.
        flush_now: send everything buffered (of a stream, or all) without waiting.
        region: the one region the producer writes to; ``None`` if any ARN's.
    """

    put_validated: _PutValidated
    flush_now: Callable[[str | None], None]
    region: str | None

    @classmethod
    def of(cls, producer: Producer) -> ProducerPort:
        """The port of ``producer``, entered (its region is known once it started)."""
        return cls(producer._put_validated, producer._flush_now, producer._region)

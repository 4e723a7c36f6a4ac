"""The producer: the public entry point, its lifecycle and its put paths.

Per stream, a record flows ShardMap (prediction) → Aggregator → Limiter → Collector → Sender →
Retrier, and from the retrier either to its outcome or back to the aggregator; one stream's
wiring is :mod:`aiokpl._pipeline.stream`, the result bookkeeping :mod:`aiokpl._pipeline.ledger`.
Everything up to the sender is synchronous: ``put_record`` checks the record
(:mod:`.admission`) and enters it (:mod:`.intake`), which runs it through the aggregator (and,
when a batch fills, further) in the caller's task, without locks, tasks or timers per record.

The producer holds its settings, its checked arguments and its spool (not open) from the
start; everything that runs is built when ``async with`` enters it (:func:`.runtime.start`,
which pushes each part to undo onto the producer's ``AsyncExitStack``), and is held as one
:class:`~.runtime.Runtime` (``None`` before, and after a start that failed: a put then says
the producer is not started, or closed). ``__aexit__`` flushes (for at most the TTL plus one
request and a second) and unwinds the same stack; an exit that is cancelled (or interrupted
while it drains) fails what is left ``"Cancelled"`` and logs one line of what that cost
(:mod:`.exit_report`).

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
import random
from collections.abc import Callable, Iterable, Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio

from .._coordination.coordinator import Coordination, ProducerCoordinator
from .._core.config import Config
from .._core.errors import BufferFullError, ProducerClosedError
from .._core.health import (
    DEFAULT_WINDOW,
    Health,
    check_window,
    closed_reason,
    not_started_reason,
    verdict,
)
from .._core.metrics import METRICS, WINDOW_SECONDS, MetricStatistics
from .._core.results import RecordResult
from .._core.statistics import ProducerStatistics, SpoolStatistics, StreamStatistics
from .._core.wire import Tags
from .._kinesis import KinesisClient, create_client
from .._metrics.recorder import MetricsSink
from .._outcome import Outcome
from .._spooling import Spool
from .admission import check_records_argument
from .exit_report import ExitReport, log_cancelled_exit
from .intake import CLOSED, Intake
from .port import ProducerPort
from .runtime import Runtime, check_arguments, start

if TYPE_CHECKING:
    pass

__all__ = ("Producer", "ProducerStatistics", "StreamStatistics", "port_of", "report_exit_to")

logger = logging.getLogger("aiokpl")


# The code and message of the records still outstanding when the producer is cancelled.
_CANCELLED = ("Cancelled", "the producer was cancelled before delivery")
_YIELD_EVERY_MASK = 255  # put_record yields to the event loop once every 256 calls


class Producer:
    """An async Kinesis producer: aggregation, per-shard rate limiting, batching, retries.

    Use it as an async context manager; entering starts it, exiting flushes everything and
    waits for every record's result (at most about ``record_ttl_ms``). An exit that is
    cancelled (Ctrl-C on asyncio, a cancel scope or timeout around it) does not wait: records
    without a result fail with code ``"Cancelled"``, and one warning on the ``aiokpl`` logger
    says how many were delivered, cancelled, sent without an answer, and left in the spool::

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
        tracer_provider: with ``config.tracing``, the OpenTelemetry ``TracerProvider`` its
            spans go to; ``None`` (the default): OpenTelemetry's global one.

    Raises:
        ConfigError: ``metrics_sinks`` are given but ``config.metrics_level`` is ``"none"``,
            or a ``tracer_provider`` while ``config.tracing`` is ``"off"``.
        ImportError: ``config.tracing`` is on and OpenTelemetry's API is not installed (the
            ``otel`` extra).
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
        tracer_provider: Any = None,
    ) -> None:
        if not isinstance(config, Config):
            raise TypeError(f"config must be an aiokpl.Config, not {type(config).__name__}")
        self._arguments = check_arguments(
            config, client, coordination, metrics_sinks, jitter_source, tracer_provider
        )
        self.config = config
        self._stack: AsyncExitStack | None = None  # what __aenter__ started, unwound at exit
        self._started = False
        self._spool: Spool | None = None
        if config.spool_directory is not None:
            self._spool = Spool(config, metrics=self._arguments.metrics, on_full=self._block)
        # What runs from the start to the exit, and its way in (read on every put): made
        # when the producer starts. None before, and after a start that failed.
        self._runtime: Runtime | None = None
        self._intake: Intake | None = None
        self._puts = 0
        # What a cancelled exit does with its summary (a SyncProducer words it itself).
        self._report_exit: Callable[[ExitReport], None] = log_cancelled_exit

    def _block(self, reason: str | None) -> None:
        """The spool's disk is full (``reason``), or has room again (``None``): puts wait
        (the spool says so only while the producer runs)."""
        runtime = self._runtime
        assert runtime is not None
        runtime.admission.blocked = reason
        if reason is None:
            runtime.ledger.wake_room()

    def _not_running(self) -> Exception:
        """What a put or a flush says when the producer does not run: not started yet, or
        closed (a start that failed included)."""
        if self._started:
            return ProducerClosedError(CLOSED)
        return RuntimeError("the producer is not started: use it with `async with`")

    def _accepting(self, stream: str) -> Runtime:
        """The running parts, once a put to ``stream`` may go ahead (``Intake.accept_stream``);
        the put paths that are not ``put_record``'s hot path start here."""
        runtime = self._runtime
        if runtime is None:
            raise self._not_running()
        runtime.intake.accept_stream(stream)
        return runtime

    # --- lifecycle ------------------------------------------------------------------------
    async def __aenter__(self) -> Producer:
        if self._started:
            raise RuntimeError("a Producer can be entered only once; create a new one")
        self._started = True
        # Each part is pushed as it starts: a failure at any step unwinds exactly those.
        stack = AsyncExitStack()
        try:
            runtime = await self._start(stack)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        self._runtime = runtime
        self._intake = runtime.intake
        return self

    async def _start(self, stack: AsyncExitStack) -> Runtime:
        # This module's names, where tests replace them.
        return await start(stack, self._arguments, self._spool, create_client, ProducerCoordinator)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        runtime = self._runtime
        stack = self._stack
        assert runtime is not None
        assert stack is not None
        runtime.intake.closed = True
        if exc_type is not None and issubclass(exc_type, anyio.get_cancelled_exc_class()):
            runtime.exit_code = _CANCELLED
        try:
            if runtime.exit_code is not _CANCELLED:
                # Every record gets its chance: at most its TTL plus one request.
                config = self.config
                limit = config.record_ttl_ms / 1000 + config.request_timeout_ms / 1000 + 1.0
                with anyio.move_on_after(limit):
                    await self.flush()  # no put can come in now: this waits for all
        except BaseException:  # cancelled, or interrupted (trio's KeyboardInterrupt), mid-drain
            runtime.exit_code = _CANCELLED
            raise
        finally:
            try:
                # Unwinds what __aenter__ started, last first: the task group is cancelled and
                # waited for, outstanding records fail with the exit code and their failure
                # callbacks drain, the metrics make their last upload, the spool and the
                # owned client close.
                await stack.aclose()
            finally:
                if runtime.exit_code is _CANCELLED:  # one line: what the cancellation cost
                    failed, unknown = runtime.exit_failed
                    self._report_exit(ExitReport(self.statistics(), failed, unknown))
        return None

    # --- putting --------------------------------------------------------------------------
    async def put_record(
        self,
        *,
        stream: str,
        partition_key: str | None = None,
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
                shard unless ``explicit_hash_key``. ``None`` (or left out): a record without
                a key, which goes as it is to a stream that places records itself
                (``AUTO``); on one that places them by key the producer chooses its shard
                (the one with the most room) and gives it the partition key ``"-"`` and an
                explicit hash key in that shard's range, so it aggregates like the rest.
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
        intake = self._intake
        if intake is None:
            raise self._not_running()
        intake.accept_stream(stream)
        record, hash_key = intake.admission.check(
            stream, partition_key, data, explicit_hash_key, tags
        )
        self._puts += 1
        if not self._puts & _YIELD_EVERY_MASK:
            # A tight loop of puts must let the stages run (sends, deadlines, the shard map).
            # Hot path: once every 256 puts, not every put (5.4 µs per put on asyncio, 6.3 µs
            # on trio, timeit of a loop of checkpoints).
            await anyio.lowlevel.checkpoint()
            intake.check_still_open()  # exit may have started while this put yielded
        if not intake.has_room(record.size):
            await intake.wait_for_room(record.size)
        return intake.enter(record, hash_key)

    def put_record_nowait(
        self,
        *,
        stream: str,
        partition_key: str | None = None,
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
        runtime = self._accepting(stream)
        intake = runtime.intake
        record, hash_key = intake.admission.check(
            stream, partition_key, data, explicit_hash_key, tags
        )
        if not intake.has_room(record.size):
            ledger = runtime.ledger
            raise BufferFullError(
                intake.admission.holds(len(ledger.outstanding), ledger.outstanding_bytes)
            )
        return intake.enter(record, hash_key)

    async def put_records(
        self,
        *,
        stream: str,
        records: Iterable[Sequence[Any]],
    ) -> list[Outcome[RecordResult]]:
        """Put many records to one stream in one call, for callers that hold them already.

        Every record is validated first: if any is rejected, nothing is enqueued (a group of
        more than ``max_outstanding_records`` is refused before its records are). Then this
        waits until there is room for all of them (as :meth:`put_record` does for one) and
        enqueues them together, in order, without yielding in between, so a cancellation
        either enqueues all of them or none. It costs less per record than :meth:`put_record`:
        one call, one clock reading and one set of timestamps for the whole group.

        Args:
            stream: the stream name.
            records: ``(partition_key, data)``, ``(partition_key, data, explicit_hash_key)``
                or ``(partition_key, data, explicit_hash_key, tags)`` sequences (tuples, or
                anything of length 2 to 4), with the meaning and limits of
                :meth:`put_record`'s arguments (a ``None`` partition key included).

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
        runtime = self._accepting(stream)
        intake = runtime.intake
        check_records_argument(records)
        if stream not in runtime.streams.pipelines:
            # A new stream: start loading its shard map now, before a large group takes its
            # time to be validated and enqueued, so that the group finds the map loaded (or
            # nearly) rather than reaching its deadline held for it (see Aggregator).
            runtime.streams.pipeline_of(stream)
            await anyio.lowlevel.checkpoint()
            intake.check_still_open()
        intake.accept_stream(stream)  # again: the producer may have closed meanwhile
        admission = intake.admission
        built, hash_keys, size = admission.check_many(stream, records)
        count = len(built)
        admission.check_group(count, size)
        await anyio.lowlevel.checkpoint()
        intake.check_still_open()
        await intake.wait_for_room(size, count)
        return list(intake.enter_group(stream, built, hash_keys))

    # --- flushing -------------------------------------------------------------------------
    async def flush(self, stream: str | None = None) -> None:
        """Send everything buffered now and wait for the results of all earlier puts.

        Aggregates and requests are closed without waiting for their deadlines, and records
        held back by the rate limiter are released. Returns once every record put before the
        call (to ``stream``, or to any stream) has its result; retries may make that take
        longer than one request. Bound it with ``anyio.fail_after`` if needed. With a spool,
        it first waits until every record recovered at the start was put back, so their
        results are among those it waits for.
        """
        runtime = self._runtime
        if runtime is None:  # nothing was put
            await anyio.lowlevel.checkpoint()
            return
        runtime.intake.check_thread()
        if self._spool is not None:
            await self._spool.replay_done.wait()
        runtime.streams.flush(stream)
        await runtime.ledger.wait_flushed(stream)

    async def wait_durable(self) -> None:
        """Wait until every record accepted so far is durable in the spool: one call for
        "everything put so far survives a crash" (see :meth:`Outcome.wait_durable`).

        Raises:
            RuntimeError: the producer has no spool (``Config.spool_directory`` is ``None``),
                or the call comes from another thread than the event loop's.
            SpoolError: the producer closed before those records were durable.
        """
        if self._intake is not None:
            self._intake.check_thread()
        if self._spool is None:
            raise RuntimeError(
                "wait_durable() needs a spool: set Config.spool_directory (the producer has none)"
            )
        await self._spool.wait_all_durable()

    # --- introspection --------------------------------------------------------------------
    @property
    def outstanding_records(self) -> int:
        """Records between ``put_record`` and their result."""
        return len(self._runtime.ledger.outstanding) if self._runtime is not None else 0

    @property
    def outstanding_bytes(self) -> int:
        """Partition key plus data bytes of the outstanding records."""
        return self._runtime.ledger.outstanding_bytes if self._runtime is not None else 0

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
        metrics = self._arguments.metrics
        if metrics is None:
            return []
        runtime = self._runtime
        if runtime is None:
            return metrics.table.window(anyio.current_time(), window, name)
        now = runtime.clock()
        if not runtime.intake.closed:
            metrics.sample(runtime.outstanding_by_stream(), now, pending=False)
        return metrics.table.window(now, window, name)

    def health(self, window_s: float = DEFAULT_WINDOW) -> Health:
        """A verdict for liveness and readiness probes: healthy, degraded or failing, and why.

        Made from what the producer keeps anyway (no work per record): cheap enough to call
        every second. The reasons and what each means are in ``docs/health.md``.

        Args:
            window_s: how far back to look, in seconds (1 … 600).

        Raises:
            ValueError: ``window_s`` is out of range.
        """
        if self._runtime is None:
            check_window(window_s)
            return verdict([closed_reason() if self._started else not_started_reason()])
        return self._runtime.health(window_s)

    def statistics(self) -> ProducerStatistics:
        """A snapshot of the producer's counters and of every stream's pipeline."""
        spool = self._spool.statistics() if self._spool is not None else None
        runtime = self._runtime
        if runtime is None:
            return _statistics_not_running(spool)
        ledger = runtime.ledger
        sender = runtime.sender.statistics()
        streams = runtime.streams.statistics()
        return ProducerStatistics(
            outstanding_records=len(ledger.outstanding),
            outstanding_bytes=ledger.outstanding_bytes,
            records_put=ledger.records_put,
            records_succeeded=ledger.succeeded,
            records_failed=ledger.failed,
            requests_sent=sender.requests_sent,
            requests_failed=sender.requests_failed,
            requests_in_flight=sender.in_flight,
            requests_queued=sender.queued,
            streams=streams,
            failure_callbacks_pending=ledger.failures.pending,
            failure_callback_errors=ledger.failures.callback_errors,
            records_expired_unsent=runtime.streams.released_expired_unsent
            + sum(s.expired_unsent for s in streams),
            requests_backing_off=sender.backing_off,
            spool=spool,
        )

    def __repr__(self) -> str:
        runtime = self._runtime
        if runtime is None:
            state = "closed" if self._started else "not started"
            return f"<Producer {state} streams=0 outstanding_records=0 outstanding_bytes=0>"
        ledger = runtime.ledger
        return (
            f"<Producer {'closed' if runtime.intake.closed else 'running'} "
            f"streams={len(runtime.streams.pipelines)} "
            f"outstanding_records={len(ledger.outstanding)} "
            f"outstanding_bytes={ledger.outstanding_bytes}>"
        )


def _statistics_not_running(spool: SpoolStatistics | None) -> ProducerStatistics:
    """The statistics of a producer that never ran (not started, or its start failed)."""
    return ProducerStatistics(
        outstanding_records=0,
        outstanding_bytes=0,
        records_put=0,
        records_succeeded=0,
        records_failed=0,
        requests_sent=0,
        requests_failed=0,
        requests_in_flight=0,
        requests_queued=0,
        streams=(),
        failure_callbacks_pending=0,
        failure_callback_errors=0,
        records_expired_unsent=0,
        requests_backing_off=0,
        spool=spool,
    )


def port_of(producer: Producer) -> ProducerPort:
    """The way in a :class:`~aiokpl.SyncProducer` enters records its callers' threads checked
    (with an :class:`~aiokpl._admission.Admission` of the same config) into ``producer``,
    running on its loop."""
    runtime = producer._runtime
    assert runtime is not None, "the producer runs"
    return ProducerPort(runtime.intake, runtime.streams.flush)


def report_exit_to(producer: Producer, report: Callable[[ExitReport], None]) -> None:
    """Hand what ``producer``'s cancelled exit cost to ``report`` instead of the log: a
    :class:`~aiokpl.SyncProducer` says it in its own words (its close interrupted, or run
    out), once. Called in the loop's thread, once every record has its result."""
    producer._report_exit = report

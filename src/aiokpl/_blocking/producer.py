"""``SyncProducer``: the producer for threaded code, its pipeline on a background event loop.

One thread (:mod:`.loop`) runs an event loop, asyncio or trio, hosting a :class:`~aiokpl.Producer`.
Any number of other threads call :meth:`SyncProducer.put_record`, which checks the record in
the caller's thread (with the async producer's :mod:`aiokpl._producer.admission`: errors are raised
there, synchronously), queues it in the hand-over (:mod:`.handover`), waiting for room if the
producer is at its bounds, and returns its future (:mod:`.futures`). Each method here is one
crossing between a caller's thread and the loop: a put, a flush, a durable wait, a question
(:mod:`.portal`), a close; and the producer's life: the start the constructor waits for, the
close, and the abandon of what is left when a Ctrl-C interrupts the close (:mod:`.exit`).

Invariants:

* every future handed out is resolved, exactly once, by the time :meth:`SyncProducer.close`
  returns (delivered, failed, or failed ``"Cancelled"`` when ``close(timeout=…)`` ran out),
  or raises the interruption (Ctrl-C) that cut its wait short (``"Cancelled"`` then too): it
  waits for an event the loop sets last, never for ``Thread.join`` alone;
* records handed over and not yet resolved never exceed ``max_outstanding_records`` /
  ``max_outstanding_bytes``: ``put_record`` blocks the calling thread for room;
* the producer's loop thread never blocks on its own work: calls that would wait for it from
  that thread (``flush``, ``close``, ``wait_durable``, a ``put_record`` without room) raise
  instead;
* a producer nobody closes is closed at interpreter exit: its thread holds it while the loop
  runs, and the exit function closes the producers still open.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from .._backend import BACKENDS
from .._core.config import Config
from .._core.errors import ProducerClosedError
from .._core.health import CLOSED, DEFAULT_WINDOW, Health, check_window
from .._core.results import RecordResult
from .._core.statistics import ProducerStatistics
from .._core.wire import Tags
from .._kinesis import fixed_region
from .._producer.admission import Admission
from .._producer.producer import Producer
from .._producer.runtime import check_tracing, tracing_for
from .exit import ExitReports, forget, in_slices, remember, uninterrupted
from .futures import RecordFuture
from .handover import CLOSED_MESSAGE, Handover
from .loop import Loop
from .portal import ask, wait_durable_from_thread

if TYPE_CHECKING:
    from .._kinesis import KinesisClient

__all__ = ("SyncProducer",)

# How long an interrupted close() waits beyond request_timeout_ms for the cancelled producer's
# exit (its async failure callbacks are bounded by request_timeout_ms) before it gives up.
_ABANDON_MARGIN = 5.0


class SyncProducer:
    """The producer for code that is not async: Django views, Celery tasks, scripts, threads.

    It runs a :class:`~aiokpl.Producer` on an event loop in a background thread; every method
    is thread-safe. Use it as a context manager, or call :meth:`close` when done::

        with SyncProducer(Config(region="us-east-1")) as producer:
            future = producer.put_record(stream="events", partition_key="k", data=b"...")
            result = future.result()  # a RecordResult

    A producer left open is closed (flushed) when the interpreter exits; its thread never keeps
    the interpreter alive.

    Args:
        config: the settings.
        client: as for :class:`~aiokpl.Producer`: an object with the Kinesis client methods
            (e.g. :class:`aiokpl.testing.FakeKinesis`), or ``None`` to open an aiobotocore
            client from ``config``. A given client is used from the background thread only.
        backend: the event loop of the background thread: ``"asyncio"`` or ``"trio"``.
        backend_options: passed to ``anyio.run`` (e.g. ``{"use_uvloop": True}`` on asyncio).
        tracer_provider: with ``config.tracing``, the OpenTelemetry ``TracerProvider`` its
            spans go to; ``None`` (the default): OpenTelemetry's global one. A record's trace
            context is the one current in the thread that puts it.

    Raises:
        TypeError: ``config`` is not a :class:`~aiokpl.Config`.
        ValueError: ``backend`` is not ``"asyncio"`` or ``"trio"``.
        Exception: whatever starting the producer raised (for example no region).
    """

    def __init__(
        self,
        config: Config,
        *,
        client: KinesisClient | None = None,
        backend: Literal["asyncio", "trio"] = "asyncio",
        backend_options: dict[str, Any] | None = None,
        tracer_provider: Any = None,
    ) -> None:
        if not isinstance(config, Config):
            raise TypeError(f"config must be an aiokpl.Config, not {type(config).__name__}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be 'asyncio' or 'trio'; got {backend!r}")
        check_tracing(config, tracer_provider)
        self.config = config
        self.backend = backend
        self._known_streams: set[str] = set()
        # The producer's rules, checked in the caller's thread. Its region (None: any ARN's) as
        # the producer decides it: Config.region, else a given client's region.
        region = config.region if client is None else fixed_region(config, client)
        # Its tracing gives each record the context of the thread that puts it; the
        # producer's own (the loop's) starts the spans.
        self._admission = Admission(config, region, tracing_for(config, tracer_provider, None))
        self._handover = Handover(self._admission)
        self._exit_reports = ExitReports(self.statistics)  # what a cancelled exit cost
        self._loop = Loop(config, self._handover, self._exit_reports, tracer_provider)
        started: Future[None] = Future()
        self._thread = threading.Thread(
            target=self._run_loop,
            args=(client, backend, backend_options or {}, started),
            name="aiokpl SyncProducer",
            daemon=True,  # a forgotten producer must not hang the interpreter at exit
        )
        try:  # start() too: a Ctrl-C in it (it waits for the thread to run) leaves a loop
            self._thread.start()
            in_slices(lambda check: bool(wait_futures((started,), check).done))
            started.result()
        except BaseException:
            # The start failed (the loop is ending), or this thread was interrupted (Ctrl-C)
            # while the loop started: nothing was put, so the start is cancelled (and a loop
            # that has not got that far stops once it sees the producer closing).
            self._handover.abandon(self._loop.abandon)
            if started.done():
                self._loop.stopped.wait()
            raise
        remember(self, self._close)

    def _run_loop(
        self,
        client: KinesisClient | None,
        backend: str,
        backend_options: dict[str, Any],
        started: Future[None],
    ) -> None:
        """The background thread: it holds this producer while the loop runs, so that one
        nobody references is still closed (its records delivered) at interpreter exit."""
        self._loop.run(client, backend, backend_options, started)

    # --- the public methods ---------------------------------------------------------------
    def put_record(
        self,
        *,
        stream: str,
        partition_key: str | None = None,
        data: bytes | bytearray | memoryview,
        explicit_hash_key: str | int | None = None,
        tags: Tags | None = None,
        timeout: float | None = None,
    ) -> Future[RecordResult]:
        """Put one record; block the calling thread only while the producer is full.

        Args:
            stream: the stream name.
            partition_key: 1 … 256 UTF-16 code units (an emoji counts 2); decides the
                shard unless ``explicit_hash_key``. ``None`` (or left out): a record without
                a key, placed as by :meth:`aiokpl.Producer.put_record`.
            data: the payload; ``len(data)`` + the key's UTF-8 length must fit
                ``Config.max_record_size`` (a record without a key counts the 1 byte of
                ``"-"``).
            explicit_hash_key: a decimal hash key (0 … 2**128 - 1) choosing the shard.
            tags: the record's tags, as for :meth:`aiokpl.Producer.put_record`.
            timeout: the most seconds to wait for room; ``None`` waits as long as needed.

        Returns:
            A :class:`concurrent.futures.Future` resolving to the record's
            :class:`~aiokpl.RecordResult` (never to an exception; it cannot be cancelled).

        Raises:
            InvalidRecordError: a value is out of its limits, or ``stream`` is an ARN in
                another region than the producer's (nothing was enqueued).
            InvalidRecordTypeError: an argument has the wrong type.
            BufferFullError: no room within ``timeout`` seconds, or no room and the call comes
                from the producer's own thread (a future's done-callback), which must not wait.
            ProducerClosedError: the producer is closed, or closed while this call waited.
        """
        if self._handover.closing:
            raise ProducerClosedError(CLOSED_MESSAGE)
        if not (type(stream) is str and stream in self._known_streams):
            self._admission.check_stream(stream)
            self._known_streams.add(stream)
        record, hash_key = self._admission.check(
            stream, partition_key, data, explicit_hash_key, tags
        )
        future = RecordFuture()
        self._handover.offer(future, record, hash_key, timeout)
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and block until every earlier put has its result.

        Args:
            timeout: the most seconds to wait; ``None`` waits as long as needed.

        Raises:
            TimeoutError: some records put before the call have no result after ``timeout``
                seconds (they go on; nothing is lost).
            RuntimeError: called from the producer's own thread (a future's done-callback).
        """
        self._refuse_own_thread("flush")
        waiter = self._handover.add_flush_waiter()
        if waiter is None or waiter.event.wait(timeout):
            return
        remaining = self._handover.drop_flush_waiter(waiter)
        if remaining:
            raise TimeoutError(
                f"flush() timed out after {timeout} s: {remaining} of the records put "
                "before it have no result yet"
            )

    def wait_durable(self, timeout: float | None = None) -> None:
        """Block until every record put before the call is durable in the producer's spool
        (see :meth:`aiokpl.Producer.wait_durable`); sending does not wait for this.

        Args:
            timeout: the most seconds to wait; ``None`` waits as long as needed.

        Raises:
            RuntimeError: the producer has no spool (``Config.spool_directory`` is ``None``),
                or the call comes from the producer's own thread (a future's done-callback).
            TimeoutError: those records are not all durable after ``timeout`` seconds.
            ProducerClosedError: the producer is closed.
            SpoolError: the producer closed before those records were durable.
        """
        self._refuse_own_thread("wait_durable")
        target = self._handover.hand_over_now()  # the pump hands the queued records over now
        wait_durable_from_thread(self._loop, target, timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush, resolve every future, and stop the background thread. Idempotent.

        Every future handed out is resolved when this returns. With ``timeout``, records still
        without a result after that many seconds fail with code ``"Cancelled"``. Failures are
        reported through the futures (and ``Config.on_record_failure``), never raised here.

        If the wait is interrupted (a second Ctrl-C: the first one left the ``with`` block),
        delivery stops at once: records still without a result fail with code
        ``"Cancelled"`` (``outcome_unknown`` when their request was in flight), a warning on
        the ``aiokpl`` logger sums up, and the interruption is raised once every future is
        resolved. That takes at most about ``request_timeout_ms`` (async
        ``on_record_failure`` calls), during which further interruptions are held back.

        Args:
            timeout: the most seconds to let the remaining records be delivered; ``None``
                allows each record its ``record_ttl_ms`` (the close then takes at most about
                ``record_ttl_ms`` + ``request_timeout_ms``, plus ``request_timeout_ms`` for
                the async ``on_record_failure`` calls of records failed by the close).

        Raises:
            RuntimeError: called from the producer's own thread (a future's done-callback).
            KeyboardInterrupt: the wait was interrupted (whatever the signal handler raised),
                after every future was resolved.
        """
        self._refuse_own_thread("close")
        self._close(timeout, f"SyncProducer.close({'' if timeout is None else f'{timeout=}'})")

    def _close(self, timeout: float | None, what: str) -> bool:
        try:
            self._handover.close(partial(self._loop.close, timeout))
            in_slices(self._loop.stopped.wait)
            self._thread.join()  # at once: the loop has ended
        except BaseException:
            self._abandon(what)
            raise
        forget(self)
        return self._exit_reports.report_ran_out(what)

    def _abandon(self, what: str) -> None:
        """Cancel whatever is left, now, and wait until every future is resolved.

        The producer's cancellation fails the records without a result (``"Cancelled"``, and
        ``outcome_unknown`` for those whose request was in flight), in the loop's thread,
        as ``close(timeout=0)`` does. Each step runs to its end even if interrupted again
        (Ctrl-C, or ``SystemExit`` from a signal handler): the caller's ``except`` must find
        every future resolved, and the summary logged. If the loop does not end within the
        bound (a failure callback blocking the loop's thread), this gives up, and says how
        many futures have no result.
        """
        uninterrupted(partial(self._handover.abandon, self._loop.abandon))
        bound = self.config.request_timeout_ms / 1000 + _ABANDON_MARGIN
        stopped = uninterrupted(partial(self._loop.stopped.wait, bound))
        if stopped:
            uninterrupted(self._thread.join)  # at once: the loop has ended
        forget(self)
        unresolved = None if stopped else self._loop.unresolved()
        uninterrupted(partial(self._exit_reports.report_abandon, what, bound, unresolved))

    def __enter__(self) -> SyncProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _refuse_own_thread(self, what: str) -> None:
        if threading.get_ident() == self._handover.loop_thread:
            raise RuntimeError(
                f"{what}() waits for the producer's own thread and cannot be called from it "
                "(from a future's done-callback); call it from another thread"
            )

    # --- introspection --------------------------------------------------------------------
    @property
    def outstanding_records(self) -> int:
        """Records put and not resolved yet (including those still being handed over; a
        record counts until the loop gives its room back, a moment after its future is
        done)."""
        return self._handover.room.records

    @property
    def outstanding_bytes(self) -> int:
        """Partition key plus data bytes of the outstanding records."""
        return self._handover.room.bytes

    def statistics(self) -> ProducerStatistics:
        """A snapshot of the underlying producer (its last one once closed)."""
        snapshot = ask(self._loop, Producer.statistics)
        if snapshot is None:
            self._loop.stopped.wait()  # the final snapshot is taken by then
            snapshot = self._loop.final_statistics
            assert snapshot is not None
        return snapshot

    def health(self, window_s: float = DEFAULT_WINDOW) -> Health:
        """The underlying producer's :meth:`~aiokpl.Producer.health`, asked from any thread;
        failing with ``"not_running"`` once closed.

        Raises:
            ValueError: ``window_s`` is not a number of seconds from 1 to 600.
        """
        question = partial(Producer.health, window_s=check_window(window_s))
        verdict = ask(self._loop, question)
        return verdict if verdict is not None else CLOSED

    def __repr__(self) -> str:
        state = "closed" if self._handover.closing else "running"
        room = self._handover.room
        return (
            f"<SyncProducer {state} backend={self.backend!r} "
            f"outstanding_records={room.records} outstanding_bytes={room.bytes}>"
        )

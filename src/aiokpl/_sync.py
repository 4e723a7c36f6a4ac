"""``SyncProducer``: the producer for threaded code, its pipeline on a background event loop.

One thread runs an event loop (asyncio or trio, through ``anyio.run``) hosting a
:class:`~aiokpl.Producer`. Any number of other threads call :meth:`SyncProducer.put_record`,
which returns a :class:`concurrent.futures.Future`.

How a record crosses threads, and why:

* the caller's thread checks it (:mod:`aiokpl._admission`, as the async producer does: errors
  are raised there, synchronously), waits for room if the producer is at its bounds, and
  appends it to a ``deque``. Only the first record after the loop last looked schedules a
  wake-up of the loop (``call_soon_threadsafe`` on asyncio, the trio token's ``run_sync_soon``
  on trio): a busy producer pays one wake-up per batch, not one per record. A
  ``BlockingPortal.call`` per record costs a cross-thread round trip and a task each (about 20
  times the async producer's time in ``bench/sync.py``; most of this module's is its futures);
* one pump task in the loop moves everything queued into the pipeline;
* the record's ``Outcome`` done-callback resolves its future in the loop's thread: no task, no
  round trip per record.

Invariants:

* every future handed out is resolved, exactly once, by the time :meth:`SyncProducer.close`
  returns (delivered, failed, or failed ``"Cancelled"`` when ``close(timeout=…)`` ran out),
  or raises the interruption (Ctrl-C) that cut its wait short (``"Cancelled"`` then too): it
  waits for an event the loop sets last, never for ``Thread.join`` alone;
* records handed over and not yet resolved never exceed ``max_outstanding_records`` /
  ``max_outstanding_bytes``: ``put_record`` blocks the calling thread for room;
* the producer's loop thread never blocks on its own work: calls that would wait for it from
  that thread (``flush``, ``close``, a ``put_record`` without room) raise instead.

Everything shared between threads is guarded by one lock, held briefly: the queue of records,
the counts, the flush waiters and the wake-up flag.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import anyio
from anyio.from_thread import BlockingPortal

from ._admission import Admission, ThreadRoom
from ._backend import BACKENDS, current_backend, current_clock, threadsafe_scheduler
from ._core.config import Config
from ._core.errors import BufferFullError, ProducerClosedError
from ._core.hashing import check_user_record
from ._core.health import CLOSED, DEFAULT_WINDOW, Health, check_window
from ._core.results import RecordResult
from ._core.statistics import ProducerStatistics
from ._core.wire import Tags
from ._exit_executor import THREADS_AT_EXIT, ExitSafeExecutor
from ._hosted import ProducerPort
from ._kinesis import fixed_region
from ._producer import Producer, port_of, report_exit_to
from ._sync_ask import ask
from ._sync_durable import wait_durable_from_thread
from ._sync_exit import ExitReports, forget, in_slices, loop_stopped, remember, uninterrupted
from ._sync_futures import FlushWaiter, RecordFuture

if TYPE_CHECKING:
    from ._kinesis import KinesisClient
    from ._outcome import Outcome

__all__ = ("SyncProducer",)

logger = logging.getLogger("aiokpl")

_CHECKPOINT_EVERY_MASK = 255  # the pump yields to the loop once every 256 records
# How long an interrupted close() waits beyond request_timeout_ms for the cancelled producer's
# exit (its async failure callbacks are bounded by request_timeout_ms) before it gives up.
_ABANDON_MARGIN = 5.0

# future, stream, partition key, size, data, hash key, explicit hash key, encoded tags, seq;
# a record put without a key has key "" and hash key KEYLESS here (the producer places it)
_Item = tuple["Future[RecordResult]", str, str, int, bytes, int, "str | None", bytes, int]


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
    ) -> None:
        if not isinstance(config, Config):
            raise TypeError(f"config must be an aiokpl.Config, not {type(config).__name__}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be 'asyncio' or 'trio'; got {backend!r}")
        self.config = config
        self.backend = backend
        self._lock = threading.Lock()
        self._queue: deque[_Item] = deque()
        self._known_streams: set[str] = set()
        # The producer's rules, checked in the caller's thread. Its region (None: any ARN's) as
        # the producer decides it: Config.region, else a given client's region.
        region = config.region if client is None else fixed_region(config, client)
        self._admission = Admission(config, region)
        self._max_record_size = config.max_record_size  # hot path: read in put_record
        self._room = ThreadRoom(self._admission, self._lock)
        self._seq = 0
        self._flush_waiters: list[FlushWaiter] = []
        self._flush_requested = False
        self._wake_scheduled = False
        self._closing = False
        self._loop_done = False
        self._loop_thread: int | None = None
        self._call_soon: Callable[[Callable[[], object]], object] = _not_running
        self._wakeup: anyio.Event | None = None
        self._clock: Callable[[], float] = _not_running
        self._scope: anyio.CancelScope | None = None
        self._producer: Producer | None = None
        self._portal: BlockingPortal | None = None
        self._final_statistics: ProducerStatistics | None = None
        self._exit_reports = ExitReports(self.statistics)  # what a cancelled exit cost
        # Set once the loop has ended and every future is resolved: what close() waits for.
        # Not Thread.join(): on Python 3.10 to 3.12, a join interrupted by Ctrl-C marks the
        # thread as stopped while it still runs, and every later join returns at once.
        self._stopped = threading.Event()
        started: Future[None] = Future()
        self._thread = threading.Thread(
            target=self._thread_main,
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
            # that has not got that far stops once it sees _closing).
            with self._lock:
                self._closing = True
                if self._call_soon is not _not_running and not self._loop_done:
                    self._call_soon(self._on_abandon)
            if started.done():
                self._stopped.wait()
            raise
        remember(self, self._close)

    # --- the background thread ----------------------------------------------------------
    def _thread_main(
        self,
        client: KinesisClient | None,
        backend: str,
        backend_options: dict[str, Any],
        started: Future[None],
    ) -> None:
        try:
            anyio.run(
                self._serve, client, started, backend=backend, backend_options=backend_options
            )
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            else:  # a bug: every future was still resolved (see _serve), but say so
                logger.exception("the SyncProducer's event loop failed", exc_info=exc)
        finally:
            self._stopped.set()

    async def _serve(self, client: KinesisClient | None, started: Future[None]) -> None:
        self._loop_thread = threading.get_ident()
        self._call_soon = threadsafe_scheduler()
        # Read in callbacks run by _call_soon, outside any task, where anyio cannot tell
        # which loop runs them.
        self._clock = current_clock()
        self._wakeup = anyio.Event()
        try:
            if THREADS_AT_EXIT and current_backend() == "asyncio":  # must still run at exit
                asyncio.get_running_loop().set_default_executor(ExitSafeExecutor())
            with anyio.CancelScope() as scope:  # close(timeout=…) sets its deadline
                self._scope = scope
                async with Producer(self.config, client=client) as producer:
                    report_exit_to(producer, self._exit_reports.give)  # for the close to say
                    self._producer = producer
                    async with BlockingPortal() as portal:  # for statistics() only
                        self._portal = portal
                        with self._lock:
                            if not self._closing:  # else the constructor was interrupted
                                started.set_result(None)
                        try:
                            if started.done():
                                await self._pump(port_of(producer))
                        finally:
                            self._portal = None
                            self._hand_over_the_rest(port_of(producer))
        finally:
            with self._lock:
                self._closing = self._loop_done = True
                self._room.wake_all()
            self._fail_the_rest()
            self._loop_thread = None  # a later thread may reuse the identifier
            if self._producer is not None:  # last: every future is resolved, whatever happens
                self._final_statistics = self._producer.statistics()

    async def _pump(self, port: ProducerPort) -> None:
        """Move queued records into the pipeline, a batch per wake-up, until closed."""
        queue = self._queue
        put_validated = port.put_validated
        settle = self._on_outcome  # bound once: a partial per record is all a callback costs
        moved = 0
        while True:
            assert self._wakeup is not None
            await self._wakeup.wait()
            self._wakeup = anyio.Event()
            with self._lock:
                self._wake_scheduled = False
                flush, self._flush_requested = self._flush_requested, False
                closing = self._closing  # once set, nothing more is queued
            while queue:
                # Peek, and pop only once in the pipeline: a cancellation leaves it queued.
                future, stream, key, size, payload, hash_key, ehk, tags, seq = queue[0]
                outcome = put_validated(stream, key, size, payload, hash_key, ehk, tags)
                if outcome is None:  # no room: only while failure callbacks hold records
                    outcome = await port.put_when_room(
                        stream, key, size, payload, hash_key, ehk, tags
                    )
                queue.popleft()
                outcome.add_done_callback(partial(settle, future, size, seq))
                moved += 1
                if not moved & _CHECKPOINT_EVERY_MASK:
                    await anyio.lowlevel.checkpoint()  # let the stages run during a long batch
            if flush:
                port.flush_now(None)
            if closing:
                return

    def _hand_over_the_rest(self, port: ProducerPort) -> None:
        """Put what is still queued when the pump stops early (``close`` timed out).

        The producer is about to exit cancelled: these fail ``"Cancelled"`` with the rest,
        through the same path (and ``on_record_failure``). They are counted already, so
        bypassing the producer's bounds here cannot grow memory.
        """
        queue = self._queue
        with self._lock:
            self._closing = True
        while queue:
            future, stream, key, size, payload, hash_key, ehk, tags, seq = queue[0]
            outcome = port.put_validated(
                stream, key, size, payload, hash_key, ehk, tags, force=True
            )
            assert outcome is not None
            queue.popleft()  # only now: if that raised, _fail_the_rest still has it
            outcome.add_done_callback(partial(self._on_outcome, future, size, seq))

    def _fail_the_rest(self) -> None:
        """Fail whatever never reached the pipeline (only if the loop itself failed)."""
        now = self._clock()
        while self._queue:
            future, stream, key, size, payload, _, ehk, tags, seq = self._queue.popleft()
            record = (stream, key, payload, ehk, tags)
            result = loop_stopped(now, record, self.config.return_record_on_failure)
            self._settle_one(future, result, size, seq)

    def _on_outcome(
        self, future: Future[RecordResult], size: int, seq: int, outcome: Outcome[RecordResult]
    ) -> None:
        """A record's outcome is resolved: so is its future (in the loop's thread)."""
        self._settle_one(future, outcome.result(), size, seq)

    def _settle_one(
        self, future: Future[RecordResult], result: RecordResult, size: int, seq: int
    ) -> None:
        future.set_result(result)  # first: a flush that returns sees this future done
        with self._lock:
            self._room.give_back(size)
            for waiter in list(self._flush_waiters) if self._flush_waiters else ():
                if seq <= waiter.horizon:
                    waiter.remaining -= 1
                    if not waiter.remaining:
                        waiter.event.set()
                        self._flush_waiters.remove(waiter)

    def _on_wake(self) -> None:
        assert self._wakeup is not None
        self._wakeup.set()

    def _on_abandon(self) -> None:
        assert self._scope is not None
        self._scope.cancel()

    def _on_close(self, timeout: float | None) -> None:
        assert self._scope is not None
        if timeout is None:
            # The producer's own bound on its exit; here it also bounds the hand-over, which
            # can wait for room while async failure callbacks hold records.
            config = self.config
            timeout = (config.record_ttl_ms + config.request_timeout_ms) / 1000 + 1.0
        self._scope.deadline = self._clock() + timeout
        self._on_wake()

    def _wake_locked(self) -> None:
        """Schedule one wake-up of the pump, unless one is pending (caller holds the lock)."""
        if not self._wake_scheduled and not self._loop_done:
            self._wake_scheduled = True
            self._call_soon(self._on_wake)

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
        if self._closing:
            raise ProducerClosedError("the SyncProducer is closed; create a new one")
        if not (type(stream) is str and stream in self._known_streams):
            self._admission.check_stream(stream)
            self._known_streams.add(stream)
        key, size, payload, hash_key, ehk = check_user_record(
            partition_key, data, explicit_hash_key, self._max_record_size
        )
        encoded_tags = b""
        if tags is not None:
            encoded_tags, size = self._admission.check_tags(tags, key, size, ehk)
        future = RecordFuture()
        with self._lock:
            if not self._room.fits(size):
                self._wait_for_room_in_thread(size, timeout)
            if self._closing:
                raise ProducerClosedError("the SyncProducer is closed; create a new one")
            self._seq += 1
            self._room.take(size)
            self._queue.append(
                (future, stream, key, size, payload, hash_key, ehk, encoded_tags, self._seq)
            )
            self._wake_locked()
        return future

    def _wait_for_room_in_thread(self, size: int, timeout: float | None) -> None:
        """Wait, holding the lock's condition, until the record fits (or fail)."""
        if threading.get_ident() == self._loop_thread:
            raise BufferFullError(
                "the producer is full and put_record was called from its own thread (a "
                "future's done-callback), which must not wait; put from another thread"
            )
        fits = self._room.wait(size, timeout, lambda: self._closing)
        if self._closing:
            raise ProducerClosedError("the SyncProducer closed while this put waited for room")
        if not fits:
            raise BufferFullError(
                f"no room for the record within timeout={timeout} s: " + self._room.holds()
            )

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
        with self._lock:
            if not self._room.records:
                return
            waiter = FlushWaiter(self._seq, self._room.records)
            self._flush_waiters.append(waiter)
            self._flush_requested = True
            self._wake_locked()
        if not waiter.event.wait(timeout):
            with self._lock:
                if waiter in self._flush_waiters:
                    self._flush_waiters.remove(waiter)
                remaining = waiter.remaining
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
        with self._lock:
            target = self._seq
            self._wake_locked()  # the pump hands the queued records over now
        wait_durable_from_thread(
            self.config, self._portal, self._producer, self._queue, target, timeout
        )

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
            with self._lock:
                if not self._closing:
                    self._closing = True
                    self._room.wake_all()
                    if not self._loop_done:
                        self._call_soon(partial(self._on_close, timeout))
            in_slices(self._stopped.wait)
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
        uninterrupted(self._request_abandon)
        bound = self.config.request_timeout_ms / 1000 + _ABANDON_MARGIN
        stopped = uninterrupted(partial(self._stopped.wait, bound))
        if stopped:
            uninterrupted(self._thread.join)  # at once: the loop has ended
        forget(self)
        unresolved = None if stopped else self._room.records
        uninterrupted(partial(self._exit_reports.report_abandon, what, bound, unresolved))

    def _request_abandon(self) -> None:
        with self._lock:
            self._closing = True
            self._room.wake_all()
            if not self._loop_done:
                self._call_soon(self._on_abandon)

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
        if threading.get_ident() == self._loop_thread:
            raise RuntimeError(
                f"{what}() waits for the producer's own thread and cannot be called from it "
                "(from a future's done-callback); call it from another thread"
            )

    # --- introspection --------------------------------------------------------------------
    @property
    def _room_waiters(self) -> int:  # what the tests watch for: a thread waits for room
        return self._room.waiters

    @property
    def outstanding_records(self) -> int:
        """Records put and not resolved yet (including those still being handed over)."""
        return self._room.records

    @property
    def outstanding_bytes(self) -> int:
        """Partition key plus data bytes of the outstanding records."""
        return self._room.bytes

    def statistics(self) -> ProducerStatistics:
        """A snapshot of the underlying producer (its last one once closed)."""
        snapshot = ask(self._portal, self._producer, self._loop_thread, Producer.statistics)
        if snapshot is None:
            self._stopped.wait()  # the final snapshot is taken by then
            snapshot = self._final_statistics
            assert snapshot is not None
        return snapshot

    def health(self, window_s: float = DEFAULT_WINDOW) -> Health:
        """The underlying producer's :meth:`~aiokpl.Producer.health`, asked from any thread;
        failing with ``"not_running"`` once closed.

        Raises:
            ValueError: ``window_s`` is not a number of seconds from 1 to 600.
        """
        question = partial(Producer.health, window_s=check_window(window_s))
        verdict = ask(self._portal, self._producer, self._loop_thread, question)
        return verdict if verdict is not None else CLOSED

    def __repr__(self) -> str:
        state = "closed" if self._closing else "running"
        return (
            f"<SyncProducer {state} backend={self.backend!r} "
            f"outstanding_records={self._room.records} "
            f"outstanding_bytes={self._room.bytes}>"
        )


def _not_running(*args: object) -> NoReturn:
    """What scheduling a call on the loop, or reading its clock, does before the loop runs."""
    raise RuntimeError("the SyncProducer's event loop is not running")

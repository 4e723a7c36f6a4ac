"""The producer's result bookkeeping: what is outstanding, who waits for room or a flush.

Every record put is entered here (:meth:`ResultLedger.add`, by the producer's intake) and
leaves through :meth:`ResultLedger.finish` (delivered, or failed through the failure handler)
or :meth:`ResultLedger.release_held` (a failed record whose async ``on_record_failure``
returned). The counts are written here only.

Invariants:

* ``records_put == len(outstanding) + succeeded + failed - len(held)`` at the end of every
  step (a held record counts as failed and outstanding until its callback returns);

* a record is resolved at most once: ``finish`` skips a record no longer outstanding, and keeps
  one held for its failure callback;
* ``outstanding_bytes`` is the sum of the outstanding records' sizes; it is lowered before a
  record's outcome resolves, so a done-callback that puts again sees the room it frees;
* a flush waits for the records put before it only: a record carries the flush generation
  (``epoch``) current when it was put, and a flush starts the next; records put between two
  flushes share one int object, so this costs nothing per record;
* every change that frees room wakes the tasks waiting for room (one event, replaced once set);
* records are resolved here only, and never inside a pipeline step: every event that can
  resolve records runs as ``with ledger.step(): ...``, opened by the event's source (the put
  path and a flush, in the router; the scheduler, for every deadline; the sender's task, for
  an answer and what it finds next; the control plane's tasks, for a new shard map, the
  stream's summary and the dry run), and what ``finish`` is given meanwhile is resolved when
  the outermost step ends (steps nest: a request the router submits can make the sender expire
  another stream's records). So done-callbacks and ``on_record_failure`` run after every
  component is consistent again, never inside one's update, and a callback that puts a record
  starts a step of its own.

The KPL keeps this in ``Producer`` and ``UserRecord`` (``producer.cc``'s outstanding count and
flush); the flush generations are ours (the KPL's flush does not wait for results).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import anyio

from .._core.results import Attempt, with_cause
from .._failures import FailureHandler

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from .._core.config import Config
    from .._core.records import KinesisRecord
    from .._metrics.recorder import MetricsRecorder
    from .._record import UserRecord

__all__ = ("ResultLedger", "Step")


class Step:
    """A pipeline step of a ledger, as a context manager (``with ledger.step(): ...``): the
    records resolved inside it are resolved when the outermost step ends. One object per
    ledger, reused by every step (it keeps no state of its own)."""

    __slots__ = ("_ledger",)

    def __init__(self, ledger: ResultLedger) -> None:
        self._ledger = ledger

    def __enter__(self) -> None:
        self._ledger.depth += 1

    def __exit__(self, *exc_info: object) -> None:
        self._ledger.leave()


class _FlushWaiter:
    __slots__ = ("event", "horizon", "remaining", "stream")

    def __init__(self, horizon: int, stream: str | None, remaining: int) -> None:
        self.horizon = horizon
        self.stream = stream
        self.remaining = remaining
        self.event = anyio.Event()


class ResultLedger:
    """Outstanding records and bytes, the room event, flush waiters, and the result counters.

    Args:
        config: the producer's settings (for the failure handler).
        metrics: the producer's metrics recorder, if any (failed records are counted there).
        clock: the producer's clock.
        task_group: the producer's task group (async ``on_record_failure`` calls run there).
        on_resolved: told of every resolution step (the durable spool acknowledges the
            records), or ``None``.
    """

    __slots__ = (
        "_deferred",
        "_step",
        "clock",
        "delivered_at",
        "depth",
        "epoch",
        "failed",
        "failures",
        "flush_waiters",
        "held",
        "metrics",
        "on_resolved",
        "outstanding",
        "outstanding_bytes",
        "records_put",
        "room",
        "succeeded",
    )

    def __init__(
        self,
        config: Config,
        metrics: MetricsRecorder | None,
        clock: Callable[[], float],
        task_group: TaskGroup | None = None,
        on_resolved: Callable[[list[UserRecord], bool], None] | None = None,
    ) -> None:
        self.clock = clock
        self.metrics = metrics
        self.outstanding: dict[UserRecord, None] = {}
        self.outstanding_bytes = 0
        # Flush generation: a record remembers the one current when it was put, and a flush
        # starts the next, so "put before this flush" is `record.epoch <= horizon`.
        self.epoch = 0
        self.records_put = 0
        self.succeeded = 0
        self.failed = 0
        # When a record was last delivered (what producer.health() judges progress by): read
        # once per request's worth of records, not per record.
        self.delivered_at = -math.inf
        self.room: anyio.Event | None = None
        self.flush_waiters: list[_FlushWaiter] = []
        self.failures = FailureHandler(config, self.release_held, task_group)
        # Failed records kept outstanding while their async on_record_failure runs.
        self.held: set[UserRecord] = set()
        # Pipeline steps under way (see enter), and what they resolved, in order.
        self.depth = 0
        self._deferred: list[tuple[list[UserRecord], bool]] = []
        self._step = Step(self)
        # None without a spool, so the step pays one test, not one call per record.
        self.on_resolved = on_resolved

    # --- records in -----------------------------------------------------------------------
    def add(self, record: UserRecord) -> None:
        """Count ``record`` outstanding, put now (in the current flush generation)."""
        record.epoch = self.epoch
        self.outstanding[record] = None
        self.outstanding_bytes += record.size
        self.records_put += 1

    def add_group(self, records: list[UserRecord]) -> None:
        """Count ``records`` outstanding, put now together (a ``put_records`` group)."""
        epoch = self.epoch
        outstanding = self.outstanding
        size = 0
        for record in records:
            record.epoch = epoch
            outstanding[record] = None
            size += record.size
        self.outstanding_bytes += size
        self.records_put += len(records)

    # --- room -----------------------------------------------------------------------------
    async def wait_for_room(self) -> None:
        """Wait until some room is freed (the caller checks whether it is enough)."""
        if self.room is None:
            self.room = anyio.Event()
        await self.room.wait()

    # --- results --------------------------------------------------------------------------
    def step(self) -> Step:
        """A pipeline step, for ``with``: what it resolves waits until the outermost step
        ends (see the module's invariants)."""
        return self._step

    def leave(self) -> None:
        """A pipeline step ends (``Step.__exit__``); the outermost resolves what the steps
        resolved, in order."""
        self.depth -= 1
        if not self.depth and self._deferred:
            deferred, self._deferred = self._deferred, []
            for records, success in deferred:
                self._resolve(records, success)

    def finish(self, records: list[UserRecord], success: bool) -> None:
        """Resolve ``records`` (delivered, or failed with their last attempt's code): now, or
        inside a pipeline step when the outermost step leaves."""
        if self.depth:
            self._deferred.append((records, success))
        else:
            self._resolve(records, success)

    def _resolve(self, records: list[UserRecord], success: bool) -> None:
        """Resolve ``records`` now (delivered, or failed with their last attempt's code).

        Called once per request's worth of records, not once per record: this loop is half of
        the per-record cost of delivery. A record already resolved is skipped. A failed record
        goes through the failure handler (``on_record_failure``); while an async callback runs
        for it, it stays outstanding (see :mod:`aiokpl._failures`) until ``release_held``.
        """
        if not success and self.metrics is not None:
            # Failures are rare: counted record by record, those not finished yet only (a
            # record held for its on_record_failure is done already).
            fresh = [r for r in records if r in self.outstanding and r not in self.held]
            self.metrics.failed(fresh, self.clock())
        outstanding = self.outstanding
        pop = outstanding.pop
        held = self.held
        waiters = self.flush_waiters
        failures = self.failures
        delivered = False
        for record in records:
            if pop(record, False) is False:
                continue  # already finished
            if held and record in held:
                # Failed before, and held for its on_record_failure: still held.
                outstanding[record] = None
                continue
            # Before resolving: a done-callback that puts again must see the room it frees,
            # and counts that add up (outstanding, succeeded and failed: the record is in one).
            self.outstanding_bytes -= record.size
            if success:
                self.succeeded += 1
                delivered = True
                record.resolve()
            else:
                self.failed += 1
                if failures.resolve(record):
                    outstanding[record] = None  # held until its async callback returns
                    held.add(record)
                    self.outstanding_bytes += record.size
                    continue
            if waiters:
                self._flush_progress(record)
        if delivered:
            self.delivered_at = self.clock()
        if self.on_resolved is not None:
            self.on_resolved(records, success)
        if self.room is not None:
            self.room.set()
            self.room = None

    def wake_room(self) -> None:
        """Wake the tasks waiting for room (something other than a result freed it)."""
        if self.room is not None:
            self.room.set()
            self.room = None

    def release_held(self, record: UserRecord) -> None:
        """A held failed record's callback has returned: it stops being outstanding."""
        self.held.discard(record)
        del self.outstanding[record]
        self.outstanding_bytes -= record.size
        if self.flush_waiters:
            self._flush_progress(record)
        if self.room is not None:
            self.room.set()
            self.room = None

    def _flush_progress(self, record: UserRecord) -> None:
        for waiter in list(self.flush_waiters):
            if record.epoch <= waiter.horizon and waiter.stream in (None, record.stream):
                waiter.remaining -= 1
                if waiter.remaining <= 0:
                    waiter.event.set()
                    self.flush_waiters.remove(waiter)

    def fail_outstanding(
        self, code: str, message: str, unanswered: Iterable[KinesisRecord]
    ) -> tuple[int, int]:
        """Fail every record still outstanding (at exit) with ``code``; a record whose request
        was sent and not answered (in ``unanswered``) says its outcome is unknown. Returns how
        many records it failed, and how many of them with an unknown outcome."""
        now = self.clock()
        # Records already failed and held for their on_record_failure keep their result.
        records = [record for record in self.outstanding if record not in self.held]
        in_flight = {user for kinesis_record in unanswered for user in kinesis_record.records}
        unknown = (
            f"{message}; its request was sent and no answer was read, so it may be in the stream"
        )
        unknowns = 0
        for record in records:
            attempts = record.attempts  # what they failed with is said (with_cause)
            if record in in_flight:
                said = with_cause(unknown, attempts) if attempts else unknown
                attempt = Attempt(
                    now, now, now - record.last_end, False, code, said, outcome_unknown=True
                )
                unknowns += 1
            else:
                said = with_cause(message, attempts) if attempts else message
                attempt = Attempt(now, now, now - record.last_end, False, code, said)
            record.add_attempt(attempt)
        self.finish(records, False)
        return len(records), unknowns

    # --- flushing -------------------------------------------------------------------------
    async def wait_flushed(self, stream: str | None) -> None:
        """Wait for the results of every record outstanding now (of ``stream``, or all)."""
        remaining = sum(
            1 for record in self.outstanding if stream is None or record.stream == stream
        )
        if not remaining:
            await anyio.lowlevel.checkpoint()
            return
        waiter = _FlushWaiter(self.epoch, stream, remaining)
        self.epoch += 1
        self.flush_waiters.append(waiter)
        try:
            await waiter.event.wait()
        finally:
            if waiter in self.flush_waiters:
                self.flush_waiters.remove(waiter)

    # --- introspection --------------------------------------------------------------------
    def outstanding_by_stream(self, streams: Iterable[str]) -> dict[str, int]:
        """Outstanding records of each of ``streams`` (what the metrics sample instead of
        counting puts, so a put does no metrics work): with one stream, a length; with
        several, one pass over the outstanding."""
        names = list(streams)
        if len(names) == 1:
            return dict.fromkeys(names, len(self.outstanding))
        counts = dict.fromkeys(names, 0)
        counts.update(Counter(record.stream for record in self.outstanding))
        return counts

    def streams_busy(self) -> set[str]:
        """The streams with a record outstanding."""
        return {record.stream for record in self.outstanding}

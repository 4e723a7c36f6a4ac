"""The background thread of a ``SyncProducer``: its event loop, the producer it hosts, the pump.

The thread runs an event loop (asyncio or trio, through ``anyio.run``) hosting a
:class:`~aiokpl.Producer`. One pump task moves the records queued in the hand-over
(:mod:`.handover`) into the producer, all that is queued at each turn, through the producer's
port (bound methods taken once: the records were checked in their callers' threads and go in
as they are). A record's outcome, once done, resolves its future, in this thread, and its room
is given back at the pump's next turn: no task, no round trip and no object per record beyond
the hand-over's (its item is kept by its outcome while it is in the producer).

Invariants:

* every future handed out is resolved, exactly once, before :attr:`Loop.stopped` is set, the
  last thing the thread does: by its record's outcome, which the producer resolves (failed
  ``"Cancelled"`` if its exit is cancelled: ``close(timeout=…)`` ran out, or an abandon), or,
  if the loop itself failed, here (``"Internal"``, the loop stopped);
* the pump lets go of a record it took only once the record is in the producer: a
  cancellation leaves it taken, and the end hands it over (the producer's bounds aside: it is
  counted already, so that cannot grow memory) to fail with the rest, through the same path
  and failure callbacks;
* a record's room is given back once, after its future is resolved: at the pump's next turn,
  or at the loop's end for those resolved after the pump stopped;
* the loop's thread never waits for itself: the callers' methods refuse to wait from it
  (``Handover.loop_thread``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import anyio
from anyio.from_thread import BlockingPortal

from .._backend import current_backend, current_clock, threadsafe_scheduler
from .._core.config import Config
from .._core.decoder import decode_tags
from .._core.results import Attempt, FailedRecord, RecordResult
from .._core.statistics import ProducerStatistics
from .._producer.producer import Producer, port_of, report_exit_to
from .executor import THREADS_AT_EXIT, ExitSafeExecutor
from .exit import ExitReports
from .handover import Handover, Item, Resolved, not_running

if TYPE_CHECKING:
    from .._kinesis import KinesisClient
    from .._outcome import Outcome
    from .._producer.port import ProducerPort
    from .._record import UserRecord

__all__ = ("Loop", "loop_stopped")

logger = logging.getLogger("aiokpl")

_CHECKPOINT_EVERY_MASK = 255  # the pump yields to the loop once every 256 records


class Loop:
    """The loop's side of a ``SyncProducer``: :meth:`run` is its thread.

    Attributes:
        config: the producer's settings.
        handover: what the loop shares with the callers' threads.
        producer: the producer, once started (kept after the end, for its last snapshot).
        portal: the portal callers' threads ask the producer through, while the pump runs.
        final_statistics: the producer's last snapshot, once the loop has ended.
        stopped: set last, once the loop has ended and every future is resolved (what a
            close waits for; not ``Thread.join``: on Python 3.10 to 3.12 a join interrupted
            by Ctrl-C marks the thread as stopped while it still runs).
    """

    def __init__(
        self,
        config: Config,
        handover: Handover,
        exit_reports: ExitReports,
        tracer_provider: Any = None,
    ) -> None:
        self.config = config
        self._tracer_provider = tracer_provider
        self.handover = handover
        self.producer: Producer | None = None
        self.portal: BlockingPortal | None = None
        self.final_statistics: ProducerStatistics | None = None
        self.stopped = threading.Event()
        self._exit_reports = exit_reports  # what a cancelled exit cost, for the close to say
        # Read in callbacks run by the hand-over's call_soon, outside any task, where anyio
        # cannot tell which loop runs them.
        self._clock: Callable[[], float] = not_running
        self._wakeup: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None  # close(timeout=…) sets its deadline
        # Records taken from the hand-over, oldest first, not yet in the producer.
        self._taken: deque[Item] = deque()
        # The hand-over item of each record in the producer, by its outcome, until it is done:
        # what resolving it needs (its future, size and sequence number) at no cost per record.
        self._in_flight: dict[Outcome[RecordResult], Item] = {}
        # The records resolved since the pump's last turn, whose room it gives back then.
        self._resolved = Resolved()

    def run(
        self,
        client: KinesisClient | None,
        backend: str,
        backend_options: dict[str, Any],
        started: Future[None],
    ) -> None:
        """Run the loop until the producer has exited; ``started`` resolves once it runs (or
        with what its start raised)."""
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
            self.stopped.set()

    async def _serve(self, client: KinesisClient | None, started: Future[None]) -> None:
        handover = self.handover
        handover.connect(threadsafe_scheduler(), self.wake)
        self._clock = current_clock()
        self._wakeup = anyio.Event()
        try:
            if THREADS_AT_EXIT and current_backend() == "asyncio":  # must still run at exit
                asyncio.get_running_loop().set_default_executor(ExitSafeExecutor())
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with Producer(
                    self.config, client=client, tracer_provider=self._tracer_provider
                ) as producer:
                    report_exit_to(producer, self._exit_reports.give)
                    self.producer = producer
                    async with BlockingPortal() as portal:  # for the callers' questions
                        self.portal = portal
                        handover.begin(started)  # unless the constructor gave up meanwhile
                        try:
                            if started.done():
                                await self._pump(port_of(producer))
                        finally:
                            self.portal = None
                            self._hand_over_the_rest(port_of(producer))
        finally:
            self._fail_the_rest(handover.end())
            handover.give_back(self._resolved)  # those the producer's exit resolved too
            handover.disconnect()  # after the rest's done-callbacks, which still run here
            if self.producer is not None:  # last: every future is resolved, whatever happens
                self.final_statistics = self.producer.statistics()

    async def _pump(self, port: ProducerPort) -> None:
        """Move queued records into the producer, all that is queued at each turn, until the
        producer closes; give back the room of those resolved since the last turn."""
        handover = self.handover
        taken = self._taken
        resolved = self._resolved
        in_flight = self._in_flight
        put = port.put
        on_done = self._on_done  # bound once: a record's callback costs no object of its own
        moved = 0
        while True:
            batch, flush, closing = handover.exchange(resolved)
            resolved.clear()
            if not (batch or flush or closing):  # nothing to do: sleep until woken
                assert self._wakeup is not None
                await self._wakeup.wait()
                self._wakeup = anyio.Event()
                continue
            taken.extend(batch)
            while taken:
                # Peek, and pop only once in the pipeline: a cancellation leaves it taken.
                item = taken[0]
                outcome = put(item[1], item[2])
                if outcome is None:  # no room: only while failure callbacks hold records
                    outcome = await port.put_when_room(item[1], item[2])
                taken.popleft()
                in_flight[outcome] = item  # first: a refused record's outcome is done already
                outcome.add_done_callback(on_done)
                moved += 1
                if not moved & _CHECKPOINT_EVERY_MASK:
                    await anyio.lowlevel.checkpoint()  # let the stages run during a long batch
                    if resolved.count:  # and give back the room they freed meanwhile
                        handover.give_back(resolved)
                        resolved.clear()
            if flush:
                port.flush_now(None)
            if closing:
                return

    def _on_done(self, outcome: Outcome[RecordResult]) -> None:
        """A record's outcome is done: so is its future; its room is given back at the pump's
        next turn, which this wakes."""
        future, _, _, size, seq = self._in_flight.pop(outcome)
        future.resolve(outcome)  # first: a flush that returns sees this future done
        resolved = self._resolved
        resolved.add(size, seq)
        if resolved.count == 1:
            self.wake()

    def unresolved(self) -> int:
        """How many futures have no result yet, from any thread (a count that may be a moment
        old: the loop's thread may be resolving some)."""
        return len(self._in_flight) + len(self._taken) + self.handover.queued()

    def handed_over(self, seq: int) -> bool:
        """Whether the records queued up to ``seq`` are all in the producer (on the loop)."""
        taken = self._taken
        if taken:
            return taken[0][-1] > seq
        first = self.handover.first_queued()
        return first is None or first > seq

    def _hand_over_the_rest(self, port: ProducerPort) -> None:
        """Put what is still queued when the pump stops early (``close`` timed out).

        The producer is about to exit cancelled: these fail ``"Cancelled"`` with the rest,
        through the same path (and ``on_record_failure``). They are counted already, so
        bypassing the producer's bounds here cannot grow memory.
        """
        taken = self._taken
        taken.extend(self.handover.take_the_rest())
        while taken:
            item = taken[0]
            outcome = port.put(item[1], item[2], force=True)
            assert outcome is not None
            taken.popleft()  # only now: if that raised, _fail_the_rest still has it
            self._in_flight[outcome] = item
            outcome.add_done_callback(self._on_done)

    def _fail_the_rest(self, queued: list[Item]) -> None:
        """Fail whatever never reached the pipeline, taken or still ``queued`` (only if the
        loop itself failed)."""
        now = self._clock()
        taken = self._taken
        taken.extend(queued)
        while taken:
            future, record, _, size, seq = taken.popleft()
            future.set_result(loop_stopped(now, record, self.config.return_record_on_failure))
            self._resolved.add(size, seq)

    # --- run on the loop (by the hand-over's call_soon, from the callers' threads) ----------
    def wake(self) -> None:
        """Wake the pump: records are queued or resolved, a flush is asked for, or the
        producer closes."""
        assert self._wakeup is not None
        self._wakeup.set()

    def abandon(self) -> None:
        """Cancel the producer now: what has no result fails ``"Cancelled"``."""
        assert self._scope is not None
        self._scope.cancel()

    def close(self, timeout: float | None) -> None:
        """Let the pump hand everything over and the producer exit, within ``timeout``
        seconds (``None``: the producer's own bound on its exit)."""
        assert self._scope is not None
        if timeout is None:
            # The producer's own bound on its exit; here it also bounds the hand-over, which
            # can wait for room while async failure callbacks hold records.
            config = self.config
            timeout = (config.record_ttl_ms + config.request_timeout_ms) / 1000 + 1.0
        self._scope.deadline = self._clock() + timeout
        self.wake()


def loop_stopped(now: float, record: UserRecord, return_record: bool) -> RecordResult:
    """The result of a record that never reached the pipeline because the loop failed
    (``record``, as checked: its key ``""`` if it has none); ``return_record`` is
    ``Config.return_record_on_failure``."""
    attempt = Attempt(now, now, 0.0, False, "Internal", "the SyncProducer's event loop stopped")
    failed = None
    if return_record:
        tags = record.encoded_tags
        failed = FailedRecord(
            record.stream,
            record.partition_key or None,
            record.data,
            record.explicit_hash_key,
            decode_tags(tags) if tags else (),
        )
    return RecordResult(False, None, None, (attempt,), failed)

"""The hand-over: what a ``SyncProducer``'s callers' threads and its loop share, under one lock.

A record checked in a caller's thread is queued here with its future and a sequence number
(:meth:`Handover.offer`); at each turn the loop's pump takes everything queued at once and puts
it into the producer (:meth:`Handover.exchange`). Only the first record queued while the pump
sleeps schedules a wake-up of the loop (``call_soon_threadsafe`` on asyncio, the trio token's
``run_sync_soon`` on trio): a busy producer pays one wake-up per batch, not one per record (a
``BlockingPortal.call`` per record costs a round trip and a task each, about 20 times the
async producer's time in ``bench/sync.py``).

Besides the queue, the lock guards what both sides read and change: the room the records hold
(:class:`ThreadRoom`, from their put to their result), the flushes waiting for results
(:class:`FlushWaiter`), whether the pump has a flush to do, and the closing state. The room of
the records resolved since the pump's last turn is given back at its next, all at once
(:class:`Resolved`): one lock per turn on the loop's side, not one per record.

The lock is held for a few statements at a time, never while a user's callback or a ``Future``
method runs. A thread that holds it without the GIL starts a convoy: every putting thread that
runs meanwhile sleeps on the lock in turn, and each release hands it to a sleeper, which owns
it before it has the GIL back. With eight threads that costs up to a switch of threads per
record (30,000 to 110,000 per 100k records, against about 1,000 without) and a third to half
of the throughput, for the rest of the run (``bench/sync.py``). So a put holds the lock across
no call into Python code, at which the interpreter may give the GIL away (the queue is a list,
whose ``append`` is no such call, where a ``deque``'s is; the room is counted inline), and a
put that finds the lock held does not sleep on it (:func:`acquire_awake`).

Invariants:

* records queued and not yet resolved never exceed ``max_outstanding_records`` /
  ``max_outstanding_bytes``: :meth:`Handover.offer` waits for room first, or raises. The room
  of a resolved record is free again at the pump's next turn, which its resolution wakes;
* once ``closing`` is set nothing more is queued; once ``loop_done`` is set nothing more is
  scheduled on the loop (it has ended);
* at most one wake-up of the loop is pending, and none while the pump is at work;
* a flush waiter counts the records put before it that have no result yet (their room not
  given back): each record at or below its horizon given back lowers the count, and the last
  sets its event.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, NoReturn

from .._core.errors import BufferFullError, ProducerClosedError
from .._producer.admission import Admission
from .futures import RecordFuture

if TYPE_CHECKING:
    from .._record import UserRecord

__all__ = (
    "CLOSED_MESSAGE",
    "FlushWaiter",
    "Handover",
    "Item",
    "Resolved",
    "ThreadRoom",
    "not_running",
)

# A queued record: its future, the record as checked (built, not yet entered), its hash key, the
# room it holds (its size when checked: an identity tag may add to the record's own), and its
# sequence number; a record put without a key has key "" and hash key KEYLESS here (the
# producer places it).
Item = tuple[RecordFuture, "UserRecord", int, int, int]

_POLITE_TRIES = 1000  # see acquire_awake

CLOSED_MESSAGE = "the SyncProducer is closed; create a new one"  # what a closed one says


def acquire_awake(lock: threading.Lock) -> None:
    """Acquire ``lock``, held by another thread, without sleeping on it while the interpreter
    lets threads take turns (the GIL): give the turn to the holder and try again; sleep on it
    only if it stays held for :data:`_POLITE_TRIES` tries (a holder that really waits, or no GIL).

    Why: a thread woken because a lock was released owns the lock before it has the GIL back.
    Every thread that runs meanwhile finds the lock held, and sleeps on it in turn; each release
    then hands it to another sleeper. Once started (by one holder that gave up the GIL), that
    convoy lasts as long as threads keep putting (see the module's doc).
    """
    for _ in range(_POLITE_TRIES):
        time.sleep(0)  # noqa: TID251 - a caller's thread: gives the GIL to the holder
        if lock.acquire(False):
            return
    lock.acquire()


def not_running(*args: object) -> NoReturn:
    """What scheduling a call on the loop, or reading its clock, does before the loop runs."""
    raise RuntimeError("the SyncProducer's event loop is not running")


class ThreadRoom:
    """What a :class:`~aiokpl.SyncProducer` holds, and its callers' wait for room.

    Records count from their put (in the caller's thread) to their result (in the loop's),
    those still being handed over included. Every method is called with ``lock`` held (the
    hand-over's lock, which also guards its queue); :meth:`wait` releases it while it waits.
    What fits, and what is said when nothing does, is the producers' shared
    :class:`~aiokpl._admission.Admission`'s.

    Attributes:
        records: records held.
        bytes: their sizes' sum.
        waiters: threads waiting for room.
        max_records: ``Config.max_outstanding_records``.
        max_bytes: ``Config.max_outstanding_bytes``.
    """

    __slots__ = (
        "_admission",
        "_condition",
        "bytes",
        "max_bytes",
        "max_records",
        "records",
        "waiters",
    )

    def __init__(self, admission: Admission, lock: threading.Lock) -> None:
        self._admission = admission
        self._condition = threading.Condition(lock)
        self.max_records = admission.max_records
        self.max_bytes = admission.max_bytes
        self.waiters = 0
        self.records = 0
        self.bytes = 0

    def fits(self, size: int) -> bool:
        """Whether one more record of ``size`` bytes fits (the bounds alone: the producer on
        the loop keeps room for identity tags in its own)."""
        return self.records < self.max_records and self.bytes + size <= self.max_bytes

    def wait(self, size: int, timeout: float | None, stop: Callable[[], bool]) -> bool:
        """Wait until a record of ``size`` bytes fits or ``stop()``; ``False`` on timeout."""
        self.waiters += 1
        try:
            return self._condition.wait_for(lambda: stop() or self.fits(size), timeout)
        finally:
            self.waiters -= 1

    def take(self, size: int) -> None:
        """Count one more record of ``size`` bytes."""
        self.records += 1
        self.bytes += size

    def give_back(self, size: int, count: int = 1) -> None:
        """``count`` records of ``size`` bytes in all have their results: wake those waiting
        for room."""
        self.records -= count
        self.bytes -= size
        if self.waiters:
            self._condition.notify_all()

    def wake_all(self) -> None:
        """Wake every waiter (to look at its ``stop``)."""
        self._condition.notify_all()

    def holds(self) -> str:
        """What the producer holds, and its bounds, in words."""
        return self._admission.holds(self.records, self.bytes)


class FlushWaiter:
    """A thread waiting in ``SyncProducer.flush`` for the records put before it."""

    __slots__ = ("event", "horizon", "remaining")

    def __init__(self, horizon: int, remaining: int) -> None:
        self.horizon = horizon
        self.remaining = remaining
        self.event = threading.Event()


class Handover:
    """The records on their way from callers' threads to the loop, and the state both sides
    share, guarded by :attr:`lock`.

    Attributes:
        lock: held for every change here (and by :class:`ThreadRoom`'s waits).
        room: what the queued and outstanding records hold.
        seq: the sequence number of the last record queued.
        closing: no more puts: set by the first close, abandon, or by the loop's end.
        loop_done: the loop has ended: nothing more may be scheduled on it.
        loop_thread: the loop's thread identifier while it runs (``None`` before and after).
    """

    __slots__ = (
        "_call_soon",
        "_flush_requested",
        "_flush_waiters",
        "_pending",
        "_wake",
        "_wake_scheduled",
        "closing",
        "lock",
        "loop_done",
        "loop_thread",
        "room",
        "seq",
    )

    def __init__(self, admission: Admission) -> None:
        self.lock = threading.Lock()
        self.room = ThreadRoom(admission, self.lock)
        self.seq = 0
        self.closing = False
        self.loop_done = False
        self.loop_thread: int | None = None
        # Queued records, oldest first: a list, not a deque, see offer().
        self._pending: list[Item] = []
        self._flush_waiters: list[FlushWaiter] = []
        self._flush_requested = False
        # True while the pump will look at _pending again without being woken: a wake-up is
        # scheduled, or the pump is at work.
        self._wake_scheduled = False
        self._call_soon: Callable[[Callable[[], object]], object] = not_running
        self._wake: Callable[[], object] = not_running

    # --- the loop's side ----------------------------------------------------------------
    def connect(
        self, call_soon: Callable[[Callable[[], object]], object], wake: Callable[[], object]
    ) -> None:
        """The loop runs, in this thread: ``call_soon(f)`` runs ``f`` on it from any thread,
        ``wake()`` (run there) wakes its pump."""
        with self.lock:  # a constructor giving up reads _call_soon under it
            self.loop_thread = threading.get_ident()
            self._call_soon = call_soon
            self._wake = wake

    def begin(self, started: Future[None]) -> None:
        """The producer runs: resolve ``started`` (which the constructor waits for), unless the
        constructor was interrupted meanwhile (it abandoned the start)."""
        with self.lock:
            if not self.closing:
                started.set_result(None)

    def exchange(self, resolved: Resolved) -> tuple[list[Item], bool, bool]:
        """The pump's turn: give back the room of the records ``resolved`` since its last turn
        (and count their results for the flushes waiting), and take every record queued.

        Returns the records taken, oldest first; whether a flush was asked for since; and
        whether the producer is closing (once it is, nothing more is queued). When there is
        nothing to do, the pump is to sleep: the next record queued wakes it.
        """
        with self.lock:
            if resolved.count:
                self._give_back(resolved)
            taken = self._pending
            self._pending = []
            flush, self._flush_requested = self._flush_requested, False
            closing = self.closing
            if not (taken or flush or closing):
                self._wake_scheduled = False
        return taken, flush, closing

    def _give_back(self, resolved: Resolved) -> None:
        """The records ``resolved`` have their results: their room is free, and the flushes
        waiting for them have that many fewer results to wait for (the lock held)."""
        self.room.give_back(resolved.size, resolved.count)
        if self._flush_waiters:
            self._count_results(resolved.seqs)

    def _count_results(self, seqs: list[int]) -> None:
        """The records ``seqs`` have their results: count them for the flushes that wait for
        them (the lock held)."""
        waiters = self._flush_waiters
        for waiter in list(waiters):
            waiter.remaining -= sum(seq <= waiter.horizon for seq in seqs)
            if not waiter.remaining:
                waiter.event.set()
                waiters.remove(waiter)

    def take_the_rest(self) -> list[Item]:
        """Queue nothing more (the producer is exiting), and take what is queued."""
        with self.lock:
            self.closing = True
            taken = self._pending
            self._pending = []
            return taken

    def end(self) -> list[Item]:
        """The loop is ending: refuse puts, schedule nothing more on it, wake the threads
        waiting for room (to raise); what is still queued (if the loop failed), to fail."""
        with self.lock:
            self.closing = self.loop_done = True
            self.room.wake_all()
            taken = self._pending
            self._pending = []
            return taken

    def give_back(self, resolved: Resolved) -> None:
        """:meth:`exchange`'s give-back alone, for the records resolved once the pump has
        stopped (the producer's exit, the loop's end)."""
        with self.lock:
            self._give_back(resolved)

    def disconnect(self) -> None:
        """The loop's thread runs no more of the producer's code (a later thread may reuse
        its identifier)."""
        self.loop_thread = None

    def queued(self) -> int:
        """How many records are queued."""
        with self.lock:
            return len(self._pending)

    def first_queued(self) -> int | None:
        """The sequence number of the oldest record queued, if any."""
        with self.lock:
            return self._pending[0][-1] if self._pending else None

    # --- the callers' side --------------------------------------------------------------
    def offer(
        self,
        future: RecordFuture,
        record: UserRecord,
        hash_key: int,
        timeout: float | None,
    ) -> None:
        """Queue a checked record, waiting up to ``timeout`` seconds for room first.

        Raises:
            BufferFullError: no room within ``timeout``, or no room and the call comes from
                the loop's thread (which must not wait for itself).
            ProducerClosedError: the producer is closed, or closed during the wait.
        """
        room = self.room
        lock = self.lock
        size = record.size
        if not lock.acquire(False):
            acquire_awake(lock)
        try:
            # The common case calls no Python function while it holds the lock (room.fits and
            # room.take written out; a list's append, unlike a deque's, is no call the
            # interpreter may switch threads at); see the module's doc.
            if self.closing:
                raise ProducerClosedError(CLOSED_MESSAGE)
            if room.records < room.max_records and room.bytes + size <= room.max_bytes:
                room.records += 1
                room.bytes += size
            else:
                self._take_room_when_free(size, timeout)
            seq = self.seq = self.seq + 1
            self._pending.append((future, record, hash_key, size, seq))
            if not self._wake_scheduled:
                self._wake_locked()
        finally:
            lock.release()

    def _take_room_when_free(self, size: int, timeout: float | None) -> None:
        """Wait, the lock held by the caller, until the record fits, and take its room (or
        fail)."""
        if threading.get_ident() == self.loop_thread:
            raise BufferFullError(
                "the producer is full and put_record was called from its own thread (a "
                "future's done-callback), which must not wait; put from another thread"
            )
        fits = self.room.wait(size, timeout, lambda: self.closing)
        if self.closing:
            raise ProducerClosedError("the SyncProducer closed while this put waited for room")
        if not fits:
            raise BufferFullError(
                f"no room for the record within timeout={timeout} s: " + self.room.holds()
            )
        self.room.take(size)

    def add_flush_waiter(self) -> FlushWaiter | None:
        """Wait for every record queued so far: a waiter (``None`` if none is outstanding),
        and the pump woken to send what is buffered."""
        with self.lock:
            if not self.room.records:
                return None
            waiter = FlushWaiter(self.seq, self.room.records)
            self._flush_waiters.append(waiter)
            self._flush_requested = True
            self._wake_locked()
        return waiter

    def drop_flush_waiter(self, waiter: FlushWaiter) -> int:
        """Stop counting for ``waiter`` (its wait timed out); the results it still lacks."""
        with self.lock:
            if waiter in self._flush_waiters:
                self._flush_waiters.remove(waiter)
            return waiter.remaining

    def hand_over_now(self) -> int:
        """Wake the pump, to hand over everything queued; the last record's sequence number."""
        with self.lock:
            self._wake_locked()
            return self.seq

    def close(self, request: Callable[[], object]) -> bool:
        """Refuse further puts and schedule ``request`` on the loop (unless it has ended);
        ``False`` (and nothing done) if the producer was closing already."""
        with self.lock:
            if self.closing:
                return False
            self.closing = True
            self.room.wake_all()
            if not self.loop_done:
                self._call_soon(request)
            return True

    def abandon(self, request: Callable[[], object]) -> None:
        """Refuse further puts and schedule ``request`` on the loop, closing or not, if the loop
        runs (it may not have started yet: then it stops once it sees ``closing``)."""
        with self.lock:
            self.closing = True
            self.room.wake_all()
            if self._call_soon is not not_running and not self.loop_done:
                self._call_soon(request)

    def _wake_locked(self) -> None:
        """Schedule one wake-up of the pump, unless one is pending (the lock held)."""
        if not self._wake_scheduled and not self.loop_done:
            self._wake_scheduled = True
            self._call_soon(self._wake)


class Resolved:
    """What the loop's thread gathers of the records resolved between two turns of its pump,
    to give their room back at once (:meth:`Handover.exchange`): one lock a turn, not one a
    record. Only the loop's thread touches it.

    Attributes:
        count: records resolved.
        size: their sizes' sum.
        seqs: their sequence numbers (for the flushes waiting).
    """

    __slots__ = ("count", "seqs", "size")

    def __init__(self) -> None:
        self.count = 0
        self.size = 0
        self.seqs: list[int] = []

    def add(self, size: int, seq: int) -> None:
        """One more record resolved."""
        self.count += 1
        self.size += size
        self.seqs.append(seq)

    def clear(self) -> None:
        self.count = 0
        self.size = 0
        self.seqs = []

"""The intake: where an async producer's accepted records enter their streams' pipelines.

:class:`~aiokpl.Producer`'s put paths check a put (:mod:`aiokpl._admission`), then hand the
checked fields here: this says whether the put may go ahead at all (the producer's thread,
open, started), counts room, builds the record (the caller's :class:`~aiokpl.Outcome`), counts
it outstanding in the ledger and puts it to its stream's pipeline (its router). The producer
binds these methods once, so a put pays the same calls as methods of its own would cost.

Invariants:

* a refused put changes nothing: every check comes before the first count;
* records put within the same millisecond share one arrival, deadline and expiry (a record's
  stamps err at most 1 ms early, never late): 96 bytes less a record (four 24-byte floats,
  with ``last_end``; ``sys.getsizeof``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from ._admission import Accepted, Admission, build_group
from ._core.errors import ProducerClosedError
from ._core.results import RecordResult
from ._outcome import Outcome
from ._record import TaggedRecord, UserRecord

if TYPE_CHECKING:
    from ._core.config import Config
    from ._marks import Marks
    from ._spool import SpoolRecord

__all__ = ("Intake", "Ledger", "Pipeline")


class Ledger(Protocol):
    """What the intake needs of the producer's ledger (``_pipeline.ledger.ResultLedger``)."""

    outstanding: dict[UserRecord, None]
    outstanding_bytes: int
    epoch: int

    async def wait_for_room(self) -> None: ...


class Pipeline(Protocol):
    """What the intake needs of a stream's pipeline (``_pipeline.stream.StreamPipeline``)."""

    def put(self, record: UserRecord, hash_key: int) -> None: ...


# Seconds: a record's arrival is the time of the first put of the millisecond it was put
# in (at most 1 ms early), so its deadline and expiry err early, never late.
_STAMP_RESOLUTION = 0.001
_thread_id = threading.get_ident


def _never_fits(records: int, outstanding_bytes: int, size: int, count: int = 1) -> bool:
    return False


class Intake:
    """One producer's way in: its state as the put paths read it, and what they do with it.

    Attributes:
        clock: the producer's clock (its event loop's, from the start on).
        thread: the event loop's thread, once started; ``None`` before.
        running: the producer has started (its task group is open).
        closed: the producer is closed (or closing): no put goes ahead.
        seq: records put so far.
    """

    __slots__ = (
        "_admission",
        "_buffered",
        "_fits",
        "_ledger",
        "_outstanding",
        "_pipeline_of",
        "_pipelines",
        "_stamps",
        "_ttl",
        "clock",
        "closed",
        "marks",
        "running",
        "seq",
        "thread",
    )

    def __init__(
        self,
        config: Config,
        admission: Admission,
        ledger: Ledger,
        pipelines: Mapping[str, Pipeline],
        pipeline_of: Callable[[str], Pipeline],
        clock: Callable[[], float],
    ) -> None:
        """``pipelines`` are the producer's by stream, ``pipeline_of`` builds a new one."""
        self._admission = admission
        # Replaced while the spool's disk is full (see block).
        self._fits = admission.fits if not admission.reserve else admission.fits_reserving
        self._ledger = ledger
        self._outstanding = ledger.outstanding
        self._pipelines = pipelines
        self._pipeline_of = pipeline_of
        self._buffered = config.record_max_buffered_time_ms / 1000
        self._ttl = config.record_ttl_ms / 1000
        # (arrival, deadline, expiry) of the latest millisecond's puts; see enqueue.
        self._stamps = (-math.inf, -math.inf, -math.inf)
        self.clock = clock
        self.thread: int | None = None
        self.running = False
        self.closed = False
        self.seq = 0
        # What a record gets besides its fields (a place in the spool, an identity), when the
        # producer spools or writes identities; its put paths then use enqueue_marked.
        self.marks: Marks | None = None

    # --- may a put go ahead ----------------------------------------------------------------
    def accept_stream(self, stream: str) -> None:
        """Check that a put to ``stream`` may go ahead: at once for a stream already in use."""
        try:
            if stream in self._pipelines and not self.closed and _thread_id() == self.thread:
                return  # most puts
        except TypeError:  # unhashable: certainly not a stream name, as the check says
            pass
        self.check_thread()
        if self.closed:
            raise ProducerClosedError("the producer is closed; create a new one to put records")
        if not self.running:
            raise RuntimeError("the producer is not started: use it with `async with`")
        self._admission.check_stream(stream)

    def check_thread(self) -> None:
        """Refuse a call from another thread than the event loop's that entered the producer.

        Its stages are not thread-safe, and a record put from a foreign loop would never get
        its result (or crash that loop, on trio).
        """
        if self.thread is not None and _thread_id() != self.thread:
            raise RuntimeError(
                "this Producer runs on the event loop of another thread; call it only from "
                "that loop. To put records from other threads, use aiokpl.SyncProducer"
            )

    def check_still_open(self) -> None:
        """After every await on a put path: the producer may have closed meanwhile."""
        if self.closed:
            raise ProducerClosedError("the producer closed while this put waited")

    # --- room ------------------------------------------------------------------------------
    def has_room(self, size: int, count: int = 1) -> bool:
        """Whether ``count`` more records of ``size`` bytes in all fit the outstanding bounds."""
        return self._fits(len(self._outstanding), self._ledger.outstanding_bytes, size, count)

    def block(self, reason: str | None) -> None:
        """Let no put in while ``reason`` holds (the spool's disk is full); ``None`` lifts it.

        Puts then wait for room as at the bounds, and ``put_record_nowait`` says ``reason``;
        the caller wakes the waiters when it lifts it.
        """
        self._admission.blocked = reason
        admission = self._admission
        fits = admission.fits if not admission.reserve else admission.fits_reserving
        self._fits = fits if reason is None else _never_fits

    async def wait_for_room(self, size: int, count: int = 1) -> None:
        """Wait until ``count`` records of ``size`` bytes in all fit the outstanding bounds."""
        while not self.has_room(size, count):
            await self._ledger.wait_for_room()
            self.check_still_open()

    # --- in --------------------------------------------------------------------------------
    def enqueue(
        self,
        stream: str,
        key: str,
        size: int,
        payload: bytes,
        hash_key: int,
        ehk: str | None,
        tags: bytes = b"",
    ) -> Outcome[RecordResult]:
        """Build an accepted record, count it outstanding and put it to its stream."""
        # Hot path: the stream's pipeline read inline, the call only for a new stream (37 ns
        # per put, 39 vs 75 ns, timeit).
        pipeline = self._pipelines.get(stream) or self._pipeline_of(stream)
        # Hot path: the millisecond's stamps, shared (see the module's invariants).
        now = self.clock()
        stamps = self._stamps
        if now - stamps[0] >= _STAMP_RESOLUTION:
            stamps = self._stamps = (now, now + self._buffered, now + self._ttl)
        arrival, deadline, expires_at = stamps
        self.seq += 1
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

    def enqueue_marked(
        self,
        stream: str,
        key: str,
        size: int,
        payload: bytes,
        hash_key: int,
        ehk: str | None,
        tags: bytes = b"",
    ) -> Outcome[RecordResult]:
        """:meth:`enqueue` for a producer that spools or writes identities: the record is
        built by its ``marks`` (framed into the spool, given its identity tag).

        Raises:
            InvalidRecordError: the identity tag would take the record over
                ``max_record_size`` (nothing was counted).
        """
        pipeline = self._pipelines.get(stream) or self._pipeline_of(stream)
        now = self.clock()
        stamps = self._stamps
        if now - stamps[0] >= _STAMP_RESOLUTION:
            stamps = self._stamps = (now, now + self._buffered, now + self._ttl)
        ledger = self._ledger
        assert self.marks is not None
        record = self.marks.record(stream, key, size, payload, ehk, tags, stamps, ledger.epoch)
        self.seq += 1
        self._outstanding[record] = None
        ledger.outstanding_bytes += record.size
        pipeline.put(record, hash_key)
        return record

    async def replay(self, spooled: SpoolRecord) -> bool:
        """Put a record recovered from the spool back into its stream, once there is room;
        ``False`` (nothing put) when the producer closed meanwhile."""
        assert self.marks is not None
        now = self.clock()
        stamps = (now, now + self._buffered, now + self._ttl)
        record = self.marks.replayed(spooled, stamps, self._ledger.epoch)
        while not self.closed:
            if self.has_room(record.size):
                break
            await self._ledger.wait_for_room()
        else:
            return False
        self._outstanding[record] = None
        self._ledger.outstanding_bytes += record.size
        self._pipeline_of(record.stream).put(record, record.hash_key)
        return True

    def enqueue_many(
        self,
        stream: str,
        accepted: list[Accepted],
        size: int,
        tagged: dict[int, bytes] | None = None,
    ) -> list[Outcome[RecordResult]]:
        """Enqueue a checked ``put_records`` group, in order, with one set of stamps."""
        if self.marks is not None:
            return self._enqueue_many_marked(stream, accepted, tagged)
        put = self._pipeline_of(stream).put
        now = self.clock()
        self.seq += len(accepted)
        self._ledger.outstanding_bytes += size
        stamps = (now, now + self._buffered, now + self._ttl)  # shared by the group
        return build_group(
            stream, accepted, tagged, stamps, self._ledger.epoch, self._outstanding, put
        )

    def _enqueue_many_marked(
        self, stream: str, accepted: list[Accepted], tagged: dict[int, bytes] | None
    ) -> list[Outcome[RecordResult]]:
        """:meth:`enqueue_many` through the marks; all or nothing: every record is built (and
        so checked) before the first is counted or framed into the spool."""
        marks = self.marks
        assert marks is not None
        put = self._pipeline_of(stream).put
        now = self.clock()
        stamps = (now, now + self._buffered, now + self._ttl)
        epoch = self._ledger.epoch
        groups = [
            (key, size, payload, ehk, tagged.get(index, b"") if tagged is not None else b"")
            for index, (key, size, payload, _, ehk) in enumerate(accepted)
        ]
        marks.check_group(groups)
        records = [
            marks.record(stream, key, size, payload, ehk, tags, stamps, epoch)
            for key, size, payload, ehk, tags in groups
        ]
        self.seq += len(records)
        for record, item in zip(records, accepted, strict=True):
            self._outstanding[record] = None
            self._ledger.outstanding_bytes += record.size
            put(record, item[3])
        return list(records)

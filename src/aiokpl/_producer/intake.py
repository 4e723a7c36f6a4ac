"""The intake: where an async producer's accepted records enter their streams' pipelines.

:class:`~aiokpl.Producer`'s put paths check a put (:mod:`aiokpl._producer.admission`: the
record comes back built, the caller's :class:`~aiokpl.Outcome`), then hand the record here:
this says whether the put may go ahead at all (the producer's thread, open) and whether there
is room, and enters it (:meth:`Intake.enter`): stamps its times, gives it its marks (a place in
the spool, an identity) when the producer has any, counts it in the ledger and puts it to its
stream's pipeline (its router). A ``SyncProducer``'s loop enters the records its callers'
threads checked through the same method. An intake exists only while its producer runs.

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

from .._core.errors import ProducerClosedError
from .._record import UserRecord
from .admission import Admission

if TYPE_CHECKING:
    from .._core.config import Config
    from .._spool import SpoolRecord
    from .marks import Marks

__all__ = ("CLOSED", "Intake", "Ledger", "Pipeline")


class Ledger(Protocol):
    """What the intake needs of the producer's ledger (``_pipeline.ledger.ResultLedger``)."""

    outstanding: dict[UserRecord, None]
    outstanding_bytes: int

    def add(self, record: UserRecord) -> None: ...

    def add_group(self, records: list[UserRecord]) -> None: ...

    async def wait_for_room(self) -> None: ...


class Pipeline(Protocol):
    """What the intake needs of a stream's pipeline (``_pipeline.stream.StreamPipeline``)."""

    def put(self, record: UserRecord, hash_key: int) -> None: ...


# Seconds: a record's arrival is the time of the first put of the millisecond it was put
# in (at most 1 ms early), so its deadline and expiry err early, never late.
_STAMP_RESOLUTION = 0.001
_thread_id = threading.get_ident

CLOSED = "the producer is closed; create a new one to put records"  # what a closed one says


class Intake:
    """A running producer's way in: its state as the put paths read it, and what they do with
    it. Made when the producer starts (a producer not started has none).

    Attributes:
        admission: what a put must pass (the producer's region known).
        clock: the producer's clock (its event loop's).
        thread: the event loop's thread.
        closed: the producer is closed (or closing): no put goes ahead.
        marks: what a record gets as it enters besides its fields (a place in the spool, an
            identity), when the producer spools or writes identities; ``None`` otherwise.
    """

    __slots__ = (
        "_buffered",
        "_ledger",
        "_pipeline_of",
        "_pipelines",
        "_stamps",
        "_ttl",
        "admission",
        "clock",
        "closed",
        "marks",
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
        marks: Marks | None = None,
        thread: int | None = None,
    ) -> None:
        """``pipelines`` are the producer's by stream, ``pipeline_of`` builds a new one;
        ``thread`` is the event loop's (``None``: this one)."""
        self.admission = admission
        self._ledger = ledger
        self._pipelines = pipelines
        self._pipeline_of = pipeline_of
        self._buffered = config.record_max_buffered_time_ms / 1000
        self._ttl = config.record_ttl_ms / 1000
        # (arrival, deadline, expiry) of the latest millisecond's puts; see enter.
        self._stamps = (-math.inf, -math.inf, -math.inf)
        self.clock = clock
        self.thread = _thread_id() if thread is None else thread
        self.closed = False
        self.marks = marks

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
            raise ProducerClosedError(CLOSED)
        self.admission.check_stream(stream)

    def check_thread(self) -> None:
        """Refuse a call from another thread than the event loop's that entered the producer.

        Its stages are not thread-safe, and a record put from a foreign loop would never get
        its result (or crash that loop, on trio).
        """
        if _thread_id() != self.thread:
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
        """Whether ``count`` more records of ``size`` bytes in all fit the outstanding bounds
        (none while the spool's disk is full: ``Admission.blocked``)."""
        ledger = self._ledger
        admission = self.admission
        return (
            admission.blocked is None
            and len(ledger.outstanding) + count <= admission.max_records
            # Each record let in may grow by its identity tag (Admission.reserve): kept free.
            and ledger.outstanding_bytes + size + count * admission.reserve <= admission.max_bytes
        )

    async def wait_for_room(self, size: int, count: int = 1) -> None:
        """Wait until ``count`` records of ``size`` bytes in all fit the outstanding bounds."""
        while not self.has_room(size, count):
            await self._ledger.wait_for_room()
            self.check_still_open()

    # --- in --------------------------------------------------------------------------------
    def _stamps_at(self, now: float) -> tuple[float, float, float]:
        """A record's arrival, deadline and expiry, put at ``now`` (the deadline never past the
        expiry: see ``UserRecord.stamp``)."""
        expires_at = now + self._ttl
        return now, min(now + self._buffered, expires_at), expires_at

    def enter(self, record: UserRecord, hash_key: int) -> UserRecord:
        """Enter a checked ``record`` (there is room: the caller looked): stamp it, mark it,
        count it in the ledger and put it to its stream. Returns it (the caller's outcome).

        Raises:
            InvalidRecordError: its identity tag would take the record over
                ``max_record_size`` (only with ``Config.record_identities``; nothing counted).
        """
        stream = record.stream
        # Hot path: the stream's pipeline read inline, the call only for a new stream (37 ns
        # per put, 39 vs 75 ns, timeit).
        pipeline = self._pipelines.get(stream) or self._pipeline_of(stream)
        # Hot path: the millisecond's stamps, shared (see the module's invariants).
        now = self.clock()
        stamps = self._stamps
        if now - stamps[0] >= _STAMP_RESOLUTION:
            stamps = self._stamps = self._stamps_at(now)
        # Hot path: UserRecord.stamp written out (the deadline is clamped to the expiry in
        # the shared stamps already).
        record.last_end, record.deadline, record.expires_at = stamps
        if self.marks is not None:
            self.marks.mark(record)
        self._ledger.add(record)
        pipeline.put(record, hash_key)
        return record

    def enter_group(
        self, stream: str, records: list[UserRecord], hash_keys: list[int]
    ) -> list[UserRecord]:
        """Enter a checked ``put_records`` group to ``stream``, in order, with one set of
        stamps; all or nothing: with marks, every record is checked with its identity before
        the first is marked.

        Raises:
            InvalidRecordError: one record's identity tag would take it over
                ``max_record_size`` (nothing counted).
        """
        put = self._pipeline_of(stream).put
        arrival, deadline, expires_at = self._stamps_at(self.clock())
        for record in records:
            record.last_end, record.deadline, record.expires_at = arrival, deadline, expires_at
        marks = self.marks
        if marks is not None:
            marks.check_group(records)
            for record in records:
                marks.mark(record)
        self._ledger.add_group(records)
        for record, hash_key in zip(records, hash_keys, strict=True):
            put(record, hash_key)
        return records

    async def replay(self, spooled: SpoolRecord) -> bool:
        """Put a record recovered from the spool back into its stream, once there is room;
        ``False`` (nothing put) when the producer closed meanwhile."""
        assert self.marks is not None
        record = self.marks.replayed(spooled)
        while not self.closed:
            if self.has_room(record.size):
                break
            await self._ledger.wait_for_room()
        else:
            return False
        record.last_end, record.deadline, record.expires_at = self._stamps_at(self.clock())
        self._ledger.add(record)
        self._pipeline_of(record.stream).put(record, record.hash_key)
        return True

"""The spool's writer: appends records and acknowledgements, group-commits, deletes what is done.

The writer is synchronous and reads no clock: the caller passes ``now`` to :meth:`flush`, and
an async shell (:class:`aiokpl._spooling.Spool`) runs the flush off the event loop. State,
h11-style:

- ``append`` and ``acknowledge`` only encode into a buffer in memory (no I/O): a record is
  *accepted* and has its sequence number (0, 1, 2, ... for this writer's producer id).
- ``flush(now)`` writes the buffer to the active segment, and fsyncs when the
  :class:`~aiokpl._spool.policy.FsyncPolicy` says so. :attr:`durable_through` then says which
  records are *durable*: every sequence number below it. With ``"none"`` a record is durable
  once written (it survives the process, not the machine).
- A segment holds at most ``segment_size_bytes``: an entry that would take it past is written
  to a new one (the full one fsync'd and closed, the new one created with its header fsync'd),
  so a flush may spread over segments; only an entry longer than a whole segment is written
  past it, alone. Recovery reads no file longer than a segment can be. Every writer session
  starts a new segment with a new, random producer id, so a sequence number is never reused
  under an id whatever a crash lost; replayed records keep the id and number they were first
  written with.
- A segment is deleted when it is the oldest and every record in it is resolved, right after an
  fsync, so the acknowledgements written so far are durable. Deleting only the oldest keeps
  every acknowledgement of a live segment's records on disk (they are in it or after it): a
  crash at any step replays nothing that was resolved, except records whose acknowledgement
  was not yet durable.

Errors: a full disk (``ENOSPC``, ``EDQUOT``) raises :class:`SpoolFullError`, another ``OSError``
:class:`SpoolIOError`, both with nothing lost: the segment is cut back to its last whole frame,
the buffer is kept, and the next ``flush`` writes it again (after a failed fsync, into a new
segment, since what the old one holds past its last fsync is in doubt).
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass

from .._core.encoder import encode_tags
from .._core.errors import AiokplError
from .files import DEFAULT_SEGMENT_SIZE_BYTES, SpoolFiles
from .format import (
    HEADER_BYTES,
    PRODUCER_ID_BYTES,
    AckOutcome,
    FrameStatus,
    SpoolAck,
    encode_ack,
    encode_header,
    encode_record_fields,
    read_frame,
    segment_name,
)
from .policy import FsyncPolicy
from .recovery import Recovery, SegmentState
from .runs import SequenceSet, runs_of

__all__ = (
    "DEFAULT_SEGMENT_SIZE_BYTES",
    "SpoolError",
    "SpoolFullError",
    "SpoolIOError",
    "SpoolWriter",
    "WriterStatistics",
)

_FULL = (errno.ENOSPC, errno.EDQUOT)


class SpoolError(AiokplError):
    """Base class of the spool's errors."""


class SpoolIOError(SpoolError, OSError):
    """Raised by :meth:`SpoolWriter.flush` when the file system fails a write or an fsync.

    Nothing is lost: the records stay accepted and not durable, and the next flush writes them
    again. The cause is the ``OSError`` (``__cause__``).
    """


class SpoolFullError(SpoolIOError):
    """Raised by :meth:`SpoolWriter.flush` when the disk is full (``ENOSPC``, ``EDQUOT``).

    Back-pressure, not a crash: stop accepting records (``SpoolWriter.full`` is true until a
    flush succeeds), free space, flush again.
    """


@dataclass(frozen=True)
class WriterStatistics:
    """A snapshot of a :class:`SpoolWriter`."""

    segments: int
    bytes_on_disk: int
    records_unresolved: int
    buffered_bytes: int
    unsynced_bytes: int
    """Written since the last fsync: 0 means every entry written (acknowledgements too) is
    durable."""
    next_sequence_number: int
    durable_through: int
    fsyncs: int
    full: bool
    producers: int
    """Producer ids whose resolved sequence numbers are kept (this session's and those of
    earlier sessions with a segment left)."""


class SpoolWriter:
    """Appends to a spool directory that :func:`~aiokpl._spool.recovery.scan` has recovered.

    Args:
        recovery: the scan of the directory (repaired); its segments become this writer's.
        files: the file layer (the one the scan used).
        policy: when to fsync.
        segment_size_bytes: the most a segment holds (an entry that would pass it starts the
            next one; only an entry longer than a segment is written alone past it).
        producer_id: this session's id (16 bytes); random by default.

    Raises:
        SpoolIOError: the first segment could not be created.
    """

    def __init__(
        self,
        recovery: Recovery,
        *,
        policy: FsyncPolicy | None = None,
        segment_size_bytes: int = DEFAULT_SEGMENT_SIZE_BYTES,
        producer_id: bytes | None = None,
    ) -> None:
        self.directory = recovery.directory
        self.files: SpoolFiles = recovery.files
        self.policy = policy if policy is not None else FsyncPolicy()
        self.segment_size_bytes = segment_size_bytes
        self.producer_id = producer_id if producer_id is not None else os.urandom(16)
        if len(self.producer_id) != PRODUCER_ID_BYTES:
            raise ValueError(f"a producer id is {PRODUCER_ID_BYTES} bytes")
        self.full = False
        self._closed = False
        self._segments: list[SegmentState] = list(recovery.segments)
        self._resolved = recovery.resolved
        self._mine = self._resolved.setdefault(self.producer_id, SequenceSet())
        self._next_number = recovery.next_segment_number
        self._next_seq = 0
        self._written_through = 0  # records below this are in the active segment or before
        self._durable_through = 0
        self._buffer = bytearray()  # appended, not written
        self._unsynced = bytearray()  # written to the active segment since its last fsync
        self._handle: object | None = None
        self._active: SegmentState | None = None
        self._in_doubt = False  # an fsync failed: the active segment's unsynced tail is suspect
        self._fsyncs = 0
        try:
            self._open_segment()
        except OSError as exc:
            self._raise(exc)

    def __repr__(self) -> str:
        return (
            f"<SpoolWriter {self.directory!r} segments={len(self._segments)} "
            f"next={self._next_seq} durable_through={self._durable_through} "
            f"buffered={len(self._buffer)}B full={self.full}>"
        )

    @property
    def durable_through(self) -> int:
        """Every record of this writer with a sequence number below this is durable."""
        return self._durable_through

    @property
    def next_sequence_number(self) -> int:
        """The sequence number the next appended record gets."""
        return self._next_seq

    def append(
        self,
        *,
        stream: str,
        partition_key: str,
        data: bytes,
        accepted_at: float,
        explicit_hash_key: str | None = None,
        tags: tuple[tuple[str, str | None], ...] = (),
    ) -> int:
        """Accept a record (in memory; :meth:`flush` writes it); returns its sequence number.

        Raises:
            SpoolError: the writer is closed.
        """
        self._check_open()
        seq = self._next_seq
        self._buffer += encode_record_fields(
            seq, accepted_at, stream, partition_key, explicit_hash_key, data, encode_tags(tags)
        )
        self._next_seq = seq + 1
        return seq

    def append_encoded(self, frames: bytes | bytearray, count: int) -> None:
        """Accept ``count`` records framed by the caller, like :meth:`append` (in memory).

        The producer frames its records on its event loop with
        :func:`~aiokpl._spool.format.encode_record_fields`, numbered from
        :attr:`next_sequence_number` on in order, while a flush may be running in a worker
        thread; it hands them over here between flushes, so only one thread at a time uses the
        writer.

        Raises:
            SpoolError: the writer is closed.
        """
        self._check_open()
        self._buffer += frames
        self._next_seq += count

    def acknowledge(self, producer_id: bytes, seqs: list[int], outcome: AckOutcome) -> None:
        """Resolve records (this writer's or recovered ones) so they are never replayed.

        Each record is acknowledged once; a repeat is ignored. Written at the next flush.

        Raises:
            SpoolError: the writer is closed.
        """
        self._check_open()
        runs = runs_of(seqs)
        if not runs:
            return
        self._buffer += encode_ack(SpoolAck(producer_id, outcome, tuple(runs)))
        resolved = self._resolved.setdefault(producer_id, SequenceSet())
        for first, count in runs:
            if not resolved.covered(first, count):
                resolved.add(first, count)
                self._resolve(producer_id, first, count)
                continue
            for seq in range(first, first + count):  # some were resolved before: skip those
                if seq not in resolved:
                    resolved.add(seq)
                    self._resolve(producer_id, seq, 1)

    def _resolve(self, producer_id: bytes, first: int, count: int) -> None:
        for segment in self._segments:
            if segment.producer_id == producer_id:
                segment.unresolved -= segment.records.covered(first, count)

    def next_flush_at(self) -> float | None:
        """When to call :meth:`flush` next: at once when something is buffered, at the policy's
        time when written data waits for its fsync, else ``None``."""
        if self._buffer:
            return 0.0
        return self.policy.next_fsync_at(unsynced=bool(self._unsynced))

    def flush(self, now: float) -> int:
        """Write what was appended, fsync if the policy says so at ``now``, delete segments
        whose records are all resolved; returns :attr:`durable_through`.

        Raises:
            SpoolFullError: the disk is full; nothing was lost, flush again later.
            SpoolIOError: another file system error; nothing was lost, flush again later.
            SpoolError: the writer is closed.
        """
        self._check_open()
        try:
            if self._in_doubt or self._handle is None or self._size() >= self.segment_size_bytes:
                self._rotate(now)
            if self._buffer:
                self._write(now)
            if self.policy.should_fsync(now, unsynced=bool(self._unsynced)):
                self._fsync(now)
            if self.policy.mode == "none":
                self._unsynced.clear()
                self._durable_through = self._written_through
            if not self._unsynced:
                self._delete_finished()
        except OSError as exc:
            self._raise(exc)
        self.full = False
        return self._durable_through

    def close(self, now: float) -> None:
        """Flush, fsync whatever is not durable yet (unless the policy is ``"none"``), close.

        Raises:
            SpoolFullError: as :meth:`flush`; the writer stays open.
            SpoolIOError: as :meth:`flush`; the writer stays open.
        """
        if self._closed:
            return
        self.flush(now)
        try:
            if self._unsynced:
                self._fsync(now)
                self._delete_finished()
        except OSError as exc:
            self._raise(exc)
        assert self._handle is not None  # a flush that returned left a segment open
        self.files.close(self._handle)
        self._handle = None
        self._closed = True

    def statistics(self) -> WriterStatistics:
        """A snapshot of the writer's counts."""
        return WriterStatistics(
            segments=len(self._segments),
            bytes_on_disk=sum(s.size for s in self._segments),
            records_unresolved=sum(s.unresolved for s in self._segments)
            + self._next_seq
            - self._written_through,
            buffered_bytes=len(self._buffer),
            unsynced_bytes=len(self._unsynced),
            next_sequence_number=self._next_seq,
            durable_through=self._durable_through,
            fsyncs=self._fsyncs,
            full=self.full,
            producers=len(self._resolved),
        )

    # -- the steps ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SpoolError(f"the spool writer of {self.directory} is closed")

    def _raise(self, exc: OSError) -> None:
        self.full = exc.errno in _FULL
        error = SpoolFullError if self.full else SpoolIOError
        raise error(exc.errno, f"spool {self.directory}: {exc.strerror}") from exc

    def _size(self) -> int:
        assert self._active is not None
        return self._active.size

    def _open_segment(self) -> None:
        number = self._next_number
        self._next_number += 1  # a half-created file keeps its number: never create it twice
        path = os.path.join(self.directory, segment_name(number))
        handle = self.files.create(path)
        try:
            self.files.append(handle, encode_header(self.producer_id))
            if self.policy.mode != "none":
                self.files.fsync(handle)
        except OSError:
            self.files.close(handle)
            with contextlib.suppress(OSError):
                self.files.unlink(path)
            raise
        segment = SegmentState(number, path, self.producer_id, HEADER_BYTES)
        self._segments.append(segment)
        self._active = segment
        self._handle = handle

    def _write(self, now: float) -> None:
        """Write the buffer, into as many segments as it takes to keep each within its size."""
        while True:
            room = self.segment_size_bytes - self._size()
            if len(self._buffer) <= room:
                self._write_part(len(self._buffer), self._next_seq - self._written_through)
                return
            size, records = self._entries_within(room)
            if size <= room or self._size() == HEADER_BYTES:  # fits, or alone in a new segment
                self._write_part(size, records)
                if not self._buffer:
                    return
            self._rotate(now)

    def _entries_within(self, room: int) -> tuple[int, int]:
        """The bytes of the buffer's first whole entries that fit in ``room`` (at least the
        first entry, even if it does not), and how many of them are records."""
        size = records = 0
        with memoryview(self._buffer) as view:  # released: the buffer stays resizable
            while size < len(view):
                frame = read_frame(view, size, self.producer_id, decode_records=False)
                assert frame.status is FrameStatus.OK  # the writer's own frames
                if frame.end > room and size:
                    break
                records += frame.sequence_number is not None
                size = frame.end
        return size, records

    def _write_part(self, size: int, records: int) -> None:
        """Write the buffer's first ``size`` bytes (whole entries, ``records`` of them records)
        to the active segment."""
        segment = self._active
        assert segment is not None
        with memoryview(self._buffer) as view:  # one copy, and the buffer resizable after
            data = bytes(view[:size])
        try:
            self.files.append(self._handle, data)
        except OSError:
            try:  # cut a part-written frame off, so the next write follows whole frames
                self.files.truncate(self._handle, segment.size)
            except OSError:
                self._in_doubt = True
            raise
        segment.size += len(data)
        self._unsynced += data
        del self._buffer[:size]
        first = self._written_through
        segment.records.add(first, records)
        segment.unresolved += records - self._mine.covered(first, records)
        self._written_through = first + records

    def _fsync(self, now: float) -> None:
        try:
            self.files.fsync(self._handle)
        except OSError:
            # What the segment holds since its last fsync is in doubt (a failed fsync may have
            # dropped it and mark it clean): written again into a new segment.
            self._in_doubt = True
            raise
        self.policy.fsynced(now)
        self._fsyncs += 1
        self._unsynced.clear()
        self._durable_through = self._written_through

    def _rotate(self, now: float) -> None:
        old = self._active
        if self._handle is not None:
            if self._unsynced and not self._in_doubt and self.policy.mode != "none":
                self._fsync(now)
            self.files.close(self._handle)
            self._handle = None
        if self._in_doubt:
            assert old is not None
            self._carry_over(old)
        self._open_segment()

    def _carry_over(self, old: SegmentState) -> None:
        """Take the records written to ``old`` since its last fsync back into the buffer."""
        carry = bytes(self._unsynced)
        old.size -= len(carry)
        with contextlib.suppress(OSError):  # best effort: a copy left there is read first
            self.files.truncate_path(old.path, old.size)
        first = self._durable_through
        count = self._written_through - first
        old.records.discard_from(first)
        old.unresolved -= count - self._mine.covered(first, count)
        self._buffer[:0] = carry
        self._unsynced.clear()
        self._written_through = first
        self._in_doubt = False

    def _delete_finished(self) -> None:
        gone: set[bytes] = set()
        while len(self._segments) > 1 and self._segments[0].unresolved == 0:
            with contextlib.suppress(FileNotFoundError):
                self.files.unlink(self._segments[0].path)
            gone.add(self._segments[0].producer_id)
            del self._segments[0]
        # An earlier session's resolved set is needed while a segment of it is left.
        for producer_id in gone - {s.producer_id for s in self._segments}:
            del self._resolved[producer_id]

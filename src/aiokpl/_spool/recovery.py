"""Recovery: rebuild the spool's state from its segments, and never refuse to start.

:func:`scan` reads the segments in order, one at a time (memory: one segment's bytes, plus sets
of sequence numbers kept as runs), and learns which records each holds and which sequence
numbers the acknowledgements resolve. What it meets on the way:

- a segment shorter than its header (a crash while it was being created): nothing in it was
  ever durable; removed and counted as a torn tail;
- a header that is not one (magic, version or CRC): the whole segment is moved aside to
  ``NAME.corrupt`` and counted;
- a torn tail (:class:`~aiokpl._spool.format.FrameStatus`): truncated at the last whole frame;
- a corrupt frame (an entry whose CRC matches but which does not decode is one: a record is
  checked field by field as it is read, so every record kept decodes when it is replayed):
  its segment cannot be framed past it, so a copy of the whole segment is
  written to ``NAME.corrupt`` (for whoever wants to look), then the segment is truncated there.
  The frames before it are recovered; the bytes from it on are counted lost.
- a name the file layer will not read (:class:`~aiokpl._private_files.UntrustedPathError`: a
  link, a FIFO, a device, another user's file, a file longer than a segment can be): renamed
  to ``NAME.corrupt`` unread (a rename moves a link, not what it points to) and counted as a
  segment moved aside; :attr:`Recovery.refused` says why.

Its work is linear in the segments' size, whatever order the sequence numbers and the
acknowledgements' runs come in (``runs.SequenceSet``).

With ``repair=False`` (``aiokpl spool check``) nothing is changed and the same counts are
returned. A record met twice (a rewrite after a failed fsync whose truncation did not hold)
belongs to the first segment that holds it, and is replayed once, its first copy (twice in
one segment too, which only a crafted file holds). Acknowledgements naming records that no
segment holds (their segment was deleted after they were written) are harmless.

:meth:`Recovery.unresolved` then streams the durable, unresolved records, one segment at a
time, for the producer to send again with their identity.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from .files import SpoolFiles, UntrustedPathError
from .format import (
    HEADER_BYTES,
    Frame,
    FrameStatus,
    HeaderError,
    SpoolAck,
    SpoolRecord,
    checked_records,
    decode_header,
    decode_record,
    read_frame,
    segment_number,
)
from .runs import SequenceSet

__all__ = ("CORRUPT_SUFFIX", "Recovery", "RecoveryStatistics", "SegmentState", "scan", "walk")

CORRUPT_SUFFIX = ".corrupt"


@dataclass(frozen=True)
class RecoveryStatistics:
    """What recovery found (and, repairing, did)."""

    segments: int = 0
    """Segments read (moved-aside and torn ones not included)."""
    records_recovered: int = 0
    """Records durable and not resolved: the ones to send again."""
    records_resolved: int = 0
    """Records found already acknowledged (delivered or failed)."""
    frames_lost: int = 0
    """Corrupt frames met; each makes the rest of its segment unreadable."""
    bytes_lost: int = 0
    """Bytes from a corrupt frame (or a corrupt header) to the end of its segment."""
    segments_moved_aside: int = 0
    """Segments copied or renamed to ``*.corrupt``."""
    torn_tails: int = 0
    """Segments whose last frame (or header) was cut off by a crash."""
    bytes_truncated: int = 0
    """Bytes of torn tails."""

    @property
    def corrupt(self) -> bool:
        """Whether anything was lost to damage (torn tails are a crash's normal mark)."""
        return self.frames_lost > 0 or self.segments_moved_aside > 0


@dataclass
class SegmentState:
    """One live segment: where it is, whose it is, which records it holds."""

    number: int
    path: str
    producer_id: bytes
    size: int
    """Its bytes up to the last whole, valid frame."""
    records: SequenceSet = field(default_factory=SequenceSet)
    """The sequence numbers of the records it holds (the first copy of each)."""
    unresolved: int = 0
    """How many of them are not resolved yet; at 0 the segment may go."""


@dataclass
class _Tally:
    segments: int = 0
    frames_lost: int = 0
    bytes_lost: int = 0
    segments_moved_aside: int = 0
    torn_tails: int = 0
    bytes_truncated: int = 0
    refused: list[str] = field(default_factory=list)


class Recovery:
    """The state :func:`scan` rebuilt: live segments, resolved sets, counts, and
    ``refused``: one line for each name set aside unread, saying why."""

    def __init__(
        self,
        directory: str,
        files: SpoolFiles,
        segments: list[SegmentState],
        resolved: dict[bytes, SequenceSet],
        next_segment_number: int,
        statistics: RecoveryStatistics,
        refused: tuple[str, ...] = (),
    ) -> None:
        self.directory = directory
        self.files = files
        self.segments = segments
        self.resolved = resolved
        self.next_segment_number = next_segment_number
        self.statistics = statistics
        self.refused = refused

    def __repr__(self) -> str:
        return f"<Recovery {self.directory!r} segments={len(self.segments)} {self.statistics}>"

    def unresolved(self) -> Iterator[SpoolRecord]:
        """The durable records no acknowledgement resolved, in the order they were written.

        One segment in memory at a time. A record resolved while the iteration runs (the
        caller acknowledged it) is not yielded again; a segment deleted meanwhile is skipped.
        """
        for segment in [s for s in self.segments if s.unresolved]:
            try:
                data = self.files.read(segment.path)
            except (FileNotFoundError, UntrustedPathError):  # gone, or replaced, since the scan
                continue
            resolved = self.resolved.get(segment.producer_id, SequenceSet())
            yielded = SequenceSet()  # a record written twice in one segment is replayed once
            for seq, start, end in checked_records(data, segment.size):
                if seq in segment.records and seq not in resolved and yielded.add(seq):
                    yield decode_record(data, start, end, segment.producer_id)
            del data  # before the next segment is read: one segment in memory, not two


def walk(data: bytes, producer_id: bytes, *, decode_records: bool = True) -> Iterator[Frame]:
    """Every frame of a segment's bytes after its header, up to and including the first one
    that is not ``OK`` (``END`` when the segment is whole)."""
    offset = HEADER_BYTES
    view = memoryview(data)
    while True:
        frame = read_frame(view, offset, producer_id, decode_records=decode_records)
        yield frame
        if frame.status is not FrameStatus.OK:
            return
        offset = frame.end


def scan(directory: str, files: SpoolFiles, *, repair: bool = True) -> Recovery:
    """Read every segment of ``directory`` and rebuild the spool's state.

    Args:
        directory: the spool directory; created when ``repair`` and missing.
        files: the file layer.
        repair: truncate torn tails, move corrupt segments aside (else only count them).

    Raises:
        FileNotFoundError: ``directory`` is missing and ``repair`` is false.
        OSError: the file system failed a read, or (repairing) a write.
    """
    if repair:
        files.makedirs(directory)
    names = files.listdir(directory)
    numbered = sorted((n, name) for name in names if (n := segment_number(name)) is not None)
    taken = set(names)
    tally = _Tally()
    segments: list[SegmentState] = []
    seen: dict[bytes, SequenceSet] = {}
    resolved: dict[bytes, SequenceSet] = {}
    for number, name in numbered:
        path = os.path.join(directory, name)
        try:
            data = files.read(path)
        except UntrustedPathError as exc:
            tally.segments_moved_aside += 1
            tally.refused.append(exc.strerror or str(exc))
            if repair:
                files.rename(path, _aside_path(path, taken))
            continue
        segment = _scan_segment(number, path, data, files, repair, taken, tally, seen, resolved)
        del data  # before the next segment is read: one segment in memory, not two
        if segment is not None:
            segments.append(segment)
    # Acknowledgements of producers with no segment left resolve nothing any more.
    resolved = {p: resolved.get(p, SequenceSet()) for p in {s.producer_id for s in segments}}
    recovered = 0
    found = 0
    for segment in segments:
        done = resolved.get(segment.producer_id, SequenceSet())
        for first, count in segment.records.runs():
            segment.unresolved += count - done.covered(first, count)
        recovered += segment.unresolved
        found += len(segment.records)
    digits = [int(name[:20]) for name in names if name[:20].isdigit()]
    statistics = RecoveryStatistics(
        segments=tally.segments,
        records_recovered=recovered,
        records_resolved=found - recovered,
        frames_lost=tally.frames_lost,
        bytes_lost=tally.bytes_lost,
        segments_moved_aside=tally.segments_moved_aside,
        torn_tails=tally.torn_tails,
        bytes_truncated=tally.bytes_truncated,
    )
    number = max(digits, default=-1) + 1
    return Recovery(directory, files, segments, resolved, number, statistics, tuple(tally.refused))


def _scan_segment(
    number: int,
    path: str,
    data: bytes,
    files: SpoolFiles,
    repair: bool,
    taken: set[str],
    tally: _Tally,
    seen: dict[bytes, SequenceSet],
    resolved: dict[bytes, SequenceSet],
) -> SegmentState | None:
    if len(data) < HEADER_BYTES:
        tally.torn_tails += 1
        tally.bytes_truncated += len(data)
        if repair:
            files.unlink(path)
        return None
    try:
        producer_id = decode_header(data)
    except HeaderError:
        tally.segments_moved_aside += 1
        tally.frames_lost += 1
        tally.bytes_lost += len(data)
        if repair:
            files.rename(path, _aside_path(path, taken))
        return None
    tally.segments += 1
    segment = SegmentState(number, path, producer_id, HEADER_BYTES)
    mine = seen.setdefault(producer_id, SequenceSet())
    for frame in walk(data, producer_id, decode_records=False):
        entry = frame.entry
        if frame.sequence_number is not None:
            if mine.add(frame.sequence_number):
                segment.records.add(frame.sequence_number)
        elif isinstance(entry, SpoolAck):
            done = resolved.setdefault(entry.producer_id, SequenceSet())
            for first, count in entry.runs:
                done.add(first, count)
        elif frame.status is FrameStatus.TORN:
            tally.torn_tails += 1
            tally.bytes_truncated += len(data) - frame.offset
        elif frame.status is FrameStatus.CORRUPT:
            tally.frames_lost += 1
            tally.segments_moved_aside += 1
            tally.bytes_lost += len(data) - frame.offset
            if repair:
                files.write_file(_aside_path(path, taken), data)
        segment.size = frame.end if frame.status is FrameStatus.OK else frame.offset
    if repair and segment.size < len(data):
        files.truncate_path(path, segment.size)
    return segment


def _aside_path(path: str, taken: set[str]) -> str:
    """``path.corrupt``, or ``path.corrupt.N`` when that name is taken."""
    directory, name = os.path.split(path)
    candidate = name + CORRUPT_SUFFIX
    n = 0
    while candidate in taken:
        n += 1
        candidate = f"{name}{CORRUPT_SUFFIX}.{n}"
    taken.add(candidate)
    return os.path.join(directory, candidate)

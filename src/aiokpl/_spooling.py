"""The durable spool on the record's route, and the identities records carry.

With ``Config.spool_directory`` set, a record accepted by a put is framed into the spool's
buffer on the event loop (an encode: no I/O, no await, no task or lock per record) and handed
to its stream's pipeline at once: sending never waits for the disk. One task, the
:class:`Spool`'s :meth:`~Spool.run`, owns the disk: it hands what was framed (records, then
the acknowledgements of resolved ones) to the :class:`~aiokpl._spool.SpoolWriter` and has it
write and fsync in a worker thread, one fsync for everything framed since the last (group
commit, as ``Config.spool_fsync`` says), then wakes whoever waits for those records to be
durable. Only that task touches the writer, one flush at a time, so the writer needs no lock.

* A record resolved (delivered, or failed and reported to its caller) is acknowledged in the
  spool, once per resolution step of the ledger (``ResultLedger.on_resolved``), and never
  sent again. Records failed by the producer's exit itself (its deadline, or a cancellation)
  are *not* acknowledged: they stay in the spool and the next start sends them again.
* At start, :meth:`Spool.open` recovers the directory (:func:`~aiokpl._spool.scan`, in a
  worker thread) and :meth:`Spool.replay` puts the records it found unresolved back into their
  streams, a batch read at a time and each waiting for room, with their original identity;
  their outcomes are acknowledged under their old producer id.
* A full disk is back-pressure: puts wait for room (``on_full`` closes the producer's gate)
  until a write succeeds again; the task retries with a backoff and logs the state.

:class:`~aiokpl._marks.Marks` builds a record at put when the producer spools or writes
identities: its place in the spool (:meth:`Spool.append`), its ``aiokpl.id`` tag.
"""

from __future__ import annotations

import errno
import heapq
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

import anyio

from ._core.config import Config
from ._core.statistics import SpoolStatistics
from ._record import SpooledRecord, UserRecord
from ._spool import (
    AckOutcome,
    FsyncPolicy,
    OsFiles,
    Recovery,
    SpoolError,
    SpoolFiles,
    SpoolFullError,
    SpoolIOError,
    SpoolRecord,
    SpoolWriter,
    scan,
)
from ._spool.files import LOCK_NAME, UntrustedPathError
from ._spool.format import encode_record_fields
from ._spool.writer import WriterStatistics

__all__ = ("Spool", "run_sync", "spool_files")

logger = logging.getLogger("aiokpl.spool")

# Records read from disk per hop to the worker thread while replaying: bounded memory, and few
# hops (a hop costs tens of microseconds).
REPLAY_BATCH = 1000
_RETRY_FIRST = 0.1  # seconds before a failed flush is retried, doubling up to _RETRY_MAX
_RETRY_MAX = 5.0


class SpoolMetrics(Protocol):
    """What the spool records in the producer's metrics (``MetricsRecorder``'s methods)."""

    def spool_fsynced(self, seconds: float, now: float) -> None: ...

    def spool_recovered(self, records: int, bytes_lost: int, now: float) -> None: ...


def spool_files(config: Config) -> SpoolFiles:
    """The file layer a producer's spool uses (tests replace this with ``MemoryFiles``)."""
    return OsFiles(check_owner=config.spool_check_permissions)


async def run_sync(function: Callable[..., Any], *args: Any) -> Any:
    """Run ``function(*args)`` in a worker thread: the spool's disk work, off the event loop.

    Tests under a virtual clock replace it (their loops run no threads)."""
    return await anyio.to_thread.run_sync(function, *args)


def _take(iterator: Iterator[SpoolRecord], count: int) -> list[SpoolRecord]:
    return list(itertools.islice(iterator, count))


class Spool:
    """One producer's spool: the framed records and acknowledgements not yet handed to the
    writer, the flushing task, and who waits for what to be durable.

    Attributes:
        producer_id: this run's producer id (the writer's; known once opened).
        next_seq: the sequence number the next record gets.
        durable_through: every record of this run numbered below it is durable.
        acking: resolutions are acknowledged (off once the producer's exit fails the rest).
        full: the last write or fsync found the disk full.
        replay_done: set once every recovered record was put back (or the producer closed).
        on_full: called with a message when the disk fills, with ``None`` when it has room.
        metrics: the producer's metrics recorder, or ``None``.
    """

    def __init__(
        self,
        config: Config,
        *,
        metrics: SpoolMetrics | None = None,
        on_full: Callable[[str | None], None] = lambda message: None,
    ) -> None:
        assert config.spool_directory is not None
        self.config = config
        self.directory = os.fspath(config.spool_directory)
        self._policy = FsyncPolicy(config.spool_fsync, config.spool_fsync_interval_ms)
        self._writer: SpoolWriter | None = None
        self._recovery: Recovery | None = None
        self.producer_id = b""
        self.next_seq = 0
        self.durable_through = 0
        self.acking = True
        self.full = False
        self.closed = False
        self.replay_done = anyio.Event()
        self.on_full = on_full
        self._unlock: Callable[[], None] = lambda: None  # gives back the directory's lock
        self.metrics = metrics
        self._wall_offset = 0.0
        # Framed on the loop, not handed to the writer yet.
        self._staged = bytearray()
        self._staged_count = 0
        self._acks: list[tuple[bytes, list[int], AckOutcome]] = []
        self._wake: anyio.Event | None = None
        self._waiters: list[tuple[int, int, anyio.Event]] = []  # (seq, tiebreak, event) heap
        self._tiebreak = itertools.count()
        self._disk = anyio.Lock()  # one thread at a time on the writer and the recovery
        self._snapshot: WriterStatistics | None = None
        self._fsync_max = 0.0
        self._fsync_total = 0.0
        self._write_errors = 0
        self._replayed = 0
        self._replay_failed = 0

    def __repr__(self) -> str:
        return (
            f"<Spool {self.directory!r} next={self.next_seq} "
            f"durable_through={self.durable_through} full={self.full}>"
        )

    # --- start and stop -------------------------------------------------------------------
    async def open(self) -> None:
        """Lock the directory, recover it and open a writer on it (in a worker thread).

        Raises:
            SpoolIOError: the directory cannot be read or written, another producer uses it,
                or it is not this user's alone (the message names it, in one line).
        """
        files = spool_files(self.config)
        try:
            lock, recovery, writer = await run_sync(_open, self.directory, files, self._policy)
        except SpoolError:
            raise
        except OSError as exc:
            why = _why(exc, self.directory)
            raise SpoolIOError(exc.errno, f"the spool {self.directory} {why}") from exc
        self._unlock = lambda: files.unlock(lock)
        self._recovery = recovery
        self._writer = writer
        self._snapshot = writer.statistics()
        self.producer_id = writer.producer_id
        self.next_seq = self.durable_through = writer.next_sequence_number
        # Segments keep wall-clock acceptance times (a dump reads as dates); taken once, the
        # offset turns the producer's clock into them.
        self._wall_offset = time.time() - anyio.current_time()  # noqa: TID251 # clock-ok: a date
        found = recovery.statistics
        for reason in recovery.refused:
            logger.warning("spool %s: set aside unread: %s", self.directory, reason)
        if self.metrics is not None:
            self.metrics.spool_recovered(
                found.records_recovered, found.bytes_lost, anyio.current_time()
            )
        if found.corrupt:
            logger.warning(
                "spool %s: damage found at start: %d entries unreadable, %d bytes lost, %d "
                "segments moved aside as *.corrupt; %d records recovered",
                self.directory,
                found.frames_lost,
                found.bytes_lost,
                found.segments_moved_aside,
                found.records_recovered,
            )
        elif found.records_recovered:
            logger.info(
                "spool %s: %d records without a result found at start; sending them again",
                self.directory,
                found.records_recovered,
            )
        if not found.records_recovered:
            self.replay_done.set()

    async def close(self) -> None:
        """Write and fsync what is left (records and acknowledgements), close the writer and
        wake every durable waiter. A failure is logged: the records it concerns were never
        reported durable."""
        writer = self._writer
        if writer is None or self.closed:
            return
        try:
            async with self._disk:
                self._hand_over(writer)
                await run_sync(writer.close, anyio.current_time())
            self.durable_through = writer.durable_through
        except SpoolError as exc:
            logger.error(
                "spool %s: closing failed (%s); records not yet durable stay so, and "
                "acknowledgements not written are sent again at the next start",
                self.directory,
                exc,
            )
        self._snapshot = writer.statistics()
        self.closed = True
        self._unlock()
        self.replay_done.set()
        for _, _, event in self._waiters:
            event.set()
        self._waiters.clear()

    # --- the put path (on the loop; no I/O) -----------------------------------------------
    def append(
        self,
        stream: str,
        partition_key: str,
        data: bytes,
        explicit_hash_key: str | None,
        tags: bytes,
        accepted_at: float,
    ) -> int:
        """Frame an accepted record into the spool's buffer; returns its sequence number."""
        seq = self.next_seq
        self._staged += encode_record_fields(
            seq,
            accepted_at + self._wall_offset,
            stream,
            partition_key,
            explicit_hash_key,
            data,
            tags,
        )
        self._staged_count += 1
        self.next_seq = seq + 1
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set()
        return seq

    def resolved(self, records: list[UserRecord], success: bool) -> None:
        """The ledger resolved ``records``: acknowledge them (unless the exit failed them)."""
        if not self.acking:
            return
        outcome = AckOutcome.DELIVERED if success else AckOutcome.FAILED
        own = self.producer_id
        mine: list[int] = []
        others: dict[bytes, list[int]] = {}
        for record in records:
            if isinstance(record, SpooledRecord):
                if record.spool_id == own:
                    mine.append(record.spool_seq)
                else:
                    others.setdefault(record.spool_id, []).append(record.spool_seq)
        if mine:
            self._acks.append((own, mine, outcome))
        for producer_id, seqs in others.items():
            self._acks.append((producer_id, seqs, outcome))
            if not success:
                self._replay_failed += len(seqs)
                logger.warning(
                    "spool %s: %d records replayed from an earlier run failed; they are "
                    "acknowledged and given to on_record_failure, if any",
                    self.directory,
                    len(seqs),
                )
        wake = self._wake
        if wake is not None and (mine or others):
            self._wake = None
            wake.set()

    # --- durability -----------------------------------------------------------------------
    def is_durable(self, producer_id: bytes, sequence: int) -> bool:
        """Whether record ``sequence`` of ``producer_id`` is durable (a recovered one is)."""
        return producer_id != self.producer_id or sequence < self.durable_through

    async def wait_durable(self, producer_id: bytes, sequence: int) -> None:
        """Wait until record ``sequence`` of ``producer_id`` is durable.

        Raises:
            SpoolError: the spool closed before the record was durable.
        """
        while not self.is_durable(producer_id, sequence):
            if self.closed:
                raise SpoolError(
                    f"spool {self.directory}: the producer closed before the record was durable"
                )
            event = anyio.Event()
            heapq.heappush(self._waiters, (sequence, next(self._tiebreak), event))
            await event.wait()
        await anyio.lowlevel.checkpoint()

    async def wait_all_durable(self) -> None:
        """Wait until every record accepted so far is durable."""
        if self.next_seq > self.durable_through:
            await self.wait_durable(self.producer_id, self.next_seq - 1)
        else:
            await anyio.lowlevel.checkpoint()

    def _wake_durable(self) -> None:
        waiters = self._waiters
        while waiters and waiters[0][0] < self.durable_through:
            heapq.heappop(waiters)[2].set()

    # --- the flushing task ----------------------------------------------------------------
    async def run(self) -> None:
        """The spool's task: flush what was framed, as the fsync policy says, until cancelled."""
        retry = _RETRY_FIRST
        while True:
            writer = self._writer
            assert writer is not None
            if not (self._staged_count or self._acks or writer.next_flush_at() is not None):
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            due = self._policy.next_fsync_at(unsynced=True)
            now = anyio.current_time()
            if due is not None and due > now:
                await anyio.sleep(due - now)  # interval: one write and fsync per interval
            try:
                await self.flush()
            except SpoolError as exc:
                self._flush_failed(exc)
                await anyio.sleep(retry)
                retry = min(retry * 2, _RETRY_MAX)
            else:
                retry = _RETRY_FIRST

    async def flush(self) -> None:
        """Hand what was framed to the writer and flush it in a worker thread."""
        writer = self._writer
        assert writer is not None
        started = anyio.current_time()
        fsyncs = self._snapshot.fsyncs if self._snapshot is not None else 0
        async with self._disk:
            # On the loop, in memory: what is handed over is the writer's even if the flush
            # is cancelled before its thread runs (the close writes it then).
            self._hand_over(writer)
            try:
                durable, snapshot = await run_sync(_flush, writer, started)
            finally:
                # What failed is in the writer's buffer still: the next flush writes it.
                self._snapshot = writer.statistics()
        if snapshot.fsyncs > fsyncs:
            now = anyio.current_time()
            took = now - started
            self._fsync_total += took
            self._fsync_max = max(self._fsync_max, took)
            if self.metrics is not None:
                self.metrics.spool_fsynced(took, now)
        self.durable_through = durable
        self._wake_durable()
        if self.full:
            self.full = False
            logger.warning("spool %s: writes succeed again; puts resume", self.directory)
            self.on_full(None)

    def _flush_failed(self, exc: SpoolError) -> None:
        self._write_errors += 1
        if isinstance(exc, SpoolFullError):
            if not self.full:
                self.full = True
                logger.error(
                    "spool %s: the disk is full (%s); puts wait until a write succeeds "
                    "(put_record_nowait raises BufferFullError); nothing is dropped",
                    self.directory,
                    exc,
                )
                self.on_full(f"the spool's disk is full ({self.directory})")
        else:
            logger.error("spool %s: a write failed (%s); retrying", self.directory, exc)

    def _hand_over(self, writer: SpoolWriter) -> None:
        """Give the writer what was framed: records, then acknowledgements (a record resolved
        before its first flush is written before its acknowledgement). Only with ``_disk``
        held: no thread is using the writer then."""
        if self._staged_count:
            writer.append_encoded(self._staged, self._staged_count)
            self._staged.clear()
            self._staged_count = 0
        acks, self._acks = self._acks, []
        for producer_id, seqs, outcome in acks:
            writer.acknowledge(producer_id, seqs, outcome)

    # --- replay ---------------------------------------------------------------------------
    async def replay(self, put: Callable[[SpoolRecord], Awaitable[bool]]) -> None:
        """Put every recovered record back with ``put`` (which waits for room; ``False``: the
        producer closed), a batch read from disk at a time; then set ``replay_done``."""
        recovery = self._recovery
        assert recovery is not None
        records = recovery.unresolved()
        try:
            while True:
                async with self._disk:
                    batch = await run_sync(_take, records, REPLAY_BATCH)
                if not batch:
                    return
                for record in batch:
                    if not await put(record):
                        return
                    self._replayed += 1
        finally:
            self.replay_done.set()

    # --- statistics -----------------------------------------------------------------------
    def statistics(self) -> SpoolStatistics:
        """A snapshot (the writer's counts as of its last flush)."""
        snapshot = self._snapshot
        found = self._recovery.statistics if self._recovery is not None else None
        return SpoolStatistics(
            segments=snapshot.segments if snapshot else 0,
            bytes_on_disk=snapshot.bytes_on_disk if snapshot else 0,
            records_appended=self.next_seq,
            records_durable=self.durable_through,
            records_unresolved=(snapshot.records_unresolved if snapshot else 0)
            + self._staged_count,
            fsyncs=snapshot.fsyncs if snapshot else 0,
            fsync_seconds_max=self._fsync_max,
            fsync_seconds_total=self._fsync_total,
            records_recovered=found.records_recovered if found else 0,
            records_replayed=self._replayed,
            records_replay_failed=self._replay_failed,
            frames_lost=found.frames_lost if found else 0,
            bytes_lost=found.bytes_lost if found else 0,
            segments_moved_aside=found.segments_moved_aside if found else 0,
            torn_tails=found.torn_tails if found else 0,
            bytes_truncated=found.bytes_truncated if found else 0,
            full=self.full,
            write_errors=self._write_errors,
        )


def _why(exc: OSError, directory: str) -> str:
    """Why a spool's start failed, after "the spool DIRECTORY"."""
    if isinstance(exc, BlockingIOError):
        return (
            f"is in use by another producer (it holds {os.path.join(directory, LOCK_NAME)}); "
            "give each producer its own directory"
        )
    if isinstance(exc, UntrustedPathError):
        why = f"is refused: {exc.strerror}"
        if exc.errno == errno.EPERM:  # an owner or a mode: the rules the setting lifts
            why += (
                "; a spool trusts only what its own user alone may write "
                "(Config.spool_check_permissions=False accepts other owners and modes)"
            )
        return why
    return f"cannot be opened: {exc.strerror or exc}"


# --- in the worker thread: the writer, one call at a time ---------------------------------
def _open(
    directory: str, files: SpoolFiles, policy: FsyncPolicy
) -> tuple[object, Recovery, SpoolWriter]:
    """Check and lock the directory, recover it, open a writer on it; the lock given back on
    failure."""
    files.makedirs(directory)
    files.check_directory(directory)
    lock = files.lock(directory)
    try:
        recovery = scan(directory, files)
        return lock, recovery, SpoolWriter(recovery, policy=policy)
    except BaseException:
        files.unlock(lock)
        raise


def _flush(writer: SpoolWriter, now: float) -> tuple[int, WriterStatistics]:
    durable = writer.flush(now)
    return durable, writer.statistics()

"""A durable spool for accepted records: the storage layer, synchronous and clock-free.

Modules, bottom up: :mod:`.format` (segment header, framed entries; pure), :mod:`.runs` (sets
of sequence numbers as runs), :mod:`.policy` (when to fsync; pure, ``now`` passed in),
:mod:`.files` (the file layer protocol and the real one), :mod:`.recovery` (rebuild state from
the segments; never refuses to start), :mod:`.writer` (append, group commit, delete what is
resolved). The fault-injecting fake of the file layer is test infrastructure
(:mod:`aiokpl.testing._spool_files`); the producer runs the writer from
:mod:`aiokpl._spooling`, its async shell. ``docs/spool.md`` describes the format and the
guarantees.
"""

from __future__ import annotations

from .files import OsFiles, SpoolFiles
from .format import AckOutcome, SpoolAck, SpoolRecord
from .policy import FsyncPolicy
from .recovery import Recovery, RecoveryStatistics, scan
from .writer import SpoolError, SpoolFullError, SpoolIOError, SpoolWriter, WriterStatistics

__all__ = (
    "AckOutcome",
    "FsyncPolicy",
    "OsFiles",
    "Recovery",
    "RecoveryStatistics",
    "SpoolAck",
    "SpoolError",
    "SpoolFiles",
    "SpoolFullError",
    "SpoolIOError",
    "SpoolRecord",
    "SpoolWriter",
    "WriterStatistics",
    "scan",
)

"""A durable spool for accepted records: the storage layer (not wired into the producer yet).

Modules, bottom up: :mod:`.format` (segment header, framed entries; pure), :mod:`.runs` (sets
of sequence numbers as runs), :mod:`.policy` (when to fsync; pure, ``now`` passed in),
:mod:`.files` (the file layer protocol and the real one), :mod:`.memory` (the fault-injecting
fake), :mod:`.recovery` (rebuild state from the segments; never refuses to start),
:mod:`.writer` (append, group commit, delete what is resolved). ``docs/spool.md`` describes the
format and the guarantees.
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

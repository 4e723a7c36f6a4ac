"""A file system in memory for the spool's fault tests: failures, disk full, and crashes.

Test infrastructure (in :mod:`aiokpl.testing`, which production code never imports): the
spool's own tests run it in place of :class:`~aiokpl._spool.files.OsFiles`.

:class:`MemoryFiles` implements :class:`aiokpl._spool.files.SpoolFiles`. Each file keeps what
the process sees and what was fsync'd; name changes (create, rename, unlink) are durable when
they return, as :class:`~aiokpl._spool.files.OsFiles` makes them by fsyncing the directory.

Faults:

- :meth:`MemoryFiles.fail`: the next call of an operation raises ``OSError(errno)``; an
  ``append`` first writes ``written`` bytes of its buffer (a short write).
- a failed ``fsync`` drops the file's unsynced bytes from the disk: the process still sees them,
  a later fsync writes zeros in their place (what Linux does after a failed writeback).
- ``capacity_bytes``: the bytes all files may hold; an append past it writes what fits and
  raises ``ENOSPC``, as a full disk does. Raise it again and writes go through.
- ``crash_at``: the operation with this number (counting from 1) raises :class:`SimulatedCrash`
  instead of running (an append first writes ``torn_bytes`` of its buffer); then
  :meth:`MemoryFiles.crash` leaves only what was durable, as after a power loss.
"""

from __future__ import annotations

import errno as errnos
import os
from collections import Counter
from dataclasses import dataclass, field

__all__ = ("MemoryFiles", "SimulatedCrash")


class SimulatedCrash(BaseException):
    """Raised by :class:`MemoryFiles` at its ``crash_at`` operation (the process "dies")."""


@dataclass
class _File:
    content: bytearray = field(default_factory=bytearray)
    synced: bytes = b""
    dropped: tuple[int, int] | None = None
    """Bytes a failed fsync dropped: still seen by the process, never reaching the disk (as
    Linux marks the pages clean after a failed writeback); zeros on the disk from then on."""

    def sync(self) -> None:
        data = bytearray(self.content)
        if self.dropped is not None:
            start, end = self.dropped
            data[start:end] = bytes(len(data[start:end]))
            self.dropped = None
        self.synced = bytes(data)


@dataclass
class _Fault:
    errno: int
    written: int


@dataclass
class _Handle:
    path: str
    file: _File
    closed: bool = False


class MemoryFiles:
    """An in-memory :class:`~aiokpl._spool.files.SpoolFiles` with injectable faults."""

    def __init__(self) -> None:
        self.files: dict[str, _File] = {}
        self.directories: set[str] = set()
        self.capacity_bytes: int | None = None
        self.crash_at: int | None = None
        self.torn_bytes = 0
        self.operations = 0
        self.operation_counts: Counter[str] = Counter()
        self.fsyncs = 0
        self._faults: dict[str, list[_Fault]] = {}
        self.locked: set[str] = set()  # directories whose lock is held

    # -- faults ---------------------------------------------------------------------------

    def fail(self, operation: str, errno: int = errnos.ENOSPC, *, written: int = 0) -> None:
        """Make the next call of ``operation`` (a method name) raise ``OSError(errno)``."""
        self._faults.setdefault(operation, []).append(_Fault(errno, written))

    def crash(self, *, power_loss: bool = True) -> None:
        """The process died: with ``power_loss``, forget everything not fsync'd (names are
        durable); without, keep everything written, which the operating system writes out."""
        for file in self.files.values():
            if power_loss:
                file.content = bytearray(file.synced)
            else:
                file.synced = bytes(file.content)
        self.crash_at = None
        self._faults.clear()
        self.locked.clear()  # a dead process holds no lock

    def content(self, path: str) -> bytes:
        """What the process sees in the file at ``path``."""
        return bytes(self.files[path].content)

    def _step(self, operation: str) -> _Fault | None:
        self.operations += 1
        self.operation_counts[operation] += 1
        if self.crash_at is not None and self.operations >= self.crash_at:
            raise SimulatedCrash(f"crash at operation {self.operations} ({operation})")
        pending = self._faults.get(operation)
        return pending.pop(0) if pending else None

    def _check(self, operation: str, path: str) -> None:
        """One step of an operation that fails whole."""
        fault = self._step(operation)
        if fault is not None:
            raise OSError(fault.errno, os.strerror(fault.errno), path)

    def _used_bytes(self) -> int:
        return sum(len(f.content) for f in self.files.values())

    # -- SpoolFiles -----------------------------------------------------------------------

    def makedirs(self, directory: str) -> None:
        self.directories.add(directory)

    def check_directory(self, directory: str) -> None:
        pass  # one user: the test's

    def listdir(self, directory: str) -> list[str]:
        if directory not in self.directories:
            raise FileNotFoundError(errnos.ENOENT, "no such directory", directory)
        prefix = directory + os.sep
        return [p[len(prefix) :] for p in self.files if p.startswith(prefix)]

    def read(self, path: str) -> bytes:
        return bytes(self._file(path).content)

    def create(self, path: str) -> object:
        self._check("create", path)
        if path in self.files:
            raise FileExistsError(errnos.EEXIST, "file exists", path)
        self.files[path] = _File()
        return _Handle(path, self.files[path])

    def append(self, handle: object, data: bytes) -> None:
        assert isinstance(handle, _Handle)
        assert not handle.closed
        try:
            fault = self._step("append")
        except SimulatedCrash:
            handle.file.content += data[: self.torn_bytes]
            raise
        room = len(data)
        if self.capacity_bytes is not None:
            room = max(0, min(room, self.capacity_bytes - self._used_bytes()))
        if fault is not None or room < len(data):
            written = min(room, fault.written) if fault is not None else room
            handle.file.content += data[:written]
            code = fault.errno if fault is not None else errnos.ENOSPC
            raise OSError(code, os.strerror(code), handle.path)
        handle.file.content += data

    def fsync(self, handle: object) -> None:
        assert isinstance(handle, _Handle)
        assert not handle.closed
        try:
            self._check("fsync", handle.path)
        except OSError:
            handle.file.dropped = (len(handle.file.synced), len(handle.file.content))
            raise
        handle.file.sync()
        self.fsyncs += 1

    def truncate(self, handle: object, size: int) -> None:
        assert isinstance(handle, _Handle)
        assert not handle.closed
        self._check("truncate", handle.path)
        del handle.file.content[size:]

    def close(self, handle: object) -> None:
        assert isinstance(handle, _Handle)
        handle.closed = True

    def truncate_path(self, path: str, size: int) -> None:
        self._check("truncate_path", path)
        file = self._file(path)
        del file.content[size:]
        file.sync()

    def write_file(self, path: str, data: bytes) -> None:
        self._check("write_file", path)
        if path in self.files:
            raise FileExistsError(errnos.EEXIST, "file exists", path)
        self.files[path] = _File(bytearray(data), bytes(data))

    def rename(self, source: str, target: str) -> None:
        self._check("rename", source)
        self.files[target] = self._file(source)
        del self.files[source]

    def unlink(self, path: str) -> None:
        self._check("unlink", path)
        self._file(path)
        del self.files[path]

    def lock(self, directory: str) -> object:
        # Not an operation that crashes or fails: the crash-at-N tests count file operations.
        if directory in self.locked:
            raise BlockingIOError(errnos.EAGAIN, "the lock is held", directory)
        self.locked.add(directory)
        return directory

    def unlock(self, handle: object) -> None:
        assert isinstance(handle, str)
        self.locked.discard(handle)

    def _file(self, path: str) -> _File:
        if path not in self.files:
            raise FileNotFoundError(errnos.ENOENT, "no such file", path)
        return self.files[path]

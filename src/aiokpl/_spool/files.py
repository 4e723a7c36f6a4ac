"""The file operations the spool does, behind a small protocol so tests can inject faults.

:class:`SpoolFiles` is everything the spool asks of a file system: list, read, create, append,
fsync, truncate, rename, unlink. :class:`OsFiles` does them with :mod:`os` and, on POSIX, fsyncs
the directory after every create, rename and unlink, so that the name change itself survives a
power loss (a new file's data fsync'd under a name that was not is lost with the name).
:class:`aiokpl.testing._spool_files.MemoryFiles` is the fake: a file system in memory that remembers
what was fsync'd, can fail a call with an ``errno`` (``ENOSPC``), write part of a buffer before
failing, and *crash*: forget everything that was not fsync'd.

Paths are strings; a handle is whatever :meth:`SpoolFiles.create` returned.
"""

from __future__ import annotations

import os
from typing import Protocol

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, the spool is not locked
    fcntl = None  # type: ignore[assignment]

__all__ = ("LOCK_NAME", "OsFiles", "SpoolFiles")

LOCK_NAME = ".lock"
"""The file in a spool directory whose lock a producer holds while it uses the spool."""


class SpoolFiles(Protocol):
    """The file system as the spool uses it. Every method may raise :class:`OSError`."""

    def makedirs(self, directory: str) -> None:
        """Create ``directory`` (and its parents) if it does not exist."""

    def listdir(self, directory: str) -> list[str]:
        """The names in ``directory``."""

    def read(self, path: str) -> bytes:
        """The whole content of the file at ``path``."""

    def create(self, path: str) -> object:
        """A new, empty file at ``path`` (which must not exist), opened for appending."""

    def append(self, handle: object, data: bytes) -> None:
        """Write all of ``data`` at the end of the file; on error part of it may be written."""

    def fsync(self, handle: object) -> None:
        """Make everything written to the file durable."""

    def truncate(self, handle: object, size: int) -> None:
        """Cut the open file back to ``size`` bytes."""

    def close(self, handle: object) -> None:
        """Close the file."""

    def truncate_path(self, path: str, size: int) -> None:
        """Cut the file at ``path`` to ``size`` bytes, durably."""

    def write_file(self, path: str, data: bytes) -> None:
        """Create ``path`` with ``data``, durably (data and name), replacing nothing."""

    def rename(self, source: str, target: str) -> None:
        """Rename ``source`` to ``target``, durably."""

    def unlink(self, path: str) -> None:
        """Remove the file at ``path``, durably."""

    def lock(self, directory: str) -> object:
        """Take ``directory``'s lock (the directory exists), without waiting: one user at a time.

        Raises:
            BlockingIOError: another user holds it.
        """

    def unlock(self, handle: object) -> None:
        """Give back the lock :meth:`lock` returned."""


class OsFiles:
    """:class:`SpoolFiles` on the real file system."""

    def makedirs(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)

    def listdir(self, directory: str) -> list[str]:
        return os.listdir(directory)

    def read(self, path: str) -> bytes:
        with open(path, "rb") as file:
            return file.read()

    def create(self, path: str) -> object:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        self._sync_directory_of(path)
        return fd

    def append(self, handle: object, data: bytes) -> None:
        assert isinstance(handle, int)
        view = memoryview(data)
        while view:
            view = view[os.write(handle, view) :]

    def fsync(self, handle: object) -> None:
        assert isinstance(handle, int)
        os.fsync(handle)

    def truncate(self, handle: object, size: int) -> None:
        assert isinstance(handle, int)
        os.ftruncate(handle, size)

    def close(self, handle: object) -> None:
        assert isinstance(handle, int)
        os.close(handle)

    def truncate_path(self, path: str, size: int) -> None:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_file(self, path: str, data: bytes) -> None:
        handle = self.create(path)
        try:
            self.append(handle, data)
            self.fsync(handle)
        finally:
            self.close(handle)

    def rename(self, source: str, target: str) -> None:
        os.rename(source, target)
        self._sync_directory_of(target)

    def unlink(self, path: str) -> None:
        os.unlink(path)
        self._sync_directory_of(path)

    def lock(self, directory: str) -> object:
        # flock, not fcntl's record locks: it is per open file, so a second producer in the
        # same process is refused too, and the kernel drops it when the process dies (SIGKILL
        # included): a lock never outlives its holder, and nothing is left to clean up.
        fd = os.open(os.path.join(directory, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise
        return fd

    def unlock(self, handle: object) -> None:
        assert isinstance(handle, int)
        os.close(handle)  # closing the file gives back its flock

    @staticmethod
    def _sync_directory_of(path: str) -> None:
        if os.name != "posix":  # pragma: no cover - Windows has no directory fsync
            return
        fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

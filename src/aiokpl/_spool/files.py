"""The file operations the spool does, behind a small protocol so tests can inject faults.

:class:`SpoolFiles` is everything the spool asks of a file system: list, read, create, append,
fsync, truncate, rename, unlink. :class:`OsFiles` does them with :mod:`os` and, on POSIX, fsyncs
the directory after every create, rename and unlink, so that the name change itself survives a
power loss (a new file's data fsync'd under a name that was not is lost with the name).
:class:`aiokpl.testing._spool_files.MemoryFiles` is the fake: a file system in memory that remembers
what was fsync'd, can fail a call with an ``errno`` (``ENOSPC``), write part of a buffer before
failing, and *crash*: forget everything that was not fsync'd.

Paths are strings; a handle is whatever :meth:`SpoolFiles.create` returned.

Trust (:mod:`aiokpl._private_files`): what a spool holds is sent again with its producer's
credentials, so :class:`OsFiles` trusts only its user. It creates the directory ``0700`` and
every file ``0600``; :meth:`~OsFiles.check_directory` refuses a directory another user owns or
may write; a segment is read, cut or locked only if it is a regular file of this user, reached
without following a link, and (read) no longer than a segment can be
(:data:`MAX_SEGMENT_BYTES`). Anything else raises
:class:`~aiokpl._private_files.UntrustedPathError` without being read, cut or written through:
recovery sets such a segment aside, a start refuses such a directory or lock file.
``OsFiles(check_owner=False)`` (``Config.spool_check_permissions=False``) drops the owner and
mode rules, for file systems without POSIX owners; links, FIFOs, devices and oversized files
are refused all the same.
"""

from __future__ import annotations

import errno
import os
from typing import Protocol

from .._private_files import (
    UntrustedPathError,
    check_private_directory,
    create_private,
    make_private_directory,
    open_regular,
    sync_directory,
)
from .format import MAX_ENTRY_BYTES

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, the spool is not locked
    fcntl = None  # type: ignore[assignment]

__all__ = (
    "DEFAULT_SEGMENT_SIZE_BYTES",
    "LOCK_NAME",
    "MAX_SEGMENT_BYTES",
    "OsFiles",
    "SpoolFiles",
    "UntrustedPathError",
)

LOCK_NAME = ".lock"
"""The file in a spool directory whose lock a producer holds while it uses the spool."""

DEFAULT_SEGMENT_SIZE_BYTES = 64 * 1024 * 1024
"""The size a spool's writer fills a segment to (``SpoolWriter(segment_size_bytes=...)``)."""

MAX_SEGMENT_BYTES = DEFAULT_SEGMENT_SIZE_BYTES + 8 + MAX_ENTRY_BYTES
"""The longest file :meth:`OsFiles.read` reads: a full segment and one more entry (its 8-byte
frame header and the longest body). The writer never takes a segment past its size (an entry
that would goes to the next one); the entry of slack is for segments written before it split
its writes, which could pass the size by what one flush wrote."""


class SpoolFiles(Protocol):
    """The file system as the spool uses it. Every method may raise :class:`OSError`."""

    def makedirs(self, directory: str) -> None:
        """Create ``directory`` (and its parents) if it does not exist."""

    def check_directory(self, directory: str) -> None:
        """Check that ``directory`` may be trusted with a spool.

        Raises:
            UntrustedPathError: another user owns it or may write it (one line says which).
        """

    def listdir(self, directory: str) -> list[str]:
        """The names in ``directory``."""

    def read(self, path: str) -> bytes:
        """The whole content of the file at ``path``.

        Raises:
            UntrustedPathError: it is not a segment the spool could have written (a link, not
                a regular file, another user's, too long): nothing was read.
        """

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
            UntrustedPathError: the lock file is a link, not a regular file, or another
                user's: nothing was created or locked at its target.
        """

    def unlock(self, handle: object) -> None:
        """Give back the lock :meth:`lock` returned."""


class OsFiles:
    """:class:`SpoolFiles` on the real file system, trusting only this process's user.

    Args:
        check_owner: refuse a directory another user owns or may write, and files another
            user owns (``Config.spool_check_permissions``).
        max_read_bytes: the longest file :meth:`read` reads.
    """

    def __init__(
        self, *, check_owner: bool = True, max_read_bytes: int = MAX_SEGMENT_BYTES
    ) -> None:
        self.check_owner = check_owner
        self.max_read_bytes = max_read_bytes

    def makedirs(self, directory: str) -> None:
        make_private_directory(directory)

    def check_directory(self, directory: str) -> None:
        if self.check_owner:
            check_private_directory(directory)

    def listdir(self, directory: str) -> list[str]:
        return os.listdir(directory)

    def read(self, path: str) -> bytes:
        fd, found = open_regular(path, owner_only=self.check_owner)
        with open(fd, "rb") as file:  # closes fd
            if found.st_size > self.max_read_bytes:
                raise UntrustedPathError(
                    errno.EFBIG,
                    f"{path} holds {found.st_size} bytes, more than a spool segment can "
                    f"({self.max_read_bytes})",
                    path,
                )
            return file.read(found.st_size)

    def create(self, path: str) -> object:
        fd = create_private(path, os.O_WRONLY | os.O_APPEND)
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
        fd, _ = open_regular(path, os.O_WRONLY, owner_only=self.check_owner)
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
        os.rename(source, target)  # renames a link itself, never what it points to
        self._sync_directory_of(target)

    def unlink(self, path: str) -> None:
        os.unlink(path)
        self._sync_directory_of(path)

    def lock(self, directory: str) -> object:
        # flock, not fcntl's record locks: it is per open file, so a second producer in the
        # same process is refused too, and the kernel drops it when the process dies (SIGKILL
        # included): a lock never outlives its holder, and nothing is left to clean up.
        # A lock file that is a link, a FIFO or another user's is refused, not set aside:
        # moving it races with another producer's start, and both could then hold a lock.
        path = os.path.join(directory, LOCK_NAME)
        fd, _ = open_regular(path, os.O_RDWR | os.O_CREAT, owner_only=self.check_owner)
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
        sync_directory(os.path.dirname(path))

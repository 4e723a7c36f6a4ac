"""Files only their owner reads, in places no one else can redirect: the rules every file the
library writes follows.

The library keeps payloads on disk (a spool's segments and the copies of damaged ones,
``aiokpl put``'s dead letters) and state (a ``Deduper``'s). What a spool holds is sent again
with the producer's credentials, to the stream each record names: a file another user could
write there is a record they send as you. So, as PostgreSQL treats its data directory and
OpenSSH a private key:

* What the library creates is its user's alone: directories ``0700``, files ``0600``, whatever
  the umask (an explicit ``chmod`` after the create: a umask can only take bits away, and one
  that takes the owner's leaves a file its writer cannot reopen).
* A directory it trusts (:func:`check_private_directory`) is owned by the process's
  (effective) user and writable by no one else.
* It never writes through a name someone else placed: a new file is created exclusively
  (``O_EXCL``: an existing name, a symbolic link included, fails the create instead of being
  opened), an existing one is opened without following a link (``O_NOFOLLOW``), and checked to
  be a regular file (``fstat``) before it is read or cut: a FIFO would block the reader
  forever, ``/dev/zero`` never ends. The open itself does not block (``O_NONBLOCK``, which a
  regular file ignores).
* A file replaced whole (:func:`write_atomically`) goes through a new temporary file with a
  unique name in the target's directory (``tempfile.mkstemp``: exclusive, no link followed,
  ``0600``), fsync'd, then renamed over the target: a name planted beside the target redirects
  nothing, and the rename replaces a link at the target rather than writing where it points.

A path these rules refuse raises :class:`UntrustedPathError`, whose ``strerror`` is one line
saying why, and whose ``errno`` says which rule: ``EPERM`` an owner or a mode, ``ELOOP`` a
link, ``EINVAL`` not a regular file, ``ENOTDIR`` not a directory, ``EFBIG`` too long.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile

__all__ = (
    "PRIVATE_DIRECTORY_MODE",
    "PRIVATE_FILE_MODE",
    "UntrustedPathError",
    "check_private_directory",
    "create_private",
    "make_private_directory",
    "open_for_append",
    "open_regular",
    "sync_directory",
    "write_atomically",
)

PRIVATE_DIRECTORY_MODE = 0o700
PRIVATE_FILE_MODE = 0o600

# Windows has neither flag (nor owners to compare): the checks that need them are skipped there.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_LINK_ERRORS = (errno.ELOOP, errno.EMLINK)  # O_NOFOLLOW on a link: Linux ELOOP, FreeBSD EMLINK

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class UntrustedPathError(PermissionError):
    """A path the library will not use: a directory another user owns or may write, a symbolic
    link where a file is expected, something that is not a regular file, a file another user
    owns, or one larger than it can hold. ``strerror`` says which, in one line."""


def _user() -> int | None:
    geteuid = getattr(os, "geteuid", None)
    return geteuid() if geteuid is not None else None  # pragma: no branch - POSIX


def _chmod(fd: int, mode: int) -> None:
    if hasattr(os, "fchmod"):  # pragma: no branch - POSIX
        os.fchmod(fd, mode)


def make_private_directory(path: str) -> None:
    """Create ``path`` (and missing parents, as ``os.makedirs`` does) if it does not exist;
    the directory itself ``0700``, whatever the umask. An existing one is left as it is."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    try:
        os.mkdir(path, PRIVATE_DIRECTORY_MODE)
    except FileExistsError:
        return
    os.chmod(path, PRIVATE_DIRECTORY_MODE)


def check_private_directory(path: str) -> None:
    """Check that ``path`` (links followed) is a directory the process's user owns and alone
    may write.

    Raises:
        UntrustedPathError: it is not; ``strerror`` says why in one line.
        OSError: it cannot be looked at (missing, say).
    """
    found = os.stat(path)
    if not stat.S_ISDIR(found.st_mode):
        raise UntrustedPathError(errno.ENOTDIR, f"{path} is not a directory", path)
    user = _user()
    if user is None:  # pragma: no cover - Windows: no owners to compare
        return
    if found.st_uid != user:
        raise UntrustedPathError(
            errno.EPERM,
            f"{path} is owned by uid {found.st_uid}, not by this process's user (uid {user})",
            path,
        )
    if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = stat.S_IMODE(found.st_mode)
        who = " and ".join(
            name
            for bit, name in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others"))
            if mode & bit
        )
        raise UntrustedPathError(
            errno.EPERM, f"{path} is writable by {who} (mode {mode:04o}; chmod go-w it)", path
        )


def create_private(path: str, flags: int = os.O_WRONLY) -> int:
    """A new file at ``path``, ``0600``, opened with ``flags``; returns its descriptor.

    Raises:
        FileExistsError: the name exists (a symbolic link to anywhere included).
    """
    fd = os.open(path, flags | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, PRIVATE_FILE_MODE)
    try:
        _chmod(fd, PRIVATE_FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"  # pragma: no cover - every kind Linux has is listed


def open_regular(
    path: str, flags: int = os.O_RDONLY, *, owner_only: bool = True
) -> tuple[int, os.stat_result]:
    """Open the regular file at ``path`` without following a link or blocking; returns its
    descriptor and ``fstat``. With ``os.O_CREAT`` in ``flags``, a missing file is created,
    and the file made ``0600`` if this user owns it (a new one whatever the umask, or one an
    earlier version left more open).

    Args:
        path: the file.
        flags: ``os.open`` flags (``O_NOFOLLOW``, ``O_NONBLOCK`` and ``O_CLOEXEC`` are added).
        owner_only: refuse a file another user owns.

    Raises:
        UntrustedPathError: ``path`` is a symbolic link, not a regular file (a FIFO, a
            device, a directory, a socket), or (``owner_only``) another user's file.
        OSError: it cannot be opened (missing, say).
    """
    try:
        fd = os.open(path, flags | _NOFOLLOW | _NONBLOCK | _CLOEXEC, PRIVATE_FILE_MODE)
    except OSError as exc:
        if exc.errno in _LINK_ERRORS and os.path.islink(path):
            raise UntrustedPathError(errno.ELOOP, f"{path} is a symbolic link", path) from exc
        if exc.errno == errno.ENXIO:  # a socket (or a FIFO opened for writing with no reader)
            raise UntrustedPathError(errno.EINVAL, f"{path} is not a regular file", path) from exc
        if exc.errno in (errno.EACCES, errno.EPERM) and owner_only:
            _refuse_a_stranger(path, os.lstat(path), exc)
        raise
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise UntrustedPathError(errno.EINVAL, f"{path} is {_kind(found.st_mode)}", path)
        if owner_only:
            _refuse_a_stranger(path, found, None)
        if (
            flags & os.O_CREAT
            and stat.S_IMODE(found.st_mode) != PRIVATE_FILE_MODE
            and found.st_uid == _user()
        ):
            _chmod(fd, PRIVATE_FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd, found


def _refuse_a_stranger(path: str, found: os.stat_result, cause: OSError | None) -> None:
    user = _user()
    if user is not None and found.st_uid != user:
        raise UntrustedPathError(
            errno.EPERM,
            f"{path} is owned by uid {found.st_uid}, not by this process's user (uid {user})",
            path,
        ) from cause


def open_for_append(path: str) -> int:
    """``path`` opened for appending, as a shell's ``>>`` does: created ``0600`` when it does
    not exist (exclusively: never at the end of a dangling link), an existing file appended to
    as it is. Returns the descriptor."""
    try:
        return create_private(path, os.O_WRONLY | os.O_APPEND)
    except FileExistsError:
        return os.open(path, os.O_WRONLY | os.O_APPEND | _CLOEXEC)


def sync_directory(path: str) -> None:
    """fsync the directory ``path``, so that the names created, renamed or removed in it are
    durable (POSIX; nothing elsewhere)."""
    if os.name != "posix":  # pragma: no cover - Windows has no directory fsync
        return
    fd = os.open(path or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace the file at ``path`` with ``data``, atomically and durably: a reader (or a
    crash) sees the old content or the new, never a mixture, and never a file someone else
    placed.

    ``data`` goes to a new temporary file in ``path``'s directory (``.NAME.XXXXXXXX.tmp``:
    a unique name, created exclusively without following a link, ``0600``), which is fsync'd
    and renamed over ``path`` (``os.replace``: a link at ``path`` is replaced, not followed);
    then the directory is fsync'd. On failure the temporary file is removed; a crash may leave
    it behind, and it is never read.

    Raises:
        OSError: the directory cannot be written, or the disk is full.
    """
    target = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(target))
    fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        try:
            _chmod(fd, PRIVATE_FILE_MODE)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):  # replaced before the failure
            os.unlink(temporary)
        raise
    sync_directory(directory)

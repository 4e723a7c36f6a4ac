"""``aiokpl spool check|repair|dump PATH``: look into a spool directory, and mend it.

- ``check`` reads every segment, changes nothing, prints what recovery would find (records to
  replay, records resolved, torn tails, corrupt frames and segments) and exits 1 when anything
  was lost to corruption (a torn tail alone, a crash's normal mark, exits 0).
- ``repair`` does what a producer's start does: truncates torn tails, moves corrupt segments
  aside (``*.corrupt``), and prints the same counts.
- ``dump`` prints one line per entry (JSON lines with ``--json``), segment by segment; a
  record's data shows as its length and a short escaped prefix, never raw bytes.

Whatever the directory holds, a problem is one line on stderr and an exit status, never a
traceback: a record that does not decode is a corrupt frame, as recovery counts it; a name a
start sets aside unread (a link, a FIFO, a directory named like a segment, another user's file,
one too long) is a segment to move aside (``dump``: a ``set-aside`` line); a directory a start
refuses (another user's, or writable by others: ``docs/spool.md``) or an entry that cannot be
read otherwise (a file without read permission) exits 2 with the error. ``--any-owner`` reads
a directory of another owner, as ``Config.spool_check_permissions=False`` does.

Memory: one segment at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from typing import Any

from .._private_files import UntrustedPathError
from .._spool.files import LOCK_NAME, OsFiles
from .._spool.format import (
    HEADER_BYTES,
    Frame,
    FrameStatus,
    HeaderError,
    SpoolRecord,
    decode_header,
    segment_number,
)
from .._spool.recovery import RecoveryStatistics, scan, walk
from .options import EXIT_FAILED, EXIT_OK, EXIT_USAGE

__all__ = ("add_parser", "escaped", "summary")

ACTIONS = ("check", "repair", "dump")
PREFIX_BYTES = 32


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``spool`` with the subcommands of the ``aiokpl`` parser.

    ``parents`` (the AWS options) is not used: the command reads a local directory.
    """
    parser: argparse.ArgumentParser = commands.add_parser(
        "spool",
        help="check, repair or dump a spool directory",
        description="Check, repair or dump a spool directory (Config.spool_directory). "
        "check exits 1 when records were lost to corruption; repair refuses a spool a "
        "producer is using.",
    )
    parser.add_argument("action", choices=ACTIONS, help="what to do")
    parser.add_argument("path", metavar="PATH", help="the spool directory")
    parser.add_argument(
        "--json", action="store_true", help="dump: one JSON object per line instead of text"
    )
    parser.add_argument(
        "--any-owner",
        action="store_true",
        help="read a directory another user owns or may write, and its files, as "
        "Config.spool_check_permissions=False does (a producer's start refuses them)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """The ``spool`` subcommand; returns the exit status."""
    path: str = args.path
    if not os.path.isdir(path):
        print(f"aiokpl spool: {path}: not a directory", file=sys.stderr)
        return EXIT_USAGE
    files = OsFiles(check_owner=not getattr(args, "any_owner", False))
    try:
        # A producer's start refuses what its owner alone may not write: so do the commands.
        files.check_directory(path)
        if args.action == "dump":
            return dump(path, as_json=args.json, files=files)
        return _check(path, repair=args.action == "repair", files=files)
    except UntrustedPathError as exc:  # its message names the path
        print(f"aiokpl spool: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # what a start would fail on too (as a SpoolIOError)
        where = exc.filename if exc.filename is not None else path
        print(f"aiokpl spool: {where}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE


def _check(path: str, *, repair: bool, files: OsFiles) -> int:
    """``check`` or ``repair``: print what a start finds (and, repairing, does)."""
    lock = None
    if repair:  # a producer's own start repairs; never beside it
        try:
            lock = files.lock(path)
        except BlockingIOError:
            print(
                f"aiokpl spool: {path}: in use by a producer (it holds {LOCK_NAME}); "
                "its start repairs what it finds",
                file=sys.stderr,
            )
            return EXIT_FAILED
    try:
        statistics = scan(path, files, repair=repair).statistics
    finally:
        if lock is not None:
            files.unlock(lock)
    print(summary(path, statistics, repaired=repair))
    return EXIT_FAILED if statistics.corrupt and not repair else EXIT_OK


def summary(path: str, stats: RecoveryStatistics, *, repaired: bool) -> str:
    """What a scan found, in a few lines."""
    done = "" if repaired else " to"
    lines = [
        f"{path}: {stats.segments} segments",
        f"records: {stats.records_recovered} to replay, {stats.records_resolved} resolved",
        f"torn tails: {stats.torn_tails} ({stats.bytes_truncated} bytes{done} truncate"
        + ("d)" if repaired else ")"),
        f"corrupt: {stats.frames_lost} frames, {stats.bytes_lost} bytes lost, "
        f"{stats.segments_moved_aside} segments {'moved' if repaired else 'to move'} aside",
    ]
    if stats.corrupt and not repaired:
        lines.append("run 'aiokpl spool repair' (a producer's start does the same)")
    return "\n".join(lines)


def escaped(data: bytes, limit: int = PREFIX_BYTES) -> str:
    """The first ``limit`` bytes as printable ASCII (others as ``\\xNN``), ``...`` if cut."""
    text = "".join(
        chr(b) if 0x20 <= b < 0x7F and b != 0x5C else f"\\x{b:02x}" for b in data[:limit]
    )
    return text + ("..." if len(data) > limit else "")


def dump(path: str, *, as_json: bool, files: OsFiles | None = None) -> int:
    """Print every entry of every segment of ``path``; returns the exit status.

    A name a start would set aside unread (a link, a FIFO, a directory, another user's file,
    one too long) is one ``set-aside`` line saying why, and nothing of it is read."""
    files = files if files is not None else OsFiles()
    for name in sorted(n for n in os.listdir(path) if segment_number(n) is not None):
        try:
            data = files.read(os.path.join(path, name))
        except UntrustedPathError as exc:
            _emit(as_json, {"segment": name, "kind": "set-aside", "error": exc.strerror})
            continue
        if len(data) < HEADER_BYTES:
            _emit(as_json, {"segment": name, "kind": "torn", "bytes": len(data)})
            continue
        try:
            producer_id = decode_header(data)
        except HeaderError as exc:
            _emit(as_json, {"segment": name, "kind": "corrupt", "error": str(exc)})
            continue
        _emit(as_json, {"segment": name, "kind": "segment", "producer_id": producer_id.hex()})
        for frame in walk(data, producer_id):
            if frame.status is not FrameStatus.END:
                _emit(as_json, _entry_fields(name, frame, len(data)))
    return EXIT_OK


def _entry_fields(name: str, frame: Frame, size: int) -> dict[str, Any]:
    fields: dict[str, Any] = {"segment": name, "offset": frame.offset}
    entry = frame.entry
    if entry is None:
        return {**fields, "kind": frame.status.value, "bytes": size - frame.offset}
    if isinstance(entry, SpoolRecord):
        accepted = datetime.fromtimestamp(entry.accepted_at, tz=timezone.utc)
        return {
            **fields,
            "kind": "record",
            "sequence_number": entry.sequence_number,
            "accepted_at": accepted.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "stream": entry.stream,
            "partition_key": entry.partition_key,
            "explicit_hash_key": entry.explicit_hash_key,
            "tags": [list(tag) for tag in entry.tags],
            "data_bytes": len(entry.data),
            "data_prefix": escaped(entry.data),
        }
    return {
        **fields,
        "kind": "ack",
        "producer_id": entry.producer_id.hex(),
        "outcome": entry.outcome.name.lower(),
        "runs": [list(run) for run in entry.runs],
    }


def _emit(as_json: bool, fields: dict[str, Any]) -> None:
    if as_json:
        print(json.dumps(fields, ensure_ascii=True))
        return
    where = fields.pop("segment") + (f"@{fields.pop('offset')}" if "offset" in fields else "")
    kind = fields.pop("kind")
    # ascii() escapes control characters and non-ASCII in keys and streams: the output is
    # printable on any terminal, whatever the records hold.
    rest = " ".join(
        f"{key}={value if isinstance(value, int) else ascii(value)}"
        for key, value in fields.items()
    )
    print(f"{where} {kind} {rest}")

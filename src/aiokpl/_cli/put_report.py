"""``aiokpl put``'s report and dead letters: what a run counted, and the lines it could not put.

:class:`PutReport` counts every line read by what became of it (blank, delivered, failed by
code, rejected by reason, not put), formats the final report and its JSON, and says where an
interrupted run resumes; :func:`progress_line` is the line shown while it runs; and
:class:`DeadLetters` appends each failed or rejected line, with its reason, to a JSON-lines file
created when the first one comes. All pure but the file, and tested on their own; the run
(``put``) feeds them.

Invariant: ``lines == blank + delivered + failed + not_put``, rejected lines counted as failed.
"""

from __future__ import annotations

import base64
import json
import shlex
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TextIO

from .._private_files import open_for_append
from .options import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK

__all__ = ("DeadLetters", "PutReport", "encode_data", "progress_line")


@dataclass
class PutReport:
    """What a ``put`` run did.

    Attributes:
        stream: the stream written to.
        lines: input lines read, blank ones included.
        blank: blank lines, skipped.
        delivered: records delivered.
        delivered_bytes: data bytes of the delivered records.
        failed: failed and rejected lines by error code.
        retries: attempts beyond the first, over all records.
        seconds: from the first read to the last result.
        dead_letters: lines written to the dead-letter file.
        dead_letter_path: that file, once created.
        dead_letter_error: why writing it failed, if it did.
        interrupted: the run was stopped by a signal (see ``stopped_by``).
        stopped_by: what stopped it: ``"Ctrl-C"`` (SIGINT) or ``"SIGTERM"``.
        not_put: lines read but not put because the run was stopped while they waited (for
            ``--rate-limit``, or for room in the producer): at most one.
        resume_source: the input holding the first line not handled, when the run was stopped
            before the end of its input (``-`` for stdin); ``None`` otherwise.
        resume_line: that line's number in ``resume_source``.
        unread_inputs: the inputs after ``resume_source``, not read at all.
    """

    stream: str
    lines: int = 0
    blank: int = 0
    delivered: int = 0
    delivered_bytes: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    seconds: float = 0.0
    dead_letters: int = 0
    dead_letter_path: str | None = None
    dead_letter_error: str | None = None
    interrupted: bool = False
    stopped_by: str = "Ctrl-C"
    not_put: int = 0
    resume_source: str | None = None
    resume_line: int = 0
    unread_inputs: tuple[str, ...] = ()

    @property
    def failed_total(self) -> int:
        """Failed and rejected lines, all codes."""
        return sum(self.failed.values())

    @property
    def records_per_second(self) -> float:
        """Delivered records per second of the run."""
        return self.delivered / self.seconds if self.seconds > 0 else 0.0

    def exit_status(self) -> int:
        """The command's exit status (see the module :mod:`aiokpl._cli.options`)."""
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_FAILED if self.failed_total or self.dead_letter_error else EXIT_OK

    def as_json(self) -> dict[str, Any]:
        """The report as a JSON-able dict (``--report-json``)."""
        return {
            "stream": self.stream,
            "lines": self.lines,
            "blank_lines": self.blank,
            "delivered": self.delivered,
            "delivered_bytes": self.delivered_bytes,
            "failed": self.failed_total,
            "failed_by_code": dict(sorted(self.failed.items())),
            "retries": self.retries,
            "seconds": round(self.seconds, 3),
            "records_per_second": round(self.records_per_second, 1),
            "dead_letters": self.dead_letters,
            "dead_letter_file": self.dead_letter_path,
            "dead_letter_error": self.dead_letter_error,
            "interrupted": self.interrupted,
            "stopped_by": self.stopped_by if self.interrupted else None,
            "not_put": self.not_put,
            "resume_source": self.resume_source,
            "resume_line": self.resume_line if self.resume_source is not None else None,
            "exit_status": self.exit_status(),
        }

    def resume_hint(self) -> str | None:
        """Where to start again after an interruption, and a command doing it; or None.

        The command reads the rest of the input from its first line not handled
        (``tail -n +N``) on stdin, then the inputs not read at all.
        """
        if self.resume_source is None:
            return None
        stdin = self.resume_source == "-"
        where = "standard input" if stdin else self.resume_source
        source = "INPUT" if stdin else shlex.quote(self.resume_source)
        rest = "".join(f" {shlex.quote(name)}" for name in self.unread_inputs)
        return (
            f"line {self.resume_line:,} of {where}: tail -n +{self.resume_line} {source} | "
            f"aiokpl put {shlex.quote(self.stream)} (same options){' -' + rest if rest else ''}"
        )

    def format(self) -> str:
        """The human-readable report printed on stderr at the end."""
        failed = ", ".join(f"{code} {n:,}" for code, n in sorted(self.failed.items()))
        rows = [
            ("stream", self.stream),
            (
                "lines read",
                f"{self.lines:,}" + (f" ({self.blank:,} blank, skipped)" if self.blank else ""),
            ),
            ("delivered", f"{self.delivered:,} records, {_size(self.delivered_bytes)}"),
            ("rate", f"{self.records_per_second:,.0f} records/s over {self.seconds:.2f} s"),
            ("retries", f"{self.retries:,}"),
            ("failed", f"{self.failed_total:,}" + (f" ({failed})" if failed else "")),
        ]
        if self.dead_letter_path is not None:
            rows.append(("dead letters", f"{self.dead_letters:,} in {self.dead_letter_path}"))
        if self.dead_letter_error is not None:
            rows.append(("dead letters", f"NOT ALL WRITTEN: {self.dead_letter_error}"))
        if self.not_put:
            rows.append(("not put", f"{self.not_put:,} (stopped while waiting to put it)"))
        if self.interrupted:
            if self.resume_source is None:
                rows.append(("interrupted", f"stopped by {self.stopped_by}; all input was read"))
            else:
                rows.append(
                    ("interrupted", f"stopped by {self.stopped_by} before the end of the input")
                )
                rows.append(("resume from", self.resume_hint() or ""))
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name:>{width}}  {value}" for name, value in rows)


def _size(count: int) -> str:
    if count < 1024:
        return f"{count:,} bytes"
    value = count / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} GiB"


def progress_line(report: PutReport, put: int, elapsed: float) -> str:
    """The progress line redrawn on a terminal while records are put."""
    rate = report.delivered / elapsed if elapsed > 0 else 0.0
    pending = put - report.delivered - report.failed_total
    line = (
        f"put {put:,} · delivered {report.delivered:,} ({_size(report.delivered_bytes)}) · "
        f"{rate:,.0f}/s · pending {max(pending, 0):,}"
    )
    if report.failed_total:
        line += f" · failed {report.failed_total:,}"
    return line


def encode_data(data: bytes) -> tuple[str, str]:
    """``(text, "text")`` if ``data`` is valid UTF-8, else ``(base64, "base64")``."""
    try:
        return data.decode("utf-8"), "text"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


class DeadLetters:
    """The dead-letter file: one JSON line per failed or rejected input line.

    The file is opened (for appending) when the first entry arrives, so a run without failures
    leaves no file. It holds the records' data: created, it is readable by its owner only
    (``0600``, whatever the umask); an existing file is appended to as it is. A write error
    is remembered, not raised (entries arrive in the producer's result callbacks); the report
    shows it and the exit status is then non-zero.

    Each entry has: ``source`` (the file name, ``-`` for stdin), ``line``, ``error_code``,
    ``error_message``, ``attempts`` (0 for a line rejected before it was sent),
    ``outcome_unknown`` (true when the record may be in the stream all the same: replaying it
    can store it twice),
    ``partition_key`` and ``explicit_hash_key`` (``null`` when the line never became a record;
    ``partition_key`` is ``null`` too for a record put without one, ``--no-partition-key``),
    ``data`` and ``data_encoding`` (``"text"``, or ``"base64"`` when the bytes are not UTF-8;
    the whole line when it never became a record, ``null`` for a line over the length limit).
    """

    def __init__(self, path: str, report: PutReport) -> None:
        self.path = path
        self._report = report
        self._file: TextIO | None = None

    def write(
        self,
        *,
        source: str,
        line: int,
        code: str,
        message: str,
        attempts: int,
        partition_key: str | None,
        explicit_hash_key: str | None,
        data: bytes | None,
        outcome_unknown: bool = False,
    ) -> None:
        """Append one entry."""
        text, encoding = encode_data(data) if data is not None else (None, None)
        entry = {
            "source": source,
            "line": line,
            "error_code": code,
            "error_message": message,
            "attempts": attempts,
            "outcome_unknown": outcome_unknown,
            "partition_key": partition_key,
            "explicit_hash_key": explicit_hash_key,
            "data": text,
            "data_encoding": encoding,
        }
        if self._report.dead_letter_error is not None:
            return
        try:
            if self._file is None:
                self._file = open(  # noqa: SIM115 - closed by close()
                    open_for_append(self.path), "a", encoding="utf-8"
                )
                self._report.dead_letter_path = self.path
            self._file.write(json.dumps(entry, ensure_ascii=False) + "\n")
        except OSError as exc:
            self._report.dead_letter_error = f"{self.path}: {exc.strerror or exc}"
        else:
            self._report.dead_letters += 1

    def close(self) -> None:
        """Flush and close the file, if it was opened."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError as exc:  # pragma: no cover - a full disk at the last flush
                self._report.dead_letter_error = f"{self.path}: {exc.strerror or exc}"
            self._file = None

"""``aiokpl put STREAM [FILE...]``: one record per input line, through the producer.

The input is streamed: blocks of at most :data:`READ_SIZE` bytes are read (from a pipe or a
terminal in a worker thread, so that waiting for a writer never blocks the event loop and the
producer keeps sending meanwhile; from a regular file directly), the blocks are split into
lines, and each line becomes a ``put_record``, which waits whenever the producer holds
``max_outstanding_records`` / ``max_outstanding_bytes``. Memory is therefore bounded by those
two numbers and :data:`~aiokpl._cli.lines.MAX_LINE_SIZE`, never by the size of the input.

Every line read ends in exactly one of these: blank (skipped); delivered; failed by Kinesis
(its result's code, e.g. ``ProvisionedThroughputExceededException`` after the TTL); rejected
before it was sent (bad JSON, a missing field, a record over the limits); or, when a signal
stops the run while the line waits to be put (for ``--rate-limit`` or for room in the
producer), not put. Failed and rejected lines are counted by code in the report and written,
with their reason and the record, to the dead-letter file, which is created only when the first
one happens. So ``lines == blank + delivered + failed + not_put``, and an interrupted run's
report says where to resume: the first line of the input not handled.

Turning lines into records is the pure module :mod:`aiokpl._cli.lines`; the report and the
dead letters are :mod:`aiokpl._cli.put_report`'s (pure too, and tested on their own); the
command's options are :mod:`aiokpl._cli.put_options`'.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import stat
import sys
import threading
from collections.abc import AsyncGenerator, Iterator
from contextlib import aclosing
from dataclasses import dataclass
from functools import partial
from typing import IO, Any, TextIO

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread

from .._core.config import Config
from .._core.errors import ConfigError, InvalidRecordError, InvalidRecordTypeError
from .._core.hashing import parse_stream_arn
from .._kinesis import create_client, error_of, stream_argument
from .._outcome import Outcome
from .._producer.producer import Producer
from .._rate_limiter import RateLimiter
from .lines import (
    MAX_LINE_SIZE,
    BadLine,
    Line,
    LineParser,
    LineSplitter,
    ParsedRecord,
)
from .options import (
    EXIT_SERVICE_ERROR,
    EXIT_USAGE,
    config_from_args,
    insecure_warning,
    interrupted,
    service_message,
    usage_message,
)
from .options import run as run_async
from .put_options import DESCRIPTION, add_put_arguments
from .put_report import DeadLetters, PutReport, progress_line

__all__ = ("Input", "PutRun", "add_parser", "default_dead_letter", "run_put_command")

READ_SIZE = 64 * 1024
"""Largest block read from an input at once."""

PROGRESS_INTERVAL = 0.25
"""Seconds between two redraws of the progress line."""

MAX_REPORTED_BAD_LINES = 20
"""Bad lines described one by one on stderr; the dead-letter file has them all."""


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    """An opened input: its name for messages and its binary file."""

    name: str
    file: IO[bytes]


class PutRun:
    """One ``put`` run: reads the inputs, puts the records, tracks every result.

    Args:
        stream: the stream to write to.
        inputs: the opened inputs, read in order.
        parser: turns lines into records.
        dead_letters: where failed lines go.
        report: the counters, updated as the run goes (read it even after an interruption).
        rate_limit: at most this many records per second over the whole run, or ``None``.
        stderr: where bad lines, the progress line and warnings go (default: ``sys.stderr``).
        progress: whether to redraw a progress line (on a terminal).
    """

    def __init__(
        self,
        *,
        stream: str,
        inputs: list[Input],
        parser: LineParser,
        dead_letters: DeadLetters,
        report: PutReport,
        rate_limit: float | None = None,
        stderr: TextIO | None = None,
        progress: bool = False,
    ) -> None:
        self._stream = stream
        self._inputs = inputs
        self._parser = parser
        self._dead_letters = dead_letters
        self.report = report
        self._rate_limit = rate_limit
        self._stderr = stderr or sys.stderr
        self._progress = progress
        self._put = 0
        self._bad_lines_shown = 0
        # Where reading stands: the input being read (its index; len(inputs) once all were
        # read), the number of its first line not handled yet, and whether a line was read
        # and is waiting to be put (for the rate limiter or for room in the producer).
        self._reading = 0
        self._next_line = 1
        self._waiting = False
        # Both made by run(): a cancel scope can be created only inside the event loop.
        self._reading_scope: anyio.CancelScope | None = None
        self._abandon: anyio.CancelScope | None = None

    async def run(self, producer: Producer, abandon: anyio.CancelScope | None = None) -> None:
        """Put every line of every input through ``producer``; return when all have a result.

        Args:
            producer: the running producer.
            abandon: the scope around the producer's ``async with``. When given, the run
                handles SIGINT and SIGTERM itself (only possible in the main thread): the first
                stops reading and lets every record read so far finish; the second cancels
                ``abandon``, so that the producer exits at once, failing what is left with code
                ``"Cancelled"`` (those records are dead-lettered too). See :meth:`stop`.
        """
        started = anyio.current_time()
        self._abandon = abandon
        self._reading_scope = anyio.CancelScope()
        try:
            async with anyio.create_task_group() as task_group:
                if self._progress:
                    task_group.start_soon(self._redraw, started)
                with self._reading_scope:
                    if abandon is not None:
                        await task_group.start(self._watch_signals)
                    await self._put_all(producer)
                await producer.flush()
                task_group.cancel_scope.cancel()
        finally:
            self._note_where_reading_stopped()  # nothing to note when all input was read
            self.report.seconds = anyio.current_time() - started
            if self._progress:
                self._stderr.write("\r\x1b[K")
                self._stderr.flush()

    def _note_where_reading_stopped(self) -> None:
        """Count the line that was waiting to be put, and where to resume (once)."""
        report = self.report
        if self._waiting:
            self._waiting = False
            report.not_put += 1
        if self._reading < len(self._inputs) and report.resume_source is None:
            report.resume_source = self._inputs[self._reading].name
            report.resume_line = self._next_line
            report.unread_inputs = tuple(i.name for i in self._inputs[self._reading + 1 :])

    async def _put_all(self, producer: Producer) -> None:
        limiter = RateLimiter(self._rate_limit) if self._rate_limit else None
        for index, source in enumerate(self._inputs):
            self._reading, self._next_line = index, 1
            # aclosing: a run stopped mid-input closes the generator now, not at collection.
            async with aclosing(_lines(source.file)) as lines:
                async for line in lines:
                    self.report.lines += 1
                    self._next_line = line.number + 1  # unless it waits to be put (below)
                    if line.data is None:
                        self._reject(
                            source.name,
                            line,
                            BadLine(
                                "LineTooLong",
                                f"line of {line.size:,} bytes is over the limit of "
                                f"{MAX_LINE_SIZE:,} bytes",
                            ),
                        )
                        continue
                    if not line.data.strip():
                        self.report.blank += 1
                        continue
                    parsed = self._parser.parse(line.data, line.number)
                    if isinstance(parsed, BadLine):
                        self._reject(source.name, line, parsed)
                        continue
                    # Stopped during these awaits, the line is neither put nor dead-lettered.
                    self._next_line, self._waiting = line.number, True
                    if limiter is not None:
                        await limiter.acquire()
                    try:
                        outcome = await producer.put_record(
                            stream=self._stream,
                            partition_key=parsed.partition_key,
                            data=parsed.data,
                            explicit_hash_key=parsed.explicit_hash_key,
                        )
                    except (InvalidRecordError, InvalidRecordTypeError) as exc:
                        self._next_line, self._waiting = line.number + 1, False
                        self._reject(source.name, line, BadLine("InvalidRecord", str(exc)))
                        continue
                    self._next_line, self._waiting = line.number + 1, False
                    self._put += 1
                    outcome.add_done_callback(
                        partial(self._on_result, source.name, line.number, parsed)
                    )
        self._reading = len(self._inputs)

    def stop(self, signum: int) -> None:
        """What a signal does to the run (``signum``: SIGINT or SIGTERM).

        The first stops reading: the line waiting to be put, if any, is not put, and every
        record already put finishes. The next cancels the ``abandon`` scope given to
        :meth:`run`, if any.
        """
        if self.report.interrupted:
            if self._abandon is not None:
                self._abandon.cancel()
            return
        self.report.interrupted = True
        self.report.stopped_by = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"
        # Cancelled before saying so: once the line is out, a read that ends is not taken.
        if self._reading_scope is not None:
            self._reading_scope.cancel()
        self._print(
            f"aiokpl put: interrupted ({self.report.stopped_by}); finishing the records "
            "already read (interrupt again to abandon them)"
        )

    async def _watch_signals(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            task_status.started()
            async for signum in signals:
                self.stop(signum)

    def _reject(self, source: str, line: Line, bad: BadLine) -> None:
        self.report.failed[bad.code] += 1
        if self._bad_lines_shown < MAX_REPORTED_BAD_LINES:
            self._bad_lines_shown += 1
            self._print(f"{source}:{line.number}: {bad.code}: {bad.message}")
            if self._bad_lines_shown == MAX_REPORTED_BAD_LINES:
                self._print("(further bad lines are not shown here; the dead-letter file has them)")
        self._dead_letters.write(
            source=source,
            line=line.number,
            code=bad.code,
            message=bad.message,
            attempts=0,
            partition_key=None,
            explicit_hash_key=None,
            data=line.data,
        )

    def _on_result(
        self, source: str, number: int, record: ParsedRecord, outcome: Outcome[Any]
    ) -> None:
        result = outcome.result()
        self.report.retries += len(result.attempts) - 1
        if result.success:
            self.report.delivered += 1
            self.report.delivered_bytes += len(record.data)
            return
        code = result.error_code or "Unknown"
        self.report.failed[code] += 1
        self._dead_letters.write(
            source=source,
            line=number,
            code=code,
            message=result.error_message or "",
            attempts=len(result.attempts),
            outcome_unknown=result.outcome_unknown,
            partition_key=record.partition_key,
            explicit_hash_key=record.explicit_hash_key,
            data=record.data,
        )

    def _print(self, message: str) -> None:
        if self._progress:
            message = "\r\x1b[K" + message
        print(message, file=self._stderr, flush=True)

    async def _redraw(self, started: float) -> None:
        while True:
            await anyio.sleep(PROGRESS_INTERVAL)
            line = progress_line(self.report, self._put, anyio.current_time() - started)
            self._stderr.write(f"\r{line}\x1b[K")
            self._stderr.flush()


def _may_block(file: IO[bytes]) -> bool:
    """Whether reading ``file`` can wait for a writer (a pipe, a terminal, a socket).

    Regular files and in-memory buffers never make a read wait for long, so they are read in
    the event loop's thread; anything else in a worker thread.
    """
    try:
        return not stat.S_ISREG(os.fstat(file.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):  # io.BytesIO has no file descriptor
        return False


async def _lines(file: IO[bytes]) -> AsyncGenerator[Line, None]:
    """The lines of ``file``, read a block at a time (in a worker thread if it may block)."""
    splitter = LineSplitter()
    read = getattr(file, "read1", file.read)
    threaded = _may_block(file)
    while True:
        if threaded:
            # abandon_on_cancel: Ctrl-C must not wait for a terminal or a pipe to send more.
            # os.read on the descriptor, not the buffered file: an abandoned thread blocked in
            # the file's read would hold its lock, and the interpreter cannot shut down then.
            block = await anyio.to_thread.run_sync(
                os.read, file.fileno(), READ_SIZE, abandon_on_cancel=True
            )
        else:
            block = read(READ_SIZE)
            await anyio.lowlevel.checkpoint()
        if not block:
            break
        for line in splitter.feed(block):
            yield line
    for line in splitter.end():
        yield line


# --------------------------------------------------------------------------------------------
# The subcommand
# --------------------------------------------------------------------------------------------


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``put`` with the subcommands of the ``aiokpl`` parser."""
    put = commands.add_parser(
        "put",
        parents=parents,
        help="put one record per input line",
        description=DESCRIPTION,
    )
    add_put_arguments(put)
    put.set_defaults(handler=run_put_command, intermixed="files")


def _parser_from_args(args: argparse.Namespace) -> LineParser:
    return LineParser(
        json_lines=args.json,
        partition_key_field=args.partition_key_field,
        partition_key_template=args.partition_key_template,
        no_partition_key=args.no_partition_key,
        explicit_hash_key_field=args.explicit_hash_key_field,
        data_field=args.data_field,
    )


def _open_inputs(names: list[str]) -> Iterator[Input]:
    for name in names or ["-"]:
        if name == "-":
            yield Input("-", sys.stdin.buffer)
        else:
            yield Input(name, open(name, "rb"))  # noqa: SIM115 - closed by the caller


def default_dead_letter(stream: str) -> str:
    """The dead-letter file of a run without ``--dead-letter``: ``NAME.dead-letter.jsonl`` in
    the current directory, ``NAME`` the stream's name, also when ``STREAM`` is its ARN (whose
    ``/`` would name a directory; a stream name holds only ``a-z A-Z 0-9 _ . -``).

    Raises:
        InvalidRecordError: ``stream`` is a malformed stream ARN.
    """
    arn = parse_stream_arn(stream)
    name = stream if arn is None else arn.name
    return f"{name}.dead-letter.jsonl"


async def _stream_check(client: Any, stream: str) -> tuple[str, str] | None:
    """``(code, message)`` if ``stream`` cannot be listed (wrong name, no access), else None."""
    try:
        await client.list_shards(**stream_argument(stream))
    except Exception as exc:  # every client error becomes data here
        return error_of(exc)
    return None


def run_put_command(args: argparse.Namespace, stderr: TextIO | None = None) -> int:
    """Run ``aiokpl put`` as ``args`` say; returns the exit status."""
    stderr = stderr or sys.stderr
    try:
        parser = _parser_from_args(args)
        config = config_from_args(
            args,
            aggregation_enabled=not args.no_aggregation,
            record_max_buffered_time_ms=args.max_buffered_ms,
            record_ttl_ms=args.record_ttl_ms,
            max_outstanding_records=args.max_outstanding_records,
            max_record_size=args.max_record_size,
        )
    except (ValueError, ConfigError) as exc:
        print(f"aiokpl put: {exc}", file=stderr)
        return EXIT_USAGE
    warning = insecure_warning(args)
    if warning is not None:
        print(f"aiokpl put: {warning}", file=stderr)
    inputs: list[Input] = []
    try:
        try:
            inputs.extend(_open_inputs(args.files))
        except OSError as exc:
            print(f"aiokpl put: cannot read {exc.filename}: {exc.strerror}", file=stderr)
            return EXIT_USAGE
        report = PutReport(stream=args.stream)
        dead_letters = DeadLetters(args.dead_letter or default_dead_letter(args.stream), report)
        run = PutRun(
            stream=args.stream,
            inputs=inputs,
            parser=parser,
            dead_letters=dead_letters,
            report=report,
            rate_limit=args.rate_limit,
            stderr=stderr,
            progress=not args.no_progress and stderr.isatty(),
        )
        try:
            status = run_async(_put_main, config, args.stream, run, stderr, backend=args.backend)
        except BaseException as exc:
            if not interrupted(exc):
                raise
            report.interrupted = True
            status = None
        finally:
            dead_letters.close()
        if status is not None:
            return status
    finally:
        for source in inputs:
            if source.name != "-":
                source.file.close()
    return _finish(args, report, stderr)


async def _put_main(config: Config, stream: str, run: PutRun, stderr: TextIO) -> int | None:
    """Check the stream, then run; returns an early exit status, or None when the run ended."""
    try:
        async with create_client(config) as client:
            refused = await _stream_check(client, stream)
            if refused is not None:
                code, message = refused
                message = service_message(message)
                print(f"aiokpl put: cannot write to {stream!r}: {code}: {message}", file=stderr)
                return EXIT_SERVICE_ERROR
            # Signals can be caught only in the main thread (main() may run in another).
            with anyio.CancelScope() as abandon:
                async with Producer(config, client=client) as producer:
                    await run.run(producer, abandon if _in_main_thread() else None)
    except ConfigError as exc:
        print(f"aiokpl put: {usage_message(exc)}", file=stderr)
        return EXIT_USAGE
    return None


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread() and sys.platform != "win32"


def _finish(args: argparse.Namespace, report: PutReport, stderr: TextIO) -> int:
    print(report.format(), file=stderr)
    if args.report_json:
        text = json.dumps(report.as_json(), indent=2)
        if args.report_json == "-":
            print(text, flush=True)
        else:
            try:
                with open(args.report_json, "w", encoding="utf-8") as file:
                    file.write(text + "\n")
            except OSError as exc:
                print(f"aiokpl put: cannot write the report: {exc}", file=stderr)
    return report.exit_status()

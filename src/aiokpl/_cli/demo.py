"""``aiokpl demo``: the project's main job, runnable with nothing but this machine.

It starts a local Kinesis (moto's server, :mod:`aiokpl.testing._servers`) on 127.0.0.1, creates
a stream, produces records through the real pipeline and aiobotocore over HTTP, reads every
record back, deaggregates it, and checks that each landed exactly once, intact, on the shard its
result names. Ctrl-C or SIGTERM stops it with one line and exit status 130; the local server is
stopped either way.
"""

import argparse
import os
import random
import signal
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from .. import aggregation
from .._core.config import Config
from .._core.hashing import hash_key_of
from .._core.results import RecordResult
from .._kinesis import create_client
from .._producer.producer import Producer
from ..testing import read_stream
from ..testing._servers import DUMMY_CREDENTIALS, LocalServerError, moto_server
from .options import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    add_backend_option,
    interrupted,
    run,
)

__all__ = ("DemoReport", "add_parser", "run_demo")


@dataclass
class DemoReport:
    """What the demo found; ``ok`` is false if any record is missing, duplicated or altered."""

    records: int
    stream: str = ""
    shards: int = 0
    size: int = 0
    keys: int = 0
    seconds: float = 0.0
    succeeded: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    kinesis_records: int = 0
    read_back: int = 0
    missing: int = 0
    duplicated: int = 0
    wrong_shard: int = 0
    corrupted: int = 0
    latencies: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.succeeded == self.records and not (
            self.missing or self.duplicated or self.wrong_shard or self.corrupted
        )

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.latencies)
        if not ordered:
            return 0.0
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class _Progress:
    def __init__(self, total: int, label: str) -> None:
        self.total = total
        self.label = label
        self.tty = sys.stderr.isatty()
        self._last = -1

    def update(self, done: int) -> None:
        tenth = done * 10 // max(self.total, 1)
        if self.tty:
            if done == self.total or done % 997 == 0:
                width = 30
                filled = width * done // max(self.total, 1)
                bar = "#" * filled + "-" * (width - filled)
                print(f"\r{self.label} [{bar}] {done:,}/{self.total:,}", end="", file=sys.stderr)
                if done == self.total:
                    print(file=sys.stderr)
        elif tenth != self._last:
            self._last = tenth
            print(f"{self.label}: {done:,}/{self.total:,}", file=sys.stderr)


def _payload(index: int, size: int, rng: random.Random) -> bytes:
    head = f"{index:010d}:".encode()
    return head + rng.randbytes(max(0, size - len(head)))


def _latency(result: RecordResult) -> float:
    first = result.attempts[0]
    return result.attempts[-1].ended_at - (first.started_at - first.delay)


async def run_demo(
    endpoint_url: str, *, count: int, size: int, shards: int, keys: int, seed: int = 7
) -> DemoReport:
    """Produce ``count`` records to a new stream at ``endpoint_url``, then verify them all."""
    stream = f"aiokpl-demo-{seed}-{count}"
    report = DemoReport(records=count, stream=stream, shards=shards, size=size, keys=keys)
    rng = random.Random(seed)
    config = Config(
        endpoint_url=endpoint_url,
        region=DUMMY_CREDENTIALS["region"],
        aws_access_key_id=DUMMY_CREDENTIALS["aws_access_key_id"],
        aws_secret_access_key=DUMMY_CREDENTIALS["aws_secret_access_key"],
        record_max_buffered_time_ms=200,
        max_outstanding_records=20_000,
    )
    # The same client the producer opens for itself (aiohttp on asyncio, httpx on trio).
    async with create_client(config) as admin:
        await admin.create_stream(StreamName=stream, ShardCount=shards)
        sent: dict[tuple[str | None, bytes], RecordResult] = {}
        outcomes = []
        progress = _Progress(count, "put")
        started = anyio.current_time()
        async with Producer(config) as producer:
            for index in range(count):
                key = f"user-{rng.randrange(keys)}"
                data = _payload(index, size, rng)
                outcomes.append(
                    (
                        key,
                        data,
                        await producer.put_record(stream=stream, partition_key=key, data=data),
                    )
                )
                progress.update(index + 1)
            await producer.flush()
        report.seconds = anyio.current_time() - started
        for key, data, outcome in outcomes:
            result = outcome.result()
            sent[(key, data)] = result
            report.retries += len(result.attempts) - 1
            if result.success:
                report.succeeded += 1
                report.latencies.append(_latency(result))
            else:
                report.failed[result.error_code or "?"] += 1

        print("reading the stream back…", file=sys.stderr)
        seen: Counter[tuple[str | None, bytes]] = Counter()
        for shard_id, kinesis_record in await read_stream(admin, stream):
            report.kinesis_records += 1
            for user_record in aggregation.deaggregate(kinesis_record):
                report.read_back += 1
                identity = (user_record.partition_key, user_record.data)
                seen[identity] += 1
                expected = sent.get(identity)
                if expected is None:
                    report.corrupted += 1
                elif expected.shard_id != shard_id:
                    report.wrong_shard += 1
        for identity, delivered in sent.items():
            if delivered.success and seen[identity] == 0:
                report.missing += 1
        report.duplicated = sum(n - 1 for n in seen.values() if n > 1)
        # Each read-back record must also sit in the range of the shard it came from.
        ranges = {
            s["ShardId"]: (
                int(s["HashKeyRange"]["StartingHashKey"]),
                int(s["HashKeyRange"]["EndingHashKey"]),
            )
            for s in (await admin.list_shards(StreamName=stream))["Shards"]
        }
        for (sent_key, _), delivered in sent.items():
            assert sent_key is not None  # the demo puts every record with a key
            if delivered.success and delivered.shard_id in ranges:
                low, high = ranges[delivered.shard_id]
                if not low <= hash_key_of(sent_key.encode()) <= high:
                    report.wrong_shard += 1
    return report


def _count(number: float, noun: str) -> str:
    """``number`` (rounded to a whole one) and ``noun``, plural unless that is 1."""
    return f"{number:,.0f} {noun}{'' if round(number) == 1 else 's'}"


def _print_report(report: DemoReport, backend: str) -> None:
    rate = report.records / report.seconds if report.seconds else 0.0
    per_kinesis = report.read_back / report.kinesis_records if report.kinesis_records else 0.0
    keys = "key user-0" if report.keys == 1 else f"keys user-0 … user-{report.keys - 1}"
    lines = [
        ("backend", backend),
        ("stream", f"{report.stream}, {_count(report.shards, 'shard')}"),
        (
            "records put",
            f"{report.records:,} of {_count(report.size, 'byte')} each, partition {keys}",
        ),
        ("delivered", f"{report.succeeded:,}"),
        ("failed", ", ".join(f"{c}: {n}" for c, n in report.failed.items()) or "0"),
        (
            "throughput",
            f"{_count(rate, 'record')}/s ({report.seconds:.2f} s, put to last result)",
        ),
        (
            "read back",
            f"{_count(report.read_back, 'user record')} in "
            f"{_count(report.kinesis_records, 'Kinesis record')}",
        ),
        ("user records per Kinesis record", f"{per_kinesis:.1f}"),
        ("retries", f"{report.retries:,}"),
        (
            "latency p50 / p99",
            f"{report.percentile(0.5) * 1000:.0f} ms / {report.percentile(0.99) * 1000:.0f} ms",
        ),
        ("missing / duplicated", f"{report.missing} / {report.duplicated}"),
        ("on the wrong shard / unknown", f"{report.wrong_shard} / {report.corrupted}"),
        ("verdict", "every record landed once, intact, where predicted" if report.ok else "FAILED"),
    ]
    width = max(len(name) for name, _ in lines)
    for name, value in lines:
        print(f"{name:>{width}}  {value}")


def _demo(args: argparse.Namespace) -> int:
    if args.region or args.endpoint_url or args.profile or not args.verify_ssl or args.ca_bundle:
        print(
            "aiokpl demo: the demo starts its own local Kinesis; --region, --endpoint-url, "
            "--profile, --no-verify-ssl and --ca-bundle do not apply",
            file=sys.stderr,
        )
        return EXIT_USAGE
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        del os.environ[name]  # the demo never reaches for real credentials
    try:
        with _sigterm_interrupts() as received, moto_server() as endpoint:
            print(f"local Kinesis (moto) at {endpoint}", file=sys.stderr)
            report = run(
                lambda: run_demo(
                    endpoint, count=args.count, size=args.size, shards=args.shards, keys=args.keys
                ),
                backend=args.backend,
            )
    except LocalServerError as exc:
        print(f"aiokpl demo: {exc}", file=sys.stderr)
        return 2
    except BaseException as exc:
        # Ctrl-C anywhere (in either event loop, or while the server starts or stops) arrives
        # as KeyboardInterrupt, possibly inside exception groups: one line, no traceback.
        if not interrupted(exc):
            raise
        end = "\n" if sys.stderr.isatty() else ""  # after the progress bar's line
        name = "SIGTERM" if received else "Ctrl-C"
        print(f"{end}aiokpl demo: interrupted ({name}); local server stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    _print_report(report, args.backend)
    return 0 if report.ok else 1


@contextmanager
def _sigterm_interrupts() -> Iterator[list[int]]:
    """While entered, SIGTERM interrupts as Ctrl-C does; yields the SIGTERMs received.

    Without it, SIGTERM would end the process at once and leave moto's server running. The
    handler sends this process SIGINT, so that whichever SIGINT handler is in force (Python's,
    asyncio's runner, trio's, which delivers it only where that is safe) does the interrupting.
    """
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received  # handlers can be set only in the main thread
        return

    def interrupt(signum: int, frame: object) -> None:
        received.append(signum)
        signal.raise_signal(signal.SIGINT)

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser(
        "demo", help="produce to a local Kinesis and verify every record (no AWS account)"
    )
    demo.add_argument(
        "--count", type=_positive, default=100_000, help="records to put (default: %(default)s)"
    )
    demo.add_argument(
        "--size",
        type=_positive,
        default=100,
        help="bytes of data per record (default: %(default)s)",
    )
    demo.add_argument(
        "--shards", type=_positive, default=4, help="shards of the stream (default: %(default)s)"
    )
    demo.add_argument(
        "--keys",
        type=_positive,
        default=4096,
        help="distinct partition keys (default: %(default)s)",
    )
    add_backend_option(demo, top_level=False)
    demo.set_defaults(handler=_demo)

"""The durable spool under SIGKILL and damage, as real processes against moto's server.

A producer process (``spool_kill_child.py``: a spool, identities, aggregation on) puts numbered
records to moto's server over HTTP and prints which are durable after each ``wait_durable``.
The test kills it with SIGKILL many times over, restarting it on the same spool directory each
time: at random moments (during start-up and recovery, between puts, with requests in flight)
and at exact points, where the child kills itself at the Nth call of a file operation of the
spool (``OsFiles``: mid-write with half a buffer written, before or after an fsync, a segment's
creation or deletion, a torn tail's truncation) or once the answer to its Nth ``PutRecords`` is
back (delivered, not yet known to be: copies). A last clean run drains the spool. The whole
stream is then read back (every shard, ``GetRecords``), deaggregated by AWS's
``aws_kinesis_agg`` (keys and data) and by ``aiokpl.aggregation.deaggregate`` (the same, and
the tags), and held to the spool's promise:

* every record reported durable is in the stream at least once, and exactly once after a
  ``Deduper`` (one per shard, as consumers run it);
* nothing is in the stream that was never put, and every record, each copy of it, carries the
  identity of its first put: the id of the run that put it (each run prints its own) and its
  place in that run's puts, whichever run sent it (a replay keeps it);
* after the drain nothing is left unresolved in the spool.

The second test damages the segment files between runs (a flipped byte in a record, a flipped
byte in a header, a torn tail) of a spool holding records never sent: the producer starts,
counts what it lost, and delivers every durable record outside the damaged ranges, and none
inside them.

Seeded: ``AIOKPL_SPOOL_KILL_SEED`` (default 23) picks every kill; ``AIOKPL_SPOOL_KILL_ITERATIONS``
(default 12: each kill point at least once) sets how many runs are killed, for a
longer soak (``-s`` prints what each run did and the figures).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import pytest

from aiokpl._spool import OsFiles, SpoolRecord, scan
from aiokpl._spool.format import HEADER_BYTES, decode_header, segment_number
from aiokpl._spool.recovery import CORRUPT_SUFFIX, walk
from aiokpl.aggregation import Deduper, deaggregate, identity_of
from aiokpl.testing import read_stream

from .helpers import admin_client, aws_deaggregate, create_stream, stream_name
from .spool_kill_child import number_of

pytestmark = pytest.mark.integration

CHILD = Path(__file__).with_name("spool_kill_child.py")
SEED = int(os.environ.get("AIOKPL_SPOOL_KILL_SEED", "23"))
ITERATIONS = int(os.environ.get("AIOKPL_SPOOL_KILL_ITERATIONS", "12"))
SHARDS = 2
RECORDS_PER_RUN = 400
BATCH = 20
PAUSE_MS = 40  # between batches: a run puts for about a second, requests in flight throughout
SEGMENT_SIZE = 16 * 1024  # small: segments rotate and are deleted in every run
WAIT = 60.0  # bound on every wait for a child; never reached
FRAME_HEAD = 8  # a frame's length word and CRC, before its body

# The file operations a child may be killed at, how it is killed there, and up to which call
# (a run of RECORDS_PER_RUN records makes about this many: 30 writes, 30 fsyncs but with
# "none", 3 segments created and 2 or 3 deleted, 7 or 8 PutRecords calls). A write is cut at
# a random point ("torn"); the run after it is killed in the repair of the torn tail.
KILL_POINTS: list[tuple[str, tuple[str, ...], int]] = [
    ("append", ("torn",), 30),
    ("fsync", ("before", "after"), 28),
    ("create", ("before", "after"), 3),
    ("unlink", ("before", "after"), 3),
    # The Nth PutRecords, once its answer is back: the server stored the records, the
    # producer dies before it learns so; they are sent again after the restart.
    ("request", ("after",), 7),
]


# -- the child processes ----------------------------------------------------------------------


@dataclass
class Child:
    """One run of the child program, its standard output collected line by line."""

    plan: dict[str, Any]
    process: subprocess.Popen[str]
    stderr: IO[bytes]
    lines: list[str] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)
    closed: bool = False

    def read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self.changed:
                self.lines.append(line.rstrip("\n"))
                self.changed.notify_all()
        with self.changed:
            self.closed = True
            self.changed.notify_all()

    def wait_for(self, predicate: Callable[[list[str]], bool], timeout: float) -> bool:
        """Wait until ``predicate(lines)`` holds or the output ends; whether it holds."""
        with self.changed:
            self.changed.wait_for(lambda: predicate(self.lines) or self.closed, timeout)
            return predicate(self.lines)

    def finish(self) -> int:
        """Wait for the process to end and its output to be read; its return code."""
        code = self.process.wait(WAIT)
        with self.changed:
            assert self.changed.wait_for(lambda: self.closed, WAIT)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)

    def durable(self) -> set[int]:
        found: set[int] = set()
        for line in self.lines:
            if line.startswith("durable "):
                _, first, end = line.split()
                found.update(range(int(first), int(end)))
        return found

    def statistics(self, word: str) -> dict[str, Any] | None:
        for line in self.lines:
            if line.startswith(word + " "):
                loaded: dict[str, Any] = json.loads(line[len(word) + 1 :])
                return loaded
        return None


@pytest.fixture
def children() -> Iterator[Callable[[dict[str, Any]], Child]]:
    """Starts child programs; kills and reaps every one still running at the end."""
    started: list[Child] = []
    with contextlib.ExitStack() as files:

        def start(plan: dict[str, Any]) -> Child:
            # Its log goes to a file: a pipe read only at the end could fill and block it.
            stderr = files.enter_context(tempfile.TemporaryFile())
            process = subprocess.Popen(
                [sys.executable, str(CHILD), json.dumps(plan)],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
            )
            child = Child(plan, process, stderr)
            threading.Thread(target=child.read, daemon=True).start()
            started.append(child)
            return child

        try:
            yield start
        finally:
            for child in started:
                child.kill()
                child.finish()
                if child.process.stdout is not None:
                    child.process.stdout.close()


def plan_for(
    endpoint: str, stream: str, directory: Path, first: int, count: int, **changes: Any
) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "endpoint": endpoint,
        "stream": stream,
        "directory": str(directory),
        "backend": "asyncio",
        "fsync": "interval",
        "first": first,
        "count": count,
        "batch": BATCH,
        "pause_ms": 0,
        "hold": False,
        "kill": None,
        "segment_size_bytes": SEGMENT_SIZE,
    }
    plan.update(changes)
    return plan


def failure(child: Child) -> str:
    """What a child that should not have failed said."""
    child.stderr.seek(0)
    stderr = child.stderr.read().decode(errors="replace")
    return f"plan {child.plan}\nstdout {child.lines[-5:]}\nstderr {stderr[-3000:]}"


# -- the stream, read back --------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    shard_id: str
    number: int | None
    identity: tuple[str, int] | None
    record: Any


def read_back(endpoint: str, stream: str) -> list[Stored]:
    """Every user record of every shard, oldest first in each shard, checked against AWS's
    deaggregator (partition keys and data), with its tags' identity."""

    async def read() -> list[tuple[str, dict[str, Any]]]:
        async with admin_client(endpoint) as admin:
            return await read_stream(admin, stream)

    found = []
    for shard_id, kinesis_record in anyio.run(read):
        ours = deaggregate(kinesis_record)
        assert [(r.partition_key, r.data) for r in ours] == aws_deaggregate(kinesis_record)
        for record in ours:
            identity = identity_of(record)
            found.append(
                Stored(
                    shard_id,
                    number_of(record.data),
                    None if identity is None else (identity.producer_id, identity.sequence),
                    record,
                )
            )
    return found


def check_stream(
    stored: list[Stored], put: dict[int, tuple[str, int]], durable: set[int]
) -> dict[str, Any]:
    """The spool's promise held against what the stream holds (``put``: the identity each
    record was put with, by number); counts for the report."""
    strangers = [s for s in stored if s.number is None or s.number not in put]
    assert not strangers, f"records never put are in the stream: {strangers[:3]}"
    anonymous = [s for s in stored if s.identity is None]
    assert not anonymous, f"records without identity: {anonymous[:3]}"
    # Every record, whichever run sent it (the one that put it, or a later one replaying it
    # from the spool), carries the identity the run that put it gave it.
    misnamed = [(s.number, s.identity) for s in stored if s.identity != put[s.number or 0]]
    assert not misnamed, f"records not under the identity they were put with: {misnamed[:3]}"
    numbers = Counter(s.number for s in stored)
    missing = sorted(durable - set(numbers))
    assert not missing, f"{len(missing)} durable records lost: {missing[:20]}"
    # One identity per record and one record per identity: a copy is the same record, sent
    # again under the identity it was first given (a replay keeps it).
    identities: dict[int | None, set[tuple[str, int] | None]] = defaultdict(set)
    owners: dict[tuple[str, int] | None, set[int | None]] = defaultdict(set)
    for s in stored:
        identities[s.number].add(s.identity)
        owners[s.identity].add(s.number)
    renamed = {n: i for n, i in identities.items() if len(i) > 1}
    assert not renamed, f"records sent under two identities: {list(renamed.items())[:3]}"
    shared = {i: n for i, n in owners.items() if len(n) > 1}
    assert not shared, f"identities given to two records: {list(shared.items())[:3]}"
    # The consumer's view: one Deduper per shard drops every copy.
    by_shard: dict[str, list[Any]] = defaultdict(list)
    for s in stored:
        by_shard[s.shard_id].append(s.record)
    once: Counter[int | None] = Counter()
    for records in by_shard.values():
        deduper = Deduper()
        fresh = deduper.filter(records)
        deduper.commit(fresh)
        once.update(number_of(r.data) for r in fresh)
    twice = {n: c for n, c in once.items() if c > 1}
    assert not twice, f"records left twice after the Deduper: {list(twice.items())[:5]}"
    assert durable <= set(once)
    return {
        "user_records_stored": len(stored),
        "distinct": len(numbers),
        "copies": len(stored) - len(numbers),
        "durable": len(durable),
    }


def identities(child: Child, first: int, count: int) -> dict[int, tuple[str, int]]:
    """The identity each record ``first`` … ``first + count - 1`` of ``child``'s run was put
    with: the run's id, and the record's place in its puts (none if it died before its start:
    it put nothing)."""
    started = child.statistics("started")
    if started is None:
        return {}
    return {first + n: (started["producer_id"], n) for n in range(count)}


def unresolved_left(directory: Path) -> int:
    """Records a start would replay (the spool read, not changed)."""
    return scan(str(directory), OsFiles(), repair=False).statistics.records_recovered


def new_stream(endpoint: str) -> str:
    stream = stream_name("spool-kill")

    async def create() -> None:
        async with admin_client(endpoint) as admin:
            await create_stream(admin, stream, SHARDS)

    anyio.run(create)
    return stream


# -- the kill loop ----------------------------------------------------------------------------


def test_every_durable_record_survives_kills_at_any_point(
    moto_endpoint: str, tmp_path: Path, children: Callable[[dict[str, Any]], Child]
) -> None:
    rng = random.Random(SEED)
    stream = new_stream(moto_endpoint)
    directory = tmp_path / "spool"
    put: dict[int, tuple[str, int]] = {}  # the identity each record was put with
    durable: set[int] = set()
    log: list[str] = []
    replayed = 0
    killed = 0
    first = 0
    kills: Counter[str] = Counter()
    copies_made = False  # a run died with a PutRecords answer unread
    torn = False  # the last run died in the middle of a write
    for iteration in range(ITERATIONS):
        plan = plan_for(
            moto_endpoint,
            stream,
            directory,
            first,
            RECORDS_PER_RUN,
            backend=("asyncio", "trio")[iteration % 2],
            fsync=("batch", "interval", "none")[iteration % 3],
            pause_ms=PAUSE_MS,
        )
        # Every other run is killed at a file operation, the operations in turn; the others
        # at a random moment, except after a torn write: then in the start's repair of it
        # (only a start that finds a torn tail truncates a segment).
        if torn:
            plan["kill"] = {"op": "truncate_path", "n": 1, "when": rng.choice(("before", "after"))}
            how = f"truncate_path#1 {plan['kill']['when']}"
            child = children(plan)
        elif iteration % 2:
            op, ways, most = KILL_POINTS[iteration // 2 % len(KILL_POINTS)]
            plan["kill"] = {"op": op, "n": rng.randint(1, most), "when": rng.choice(ways)}
            plan["kill"]["cut"] = rng.random()
            if op == "fsync" and plan["fsync"] == "none":
                plan["fsync"] = "batch"  # "none" never fsyncs
            how = f"{op}#{plan['kill']['n']} {plan['kill']['when']}"
            child = children(plan)
        else:
            child = children(plan)
            # A third of the moments counted from the spawn (start-up, recovery, the replay),
            # the rest from the start (puts, fsyncs, requests in flight).
            if rng.random() < 1 / 3:
                delay = rng.uniform(0.3, 2.0)
                how = f"{delay:.2f} s after the spawn"
            else:
                child.wait_for(lambda lines: bool(lines), WAIT)
                delay = rng.uniform(0.0, 0.8)
                how = f"{delay:.2f} s after the start"
            time.sleep(delay)
            child.kill()
        code = child.finish()
        torn = (
            code == -signal.SIGKILL and plan["kill"] is not None and plan["kill"]["op"] == "append"
        )
        put.update(identities(child, first, RECORDS_PER_RUN))
        durable |= child.durable()
        if code == -signal.SIGKILL:
            killed += 1
            kills[plan["kill"]["op"] if plan["kill"] else "timing"] += 1
            copies_made |= bool(plan["kill"]) and plan["kill"]["op"] == "request"
        else:
            assert code == 0, failure(child)
        started = child.statistics("started")
        if started is not None:
            replayed += started["records_recovered"]
        log.append(f"{iteration}: {plan['fsync']} {plan['backend']} kill {how} -> {code}")
        first += RECORDS_PER_RUN

    # A clean run drains what is left.
    drain = children(plan_for(moto_endpoint, stream, directory, first, BATCH))
    assert drain.finish() == 0, failure(drain)
    put.update(identities(drain, first, BATCH))
    durable |= drain.durable()

    print(*log, sep="\n")
    figures = check_stream(read_back(moto_endpoint, stream), put, durable)
    figures.update(
        iterations=ITERATIONS, killed=killed, replayed=replayed, seed=SEED, kills=dict(kills)
    )
    print(json.dumps(figures))
    assert unresolved_left(directory) == 0  # every delivered record acknowledged in the spool
    assert replayed > 0  # the identity check had records sent by another run than their own
    if copies_made:  # the Deduper had copies to drop
        assert figures["copies"] > 0
    assert killed >= ITERATIONS // 2, log  # the kills happened (not every run ran to its end)
    assert figures["durable"] >= RECORDS_PER_RUN, log


# -- damage between runs ----------------------------------------------------------------------


def records_by_segment(directory: Path) -> dict[Path, list[tuple[int, int, int]]]:
    """For each segment, ``(offset, end, number)`` of each record frame, in order."""
    found = {}
    for path in sorted(directory.iterdir()):
        if segment_number(path.name) is None:
            continue
        data = path.read_bytes()
        frames = walk(data, decode_header(data))
        found[path] = [
            (frame.offset, frame.end, number_of(frame.entry.data))
            for frame in frames
            if isinstance(frame.entry, SpoolRecord)
        ]
    return found  # type: ignore[return-value]


def test_damaged_segments_lose_only_what_was_damaged(
    moto_endpoint: str, tmp_path: Path, children: Callable[[dict[str, Any]], Child]
) -> None:
    rng = random.Random(SEED)
    stream = new_stream(moto_endpoint)
    directory = tmp_path / "spool"
    durable: set[int] = set()
    put: dict[int, tuple[str, int]] = {}
    count = 150
    # Two sessions that spool records, never send them, and die once they are durable.
    for run, backend in enumerate(("asyncio", "trio")):
        plan = plan_for(
            moto_endpoint,
            stream,
            directory,
            run * count,
            count,
            backend=backend,
            hold=True,
            segment_size_bytes=4096,
        )
        child = children(plan)
        assert child.finish() == -signal.SIGKILL, failure(child)
        assert child.durable() == set(range(run * count, (run + 1) * count)), failure(child)
        durable |= child.durable()
        put.update(identities(child, run * count, count))

    segments = {p: r for p, r in records_by_segment(directory).items() if len(r) >= 4}
    assert len(segments) >= 3, segments
    flipped, torn, headless = rng.sample(sorted(segments), 3)
    lost: set[int] = set()
    # A flipped byte in the body of a record in the middle: that frame and the rest of its
    # segment are lost.
    frames = segments[flipped]
    k = len(frames) // 2
    data = bytearray(flipped.read_bytes())
    offset, end, _ = frames[k]
    data[rng.randrange(offset + FRAME_HEAD, end)] ^= 0x10
    flipped.write_bytes(bytes(data))
    lost |= {number for _, _, number in frames[k:]}
    # A torn tail: the last frame cut in its middle.
    offset, end, number = segments[torn][-1]
    os.truncate(torn, rng.randrange(offset + 1, end))
    lost.add(number)
    # A flipped byte in a header: the whole segment is moved aside.
    data = bytearray(headless.read_bytes())
    data[rng.randrange(HEADER_BYTES)] ^= 0x01
    headless.write_bytes(bytes(data))
    lost |= {number for _, _, number in segments[headless]}

    # What a start will find (the storage layer, reading only).
    found = scan(str(directory), OsFiles(), repair=False).statistics
    assert (found.frames_lost, found.segments_moved_aside, found.torn_tails) == (2, 2, 1)
    assert found.records_recovered == len(durable - lost)

    drain = children(plan_for(moto_endpoint, stream, directory, 2 * count, BATCH))
    assert drain.finish() == 0, failure(drain)
    started = drain.statistics("started")
    assert started is not None
    assert started["frames_lost"] == 2  # the flipped record, the flipped header
    assert started["segments_moved_aside"] == 2
    assert started["bytes_lost"] == found.bytes_lost > 0
    assert started["records_recovered"] == len(durable - lost)
    aside = sorted(p.name for p in directory.iterdir() if CORRUPT_SUFFIX in p.name)
    assert aside == sorted([flipped.name + CORRUPT_SUFFIX, headless.name + CORRUPT_SUFFIX])

    durable |= drain.durable()
    put.update(identities(drain, 2 * count, BATCH))
    stored = read_back(moto_endpoint, stream)
    check_stream(stored, put, durable - lost)
    # Records of the damaged ranges were never sent, and are gone.
    assert not lost & {s.number for s in stored}
    assert unresolved_left(directory) == 0  # the replayed records were acknowledged

"""Streams that place records themselves (``AUTO``): the issue's table, measured where users
run the producer (issue 30).

``python -m bench.auto [--quick] [--only NAME ...] [--producer-src DIR] [--json PATH]``

Each cell starts its own throttling Kinesis (``aiokpl.testing._servers.moto_server`` with
``ShardLimits()``: moto's server in a process of its own, AWS's 1,000 records/s and 1 MiB/s per
shard, one second of burst), creates one on-demand stream, and runs **one** producer process:
a real ``Producer`` with its own aiobotocore client over HTTP, ``Config`` at its defaults but
the endpoint and dummy credentials. It puts 100-byte records (the first 8 bytes are the
record's index) over 997 partition keys, awaits every outcome, and writes one JSON line per
record: its attempts and, if it failed, its error code. The benchmark then reads the stream
back (every shard from ``TRIM_HORIZON``) and computes:

* **attempts per record** (from the producer's results) and records **failed**;
* **user records stored**: every copy, aggregates split (``aiokpl.aggregation.deaggregate``), no
  range check; **extra copies** = (stored - N) / N;
* records **a KCL consumer sees** (``aiokpl.testing.read_as_kcl``: an aggregate is kept whole
  only if every user record in it hashes into the shard holding it), distinct, and how many
  of the N are **missing** for it;
* **Kinesis records** stored, **user records per Kinesis record**, **wall time** (first put to
  last outcome, in the producer process).

The cells (the issue's):

1. ``AUTO 4 shards``: 20,000 records put as fast as ``put_record`` takes them;
2. ``AUTO 16 shards``: 10,000 records, the same way;
3. ``switch``: a ``USER_PARTITION_KEY`` stream of 4 shards offered 1,500 records/s for 12 s
   (paced); the benchmark switches it to ``AUTO`` at 4 s and back at 8 s, the producer never
   told;
4. ``keyed`` then ``keyless`` (each on a server of its own): 20,000 records on a
   ``USER_PARTITION_KEY`` stream of 4 shards, with their partition keys, then without any
   (``put_record(stream=..., data=...)``): user records per Kinesis record of each, and the
   spread of the keyless records over the shards (each shard's count against the mean, from
   the read-back). A producer that cannot put a record without a key (``TypeError``: aiokpl
   before it took them) has the cell reported as refused.

Targets (the issue's): AUTO cells ≤ 1.05 attempts a record, ≤ 1% extra copies, 0 failed,
0 missing for a KCL consumer; switch: 0 missing for a KCL consumer, ≤ 1% extra copies;
keyless: user records per Kinesis record ≥ 0.95× the keyed run's, every shard within 10% of
the mean. ``keyed`` is the keyless cell's reference, held to nothing itself.

``--quick`` shrinks the cells, same shapes: 4,000 and 2,000 records, a 6-second switch (at 2 s
and 4 s), 4,000 keyed and keyless. ``--producer-src DIR`` has the producer process import
aiokpl from another tree (an earlier commit's ``src/``); the server and the read-back always
run this tree's code. A full run takes about two minutes, mostly servers and processes
starting; the figures, but the wall times, are counts, which a noisy machine moves little.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._processes import (
    LineProcess,
    emit,
    local_client,
    local_config,
    processes,
    producer_environment,
    run_worker,
    spawn,
)
from .report import Row, ScenarioResult, format_table, machine

if TYPE_CHECKING:
    from aiokpl.aggregation import DeaggregatedRecord

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "bench" / "results" / "auto.json"
STREAM = "auto"
RECORD_BYTES = 100
INDEX_BYTES = 8  # each record's data starts with its index, in 8 decimal digits
KEYS = 997
AUTO = "AUTO"
BY_KEY = "USER_PARTITION_KEY"
# How long a producer may take past its cell's load to resolve every outcome (its records'
# TTL is 30 s by default) before it is killed and its missing results counted as failures.
WORKER_GRACE = 90.0


@dataclass(frozen=True)
class Targets:
    """What a cell is held to; ``None``: not held to that figure."""

    attempts_per_record: float | None = None
    extra_copies: float | None = None
    failed: int | None = None
    missing_for_kcl: int | None = None
    # keyless: user records per Kinesis record, at least this share of the keyed run's
    aggregation_of_keyed: float | None = None
    # keyless: every shard's count within this share of the mean
    spread: float | None = None


AUTO_TARGETS = Targets(attempts_per_record=1.05, extra_copies=0.01, failed=0, missing_for_kcl=0)
SWITCH_TARGETS = Targets(extra_copies=0.01, missing_for_kcl=0)
KEYLESS_TARGETS = Targets(aggregation_of_keyed=0.95, spread=0.10)


@dataclass(frozen=True)
class Cell:
    """One cell of the table.

    Attributes:
        name: as the issue's table names it.
        shards: the on-demand stream's shards.
        records: how many records the producer puts.
        strategy: the stream's record distribution strategy when created.
        rate: records offered per second (paced); ``None``: as fast as ``put_record`` takes
            them.
        switches: ``(seconds after the start, strategy)``: the benchmark switches the stream's
            strategy then (``UpdateStreamRecordDistributionStrategy``), the producer not told.
        keyless: the records are put without a partition key.
        targets: what the cell is held to.
    """

    name: str
    shards: int
    records: int
    strategy: str = AUTO
    rate: float | None = None
    switches: tuple[tuple[float, str], ...] = ()
    keyless: bool = False
    targets: Targets = Targets()

    @property
    def duration(self) -> float:
        """Seconds the load is offered for (0: as fast as it goes)."""
        return 0.0 if self.rate is None else self.records / self.rate


def cells(quick: bool = False) -> list[Cell]:
    """The issue's cells; ``quick``: smaller, same shapes."""
    scale = 5 if quick else 1
    seconds = 6.0 if quick else 12.0
    rate = 1500.0
    return [
        Cell("AUTO 4 shards", 4, 20_000 // scale, targets=AUTO_TARGETS),
        Cell("AUTO 16 shards", 16, 10_000 // scale, targets=AUTO_TARGETS),
        Cell(
            "switch",
            4,
            int(rate * seconds),
            BY_KEY,
            rate=rate,
            switches=((seconds / 3, AUTO), (2 * seconds / 3, BY_KEY)),
            targets=SWITCH_TARGETS,
        ),
        Cell("keyed", 4, 20_000 // scale, BY_KEY),
        Cell("keyless", 4, 20_000 // scale, BY_KEY, keyless=True, targets=KEYLESS_TARGETS),
    ]


# -- the producer process ----------------------------------------------------------------------


def record_data(index: int) -> bytes:
    """A record's 100 bytes: its index in 8 digits, then filler."""
    return b"%08d" % index + b"x" * (RECORD_BYTES - INDEX_BYTES)


def record_index(data: bytes) -> int | None:
    """The index :func:`record_data` wrote (``None``: not a record of this benchmark)."""
    head = data[:INDEX_BYTES]
    return int(head) if len(head) == INDEX_BYTES and head.isdigit() else None


def worker_main(argv: Sequence[str]) -> int:
    """``python -m bench.auto worker ...``: one producer putting one cell's records (also
    ``bench.service_life``'s producer: on another stream, backend, without aggregation)."""
    parser = argparse.ArgumentParser(prog="bench.auto worker")
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--rate", type=float, default=None, help="records/s, paced")
    parser.add_argument("--keyless", action="store_true")
    parser.add_argument("--stream", default=STREAM)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument(
        "--no-aggregation", action="store_true", help="Config(aggregation_enabled=False)"
    )
    parser.add_argument(
        "--counts-only",
        action="store_true",
        help="no line per record: the failures by code in the last line only",
    )
    args = parser.parse_args(argv)
    return run_worker(_worker, args)


async def _worker(args: argparse.Namespace) -> None:
    import anyio

    from aiokpl import Outcome, Producer, RecordResult

    changes: dict[str, Any] = {"aggregation_enabled": False} if args.no_aggregation else {}
    config = local_config(args.endpoint, **changes)
    stream = args.stream
    async with Producer(config) as producer:
        put_record = producer.put_record

        async def put(index: int) -> Outcome[RecordResult]:
            if args.keyless:
                return await put_record(stream=stream, data=record_data(index))
            return await put_record(
                stream=stream, partition_key=f"pk-{index % KEYS}", data=record_data(index)
            )

        emit({"ready": True})
        line = await anyio.to_thread.run_sync(sys.stdin.readline)
        start = float(line.split()[1])  # "go START": the wall-clock second to start at
        await anyio.sleep(max(0.0, start - time.time()))
        began = time.perf_counter()
        outcomes: list[Outcome[RecordResult]] = []
        put_at: list[float] = []
        try:
            # The first put alone: a producer that takes no record without a key refuses it.
            outcomes.append(await put(0))
        except TypeError as exc:
            if not args.keyless:
                raise
            emit({"refused": f"{type(exc).__name__}: {exc}"})
            return
        put_at.append(0.0)
        index = 1
        while index < args.records:
            if args.rate is None:
                due = args.records
            else:
                # Paced on the wall clock: what is due by now, caught up after a wait.
                due = min(args.records, int(args.rate * (time.perf_counter() - began)) + 1)
                if index >= due:
                    await anyio.sleep(0.005)
                    continue
            while index < due:
                outcomes.append(await put(index))
                put_at.append(time.perf_counter() - began)
                index += 1
        put_seconds = time.perf_counter() - began
        results = [await outcome for outcome in outcomes]
        resolved_seconds = time.perf_counter() - began
        # At once, before the lines below take their time: the moment the run ended.
        emit({"resolved": resolved_seconds})
        attempt_codes: Counter[str] = Counter(
            str(attempt.error_code)
            for result in results
            for attempt in result.attempts
            if not attempt.success
        )
        # One message of each error code, to say what the code meant here.
        attempt_messages: dict[str, str] = {}
        for result in results:
            for attempt in result.attempts:
                if not attempt.success:
                    attempt_messages.setdefault(
                        str(attempt.error_code), str(attempt.error_message)[:300]
                    )
        failure_codes = Counter(str(r.error_code) for r in results if not r.success)
        if not args.counts_only:
            lines = [
                json.dumps(
                    {
                        "i": i,
                        "a": len(result.attempts),
                        "e": None if result.success else str(result.error_code),
                        "t": round(at, 4),
                    }
                )
                for i, (result, at) in enumerate(zip(results, put_at, strict=True))
            ]
            sys.stdout.write("\n".join(lines) + "\n")
        streams = producer.statistics().streams
        emit(
            {
                "done": {
                    "put": len(outcomes),
                    "put_seconds": put_seconds,
                    "resolved_seconds": resolved_seconds,
                    "attempt_codes": dict(attempt_codes),
                    "attempt_messages": attempt_messages,
                    "failure_codes": dict(failure_codes),
                    # What the producer made of the stream (absent before it knew AUTO).
                    "streams": [
                        {
                            name: getattr(stream, name, None)
                            for name in (
                                "record_distribution",
                                "placed_by_service",
                                "retries",
                                "billed_kib",
                            )
                        }
                        for stream in streams
                    ],
                }
            }
        )


# -- the server side: the stream, the switches, the read-back ----------------------------------


async def create_stream(kinesis: Any, cell: Cell) -> None:
    """The cell's on-demand stream, with its initial strategy."""
    await kinesis.create_stream(
        StreamName=STREAM,
        ShardCount=cell.shards,
        StreamModeDetails={"StreamMode": "ON_DEMAND"},
        RecordDistributionStrategy=cell.strategy,
    )


async def switch(kinesis: Any, switches: Sequence[tuple[float, str]], start: float) -> list[float]:
    """Switch the stream's strategy at each ``(seconds after start, strategy)`` (wall clock);
    returns when each switch was answered, in seconds after ``start``."""
    import anyio

    summary = await kinesis.describe_stream_summary(StreamName=STREAM)
    arn = summary["StreamDescriptionSummary"]["StreamARN"]
    done: list[float] = []
    for at, strategy in switches:
        await anyio.sleep(max(0.0, start + at - time.time()))
        await kinesis.update_stream_record_distribution_strategy(
            StreamARN=arn, RecordDistributionStrategy=strategy
        )
        done.append(round(time.time() - start, 3))
    return done


@dataclass
class ReadBack:
    """What the stream holds: every Kinesis record with its shard, what a KCL consumer keeps,
    and the stream's open shards."""

    stored: list[tuple[str, dict[str, Any]]]
    kcl: list[tuple[str, DeaggregatedRecord]]
    shard_ids: list[str]


async def read_back(kinesis: Any) -> ReadBack:
    """Read the stream back as :func:`measure` needs it (call once the producer is done)."""
    from aiokpl.testing import read_as_kcl, read_stream

    stored = await read_stream(kinesis, STREAM)
    kcl = await read_as_kcl(kinesis, STREAM)
    shards = await kinesis.list_shards(StreamName=STREAM, ShardFilter={"Type": "AT_LATEST"})
    return ReadBack(stored, kcl, [shard["ShardId"] for shard in shards["Shards"]])


# -- the figures -------------------------------------------------------------------------------


@dataclass
class Spread:
    """How evenly user records lie over the shards, each shard's count against the mean.

    Attributes:
        counts: user records (every copy) by shard id, every open shard listed.
        above: the fullest shard's excess over the mean, a share of the mean.
        below: the emptiest shard's shortfall under the mean, a share of the mean.
        mean_deviation: the mean absolute deviation from the mean, a share of the mean.
    """

    counts: dict[str, int]
    above: float
    below: float
    mean_deviation: float

    @property
    def worst(self) -> float:
        return max(self.above, self.below)


def spread_of(counts: Mapping[str, int]) -> Spread:
    """The :class:`Spread` of per-shard ``counts`` (all zero, or none: no deviation)."""
    values = list(counts.values())
    mean = sum(values) / len(values) if values else 0.0
    if not mean:
        return Spread(dict(counts), 0.0, 0.0, 0.0)
    return Spread(
        dict(counts),
        above=max(values) / mean - 1.0,
        below=1.0 - min(values) / mean,
        mean_deviation=sum(abs(v - mean) for v in values) / len(values) / mean,
    )


@dataclass
class CellResult:
    """What one cell measured (the figures are those of the module's docstring)."""

    cell: Cell
    put: int = 0
    refused: str | None = None
    error: str | None = None
    attempts_per_record: float = 0.0
    attempts: dict[int, int] = field(default_factory=dict)  # attempts -> records
    attempt_codes: dict[str, int] = field(default_factory=dict)  # of the attempts that failed
    attempt_messages: dict[str, str] = field(default_factory=dict)  # one message of each code
    failed: int = 0
    failure_codes: dict[str, int] = field(default_factory=dict)
    user_records_stored: int = 0
    distinct_stored: int = 0
    extra_copies: float = 0.0
    kcl_seen: int = 0
    missing_for_kcl: int = 0
    # Of the records missing for a KCL consumer, how many were put in each second of the load.
    missing_for_kcl_by_second: dict[int, int] = field(default_factory=dict)
    kinesis_records: int = 0
    user_per_kinesis: float = 0.0
    wall_seconds: float = 0.0
    put_seconds: float = 0.0
    spread: Spread | None = None
    switched_at: list[float] = field(default_factory=list)
    producer_streams: list[dict[str, Any]] = field(default_factory=list)
    load_before: list[float] = field(default_factory=list)
    load_after: list[float] = field(default_factory=list)
    cell_seconds: float = 0.0


def measure(cell: Cell, lines: Sequence[Mapping[str, Any]], stored: ReadBack) -> CellResult:
    """A cell's figures from the producer's lines and what the stream holds.

    Records the producer put but reported no result for (it was killed) count as failed.
    """
    from aiokpl.aggregation import deaggregate

    result = CellResult(cell)
    for line in lines:
        if "error" in line:
            result.error = str(line["error"])
        if "refused" in line:
            result.refused = str(line["refused"])
    done = next((line["done"] for line in lines if "done" in line), None)
    per_record = [line for line in lines if "i" in line]
    result.put = done["put"] if done is not None else cell.records
    if result.refused is not None:
        result.put = 0
        return result
    if done is not None:
        result.wall_seconds = float(done["resolved_seconds"])
        result.put_seconds = float(done["put_seconds"])
        result.attempt_codes = dict(done["attempt_codes"])
        result.attempt_messages = dict(done.get("attempt_messages", {}))
        result.producer_streams = list(done["streams"])
    result.attempts = dict(sorted(Counter(int(line["a"]) for line in per_record).items()))
    total_attempts = sum(int(line["a"]) for line in per_record)
    result.attempts_per_record = total_attempts / len(per_record) if per_record else 0.0
    failures = Counter(str(line["e"]) for line in per_record if line["e"] is not None)
    unreported = result.put - len(per_record)
    if unreported:
        failures["no result (producer killed)"] += unreported
    result.failure_codes = dict(failures)
    result.failed = sum(failures.values())

    copies: Counter[int | None] = Counter()
    by_shard: Counter[str] = Counter(dict.fromkeys(stored.shard_ids, 0))
    for shard_id, record in stored.stored:
        for user in deaggregate(record):
            copies[record_index(user.data)] += 1
            by_shard[shard_id] += 1
    n = result.put
    result.user_records_stored = sum(copies.values())
    result.distinct_stored = len(set(copies) & set(range(n)))
    result.extra_copies = (result.user_records_stored - n) / n if n else 0.0
    seen = {record_index(user.data) for _, user in stored.kcl}
    wanted = set(range(n))
    result.kcl_seen = len(seen & wanted)
    missing = wanted - seen
    result.missing_for_kcl = len(missing)
    put_at = {int(line["i"]): float(line["t"]) for line in per_record}
    result.missing_for_kcl_by_second = dict(
        sorted(Counter(int(put_at.get(i, -1.0)) for i in missing).items())
    )
    result.kinesis_records = len(stored.stored)
    result.user_per_kinesis = (
        result.user_records_stored / result.kinesis_records if result.kinesis_records else 0.0
    )
    result.spread = spread_of(by_shard)
    return result


def verdicts(result: CellResult, keyed: CellResult | None = None) -> dict[str, bool | None]:
    """Each of the cell's targets met (``True``) or missed; ``None``: it cannot be judged
    (the keyless cell without a keyed run to compare with). A refused cell, or one whose
    producer failed, misses every target it has."""
    targets = result.cell.targets
    judged: dict[str, bool | None] = {}
    broken = result.refused is not None or result.error is not None
    if targets.attempts_per_record is not None:
        judged["attempts"] = not broken and (
            result.attempts_per_record <= targets.attempts_per_record
        )
    if targets.extra_copies is not None:
        judged["extra copies"] = not broken and result.extra_copies <= targets.extra_copies
    if targets.failed is not None:
        judged["failed"] = not broken and result.failed <= targets.failed
    if targets.missing_for_kcl is not None:
        judged["missing for KCL"] = not broken and (
            result.missing_for_kcl <= targets.missing_for_kcl
        )
    if targets.aggregation_of_keyed is not None:
        if broken:
            judged["aggregation"] = False
        elif keyed is None or keyed.refused is not None or not keyed.user_per_kinesis:
            judged["aggregation"] = None
        else:
            judged["aggregation"] = (
                result.user_per_kinesis >= targets.aggregation_of_keyed * keyed.user_per_kinesis
            )
    if targets.spread is not None:
        judged["spread"] = (
            not broken and result.spread is not None and result.spread.worst <= targets.spread
        )
    return judged


def _keyed_of(results: Iterable[CellResult]) -> CellResult | None:
    return next((r for r in results if r.cell.name == "keyed" and r.error is None), None)


def verdict_text(judged: Mapping[str, bool | None]) -> str:
    """``met``, ``missed: …``, or ``info`` (held to nothing)."""
    if all(ok is None for ok in judged.values()):
        return "info"
    missed = [name for name, ok in judged.items() if ok is False]
    return "met" if not missed else "missed: " + ", ".join(missed)


# -- one cell ----------------------------------------------------------------------------------


def _worker_arguments(cell: Cell, endpoint: str) -> list[str]:
    return [
        f"--endpoint={endpoint}",
        f"--records={cell.records}",
        *([] if cell.rate is None else [f"--rate={cell.rate}"]),
        *(["--keyless"] if cell.keyless else []),
    ]


def run_cell(cell: Cell, producer_src: Path | None = None, log: Any = sys.stderr) -> CellResult:
    """Run one cell: its own server and producer process, both stopped on return."""
    import anyio

    from aiokpl.testing._servers import ShardLimits, moto_server

    load_before = machine()["load_average"]
    began = time.perf_counter()

    async def prepare(endpoint: str) -> None:
        async with local_client(endpoint) as kinesis:
            await create_stream(kinesis, cell)

    async def switches(endpoint: str, start: float) -> list[float]:
        async with local_client(endpoint) as kinesis:
            return await switch(kinesis, cell.switches, start)

    async def read(endpoint: str) -> ReadBack:
        async with local_client(endpoint) as kinesis:
            return await read_back(kinesis)

    switched: list[float] = []
    with moto_server(limits=ShardLimits()) as endpoint:
        anyio.run(prepare, endpoint)
        with processes() as started:
            worker = spawn(
                LineProcess,
                "bench.auto",
                "producer",
                _worker_arguments(cell, endpoint),
                started,
                cwd=ROOT,
                env=producer_environment(ROOT, producer_src),
            )
            worker.wait_ready(timeout=90.0)
            start = time.time() + 0.2
            worker.send(f"go {start}")
            if cell.switches:
                switched = anyio.run(switches, endpoint, start)
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.process.wait(timeout=max(1.0, start + cell.duration + WORKER_GRACE))
        if worker.thread is not None:
            worker.thread.join(timeout=10.0)
        refused = any("refused" in line for line in worker.lines)
        stored = ReadBack([], [], []) if refused else anyio.run(read, endpoint)
    result = measure(cell, worker.lines, stored)
    result.switched_at = switched
    result.load_before = load_before
    result.load_after = machine()["load_average"]
    result.cell_seconds = time.perf_counter() - began
    print(f"auto: {describe(result)}", file=log, flush=True)
    return result


# -- output ------------------------------------------------------------------------------------


def describe(result: CellResult) -> str:
    """One line: the cell and its figures."""
    name = result.cell.name
    if result.refused is not None:
        return f"{name}: refused by the producer ({result.refused})"
    if result.error is not None:
        return f"{name}: the producer failed ({result.error})"
    return (
        f"{name}: {result.put:,} put, {result.attempts_per_record:.3f} attempts a record, "
        f"{result.failed} failed; {result.user_records_stored:,} user records stored "
        f"({result.extra_copies:+.2%} extra copies); a KCL consumer sees {result.kcl_seen:,} "
        f"({result.missing_for_kcl:,} missing); {result.kinesis_records:,} Kinesis records, "
        f"{result.user_per_kinesis:.1f} user records each; {result.wall_seconds:.1f} s"
    )


def _with(text: str, target: str, ok: bool | None) -> str:
    if ok is None:
        return text
    return f"{text} ({target}: {'pass' if ok else 'FAIL'})"


def table(results: Sequence[CellResult], label: str = "") -> str:
    """A Markdown table: one line per cell, each figure with its target and verdict."""
    keyed = _keyed_of(results)
    lines = [
        "| cell | attempts / record | failed | user records stored (extra copies) "
        "| KCL consumer sees (missing) | Kinesis records | user records / Kinesis record "
        "| spread over shards (max / min / mean dev.) | wall | targets |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for result in results:
        judged = verdicts(result, keyed)
        name = f"{label}{result.cell.name}"
        if result.refused is not None or result.error is not None:
            what = "refused" if result.refused is not None else "failed"
            why = result.refused or result.error
            lines.append(f"| {name} | {what}: {why} | | | | | | | | {verdict_text(judged)} |")
            continue
        targets = result.cell.targets
        spread = result.spread
        aggregation = f"{result.user_per_kinesis:.1f}"
        if keyed is not None and keyed.user_per_kinesis and targets.aggregation_of_keyed:
            aggregation += f" ({result.user_per_kinesis / keyed.user_per_kinesis:.2f}× keyed)"
        columns = [
            _with(
                f"{result.attempts_per_record:.3f}",
                f"≤ {targets.attempts_per_record}",
                judged.get("attempts"),
            ),
            _with(f"{result.failed:,}", "0", judged.get("failed")),
            _with(
                f"{result.user_records_stored:,} ({result.extra_copies:+.2%})",
                f"≤ {targets.extra_copies or 0:.0%}",
                judged.get("extra copies"),
            ),
            _with(
                f"{result.kcl_seen:,} ({result.missing_for_kcl:,})",
                "0 missing",
                judged.get("missing for KCL"),
            ),
            f"{result.kinesis_records:,}",
            _with(
                aggregation,
                f"≥ {targets.aggregation_of_keyed or 0:g}× keyed",
                judged.get("aggregation"),
            ),
            "-"
            if spread is None
            else _with(
                f"+{spread.above:.1%} / -{spread.below:.1%} / {spread.mean_deviation:.1%}",
                f"≤ {targets.spread or 0:.0%}",
                judged.get("spread"),
            ),
            f"{result.wall_seconds:.1f} s",
            verdict_text(judged),
        ]
        lines.append(f"| {name} | " + " | ".join(columns) + " |")
    return "\n".join(lines)


def rows(results: Sequence[CellResult]) -> list[Row]:
    """The rows of ``python -m bench``'s table: each figure, its target, its verdict."""
    keyed = _keyed_of(results)
    found: list[Row] = []
    for result in results:
        cell = result.cell
        name = f"auto/{cell.name}"
        judged = verdicts(result, keyed)
        targets = cell.targets
        if result.refused is not None or result.error is not None:
            what = "refused" if result.refused is not None else "producer failed"
            found.append(
                Row(
                    name,
                    f"{what}: {result.refused or result.error}",
                    ", ".join(judged) or "runs",
                    None,
                    "",
                    False if judged else None,
                )
            )
            continue
        codes = ", ".join(f"{code} {n:,}" for code, n in result.attempt_codes.items())
        found += [
            Row(
                name,
                f"{result.put:,} records, {result.attempts_per_record:.3f} attempts a record "
                f"(by attempts: {result.attempts}; failed attempts: {codes or 'none'})",
                _target(targets.attempts_per_record, "≤ {:g} attempts a record"),
                result.attempts_per_record,
                "attempts/record",
                judged.get("attempts"),
            ),
            Row(
                name,
                f"{result.failed:,} failed {result.failure_codes or ''}".rstrip(),
                _target(targets.failed, "{} failed"),
                None,
                "",
                judged.get("failed"),
            ),
            Row(
                name,
                f"{result.user_records_stored:,} user records stored (every copy, no range "
                f"check), {result.distinct_stored:,} distinct: {result.extra_copies:+.2%} "
                "extra copies",
                _target(targets.extra_copies, "≤ {:.0%} extra copies"),
                result.extra_copies,
                "extra copies",
                judged.get("extra copies"),
            ),
            Row(
                name,
                f"a KCL consumer sees {result.kcl_seen:,} distinct, "
                f"{result.missing_for_kcl:,} missing"
                + (f" (switched at {result.switched_at} s)" if result.switched_at else ""),
                _target(targets.missing_for_kcl, "{} missing"),
                None,
                "",
                judged.get("missing for KCL"),
            ),
            Row(
                name,
                f"{result.kinesis_records:,} Kinesis records stored, "
                f"{result.user_per_kinesis:.1f} user records each; all resolved in "
                f"{result.wall_seconds:.1f} s (load {result.load_before[0]:.1f})",
                _target(
                    targets.aggregation_of_keyed, "≥ {:g}× the keyed run's user records/record"
                ),
                None
                if keyed is None or not targets.aggregation_of_keyed
                else result.user_per_kinesis / keyed.user_per_kinesis,
                "of keyed" if targets.aggregation_of_keyed else "",
                judged.get("aggregation"),
            ),
        ]
        if targets.spread is not None and result.spread is not None:
            spread = result.spread
            found.append(
                Row(
                    name,
                    f"user records by shard {sorted(spread.counts.values())}: fullest "
                    f"+{spread.above:.1%}, emptiest -{spread.below:.1%}, mean deviation "
                    f"{spread.mean_deviation:.1%} of the mean",
                    _target(targets.spread, "every shard within {:.0%} of the mean"),
                    spread.worst,
                    "worst shard off the mean",
                    judged.get("spread"),
                )
            )
    return found


def _target(value: float | None, text: str) -> str:
    return "info" if value is None else text.format(value)


def _document(result: CellResult, keyed: CellResult | None) -> dict[str, Any]:
    return {
        **asdict(result),
        "name": result.cell.name,
        "verdicts": verdicts(result, keyed),
    }


def write_json(results: Sequence[CellResult], path: Path, meta: Mapping[str, Any]) -> None:
    """Every figure of every cell, with the run's ``meta``, to ``path``."""
    keyed = _keyed_of(results)
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"meta": dict(meta), "cells": [_document(r, keyed) for r in results]}
    path.write_text(json.dumps(document, indent=1, default=str) + "\n")


# -- `python -m bench` -------------------------------------------------------------------------


def run(quick: bool, http: bool) -> ScenarioResult:
    """The ``auto`` scenario of ``python -m bench``: every cell (smaller with ``quick``)."""
    del http  # always over HTTP: the producer is a process of its own
    results = [run_cell(cell) for cell in cells(quick)]
    keyed = _keyed_of(results)
    return ScenarioResult(
        "auto", rows=rows(results), details={"cells": [_document(r, keyed) for r in results]}
    )


# -- command line ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["worker"]:
        return worker_main(arguments[1:])
    names = [cell.name for cell in cells()]
    parser = argparse.ArgumentParser(
        prog="python -m bench.auto",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="smaller cells, same shapes")
    parser.add_argument("--only", nargs="+", choices=names, metavar="NAME", default=None)
    parser.add_argument(
        "--producer-src",
        type=Path,
        default=None,
        metavar="DIR",
        help="the producer process imports aiokpl from this src directory (e.g. a git "
        "worktree of an earlier commit's src/), to compare two versions on one server",
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args(arguments)
    producer_src = None if args.producer_src is None else args.producer_src.resolve()
    label = "this tree" if producer_src is None else str(producer_src)
    print(f"producer process imports aiokpl from {label}", flush=True)
    chosen = [cell for cell in cells(args.quick) if args.only is None or cell.name in args.only]
    meta: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "producer_src": None if producer_src is None else str(producer_src),
        "quick": args.quick,
        "machine_before": machine(),
    }
    results = []
    for index, cell in enumerate(chosen, 1):
        print(f"auto: cell {index}/{len(chosen)}: {cell.name} …", file=sys.stderr, flush=True)
        results.append(run_cell(cell, producer_src))
    meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    meta["machine_after"] = machine()
    print(format_table([ScenarioResult("auto", rows=rows(results))]))
    print()
    print(table(results))
    write_json(results, args.json, meta)
    print(f"\nfigures written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

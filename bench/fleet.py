"""Many producer processes on one stream, as deployments run them (issue 20).

``python -m bench.fleet [--full | --preset NAME | matrix options] [--quick] [--png PATH]
[--json PATH]``

Each cell starts the throttling Kinesis (``aiokpl.testing._servers.moto_server`` with
``ShardLimits``: moto's server in a process of its own, per-shard token buckets of records and
bytes, one second of burst, AWS's per-record ``ProvisionedThroughputExceededException``) and N
producer **processes**, each a real ``Producer`` with its own aiobotocore client over HTTP,
``Config`` at its defaults except what the cell states. The set-up of the issue: 2 shards at
250 records/s each (so 500 records/s of capacity), 100-byte records with distinct partition
keys, ``record_ttl_ms`` 10 s, 40 s per cell, the producers together offering a multiple of the
capacity and each awaiting ``put_record`` (the default back-pressure).

A cell's axes (``Cell``):

* ``producers``: 4 or 8;
* ``offered``: 2× or 5× the stream's capacity, in user records, shared evenly;
* ``limit``: ``matched`` sets each producer's ``rate_limit_records_per_sec_per_shard`` to the
  server's 250; ``default`` leaves it at the ``Config`` default (1,000, above the server's: a
  shard shared with writers a producer cannot see);
* ``aggregation``: on or off (``aggregation_enabled``). With aggregation on, a shard is limited
  by its bytes, not its records (an aggregate holds many user records): those cells scale AWS's
  byte limits down by 16, as the record limits are scaled down by 4: the server takes 64 KiB/s
  per shard (1 MiB/16) with one second of burst, the producers aggregate up to 3,200 bytes
  (``aggregation_max_size``, 51,200/16, so an aggregate is a twentieth of a second of a shard,
  as on AWS), and ``matched`` also sets ``rate_limit_bytes_per_sec_per_shard`` to 64 KiB. Their
  capacity, in user records, is the byte limit over a user record's share of an aggregate
  (about 124 bytes: computed with the encoder, see :func:`user_record_bytes`);
* ``coordination``: ``off``; ``inside``: ``aiokpl.coordination`` with a ``DynamoDBStore`` on
  the same moto server, interval 1 s, ``shard_max_records_per_sec`` = 250, the summarizer in
  producer 0 (``summarize=True``); ``process``: the same with ``aiokpl coordinate`` as its own
  process;
* ``churn``: at half time the last producer is killed (SIGTERM: gone at once, its report stays
  until stale) and a new one starts.

Measured by the **server** (its per-second counts at ``/_local/throughput``, never the
producers' own accounting), per cell:

* **delivered**: user records stored in the steady window (from 12 s; 8 s with ``--quick``)
  over the stream's capacity for the window (in user records; with aggregation, from the byte
  limit, above);
* **throttled**: Kinesis records throttled over Kinesis records sent, in the window;
* **worst second**: the largest share of Kinesis records throttled in one second after
  warm-up (the window's start);
* with churn, **recovery**: seconds after the swap until every later 3-second span is within
  the cell's targets again (``None``: never before the end);
* for information, from the producers' results: records that expired, the machine's load.

Targets (issue 20): without coordination ≥ 90% delivered, ≤ 5% throttled, no second over 20%
throttled; with coordination ≥ 97% delivered, ≤ 1% throttled, back within 10 s of a swap.
Cells whose producers keep the default limit are held to them only with coordination.

Cost in wall time: about 40 s of phase plus 5-10 s of start-up per cell; ``--full`` is 51 cells
(about 45 minutes); ``--quick`` phases are 20 s. The figures are real time on a shared
machine: compare runs made side by side, and read the load averages printed with them.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from ._processes import (
    REGION,
    LineProcess,
    emit,
    local_client,
    local_config,
    processes,
    producer_environment,
    spawn,
)

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "bench" / "results" / "fleet.json"
STREAM = "fleet"
SHARDS = 2
SHARD_RATE = 250.0
RECORD_BYTES = 100
# Aggregation cells: AWS's byte limits scaled down by 16 (see the module's docstring).
BYTE_SCALE = 16
SHARD_BYTES = 1024 * 1024 / BYTE_SCALE
AGGREGATE_BYTES = 51_200 // BYTE_SCALE
KEY_SAMPLE = "0123abcd-12345"  # a worker's partition keys: 8 hex digits, "-", the index
TTL_MS = 10_000
GROUP = "fleet"
COORDINATIONS = ("off", "inside", "process")
LIMITS = ("matched", "default")


@dataclass(frozen=True)
class Targets:
    delivered: float
    throttled: float
    worst_second: float
    recovery: float


WITHOUT = Targets(delivered=0.90, throttled=0.05, worst_second=0.20, recovery=10.0)
WITH = Targets(delivered=0.97, throttled=0.01, worst_second=0.20, recovery=10.0)


@dataclass(frozen=True)
class Cell:
    """One cell of the matrix: what differs from the issue's set-up."""

    producers: int = 4
    offered: float = 2.0
    limit: str = "matched"
    aggregation: bool = False
    coordination: str = "off"
    churn: bool = False
    duration: float = 40.0
    window_from: float = 12.0
    # The server's records/s per shard when not SHARD_RATE: a control (a server far above the
    # producers' limit shows what they deliver when the server is not the limit).
    server_rate: float | None = None

    @property
    def name(self) -> str:
        return (
            f"{self.producers}p {self.offered:g}x limit={self.limit} "
            f"agg={'on' if self.aggregation else 'off'} coord={self.coordination}"
            f"{' churn' if self.churn else ''}"
            f"{'' if self.server_rate is None else f' server={self.server_rate:g}/s'}"
        )

    @property
    def capacity(self) -> float:
        """The stream's user records per second: by records, or with aggregation by bytes."""
        if self.aggregation:
            return SHARDS * SHARD_BYTES / user_record_bytes()
        return SHARDS * SHARD_RATE

    @property
    def swap_at(self) -> float | None:
        return self.duration / 2 if self.churn else None

    @property
    def targets(self) -> Targets | None:
        """The issue's targets for this cell; ``None``: information only."""
        if self.coordination != "off":
            return WITH
        return WITHOUT if self.limit == "matched" else None


@functools.cache
def user_record_bytes() -> float:
    """What one of the workers' user records costs a shard inside a full aggregate, in bytes:
    its share of the aggregate (framing, its partition key in the key table, its data) and of
    the aggregate's own partition key, as the server counts them (data plus key)."""
    from aiokpl.aggregation import encode

    records = [(f"{KEY_SAMPLE[:-5]}{i:05d}", b"x" * RECORD_BYTES) for i in range(200)]
    count = 1
    while count < len(records) and len(encode(records[: count + 1])) <= AGGREGATE_BYTES:
        count += 1
    return (len(encode(records[:count])) + len(KEY_SAMPLE)) / count


# -- a producer process ------------------------------------------------------------------------


def worker_main(argv: Sequence[str]) -> int:
    """``python -m bench.fleet worker ...``: one producer offering a steady load."""
    parser = argparse.ArgumentParser(prog="bench.fleet worker")
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--rate", type=float, required=True, help="user records/s offered")
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--limit", type=float, default=None)
    parser.add_argument("--byte-limit", type=float, default=None)
    parser.add_argument("--aggregation-max-size", type=int, default=None)
    parser.add_argument("--shard-bytes", type=float, default=None, help="coordination's")
    parser.add_argument("--aggregation", action="store_true")
    parser.add_argument("--table", default=None, help="coordinate through this DynamoDB table")
    parser.add_argument("--summarize", action="store_true")
    args = parser.parse_args(argv)
    import anyio

    anyio.run(_worker, args)
    return 0


async def _worker(args: argparse.Namespace) -> None:
    import anyio

    from aiokpl import Producer
    from aiokpl._kinesis import create_client
    from aiokpl.coordination import Coordination, DynamoDBStore

    changes: dict[str, Any] = {
        "aggregation_enabled": args.aggregation,
        "record_ttl_ms": TTL_MS,
    }
    if args.limit is not None:
        changes["rate_limit_records_per_sec_per_shard"] = args.limit
    if args.byte_limit is not None:
        changes["rate_limit_bytes_per_sec_per_shard"] = args.byte_limit
    if args.aggregation_max_size is not None:
        changes["aggregation_max_size"] = args.aggregation_max_size
    config = local_config(args.endpoint, **changes)
    async with contextlib.AsyncExitStack() as stack:
        coordination = None
        if args.table is not None:
            client = await stack.enter_async_context(create_client(config, "dynamodb"))
            coordination = Coordination(
                store=DynamoDBStore(client, args.table, GROUP),
                interval=1.0,
                shard_max_records_per_sec=SHARD_RATE,
                **(
                    {}
                    if args.shard_bytes is None
                    else {"shard_max_bytes_per_sec": args.shard_bytes}
                ),
                summarize=args.summarize,
            )
        producer = await stack.enter_async_context(Producer(config, coordination=coordination))
        codes: Counter[str] = Counter()

        def tally(outcome: Any) -> None:
            result = outcome.result()
            codes["delivered" if result.success else str(result.error_code)] += 1

        emit({"ready": True})
        line = await anyio.to_thread.run_sync(sys.stdin.readline)
        start = float(line.split()[1])  # "go START": wall-clock second to start at
        await anyio.sleep(max(0.0, start - time.time()))
        prefix = uuid.uuid4().hex[:8]
        data = b"x" * RECORD_BYTES
        index = 0
        owed = 0.0
        last = time.monotonic()
        next_line = start + 1.0
        while (now := time.time()) < start + args.duration:
            clock = time.monotonic()
            # What is owed since the last pass, never more than a second of it: a producer held
            # back by its back-pressure does not make up for it in one burst.
            owed = min(owed + args.rate * (clock - last), args.rate)
            last = clock
            while owed >= 1.0:
                owed -= 1.0
                index += 1
                outcome = await producer.put_record(
                    stream=STREAM, partition_key=f"{prefix}-{index}", data=data
                )
                outcome.add_done_callback(tally)
            if now >= next_line:
                next_line += 1.0
                streams = producer.statistics().streams
                rates = (
                    {k[-3:]: round(v[0]) for k, v in streams[0].rates_by_shard.items()}
                    if streams
                    else {}
                )
                emit({"t": now, "put": index, "codes": dict(codes), "rates": rates})
            await anyio.sleep(0.01)
        emit({"final": {"put": index, **codes}, "t": time.time()})
        # Leave at once: the cell is over, and a flush of a congested producer could take up
        # to its TTL; what is still pending is neither delivered nor expired yet.
        sys.stdout.flush()
        os._exit(0)


# -- processes ---------------------------------------------------------------------------------


class _Process(LineProcess):
    """A producer process of this benchmark."""

    def go(self, start: float) -> None:
        self.send(f"go {start}")

    def codes_at(self, at: float) -> Counter[str]:
        """Its outcome counts as of its last line at or before ``at`` (wall clock)."""
        codes: Counter[str] = Counter()
        for line in self.lines:
            if "codes" in line and line["t"] <= at:
                codes = Counter(line["codes"])
        return codes


# ``producer_src`` (``--producer-src``): the producer processes (workers, ``aiokpl
# coordinate``) import aiokpl from this source tree instead, so that two versions of the
# producer are measured against the same server side by side (the server always runs this
# tree's code).


_processes = processes


def _spawn(
    name: str, arguments: list[str], into: list[_Process], producer_src: Path | None
) -> _Process:
    env = producer_environment(ROOT, producer_src)
    return spawn(_Process, "bench.fleet", name, arguments, into, cwd=ROOT, env=env)


def _summarizer(endpoint: str, table: str, into: list[_Process], producer_src: Path | None) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiokpl",
            "coordinate",
            "--dynamodb",
            table,
            "--group",
            GROUP,
            "--interval=1",
            f"--region={REGION}",
            f"--endpoint-url={endpoint}",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
        env=producer_environment(ROOT, producer_src),
    )
    into.append(_Process("summarizer", process))


# -- measuring ---------------------------------------------------------------------------------


@dataclass
class CellResult:
    """What one cell measured; the series are per second from the cell's start."""

    cell: Cell
    capacity: float
    delivered: float
    throttled: float
    worst_second: float
    worst_second_at: int | None
    recovery: float | None
    expired: int
    put: int
    delivered_per_second: list[int]
    throttled_per_second: list[int]
    delivered_user_per_second: list[int]
    load_before: list[float]
    load_after: list[float]
    # The server process's CPU time over the cell's wall time (1.0 = one whole core).
    server_cpu: float | None = None

    @property
    def verdicts(self) -> dict[str, bool | None]:
        """Each target's pass / fail (``None``: the cell is held to no target)."""
        targets = self.cell.targets
        if targets is None:
            return {"delivered": None, "throttled": None, "worst second": None}
        verdicts: dict[str, bool | None] = {
            "delivered": self.delivered >= targets.delivered,
            "throttled": self.throttled <= targets.throttled,
            "worst second": self.worst_second <= targets.worst_second,
        }
        if self.cell.churn:
            verdicts["recovery"] = self.recovery is not None and self.recovery <= targets.recovery
        return verdicts


def series_of(
    rows: Sequence[dict[str, Any]], first: int, seconds: int, stream: str = STREAM
) -> dict[str, list[int]]:
    """The server's per-second rows of ``stream`` as lists of ``seconds`` from ``first`` on."""
    series = {key: [0] * seconds for key in ("delivered", "throttled", "delivered_user_records")}
    for row in rows:
        offset = int(row["second"]) - first
        if row["stream"] == stream and 0 <= offset < seconds:
            for key, values in series.items():
                values[offset] += int(row[key])
    return series


def throttled_share(delivered: int, throttled: int) -> float:
    sent = delivered + throttled
    return throttled / sent if sent else 0.0


def recovery_after(
    users: Sequence[int],
    delivered: Sequence[int],
    throttled: Sequence[int],
    capacity: float,
    swap: int,
    targets: Targets,
    span: int = 3,
) -> float | None:
    """Seconds after ``swap`` from which every ``span``-second stretch to the end is within
    ``targets`` (delivered and throttled); ``None`` if the last stretch is not."""
    end = len(users)
    good_from: int | None = None
    for second in range(swap, end - span + 1):
        stored = sum(users[second : second + span])
        share = throttled_share(
            sum(delivered[second : second + span]), sum(throttled[second : second + span])
        )
        within = stored >= targets.delivered * capacity * span and share <= targets.throttled
        if within and good_from is None:
            good_from = second
        elif not within:
            good_from = None
    return None if good_from is None else float(good_from - swap)


# ``--trace``: each producer's per-second lines (its outcome counts and its rate per shard, as
# its statistics give them) are appended here, one JSON line per cell.
_TRACE: Path | None = None


def _write_trace(path: Path, cell: Cell, start: float, producers: Sequence[_Process]) -> None:
    lines = [[line for line in p.lines if "rates" in line] for p in producers]
    with path.open("a") as out:
        out.write(json.dumps({"cell": cell.name, "start": start, "producers": lines}) + "\n")


def measure(
    cell: Cell,
    rows: Sequence[dict[str, Any]],
    first: int,
    producers: Sequence[_Process],
    start: float,
    loads: tuple[list[float], list[float]],
) -> CellResult:
    """A cell's figures from the server's rows (``first``: the wall-clock second it started)."""
    seconds = int(cell.duration)
    series = series_of(rows, first, seconds)
    delivered, throttled = series["delivered"], series["throttled"]
    users = series["delivered_user_records"]
    low = int(cell.window_from)
    capacity = cell.capacity
    window_users = sum(users[low:])
    worst, worst_at = 0.0, None
    for second in range(low, seconds):
        share = throttled_share(delivered[second], throttled[second])
        if share > worst:
            worst, worst_at = share, second
    recovery = None
    targets = cell.targets or WITHOUT
    if cell.swap_at is not None:
        recovery = recovery_after(users, delivered, throttled, capacity, int(cell.swap_at), targets)
    expired = sum(
        p.codes_at(start + seconds)["Expired"] - p.codes_at(start + low)["Expired"]
        for p in producers
    )
    put = sum(max((line.get("put", 0) for line in p.lines), default=0) for p in producers)
    if _TRACE is not None:
        _write_trace(_TRACE, cell, start, producers)
    return CellResult(
        cell=cell,
        capacity=capacity,
        delivered=window_users / (capacity * (seconds - low)),
        throttled=throttled_share(sum(delivered[low:]), sum(throttled[low:])),
        worst_second=worst,
        worst_second_at=worst_at,
        recovery=recovery,
        expired=expired,
        put=put,
        delivered_per_second=delivered,
        throttled_per_second=throttled,
        delivered_user_per_second=users,
        load_before=loads[0],
        load_after=loads[1],
    )


# -- one cell ----------------------------------------------------------------------------------


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


async def _prepare(endpoint: str, table: str | None) -> None:
    from aiokpl.coordination import DynamoDBStore

    async with local_client(endpoint) as kinesis:
        await kinesis.create_stream(StreamName=STREAM, ShardCount=SHARDS)
    if table is not None:
        async with local_client(endpoint, "dynamodb") as dynamodb:
            await DynamoDBStore(dynamodb, table, GROUP).create_table()


def run_cell(cell: Cell, log: Any = sys.stderr, producer_src: Path | None = None) -> CellResult:
    """Run one cell: its own server, producers and summarizer, all stopped on return; with
    ``producer_src``, the producer processes import aiokpl from that tree."""
    import anyio

    from aiokpl.testing._servers import ShardLimits, moto_server, throughput

    loads_before = _load()
    limits = ShardLimits(
        records_per_second=cell.server_rate or SHARD_RATE,
        **({"bytes_per_second": SHARD_BYTES} if cell.aggregation else {}),
    )
    with moto_server(limits=limits) as endpoint:
        table = None if cell.coordination == "off" else f"fleet-{uuid.uuid4().hex[:8]}"
        anyio.run(_prepare, endpoint, table)
        rate = cell.offered * cell.capacity / cell.producers
        common = [f"--endpoint={endpoint}", f"--rate={rate}"]
        if cell.limit == "matched":
            common.append(f"--limit={SHARD_RATE}")
            if cell.aggregation:
                common.append(f"--byte-limit={SHARD_BYTES}")
        if cell.aggregation:
            common += ["--aggregation", f"--aggregation-max-size={AGGREGATE_BYTES}"]
            if table is not None:
                common.append(f"--shard-bytes={SHARD_BYTES}")
        if table is not None:
            common.append(f"--table={table}")
        with _processes() as procs:
            if cell.coordination == "process":
                assert table is not None
                _summarizer(endpoint, table, procs, producer_src)
            producers = [
                _spawn(
                    f"p{i}",
                    [
                        *common,
                        f"--duration={cell.duration}",
                        *(["--summarize"] if i == 0 and cell.coordination == "inside" else []),
                    ],
                    procs,
                    producer_src,
                )
                for i in range(cell.producers)
            ]
            joiner = None
            swap_at = cell.swap_at
            if swap_at is not None:
                joiner = _spawn(
                    "joiner",
                    [*common, f"--duration={cell.duration - swap_at}"],
                    procs,
                    producer_src,
                )
            for item in [*producers, *([joiner] if joiner else [])]:
                item.wait_ready(timeout=90.0)
            cpu_before = throughput(endpoint)["cpu_seconds"]
            # Start on a whole second of the wall clock, which the server counts by.
            start = float(math.ceil(time.time()) + 1)
            for item in producers:
                item.go(start)
            if joiner is not None and swap_at is not None:
                joiner.go(start + swap_at)
                time.sleep(max(0.0, start + swap_at - time.time()))
                producers[-1].process.send_signal(signal.SIGTERM)  # gone at once, no clean-up
            deadline = start + cell.duration + 30.0
            for item in [*producers, *([joiner] if joiner else [])]:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    item.process.wait(timeout=max(1.0, deadline - time.time()))
                if item.thread is not None:
                    item.thread.join(timeout=5.0)
            report = throughput(endpoint)
            elapsed = time.time() - start
    everyone = [*producers, *([joiner] if joiner else [])]
    result = measure(cell, report["series"], int(start), everyone, start, (loads_before, _load()))
    result.server_cpu = (report["cpu_seconds"] - cpu_before) / elapsed
    print(f"fleet: {describe(result)}", file=log, flush=True)
    return result


# -- the matrix --------------------------------------------------------------------------------


def matrix(
    producers: Sequence[int] = (4,),
    offered: Sequence[float] = (2.0,),
    limits: Sequence[str] = LIMITS,
    aggregation: Sequence[bool] = (False,),
    coordination: Sequence[str] = ("off", "inside"),
    churn: Sequence[bool] = (False,),
    duration: float = 40.0,
    window_from: float = 12.0,
) -> list[Cell]:
    """Every combination of the values given, in a stable order."""
    return [
        Cell(p, o, lim, agg, coord, ch, duration, window_from)
        for p, o, lim, agg, coord, ch in itertools.product(
            producers, offered, limits, aggregation, coordination, churn
        )
    ]


PRESETS: dict[str, list[Cell]] = {
    # The table: 4 producers, 2×, aggregation off; both limits, with and without
    # coordination (the summarizer in producer 0).
    "baseline": matrix(),
    # The full matrix of the issue, then the join / leave cells.
    "full": matrix(
        producers=(4, 8),
        offered=(2.0, 5.0),
        limits=LIMITS,
        aggregation=(False, True),
        coordination=COORDINATIONS,
    )
    + matrix(limits=("matched",), coordination=COORDINATIONS, churn=(True,)),
    # `make bench`: two cells of the baseline.
    "reduced": matrix(limits=("matched",), coordination=("off", "inside")),
}


def shortened(cells: Sequence[Cell], duration: float, window_from: float) -> list[Cell]:
    return [replace(c, duration=duration, window_from=window_from) for c in cells]


# -- output ------------------------------------------------------------------------------------


def _percent(value: float) -> str:
    return f"{value:.1%}"


def describe(result: CellResult) -> str:
    """One line: the cell and its figures."""
    recovery = ""
    if result.cell.churn:
        recovery = " recovery " + ("never" if result.recovery is None else f"{result.recovery:g} s")
    at = "" if result.worst_second_at is None else f" (t={result.worst_second_at})"
    return (
        f"{result.cell.name}: delivered {_percent(result.delivered)}, throttled "
        f"{_percent(result.throttled)}, worst second {_percent(result.worst_second)}{at}"
        f"{recovery}; expired {result.expired}; load {result.load_before[0]:.1f}"
        f"→{result.load_after[0]:.1f}; server CPU {_cpu(result)}"
    )


def _cpu(result: CellResult) -> str:
    return "-" if result.server_cpu is None else f"{result.server_cpu:.0%}"


def table(results: Sequence[CellResult]) -> str:
    """A Markdown table of the results, with each figure's verdict."""
    lines = [
        "| cell | delivered (of capacity) | throttled (of attempts) | worst second throttled "
        "| recovery after swap | expired | load (1 min) | server CPU | targets |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for result in results:
        verdicts = result.verdicts
        if all(v is None for v in verdicts.values()):
            verdict = "info"
        else:
            missed = [name for name, ok in verdicts.items() if ok is False]
            verdict = "met" if not missed else "missed: " + ", ".join(missed)
        recovery = (
            "-"
            if not result.cell.churn
            else "never"
            if result.recovery is None
            else f"{result.recovery:g} s"
        )
        lines.append(
            f"| {result.cell.name} | {_percent(result.delivered)} | {_percent(result.throttled)} "
            f"| {_percent(result.worst_second)} | {recovery} | {result.expired:,} "
            f"| {result.load_before[0]:.1f}→{result.load_after[0]:.1f} | {_cpu(result)} "
            f"| {verdict} |"
        )
    return "\n".join(lines)


def series_text(result: CellResult) -> str:
    """The per-second series of one cell, as the issue's measurements show them."""
    return "\n".join(
        [
            f"{result.cell.name}",
            "    delivered/s: " + " ".join(str(v) for v in result.delivered_user_per_second),
            "    throttled/s: " + " ".join(str(v) for v in result.throttled_per_second),
        ]
    )


def plot(results: Sequence[CellResult], path: Path, labels: Sequence[str] | None = None) -> None:
    """One panel per cell: user records stored and Kinesis records throttled per second.

    ``labels``, one per result, go before each panel's title (e.g. which code ran it).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = 2 if len(results) > 1 else 1
    rows = math.ceil(len(results) / columns)
    figure, axes = plt.subplots(
        rows, columns, figsize=(6 * columns, 2.6 * rows), sharex=True, squeeze=False
    )
    names = list(labels) if labels is not None else [""] * len(results)
    for axis, result, label in zip(axes.flat, results, names, strict=False):
        seconds = list(range(len(result.delivered_per_second)))
        axis.plot(seconds, result.delivered_user_per_second, color="tab:blue", label="stored")
        axis.plot(seconds, result.throttled_per_second, color="tab:red", label="throttled")
        axis.axhline(result.capacity, color="grey", linestyle="--", label="capacity")
        axis.axvspan(0, result.cell.window_from, color="grey", alpha=0.1)
        if result.cell.swap_at is not None:
            axis.axvline(result.cell.swap_at, color="black", linestyle=":", linewidth=1)
        axis.set_title(
            f"{label}{result.cell.name}\n{_percent(result.delivered)} delivered, "
            f"{_percent(result.throttled)} throttled",
            fontsize="small",
        )
        axis.set_ylabel("records / s", fontsize="small")
        axis.grid(alpha=0.3)
    for axis in axes.flat[len(results) :]:
        axis.set_visible(False)
    axes.flat[0].legend(loc="upper right", fontsize="x-small")
    for axis in axes[-1]:
        axis.set_xlabel("seconds since the producers started", fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def read_json(path: Path) -> list[CellResult]:
    """The results :func:`write_json` wrote (to print or draw them again)."""
    names = {f.name for f in fields(CellResult)}
    return [
        CellResult(
            **{k: v for k, v in saved.items() if k in names and k != "cell"},
            cell=Cell(**saved["cell"]),
        )
        for saved in json.loads(path.read_text())["cells"]
    ]


def write_json(results: Sequence[CellResult], path: Path, meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    cells = [{**asdict(r), "name": r.cell.name, "verdicts": r.verdicts} for r in results]
    path.write_text(json.dumps({"meta": meta, "cells": cells}, indent=1) + "\n")


# -- `make bench` --------------------------------------------------------------------------------


def run(quick: bool, http: bool) -> Any:
    """The ``fleet`` scenario of ``python -m bench``: the reduced matrix, short phases."""
    from .report import Row, ScenarioResult

    del http  # always over HTTP: the producers are processes of their own
    duration, window_from = (12.0, 5.0) if quick else (20.0, 8.0)
    results = [run_cell(c) for c in shortened(PRESETS["reduced"], duration, window_from)]
    scenario = ScenarioResult("fleet")
    for result in results:
        targets = result.cell.targets
        name = f"fleet/{result.cell.name}"
        window = f"t = {result.cell.window_from:g}–{result.cell.duration:g} s"
        verdicts = result.verdicts
        scenario.rows += [
            Row(
                name,
                f"user records stored in {window}, of capacity ({SHARDS} shards × "
                f"{SHARD_RATE:g}/s; server-side counts; load {result.load_before[0]:.1f})",
                "info" if targets is None else f"≥ {targets.delivered:.0%} of capacity",
                result.delivered,
                "of capacity",
                verdicts["delivered"],
            ),
            Row(
                name,
                f"Kinesis records throttled in {window}, of attempts; worst second "
                f"{_percent(result.worst_second)}; {result.expired} expired",
                "info" if targets is None else f"≤ {targets.throttled:.0%} throttled",
                result.throttled,
                "throttled",
                verdicts["throttled"],
            ),
        ]
    scenario.details = {"cells": [{**asdict(r), "name": r.cell.name} for r in results]}
    return scenario


# -- command line ------------------------------------------------------------------------------


def _bool(text: str) -> bool:
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"on or off, not {text!r}")
    return text == "on"


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["worker"]:
        return worker_main(arguments[1:])
    parser = argparse.ArgumentParser(
        prog="python -m bench.fleet",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--full", action="store_true", help="the whole matrix (51 cells)")
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None)
    parser.add_argument("--producers", type=int, nargs="+", default=None, metavar="N")
    parser.add_argument("--offered", type=float, nargs="+", default=None, metavar="X")
    parser.add_argument("--limit", choices=LIMITS, nargs="+", default=None)
    parser.add_argument("--aggregation", type=_bool, nargs="+", default=None, metavar="on|off")
    parser.add_argument("--coordination", choices=COORDINATIONS, nargs="+", default=None)
    parser.add_argument("--churn", action="store_true", help="the join / leave cells only")
    parser.add_argument("--quick", action="store_true", help="20 s cells, window from 8 s")
    parser.add_argument("--duration", type=float, default=None, help="seconds per cell")
    parser.add_argument("--window-from", type=float, default=None, help="steady window start")
    parser.add_argument("--repeat", type=int, default=1, help="run each cell this many times")
    parser.add_argument(
        "--server-rate",
        type=float,
        default=None,
        help=f"the server's records/s per shard (default {SHARD_RATE:g}, what the producers "
        "are limited to and the capacity figures count): a control",
    )
    parser.add_argument(
        "--producer-src",
        type=Path,
        default=None,
        metavar="DIR",
        help="the producer processes import aiokpl from this src directory (e.g. a git "
        "worktree of an earlier commit's src/), to compare two versions on one server",
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--png", type=Path, default=None, help="draw the figure here")
    parser.add_argument(
        "--replot",
        type=Path,
        default=None,
        metavar="JSON",
        help="run nothing: print and draw (--png) the results of an earlier --json; --only "
        "picks cells by their number in it (1 …)",
    )
    parser.add_argument("--only", type=int, nargs="+", default=None, metavar="N")
    parser.add_argument(
        "--trace",
        type=Path,
        default=None,
        metavar="JSONL",
        help="append each producer's per-second rates by shard (its statistics' "
        "rates_by_shard) and outcome counts to this file, one line per cell",
    )
    args = parser.parse_args(arguments)
    global _TRACE
    _TRACE = args.trace
    producer_src = None if args.producer_src is None else args.producer_src.resolve()
    if producer_src is not None:
        print(f"producer processes import aiokpl from {producer_src}")
    if args.replot is not None:
        saved = read_json(args.replot)
        chosen = [saved[i - 1] for i in args.only] if args.only else saved
        print(table(chosen))
        if args.png is not None:
            plot(chosen, args.png)
        return 0

    axes = (args.producers, args.offered, args.limit, args.aggregation, args.coordination)
    if args.full or args.preset:
        cells = PRESETS["full" if args.full else args.preset]
    else:
        base = Cell()
        cells = matrix(
            producers=args.producers or (base.producers,),
            offered=args.offered or (base.offered,),
            limits=args.limit or LIMITS,
            aggregation=args.aggregation or (base.aggregation,),
            coordination=args.coordination or ("off", "inside"),
            churn=(args.churn,),
        )
        if not any(axes) and not args.churn:
            cells = PRESETS["baseline"]
    duration = args.duration or (20.0 if args.quick else 40.0)
    window_from = args.window_from or (8.0 if args.quick else 12.0)
    cells = shortened(cells, duration, window_from) * args.repeat
    if args.server_rate is not None:
        cells = [replace(c, server_rate=args.server_rate) for c in cells]
    meta = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count()}
    results = []
    for index, cell in enumerate(cells, 1):
        print(f"fleet: cell {index}/{len(cells)}: {cell.name} …", file=sys.stderr, flush=True)
        results.append(run_cell(cell, producer_src=producer_src))
    print(table(results))
    print()
    for result in results:
        print(series_text(result))
    write_json(results, args.json, meta)
    print(f"\nfigures written to {args.json}")
    if args.png is not None:
        plot(results, args.png)
        print(f"figure: {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

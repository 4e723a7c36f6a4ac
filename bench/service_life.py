"""A service's first minute and last (issue 31): the issue's table, measured the way deployments
meet it.

``python -m bench.service_life [--quick] [--only NAME ...] [--producer-src DIR]
[--backend asyncio|trio|both] [--json PATH] [--compare JSON]``

Every cell runs producer **OS processes** over HTTP against the throttling Kinesis
(``aiokpl.testing._servers.moto_server`` with ``ShardLimits()``: moto's server in a process of
its own, AWS's 1,000 records/s and 1 MiB/s per shard, one second of burst), each a real
``Producer`` with its own aiobotocore client, ``Config`` at its defaults but the endpoint, dummy
credentials and what the cell states. Throttling and delivery are the **server's** counts
(``/_local/throughput``: Kinesis records stored and throttled per stream and second), never
the producer's accounting. The producer process is ``bench.auto``'s worker: 100-byte records
over 997 partition keys (the first 8 bytes hold the record's index, and the worker reports when
it put each record), every outcome awaited.

The cells (``--only`` names them):

1. ``cold``: ``ListShards``, ``DescribeStream`` and ``DescribeStreamSummary`` answered 0.3 s
   and 1.0 s late (``ServerFaults(control_latency=...)``: a cold start's slow first calls), 4
   shards, aggregation on; on each backend one producer puts 2,000 records/s for 3 s (paced).
   The stream is read back (``aiokpl.aggregation.deaggregate``): the share of the records put
   in the first second that were stored in an aggregate of more than one user record; user
   records per Kinesis record for the first second (over the Kinesis records holding any of
   them) and overall; records failed; Kinesis records throttled. Then ``aiokpl demo
   --backend X`` on each backend (a subprocess importing the producer under test): its "user
   records per Kinesis record".
2. ``restart``: 2 shards (2,000 records/s), aggregation off, 20,000 records put as fast as
   ``put_record`` takes them, by three producer processes one after another on one server:
   ``first`` on fresh shards, ``spent`` started the moment the first's last outcome resolved
   (the shards spent: a restart), ``rested`` 3 s after the second's. Each run's per-second
   series of the server; the share of capacity stored in each second between the run's first
   and last active ones (with a record stored or throttled: the first holds the burst, the
   last is partial; the seconds before the first, the producer's start-up, and after the
   last, its outcomes coming back, are in the wall time), and before the first second that
   starts with under two seconds of capacity left to store (the keys split the records
   unevenly between the shards: from there one shard runs out first);
   the wall time (the producer's: first put to last outcome; the floor is about 9 s); Kinesis
   records throttled (a second that two runs share counts for the later one).
3. ``lone``: a lone producer on quiet shards (2 shards, aggregation off), 3,000 records as
   fast as ``put_record`` takes them, and 20,000 (each on a stream of its own of a fresh
   server: quiet shards): Kinesis records throttled.
4. ``fleet-agg``: 8 producer processes at defaults with aggregation on, no coordination, 2×
   the capacity offered: the cell of ``bench.fleet``'s matrix, run by ``bench.fleet.run_cell``
   (its scaled limits: 250 records/s and 64 KiB/s per shard); the same as ``python -m
   bench.fleet --producers 8 --offered 2 --limit default --aggregation on --coordination off``
   (``--quick`` for the quick run's 20 s). Delivered, throttled, worst second, as
   ``bench.fleet`` measures them (its steady window).
5. ``wrong-endpoint`` (``bench.wrong_endpoint``): a producer pointed at a closed port on
   127.0.0.1, and one pointed at another closed port with region ``us-east-11``, each putting
   one record: the record's message once it fails (after ``record_ttl_ms``, 30 s), the time
   from the put to the first log line (stderr, ``WARNING`` and above) naming the endpoint or
   a connection, and, if the producer has ``Producer.health``, to its first ``"failing"``
   (polled every 0.5 s). The issue's third variant (no ``endpoint_url``, ``us-east-11``) is
   not run: the producer would resolve ``kinesis.us-east-11.amazonaws.com`` through the
   machine's resolver, which reaches the internet. These processes mostly wait on retries:
   they run beside the other cells, to save their 30 s.

Targets (the issue's): ``cold``: ≥ 95% of the first second's records aggregated; the demo's
user records per Kinesis record within 10% of each other on the two backends. ``restart``:
every judged second ≥ 90% of capacity; wall time ≤ 11 s (the floor, records less the burst
over the capacity, plus 2 s). ``lone``: 0 throttled. ``fleet-agg``: ≤ 5% throttled, no
second over 20%. ``wrong-endpoint``: a log line within 5 s, health ``"failing"`` within 10 s.
The other figures are information.

``--quick``: ``cold`` at 1.0 s only, the demo with 10,000 records, ``restart`` with 10,000
records a run, ``lone`` with 3,000 only, ``fleet-agg`` for 20 s; about two minutes. A full run
takes about five. ``--producer-src DIR`` has every producer process (and the demo) import
aiokpl from another tree (an earlier commit's ``src/``); the servers and the read-back always
run this tree's code. ``--backend`` picks the backends of ``cold`` and the demo (both by
default); the other cells run on asyncio, or on trio if it alone is picked. ``--compare JSON``
prints an earlier run's figures (its ``--json``) beside this run's.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import auto, fleet, wrong_endpoint
from ._processes import LineProcess, local_client, processes, producer_environment
from ._processes import spawn as _spawn_process
from .report import Row, ScenarioResult, machine

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "bench" / "results" / "service_life.json"
NAMES = ("cold", "restart", "lone", "fleet-agg", "wrong-endpoint")
BACKENDS = ("asyncio", "trio")
SHARD_RATE = 1000.0  # ShardLimits(): records/s per shard, and one second of it as burst

# cold
COLD_LATENCIES = (0.3, 1.0)
COLD_SHARDS = 4
COLD_RATE = 2000.0
COLD_SECONDS = 3.0
FIRST_SECOND_AGGREGATED = 0.95
DEMO_AGREEMENT = 0.10
# restart and lone
RAW_SHARDS = 2
RESTART_RECORDS = 20_000
REST_SECONDS = 3.0
CAPACITY_SHARE = 0.90
WALL_MARGIN = 2.0
LONE_RECORDS = (3_000, 20_000)
# fleet-agg
FLEET_THROTTLED = 0.05
FLEET_WORST_SECOND = 0.20
# wrong-endpoint
LOG_WITHIN = 5.0
HEALTH_WITHIN = 10.0
# How long a producer may take past its load to resolve every outcome (the default TTL is
# 30 s) before it is killed, its missing results then counted as failures.
GRACE = 90.0


@dataclass
class Figure:
    """One line of the table.

    Attributes:
        cell: the cell and its variant, e.g. ``"cold 1.0s/trio"``.
        name: what is measured; with ``cell``, the key that lines two runs up.
        text: the figure as printed.
        target: what it is held to (``"info"``: nothing).
        ok: met, missed, or ``None`` (information, or not measurable here).
        value: the number behind ``text``, when there is one.
    """

    cell: str
    name: str
    text: str
    target: str = "info"
    ok: bool | None = None
    value: float | None = None

    @property
    def verdict(self) -> str:
        return "info" if self.ok is None else "pass" if self.ok else "FAIL"


_BEGAN = time.monotonic()


def say(text: str) -> None:
    """A line of progress on standard error, with the seconds since the start."""
    print(f"service_life [{time.monotonic() - _BEGAN:4.0f} s]: {text}", file=sys.stderr, flush=True)


# -- pure figures ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FirstSecond:
    """The records put in a run's first second, as the stream holds them.

    Attributes:
        put: user records put in the first second.
        aggregated: of those, the ones stored in an aggregate of more than one user record.
        user_records: copies of them stored (retries may store a record twice).
        kinesis_records: Kinesis records holding any of them.
    """

    put: int
    aggregated: int
    user_records: int
    kinesis_records: int

    @property
    def share(self) -> float:
        return self.aggregated / self.put if self.put else 0.0

    @property
    def user_per_kinesis(self) -> float:
        return self.user_records / self.kinesis_records if self.kinesis_records else 0.0


def first_second(
    stored: Sequence[tuple[str, Mapping[str, Any]]],
    put_at: Mapping[int, float],
    within: float = 1.0,
) -> FirstSecond:
    """How the records put before ``within`` seconds (``put_at``: each index's put time) were
    stored: ``stored`` is the read-back, ``(shard_id, record)`` pairs."""
    from aiokpl.aggregation import deaggregate

    early = {index for index, at in put_at.items() if at < within}
    aggregated: set[int] = set()
    copies = holders = 0
    for _, record in stored:
        users = list(deaggregate(dict(record)))
        indices = [auto.record_index(user.data) for user in users]
        mine = [index for index in indices if index is not None and index in early]
        if not mine:
            continue
        holders += 1
        copies += len(mine)
        if len(users) > 1:
            aggregated.update(mine)
    return FirstSecond(len(early), len(aggregated), copies, holders)


def stream_total(rows: Sequence[Mapping[str, Any]], stream: str, key: str = "throttled") -> int:
    """The server's count ``key`` of ``stream`` over every second."""
    return sum(int(row[key]) for row in rows if row["stream"] == stream)


def run_windows(runs: Sequence[tuple[float, float]]) -> list[tuple[int, int]]:
    """Each run's server seconds, first and last (inclusive), from its ``(start, end)`` wall
    times in order: the second a run starts in is the previous run's no longer."""
    windows = []
    for k, (start, end) in enumerate(runs):
        last = math.floor(end)
        if k + 1 < len(runs) and math.floor(runs[k + 1][0]) <= last:
            last = math.floor(runs[k + 1][0]) - 1
        windows.append((math.floor(start), last))
    return windows


def judged_shares(
    delivered: Sequence[int],
    throttled: Sequence[int],
    capacity: float,
    shared_first: bool,
    records: int | None = None,
) -> list[float]:
    """The share of ``capacity`` stored in each judged second of a run.

    ``delivered`` and ``throttled`` hold the run's seconds from the one it starts in to the
    one it ends in (``shared_first``: the first is also the previous run's last). A second is
    active if a record was stored or throttled in it. Judged: the seconds after the first
    active one (after the shared one; its burst) and before the last active one (partial).
    The seconds before the first (the producer's start-up) and after the last (its last
    outcomes coming back) are the wall time's, not the flow's. With ``records`` (what the run
    puts), judging also stops at the first second that starts with less than two seconds of
    ``capacity`` left to store (counting every record stored in the run's seconds as its
    own): the keys do not split the records evenly between the shards, so from there one
    shard runs out before the other and the stream's second is partial whatever the rate.
    """
    begin = 1 if shared_first else 0
    active = [i for i in range(begin, len(delivered)) if delivered[i] or throttled[i]]
    if not active:
        return []
    end = active[-1]
    if records is not None:
        left = records
        for second in range(len(delivered)):
            if second > active[0] and left < 2 * capacity:
                end = min(end, second)
                break
            left -= delivered[second]
    return [count / capacity for count in delivered[active[0] + 1 : end]]


def wall_target(records: int, shards: int) -> float:
    """Seconds ``records`` take at ``shards``' capacity after their burst, plus a margin: the
    issue's 11 s for 20,000 records on 2 shards."""
    capacity = shards * SHARD_RATE
    return max(0.0, records - capacity) / capacity + WALL_MARGIN


_DEMO_FIGURE = re.compile(r"user records per Kinesis record\s+([\d,.]+)")


def demo_per_kinesis(output: str) -> float | None:
    """The "user records per Kinesis record" of ``aiokpl demo``'s report (``None``: absent)."""
    found = _DEMO_FIGURE.search(output)
    return None if found is None else float(found.group(1).replace(",", ""))


def disagreement(a: float, b: float) -> float:
    """How far apart two figures are, as a share of the larger."""
    high = max(a, b)
    return abs(a - b) / high if high else 0.0


# -- the producer processes --------------------------------------------------------------------


def _producer(
    into: list[Any],
    endpoint: str,
    stream: str,
    records: int,
    *,
    backend: str,
    rate: float | None = None,
    aggregation: bool = True,
    producer_src: Path | None,
) -> LineProcess:
    """``bench.auto``'s worker putting ``records`` into ``stream``; it waits for ``go``."""
    arguments = [
        f"--endpoint={endpoint}",
        f"--records={records}",
        f"--stream={stream}",
        f"--backend={backend}",
        *([] if rate is None else [f"--rate={rate}"]),
        # Without aggregation (restart, lone) only counts: a line per record would cost the
        # next run's start CPU time on a 2-core machine.
        *([] if aggregation else ["--no-aggregation", "--counts-only"]),
    ]
    return _spawn_process(
        LineProcess,
        "bench.auto",
        f"{stream}-{backend}",
        arguments,
        into,
        cwd=ROOT,
        env=producer_environment(ROOT, producer_src),
    )


def _resolved(worker: LineProcess, timeout: float) -> float | None:
    """Wait until ``worker`` says its last outcome resolved: seconds after its start
    (``None``: it failed, exited or ran out of time)."""
    deadline = time.monotonic() + timeout
    while True:
        exited = worker.process.poll() is not None
        if exited and worker.thread is not None:
            worker.thread.join(timeout=10.0)  # its last lines
        for line in worker.lines:
            if "resolved" in line:
                return float(line["resolved"])
            if "error" in line or "refused" in line:
                return None
        if exited or time.monotonic() > deadline:
            return None
        time.sleep(0.01)


def _create_streams(endpoint: str, streams: Sequence[str], shards: int) -> None:
    import anyio

    async def create() -> None:
        async with local_client(endpoint) as kinesis:
            for stream in streams:
                await kinesis.create_stream(StreamName=stream, ShardCount=shards)

    anyio.run(create)


def _read(endpoint: str, stream: str) -> list[tuple[str, dict[str, Any]]]:
    import anyio

    from aiokpl.testing import read_stream

    async def read() -> list[tuple[str, dict[str, Any]]]:
        async with local_client(endpoint) as kinesis:
            return await read_stream(kinesis, stream)

    return anyio.run(read)


def _one_run(worker: LineProcess, start: float, duration: float) -> tuple[float, float | None]:
    """Start a ready ``worker`` at ``start`` (wall clock); returns ``(start, resolved)``."""
    worker.send(f"go {start}")
    return start, _resolved(worker, max(0.0, start - time.time()) + duration + GRACE)


def _run_alone(
    start: Callable[[list[Any]], LineProcess], duration: float
) -> tuple[LineProcess, tuple[float, float | None]]:
    """The worker ``start(into)`` starts (a :func:`_producer`), on its own: ready, run from
    0.2 s on (its load ``duration`` seconds long), finished, and killed if it has not exited;
    returns it (its lines) and :func:`_one_run`'s ``(start, resolved)``."""
    with processes() as started:
        worker = start(started)
        worker.wait_ready(timeout=90.0)
        ran = _one_run(worker, time.time() + 0.2, duration)
        worker.finish(GRACE)
    return worker, ran


# -- cold --------------------------------------------------------------------------------------


@dataclass
class ColdRun:
    """One producer's cold start: its records, as the stream holds them and the server
    counted them."""

    latency: float
    backend: str
    records: int
    put: int = 0
    failed: int = 0
    failure_codes: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    first: FirstSecond = FirstSecond(0, 0, 0, 0)
    user_per_kinesis: float = 0.0
    kinesis_records: int = 0
    throttled: int = 0
    wall_seconds: float = 0.0

    @property
    def cell(self) -> str:
        return f"cold {self.latency:.1f}s/{self.backend}"


def run_cold(
    latency: float,
    backends: Sequence[str],
    records: int,
    producer_src: Path | None,
) -> list[ColdRun]:
    """One server whose map calls answer ``latency`` late; one stream and producer process per
    backend, one after the other."""
    from aiokpl.testing._servers import ServerFaults, ShardLimits, moto_server, throughput

    found = []
    faults = ServerFaults(control_latency=latency)
    with moto_server(limits=ShardLimits(), faults=faults) as endpoint:
        streams = [f"cold-{backend}" for backend in backends]
        _create_streams(endpoint, streams, COLD_SHARDS)
        for backend, stream in zip(backends, streams, strict=True):
            worker, _ = _run_alone(
                functools.partial(
                    _producer,
                    endpoint=endpoint,
                    stream=stream,
                    records=records,
                    backend=backend,
                    rate=COLD_RATE,
                    producer_src=producer_src,
                ),
                records / COLD_RATE,
            )
            stored = _read(endpoint, stream)
            run = measure_cold(latency, backend, records, worker.lines, stored)
            run.throttled = stream_total(throughput(endpoint)["series"], stream)
            say(describe_cold(run))
            found.append(run)
    return found


def measure_cold(
    latency: float,
    backend: str,
    records: int,
    lines: Sequence[Mapping[str, Any]],
    stored: Sequence[tuple[str, dict[str, Any]]],
) -> ColdRun:
    """A cold run's figures from the worker's lines and the read-back (the server's throttled
    count is set by the caller)."""
    cell = auto.Cell(f"cold-{backend}", COLD_SHARDS, records, rate=COLD_RATE)
    # Only the producer's side and the stored counts of bench.auto's figures are used here.
    counted = auto.measure(cell, lines, auto.ReadBack(list(stored), [], []))
    put_at = {int(line["i"]): float(line["t"]) for line in lines if "i" in line}
    return ColdRun(
        latency,
        backend,
        records,
        put=counted.put,
        failed=counted.failed,
        failure_codes=counted.failure_codes,
        error=counted.error,
        first=first_second(stored, put_at),
        user_per_kinesis=counted.user_per_kinesis,
        kinesis_records=counted.kinesis_records,
        wall_seconds=counted.wall_seconds,
    )


def describe_cold(run: ColdRun) -> str:
    return (
        f"{run.cell}: {run.first.share:.1%} of the first second's {run.first.put:,} records "
        f"aggregated ({run.first.user_per_kinesis:.1f} a Kinesis record; "
        f"{run.user_per_kinesis:.1f} overall), {run.failed} failed, {run.throttled} throttled, "
        f"{run.wall_seconds:.1f} s" + (f"; error {run.error}" if run.error else "")
    )


def cold_figures(run: ColdRun) -> list[Figure]:
    first = run.first
    figures = [
        Figure(
            run.cell,
            "first second's records in aggregates of >1",
            f"{first.share:.1%} ({first.aggregated:,} of {first.put:,})",
            f"≥ {FIRST_SECOND_AGGREGATED:.0%}",
            run.error is None and first.put > 0 and first.share >= FIRST_SECOND_AGGREGATED,
            first.share,
        ),
        Figure(
            run.cell,
            "user records / Kinesis record, first second",
            f"{first.user_per_kinesis:.1f}",
            value=first.user_per_kinesis,
        ),
        Figure(
            run.cell,
            "user records / Kinesis record, overall",
            f"{run.user_per_kinesis:.1f} ({run.kinesis_records:,} Kinesis records)",
            value=run.user_per_kinesis,
        ),
        Figure(
            run.cell,
            "records failed",
            f"{run.failed:,}" + (f" {run.failure_codes}" if run.failure_codes else ""),
            value=run.failed,
        ),
        Figure(run.cell, "Kinesis records throttled (server)", f"{run.throttled:,}"),
    ]
    if run.error is not None:
        figures.append(Figure(run.cell, "producer error", run.error[:200], "runs", False))
    return figures


@dataclass
class DemoRun:
    """``aiokpl demo --backend X``'s report."""

    backend: str
    count: int
    per_kinesis: float | None = None
    report: str = ""
    error: str | None = None


def run_demo(backend: str, count: int, producer_src: Path | None) -> DemoRun:
    """``python -m aiokpl demo`` as a subprocess, importing the producer under test."""
    done = subprocess.run(
        [sys.executable, "-m", "aiokpl", "demo", f"--backend={backend}", f"--count={count}"],
        cwd=ROOT,
        env=producer_environment(ROOT, producer_src),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    run = DemoRun(backend, count, demo_per_kinesis(done.stdout), done.stdout)
    if done.returncode != 0 or run.per_kinesis is None:
        run.error = f"exit {done.returncode}: {(done.stderr or done.stdout)[-300:].strip()}"
    say(
        f"demo/{backend}: {run.per_kinesis} user records per Kinesis record"
        + (f" ({run.error})" if run.error else "")
    )
    return run


def demo_figures(runs: Sequence[DemoRun]) -> list[Figure]:
    figures = [
        Figure(
            f"cold demo/{run.backend}",
            "aiokpl demo: user records / Kinesis record",
            f"{run.per_kinesis:.1f} ({run.count:,} records)"
            if run.per_kinesis is not None
            else f"failed: {run.error}",
            "runs" if run.per_kinesis is None else "info",
            False if run.per_kinesis is None else None,
            run.per_kinesis,
        )
        for run in runs
    ]
    measured = [run for run in runs if run.per_kinesis is not None]
    if len(runs) == 2:
        if len(measured) == 2:
            apart = disagreement(measured[0].per_kinesis or 0.0, measured[1].per_kinesis or 0.0)
            figures.append(
                Figure(
                    "cold demo",
                    "asyncio and trio apart",
                    f"{apart:.1%}",
                    f"≤ {DEMO_AGREEMENT:.0%}",
                    apart <= DEMO_AGREEMENT,
                    apart,
                )
            )
        else:
            figures.append(
                Figure("cold demo", "asyncio and trio apart", "a demo failed", "≤ 10%", False)
            )
    return figures


# -- restart and lone ---------------------------------------------------------------------------


@dataclass
class RawRun:
    """One producer putting records as fast as ``put_record`` takes them, aggregation off,
    with the server's per-second series of its stream."""

    name: str
    records: int
    start: float = 0.0
    wall_seconds: float | None = None
    failed: int = 0
    error: str | None = None
    first_second: int = 0  # the server second its series starts at
    delivered: list[int] = field(default_factory=list)
    throttled_series: list[int] = field(default_factory=list)
    shared_first: bool = False  # its first second is also the run before's last
    throttled: int = 0

    @property
    def shares(self) -> list[float]:
        capacity = RAW_SHARDS * SHARD_RATE
        return judged_shares(
            self.delivered, self.throttled_series, capacity, self.shared_first, self.records
        )


def outcome(lines: Sequence[Mapping[str, Any]], records: int) -> tuple[int, str | None]:
    """Records failed (all of them if the worker never said) and its error, from its lines
    (``--counts-only``: the failures by code in its last line)."""
    error = next((str(line["error"]) for line in lines if "error" in line), None)
    done = next((line["done"] for line in lines if "done" in line), None)
    if done is None:
        return records, error
    return sum(done["failure_codes"].values()) + records - int(done["put"]), error


def attach_series(runs: Sequence[RawRun], rows: Sequence[dict[str, Any]], stream: str) -> None:
    """Each run's per-second series (from its start's second to its end's) and throttled
    total (a second two runs share counts for the later) from the server's ``rows``."""
    ended = [(r.start, r.start + (r.wall_seconds or 0.0)) for r in runs]
    previous_end = -math.inf
    for run, (_, end), (first, last) in zip(runs, ended, run_windows(ended), strict=True):
        seconds = math.floor(end) - first + 1
        series = fleet.series_of(rows, first, seconds, stream)
        run.first_second = first
        run.delivered = series["delivered"]
        run.throttled_series = series["throttled"]
        run.shared_first = first <= previous_end
        run.throttled = sum(series["throttled"][: last - first + 1])
        previous_end = math.floor(end)


def run_restart(records: int, backend: str, producer_src: Path | None) -> list[RawRun]:
    """Three producer processes on one stream: on fresh shards, the moment the first ended,
    and after a rest."""
    from aiokpl.testing._servers import ShardLimits, moto_server, throughput

    stream = "restart"
    runs = [RawRun(name, records) for name in ("first", "spent", "rested")]
    with moto_server(limits=ShardLimits()) as endpoint:
        _create_streams(endpoint, [stream], RAW_SHARDS)
        with processes() as started:
            # All three started and ready first: the second's first put follows the first's
            # last outcome at once, not after a process's start-up.
            workers = [
                _producer(
                    started,
                    endpoint,
                    stream,
                    records,
                    backend=backend,
                    aggregation=False,
                    producer_src=producer_src,
                )
                for _ in runs
            ]
            for worker in workers:
                worker.wait_ready(timeout=90.0)
            start = float(math.ceil(time.time() + 0.2))
            for run, worker in zip(runs, workers, strict=True):
                run.start, run.wall_seconds = _one_run(worker, start, 0.0)
                if run.wall_seconds is None:
                    break
                start = time.time()
                if run.name == "spent":
                    start = run.start + run.wall_seconds + REST_SECONDS
            for worker in workers:
                worker.finish(GRACE)
        rows = throughput(endpoint)["series"]
    for run, worker in zip(runs, workers, strict=True):
        run.failed, run.error = outcome(worker.lines, records)
    attach_series([r for r in runs if r.wall_seconds is not None], rows, stream)
    for run in runs:
        say(f"restart/{describe_raw(run)}")
    return runs


def run_lone(counts: Sequence[int], backend: str, producer_src: Path | None) -> list[RawRun]:
    """One producer on quiet shards per count: a stream of its own on a fresh server."""
    from aiokpl.testing._servers import ShardLimits, moto_server, throughput

    runs = [RawRun(f"{count:,}", count) for count in counts]
    with moto_server(limits=ShardLimits()) as endpoint:
        streams = [f"lone-{count}" for count in counts]
        _create_streams(endpoint, streams, RAW_SHARDS)
        for run, stream in zip(runs, streams, strict=True):
            worker, (run.start, run.wall_seconds) = _run_alone(
                functools.partial(
                    _producer,
                    endpoint=endpoint,
                    stream=stream,
                    records=run.records,
                    backend=backend,
                    aggregation=False,
                    producer_src=producer_src,
                ),
                0.0,
            )
            run.failed, run.error = outcome(worker.lines, run.records)
            if run.wall_seconds is not None:
                attach_series([run], throughput(endpoint)["series"], stream)
            run.throttled = stream_total(throughput(endpoint)["series"], stream)
            say(f"lone/{describe_raw(run)}")
    return runs


def describe_raw(run: RawRun) -> str:
    wall = "no end" if run.wall_seconds is None else f"{run.wall_seconds:.1f} s"
    shares = " ".join(f"{share:.0%}" for share in run.shares)
    return (
        f"{run.name}: {run.records:,} records in {wall}, {run.throttled:,} throttled, "
        f"{run.failed:,} failed; stored/s {run.delivered}, of capacity, judged seconds: {shares}"
        + (f"; error {run.error}" if run.error else "")
    )


def restart_figures(runs: Sequence[RawRun]) -> list[Figure]:
    figures = []
    for run in runs:
        cell = f"restart/{run.name}"
        shares = run.shares
        target_wall = wall_target(run.records, RAW_SHARDS)
        if run.wall_seconds is None:
            figures.append(
                Figure(cell, "run", f"did not end: {run.error or 'no result'}", "runs", False)
            )
            continue
        worst = min(shares) if shares else None
        figures += [
            Figure(
                cell,
                "worst second between the first and last active, of capacity",
                "no whole second"
                if worst is None
                else f"{worst:.0%} (each: {' '.join(f'{s:.0%}' for s in shares)})",
                f"≥ {CAPACITY_SHARE:.0%} each second",
                None if worst is None else worst >= CAPACITY_SHARE,
                worst,
            ),
            Figure(
                cell,
                "wall time (first put to last outcome)",
                f"{run.wall_seconds:.1f} s ({run.records:,} records)",
                f"≤ {target_wall:g} s",
                run.wall_seconds <= target_wall,
                run.wall_seconds,
            ),
            Figure(cell, "Kinesis records throttled (server)", f"{run.throttled:,}"),
            Figure(cell, "records failed", f"{run.failed:,}", value=run.failed),
        ]
    return figures


def lone_figures(runs: Sequence[RawRun]) -> list[Figure]:
    figures = []
    for run in runs:
        cell = f"lone/{run.name}"
        wall = "no end" if run.wall_seconds is None else f"{run.wall_seconds:.1f} s"
        figures += [
            Figure(
                cell,
                "Kinesis records throttled (server)",
                f"{run.throttled:,} ({run.records:,} records in {wall})",
                "0",
                run.wall_seconds is not None and run.throttled == 0,
                run.throttled,
            ),
            Figure(cell, "records failed", f"{run.failed:,}", value=run.failed),
        ]
    return figures


# -- fleet-agg ---------------------------------------------------------------------------------


def fleet_cell(quick: bool) -> fleet.Cell:
    """``bench.fleet``'s cell: 8 producers, 2× offered, their default limit, aggregation on,
    no coordination (``python -m bench.fleet``'s durations)."""
    duration, window_from = (20.0, 8.0) if quick else (40.0, 12.0)
    return fleet.Cell(8, 2.0, "default", True, "off", duration=duration, window_from=window_from)


def fleet_command(quick: bool) -> str:
    """The ``bench.fleet`` command line that runs :func:`fleet_cell` alone."""
    return (
        "python -m bench.fleet --producers 8 --offered 2 --limit default --aggregation on "
        "--coordination off" + (" --quick" if quick else "")
    )


def fleet_figures(result: fleet.CellResult) -> list[Figure]:
    cell = "fleet-agg"
    at = "" if result.worst_second_at is None else f" (at {result.worst_second_at} s)"
    return [
        Figure(
            cell,
            "delivered, of capacity (steady window)",
            f"{result.delivered:.1%}",
            value=result.delivered,
        ),
        Figure(
            cell,
            "Kinesis records throttled, of sent",
            f"{result.throttled:.1%}",
            f"≤ {FLEET_THROTTLED:.0%}",
            result.throttled <= FLEET_THROTTLED,
            result.throttled,
        ),
        Figure(
            cell,
            "worst second throttled",
            f"{result.worst_second:.1%}{at}",
            f"≤ {FLEET_WORST_SECOND:.0%}",
            result.worst_second <= FLEET_WORST_SECOND,
            result.worst_second,
        ),
    ]


# -- wrong-endpoint ----------------------------------------------------------------------------


def wrong_figures(runs: Sequence[wrong_endpoint.WrongRun]) -> list[Figure]:
    figures = []
    for run in runs:
        cell = f"wrong-endpoint/{run.name}"
        after = "" if run.result_after is None else f" (after {run.result_after:.1f} s)"
        if run.has_health is None:
            health = Figure(cell, "health says failing", "the producer did not start", "≤ 10 s")
        elif not run.has_health:
            health = Figure(cell, "health says failing", "no Producer.health", "≤ 10 s")
        else:
            health = _within(
                cell,
                "health says failing",
                run.failing_after,
                HEALTH_WITHIN,
                f" (said: {', '.join(run.health_seen)})" if run.health_seen else "",
            )
        figures += [
            Figure(cell, "the record's result", wrong_endpoint.result_text(run) + after),
            _within(
                cell,
                "first log line naming the endpoint or a connection",
                run.log_after,
                LOG_WITHIN,
                f": {run.log_line[:160]}" if run.log_line else "",
            ),
            health,
        ]
    return figures


def _within(cell: str, name: str, seconds: float | None, limit: float, said: str) -> Figure:
    """A wrong-endpoint run's time from its put to what ``name`` says (``None``: never), held
    to ``limit`` seconds; ``said`` follows the time in the text."""
    return Figure(
        cell,
        name,
        wrong_endpoint.after_text(seconds) + said,
        f"≤ {limit:g} s",
        seconds is not None and seconds <= limit,
        seconds,
    )


# -- the whole table ---------------------------------------------------------------------------


@dataclass
class Plan:
    """What a run does: the cells chosen, their sizes, the backends."""

    only: tuple[str, ...] = NAMES
    quick: bool = False
    backends: tuple[str, ...] = BACKENDS
    producer_src: Path | None = None

    @property
    def backend(self) -> str:
        """The backend of the cells that run on one: asyncio, unless trio alone was picked."""
        return self.backends[0]


def run_all(plan: Plan) -> tuple[list[Figure], dict[str, Any]]:
    """Every chosen cell, in order; the wrong-endpoint processes run beside the others."""
    figures: list[Figure] = []
    details: dict[str, Any] = {}
    src = plan.producer_src
    with contextlib.ExitStack() as stack:
        wrong = None
        if "wrong-endpoint" in plan.only:
            wrong = stack.enter_context(wrong_endpoint.started(plan.backend, src))
        if "cold" in plan.only:
            latencies = COLD_LATENCIES[-1:] if plan.quick else COLD_LATENCIES
            records = int(COLD_RATE * COLD_SECONDS)
            cold = [
                run
                for latency in latencies
                for run in run_cold(latency, plan.backends, records, src)
            ]
            demos = [
                run_demo(backend, 10_000 if plan.quick else 100_000, src)
                for backend in plan.backends
            ]
            figures += [f for run in cold for f in cold_figures(run)] + demo_figures(demos)
            details["cold"] = [asdict(run) for run in cold]
            details["demo"] = [asdict(run) for run in demos]
        if "restart" in plan.only:
            records = RESTART_RECORDS // 2 if plan.quick else RESTART_RECORDS
            runs = run_restart(records, plan.backend, src)
            figures += restart_figures(runs)
            details["restart"] = [asdict(run) for run in runs]
        if "lone" in plan.only:
            runs = run_lone(LONE_RECORDS[:1] if plan.quick else LONE_RECORDS, plan.backend, src)
            figures += lone_figures(runs)
            details["lone"] = [asdict(run) for run in runs]
        if "fleet-agg" in plan.only:
            say(f"fleet-agg is `{fleet_command(plan.quick)}`")
            result = fleet.run_cell(fleet_cell(plan.quick), producer_src=src)
            figures += fleet_figures(result)
            details["fleet-agg"] = {
                **asdict(result),
                "command": fleet_command(plan.quick),
            }
        if wrong is not None:
            pointed = wrong()
            for one in pointed:
                say(wrong_endpoint.describe(one))
            figures += wrong_figures(pointed)
            details["wrong-endpoint"] = [asdict(one) for one in pointed]
    return figures, details


def table(figures: Sequence[Figure], before: Mapping[tuple[str, str], str] | None = None) -> str:
    """A Markdown table, one figure a line with its target; with ``before`` (an earlier run's
    texts by cell and figure), that run's beside this one's, headed by their roles (the
    ``--compare`` file's, this run's), not "before" and "after": either may be the old code."""
    pipe = str.maketrans({"|": "/", "\n": " "})
    if before is None:
        lines = ["| cell | figure | measured | target | verdict |", "|---|---|---|---|---|"]
    else:
        lines = [
            "| cell | figure | --compare's run | this run | target | verdict (this run) |",
            "|---|---|---|---|---|---|",
        ]
    for figure in figures:
        columns = [figure.cell, figure.name, figure.text, figure.target, figure.verdict]
        if before is not None:
            columns.insert(2, before.get((figure.cell, figure.name), "-"))
        lines.append("| " + " | ".join(c.translate(pipe) for c in columns) + " |")
    return "\n".join(lines)


def series_text(details: Mapping[str, Any]) -> str:
    """The restart and lone runs' per-second series, as the server counted them."""
    lines = []
    for cell in ("restart", "lone"):
        for run in details.get(cell, []):
            lines += [
                f"{cell}/{run['name']} (from server second {run['first_second']})",
                "    stored/s:    " + " ".join(str(v) for v in run["delivered"]),
                "    throttled/s: " + " ".join(str(v) for v in run["throttled_series"]),
            ]
    return "\n".join(lines)


def read_figures(path: Path) -> dict[tuple[str, str], str]:
    """An earlier run's figure texts (its ``--json``), by cell and figure."""
    saved = json.loads(path.read_text())
    return {(f["cell"], f["name"]): f["text"] for f in saved["figures"]}


def write_json(
    figures: Sequence[Figure], details: Mapping[str, Any], path: Path, meta: Mapping[str, Any]
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "meta": dict(meta),
        "figures": [{**asdict(f), "verdict": f.verdict} for f in figures],
        "details": dict(details),
    }
    path.write_text(json.dumps(document, indent=1, default=str) + "\n")


def rows(figures: Sequence[Figure]) -> list[Row]:
    """The rows of ``python -m bench``'s table."""
    return [
        Row(f"service_life/{f.cell}", f"{f.name}: {f.text}", f.target, None, "", f.ok)
        for f in figures
    ]


# -- `python -m bench` -------------------------------------------------------------------------


def run(quick: bool, http: bool) -> ScenarioResult:
    """The ``service_life`` scenario of ``python -m bench``: every cell on both backends."""
    del http  # always over HTTP: the producers are processes of their own
    figures, details = run_all(Plan(quick=quick))
    return ScenarioResult("service_life", rows=rows(figures), details=details)


# -- command line ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m bench.service_life",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="smaller cells: about 2 minutes")
    parser.add_argument("--only", nargs="+", choices=NAMES, metavar="NAME", default=None)
    parser.add_argument(
        "--producer-src",
        type=Path,
        default=None,
        metavar="DIR",
        help="the producer processes (and the demo) import aiokpl from this src directory",
    )
    parser.add_argument("--backend", choices=(*BACKENDS, "both"), default="both")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument(
        "--compare",
        type=Path,
        default=None,
        metavar="JSON",
        help="an earlier run's --json: its figures are printed beside this run's",
    )
    args = parser.parse_args(arguments)
    producer_src = None if args.producer_src is None else args.producer_src.resolve()
    plan = Plan(
        only=tuple(args.only or NAMES),
        quick=args.quick,
        backends=BACKENDS if args.backend == "both" else (args.backend,),
        producer_src=producer_src,
    )
    before = None if args.compare is None else read_figures(args.compare)
    label = "this tree" if producer_src is None else str(producer_src)
    print(f"producer processes import aiokpl from {label}", flush=True)
    meta: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "producer_src": None if producer_src is None else str(producer_src),
        "quick": args.quick,
        "cells": list(plan.only),
        "backends": list(plan.backends),
        "fleet_command": fleet_command(args.quick),
        "machine_before": machine(),
    }
    began = time.perf_counter()
    figures, details = run_all(plan)
    meta["seconds"] = round(time.perf_counter() - began, 1)
    meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    meta["machine_after"] = machine()
    print(table(figures, before))
    text = series_text(details)
    if text:
        print("\n" + text)
    if "fleet-agg" in plan.only:
        print(f"\nfleet-agg is bench.fleet's cell: {fleet_command(args.quick)}")
    load = meta["machine_before"]["load_average"], meta["machine_after"]["load_average"]
    print(f"\n{meta['seconds']:.0f} s; load average before {load[0]}, after {load[1]}")
    write_json(figures, details, args.json, meta)
    print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

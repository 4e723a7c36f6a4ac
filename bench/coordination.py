"""Coordination experiment: producer *processes* sharing one throttled stream.

``python -m bench.coordination [--quick] [--store dynamodb|s3] [--png PATH] [--json PATH]``

One run, two phases, on one 2-shard stream of the loopback throttling server
(``LoopbackKinesis`` over a ``FakeKinesis`` with ``throttle=True``, in a thread of this
process) and one coordination store on moto's server:

1. **without coordination**: 4 producer processes, each offering half a shard's capacity per
   shard (2× the stream's capacity in total), each limiting itself to the full shard rate;
2. **with coordination**: the same 4 producers with ``Coordination(interval=1)`` and
   ``aiokpl coordinate`` (a process of its own) running the summary. After the measured
   window one producer is killed (SIGTERM: no clean-up, its report stays until it goes stale)
   and a new one starts; the sum of the live producers' ceilings per shard is watched until
   it is back within 10% of the shard's capacity for good.

Measured by the server (per second): records stored and records throttled. Reported per phase
over the steady window: delivered fraction of capacity, fraction of Kinesis records
throttled, and records expired (``record_ttl_ms`` = 5 s, from the producers' own results);
and, from the producers' results too, the mean duration of a ``PutRecords`` attempt of the
records resolved in the window: the round trip of the throttle feedback, which a loaded
machine stretches from tens of milliseconds to seconds.
Aggregation is off, so one user record is one Kinesis record and the counts compare directly.

Every process this starts is stopped before it returns, whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ._processes import LineProcess, local_config, processes, producer_environment, spawn

ROOT = Path(__file__).resolve().parent.parent
STREAM = "coordination"
SHARDS = 2
PRODUCERS = 4
TTL_MS = 5000
DUMMY_KEY = "testing"  # moto accepts any credentials; never real ones
THROTTLED = "ProvisionedThroughputExceededException"


# -- the server side: a FakeKinesis that counts per second -------------------------------------


def _counting_fake() -> Any:
    from aiokpl.testing import FakeKinesis

    class CountingKinesis(FakeKinesis):
        """Counts stored and throttled records per whole second of ``time.monotonic``."""

        def __init__(self) -> None:
            super().__init__(clock=time.monotonic)
            self.stored: Counter[int] = Counter()
            self.throttled: Counter[int] = Counter()

        async def put_records(
            self,
            *,
            Records: Sequence[Mapping[str, Any]],
            StreamName: str | None = None,
            StreamARN: str | None = None,
            StreamId: str | None = None,
            DryRun: bool | None = None,
        ) -> dict[str, Any]:
            # Counted as the call returns, in the same step as the fake served it.
            response = await super().put_records(
                Records=Records,
                StreamName=StreamName,
                StreamARN=StreamARN,
                StreamId=StreamId,
                DryRun=DryRun,
            )
            second = int(time.monotonic())
            for entry in response["Records"]:
                if "SequenceNumber" in entry:
                    self.stored[second] += 1
                elif entry.get("ErrorCode") == THROTTLED:
                    self.throttled[second] += 1
            return response

        def counts(self) -> tuple[dict[int, int], dict[int, int]]:
            return dict(self.stored), dict(self.throttled)

    return CountingKinesis()


# -- a producer process ------------------------------------------------------------------------


def worker_main(argv: Sequence[str]) -> int:
    """``python -m bench.coordination worker ...``: one producer offering a steady load."""
    parser = argparse.ArgumentParser(prog="bench.coordination worker")
    parser.add_argument("--kinesis", required=True)
    parser.add_argument("--store-endpoint", required=True)
    parser.add_argument("--store", choices=("dynamodb", "s3"), required=True)
    parser.add_argument("--store-name", required=True)
    parser.add_argument("--coordinate", action="store_true")
    parser.add_argument("--rate", type=float, required=True, help="records/s offered")
    parser.add_argument("--shard-rate", type=float, required=True)
    parser.add_argument("--duration", type=float, required=True)
    args = parser.parse_args(argv)
    import anyio

    anyio.run(_worker, args)
    return 0


async def _worker(args: argparse.Namespace) -> None:
    import anyio

    from aiokpl import Producer
    from aiokpl._kinesis import create_client
    from aiokpl.coordination import Coordination, DynamoDBStore, S3Store

    def emit(document: Mapping[str, Any]) -> None:
        print(json.dumps(document), flush=True)

    config = local_config(
        args.kinesis,
        aggregation_enabled=False,
        rate_limit_records_per_sec_per_shard=args.shard_rate,
        record_ttl_ms=TTL_MS,
        # Back-pressure at one second of the offered load: put_record waits beyond that,
        # as an application with bounded memory would.
        max_outstanding_records=max(1, int(args.rate)),
    )
    store_config = config.replace(endpoint_url=args.store_endpoint)
    async with contextlib.AsyncExitStack() as stack:
        coordination = None
        if args.coordinate:
            client = await stack.enter_async_context(create_client(store_config, args.store))
            store: Any = (
                S3Store(client, args.store_name, "bench/")
                if args.store == "s3"
                else DynamoDBStore(client, args.store_name, "bench")
            )
            coordination = Coordination(
                store=store, interval=1.0, shard_max_records_per_sec=args.shard_rate
            )
        producer = await stack.enter_async_context(Producer(config, coordination=coordination))
        codes: Counter[str] = Counter()
        # Round trips of the PutRecords requests (each attempt's duration): how slow the
        # throttle feedback is on this machine now.
        attempts = [0.0, 0]

        def tally(outcome: Any) -> None:
            result = outcome.result()
            codes["delivered" if result.success else str(result.error_code)] += 1
            for attempt in result.attempts:
                attempts[0] += attempt.duration
                attempts[1] += 1

        emit({"ready": True})
        # Wait for the parent's "go", so every producer of a phase starts at the same time.
        await anyio.to_thread.run_sync(sys.stdin.readline)
        started = time.monotonic()
        tick = 0.02
        owed = 0.0
        index = 0
        next_line = started
        prefix = uuid.uuid4().hex[:8]
        while (now := time.monotonic()) < started + args.duration:
            owed += args.rate * tick
            while owed >= 1.0:
                owed -= 1.0
                index += 1
                outcome = await producer.put_record(
                    stream=STREAM, partition_key=f"{prefix}-{index}", data=b"x" * 100
                )
                outcome.add_done_callback(tally)
            if now >= next_line:
                next_line += 1.0
                streams = producer.statistics().streams
                ceilings = streams[0].ceilings_by_shard if streams else {}
                emit(
                    {
                        "t": now,
                        "ceilings": {s: c[0] for s, c in ceilings.items()},
                        "codes": dict(codes),
                        "attempts": attempts,
                    }
                )
            await anyio.sleep(tick)
        emit({"final": {"put": index, **codes}})
        # Leave at once: the phase is over, and a flush of a congested producer could take
        # up to its TTL; what was still pending is neither delivered nor expired yet.
        sys.stdout.flush()
        os._exit(0)


# -- the experiment ----------------------------------------------------------------------------


class _Process(LineProcess):
    """A producer process of this benchmark."""

    def go(self) -> None:
        self.send("go")

    def attempts_at(self, at: float) -> tuple[float, int]:
        """Its (summed attempt durations, attempts) as of its last line at or before ``at``."""
        total: tuple[float, int] = (0.0, 0)
        for line in self.lines:
            if "t" in line and line["t"] <= at:
                total = (float(line["attempts"][0]), int(line["attempts"][1]))
        return total

    def codes_at(self, at: float) -> Counter[str]:
        """Its outcome counts as of its last line at or before ``at``."""
        codes: Counter[str] = Counter()
        for line in self.lines:
            if "t" in line and line["t"] <= at:
                codes = Counter(line["codes"])
        return codes

    @property
    def final(self) -> dict[str, int] | None:
        return next((line["final"] for line in self.lines if "final" in line), None)


_processes = processes


def _environment() -> dict[str, str]:
    return producer_environment(ROOT)


def _spawn(name: str, arguments: list[str], into: list[_Process]) -> _Process:
    environment = _environment()
    return spawn(_Process, "bench.coordination", name, arguments, into, cwd=ROOT, env=environment)


@dataclass
class PhaseResult:
    """What one phase measured (window figures over its steady part)."""

    name: str
    window: tuple[float, float]
    capacity: float
    delivered_fraction: float
    throttled_fraction: float
    expired: int
    put: int
    seconds: list[float]
    delivered_per_second: list[int]
    throttled_per_second: list[int]
    mean_attempt_seconds: float | None = None
    ceiling_sums: dict[str, list[float | None]] = field(default_factory=dict)
    swap_at: float | None = None
    reconverged_after: float | None = None
    reconverged_within_5pct_after: float | None = None


def _ceiling_sums(
    procs: Sequence[_Process], start: float, seconds: int, dead: Mapping[str, float]
) -> dict[str, list[float | None]]:
    """Per shard, per second of the phase: the sum of the live producers' latest ceilings."""
    sums: dict[str, list[float | None]] = defaultdict(lambda: [None] * seconds)
    for second in range(seconds):
        at = start + second + 1
        totals: dict[str, float] = defaultdict(float)
        for item in procs:
            if item.name in dead and dead[item.name] <= at:
                continue
            latest = None
            for line in item.lines:
                if "t" in line and line["t"] <= at:
                    latest = line
            if latest is not None and at - latest["t"] <= 2.5:
                for shard, ceiling in latest["ceilings"].items():
                    totals[shard] += ceiling
        for shard, total in totals.items():
            sums[shard][second] = total
    return dict(sums)


def _reconverged(
    sums: Mapping[str, list[float | None]], capacity: float, swap: int, tolerance: float = 0.1
) -> float | None:
    """Seconds after ``swap`` from which every shard's sum stays within ``tolerance``."""
    length = max((len(v) for v in sums.values()), default=0)
    last_bad = swap - 1
    for second in range(swap, length):
        for values in sums.values():
            value = values[second]
            if value is None or abs(value - capacity) > tolerance * capacity:
                last_bad = second
    if last_bad >= length - 3:  # not settled for at least 3 s before the end: not converged
        return None
    return float(last_bad + 1 - swap)


def run_phase(
    name: str,
    *,
    coordinate: bool,
    kinesis: str,
    store_endpoint: str,
    store: str,
    store_name: str,
    shard_rate: float,
    duration: float,
    window: tuple[float, float],
    swap_at: float | None,
    server: Any,
    fake: Any,
) -> PhaseResult:
    capacity = shard_rate * SHARDS
    per_producer = 2.0 * capacity / PRODUCERS  # 2× the stream's capacity in total
    common = [
        f"--kinesis={kinesis}",
        f"--store-endpoint={store_endpoint}",
        f"--store={store}",
        f"--store-name={store_name}",
        f"--rate={per_producer}",
        f"--shard-rate={shard_rate}",
    ]
    if coordinate:
        common.append("--coordinate")
    dead: dict[str, float] = {}
    with _processes() as procs:
        for index in range(PRODUCERS):
            _spawn(f"p{index}", [*common, f"--duration={duration}"], procs)
        joiner = None
        if swap_at is not None:
            # Started now and held until the swap: its interpreter start-up is not counted.
            joiner = _spawn("p-new", [*common, f"--duration={duration - swap_at}"], procs)
        for item in procs:
            item.wait_ready(timeout=60.0)
        # Start on a whole second of the monotonic clock, so the server's per-second
        # counts line up with the phase's seconds.
        time.sleep(math.ceil(time.monotonic()) - time.monotonic())
        start = time.monotonic()
        for item in procs[:PRODUCERS]:
            item.go()
        if joiner is not None and swap_at is not None:
            time.sleep(max(0.0, start + swap_at - time.monotonic()))
            procs[0].process.terminate()  # SIGTERM: gone at once, no clean-up
            dead[procs[0].name] = time.monotonic()
            joiner.go()
        deadline = start + duration + 30.0
        for item in procs:
            item.process.wait(timeout=max(1.0, deadline - time.monotonic()))
            if item.thread is not None:
                item.thread.join(timeout=5.0)
    stored, throttled = server.call(fake.counts)
    seconds = int(duration)
    first = int(start)
    delivered_series = [stored.get(first + s, 0) for s in range(seconds)]
    throttled_series = [throttled.get(first + s, 0) for s in range(seconds)]
    low, high = (int(window[0]), int(window[1]))
    delivered = sum(delivered_series[low:high])
    throttled_count = sum(throttled_series[low:high])
    sent = delivered + throttled_count
    expired = sum(
        item.codes_at(start + high)["Expired"] - item.codes_at(start + low)["Expired"]
        for item in procs
    )
    put = sum((item.final or {}).get("put", 0) for item in procs)
    seconds_sum = count = 0.0
    for item in procs:
        (high_sum, high_count), (low_sum, low_count) = (
            item.attempts_at(start + high),
            item.attempts_at(start + low),
        )
        seconds_sum += high_sum - low_sum
        count += high_count - low_count
    result = PhaseResult(
        name=name,
        window=window,
        capacity=capacity,
        delivered_fraction=delivered / (capacity * (high - low)),
        throttled_fraction=throttled_count / sent if sent else 0.0,
        expired=expired,
        put=put,
        seconds=[float(s) for s in range(seconds)],
        delivered_per_second=delivered_series,
        throttled_per_second=throttled_series,
        mean_attempt_seconds=seconds_sum / count if count else None,
    )
    if coordinate:
        result.ceiling_sums = _ceiling_sums(procs, start, seconds, dead)
        if swap_at is not None:
            result.swap_at = swap_at
            swap = int(swap_at)
            result.reconverged_after = _reconverged(result.ceiling_sums, shard_rate, swap)
            result.reconverged_within_5pct_after = _reconverged(
                result.ceiling_sums, shard_rate, swap, tolerance=0.05
            )
    return result


@dataclass
class Experiment:
    """Both phases of one run, and how they were set up."""

    store: str
    shard_rate: float
    without: PhaseResult
    with_coordination: PhaseResult


def run(*, quick: bool = False, store: str = "dynamodb", shard_rate: float = 500.0) -> Experiment:
    """Run both phases; servers and processes are stopped before this returns."""
    from aiokpl._kinesis import create_client
    from aiokpl.coordination import DynamoDBStore
    from aiokpl.testing import LoopbackKinesis
    from aiokpl.testing._servers import moto_server

    if quick:
        without_duration, without_window = 8.0, (3.0, 8.0)
        with_duration, with_window, swap_at = 34.0, (10.0, 18.0), 18.0
    else:
        without_duration, without_window = 30.0, (10.0, 30.0)
        with_duration, with_window, swap_at = 75.0, (15.0, 40.0), 40.0
    fake = _counting_fake()
    fake.add_stream(STREAM, shard_count=SHARDS, throttle=True, records_per_second=shard_rate)
    store_name = f"aiokpl-bench-{uuid.uuid4().hex[:8]}"
    with moto_server() as store_endpoint, LoopbackKinesis(fake).running_in_thread() as server:
        import anyio

        from aiokpl import Config

        async def prepare() -> None:
            config = Config(
                region="us-east-1",
                endpoint_url=store_endpoint,
                aws_access_key_id=DUMMY_KEY,
                aws_secret_access_key=DUMMY_KEY,
            )
            async with create_client(config, store) as client:
                if store == "s3":
                    await client.create_bucket(Bucket=store_name)
                else:
                    await DynamoDBStore(client, store_name, "bench").create_table()

        anyio.run(prepare)
        common: dict[str, Any] = {
            "kinesis": server.endpoint_url,
            "store_endpoint": store_endpoint,
            "store": store,
            "store_name": store_name,
            "shard_rate": shard_rate,
            "server": server,
            "fake": fake,
        }
        # The summarizer starts first, so its start-up overlaps the first phase, which
        # publishes nothing: it idles through it. The loopback server runs in this process
        # and keeps every record it stores; a full pass of the cyclic garbage collector over
        # them stalls it (and so the stream) for up to a second: collection is off meanwhile.
        gc.collect()
        gc.disable()
        try:
            with _summarizer(store, store_endpoint, store_name):
                without = run_phase(
                    "without coordination",
                    coordinate=False,
                    duration=without_duration,
                    window=without_window,
                    swap_at=None,
                    **common,
                )
                with_coordination = run_phase(
                    "with coordination",
                    coordinate=True,
                    duration=with_duration,
                    window=with_window,
                    swap_at=swap_at,
                    **common,
                )
        finally:
            gc.enable()
    return Experiment(store, shard_rate, without, with_coordination)


@contextlib.contextmanager
def _summarizer(store: str, endpoint: str, name: str) -> Iterator[None]:
    """``aiokpl coordinate`` in a process of its own, for the length of the block."""
    where = (
        ["--s3", f"{name}/bench/"] if store == "s3" else ["--dynamodb", name, "--group", "bench"]
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiokpl",
            "coordinate",
            *where,
            "--interval=1",
            "--region=us-east-1",
            f"--endpoint-url={endpoint}",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=_environment(),
    )
    try:
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def plot(experiment: Experiment, path: Path) -> None:
    """Aggregate throughput, throttle rate and (with coordination) ceiling sums over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    throughput, throttling, ceilings = axes
    for phase, colour in (
        (experiment.without, "tab:red"),
        (experiment.with_coordination, "tab:blue"),
    ):
        seconds = phase.seconds
        throughput.plot(seconds, phase.delivered_per_second, color=colour, label=phase.name)
        rates = [
            100.0 * t / (d + t) if d + t else 0.0
            for d, t in zip(phase.delivered_per_second, phase.throttled_per_second, strict=True)
        ]
        throttling.plot(seconds, rates, color=colour, label=phase.name)
    capacity = experiment.without.capacity
    throughput.axhline(capacity, color="grey", linestyle="--", label="stream capacity")
    throughput.set_ylabel("records stored / s")
    throughput.set_title(
        f"{PRODUCERS} producer processes, 2 shards × {experiment.shard_rate:g} records/s, "
        "offering 2× capacity"
    )
    throttling.set_ylabel("Kinesis records throttled (%)")
    phase = experiment.with_coordination
    for shard, values in sorted(phase.ceiling_sums.items()):
        ceilings.plot(
            phase.seconds,
            [float("nan") if v is None else v for v in values],
            label=f"sum of ceilings, {shard}",
        )
    ceilings.axhline(experiment.shard_rate, color="grey", linestyle="--", label="shard capacity")
    ceilings.set_ylabel("records/s")
    ceilings.set_xlabel("seconds since the phase started")
    for axis in axes:
        if phase.swap_at is not None:
            axis.axvline(phase.swap_at, color="black", linestyle=":", linewidth=1)
        axis.legend(loc="upper right", fontsize="small")
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _describe(experiment: Experiment) -> str:
    lines = [
        f"store: {experiment.store}; stream: {SHARDS} shards × {experiment.shard_rate:g} "
        f"records/s; {PRODUCERS} producers offering 2× capacity in total",
        f"{'':24}{'delivered':>12}{'throttled':>12}{'expired':>10}{'window (s)':>14}"
        f"{'round trip':>12}",
    ]
    for phase in (experiment.without, experiment.with_coordination):
        trip = phase.mean_attempt_seconds
        lines.append(
            f"{phase.name:24}{phase.delivered_fraction:>11.1%} {phase.throttled_fraction:>11.2%}"
            f"{phase.expired:>10}{f'{phase.window[0]:g}–{phase.window[1]:g}':>14}"
            f"{'-' if trip is None else f'{trip * 1000:.0f} ms':>12}"
        )
    phase = experiment.with_coordination
    if phase.swap_at is not None:
        verdicts = [
            f"{after:g} s" if after is not None else "not settled by the end"
            for after in (phase.reconverged_after, phase.reconverged_within_5pct_after)
        ]
        lines.append(
            f"one producer killed and a new one started at t = {phase.swap_at:g} s: the sum of "
            f"ceilings per shard back within 10% of capacity after {verdicts[0]} "
            f"(within 5% after {verdicts[1]})"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["worker"]:
        return worker_main(arguments[1:])
    parser = argparse.ArgumentParser(prog="python -m bench.coordination", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short phases (about a minute)")
    parser.add_argument("--store", choices=("dynamodb", "s3"), default="dynamodb")
    parser.add_argument("--shard-rate", type=float, default=500.0, help="records/s per shard")
    parser.add_argument("--png", type=Path, default=None, help="draw the figure here")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(arguments)
    experiment = run(quick=args.quick, store=args.store, shard_rate=args.shard_rate)
    print(_describe(experiment))
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(experiment), indent=1))
    if args.png is not None:
        plot(experiment, args.png)
        print(f"figure: {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

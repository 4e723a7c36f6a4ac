"""Ordering: what ``Config(ordering="shard")`` costs beside the default, on the same loads.

Strict order per shard sends at most one request per shard at a time, one Kinesis record for
it each, so a shard's throughput is bounded by its record size over the round trip. Two parts:

* **round trip** (virtual clock, trio ``MockClock``): the 4-shard throttling server of the
  latency scenario (1000 records/s and 1 MiB/s per shard, exact) answering every call after
  ``LATENCY_MS`` = 25 ms, a real ``PutRecords`` round trip. User records of about 1008 bytes
  over 4096 keys, aggregation on, default settings otherwise. Offered at 50% of the byte
  capacity, each record's latency (put → outcome) is timed; offered at 2× for the same time,
  the goodput is the bytes the stream stored per second (after the first second). Then the
  same 50% load with aggregation off: one user record per shard per round trip.
* **CPU** (real clock, asyncio): the pipeline-ceiling load (100-byte records, 4096 keys, a
  64-shard in-process ``FakeKinesis`` answering at once) put as fast as the producer takes
  them, in both modes, rounds interleaved, best time of each: the bookkeeping the lanes add.

Nothing here is a target of SPEC §6: the rows are information, ratios of ``shard`` to
``aggregate`` measured side by side in one run.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import anyio
import trio.testing

from aiokpl import Config, Producer
from aiokpl.testing import FakeKinesis

from . import _load
from .report import Row, ScenarioResult

LATENCY_MS = 25
SECONDS = 10.0
QUICK_SECONDS = 3.0
MODES = ("aggregate", "shard")
CPU_RECORDS = 100_000
QUICK_CPU_RECORDS = 20_000
CPU_ROUNDS = 3
QUICK_CPU_ROUNDS = 1
CPU_SHARDS = 64
CPU_DATA_SIZE = 100


async def _round_trip(ordering: str, fraction: float, seconds: float, aggregation: bool) -> Any:
    fake = _load.throttling_server()
    fake.latency = LATENCY_MS / 1000
    config = Config(region="us-east-1", ordering=ordering, aggregation_enabled=aggregation)  # type: ignore[arg-type]
    rate = fraction * _load.CAPACITY_BYTES_PER_SECOND / _load.MEAN_RECORD_BYTES
    async with Producer(config, client=fake) as producer:
        await _load.warm_up(producer)
        load = await _load.offer(producer, rate, seconds, clock=anyio.current_time)
        end = anyio.current_time()
        statistics = producer.statistics()
    delivery = _load.match(fake, load)
    latencies = sorted(
        done - put
        for put, done, outcome in zip(load.put_times, load.done_times, load.outcomes, strict=True)
        if done and outcome.result().success
    )
    stored = _load.kinesis_bytes_between(fake, load.started_at + 1.0, end)
    return {
        "ordering": ordering,
        "aggregation_enabled": aggregation,
        "offered_fraction_of_capacity": load.put_bytes
        / load.offered_seconds
        / _load.CAPACITY_BYTES_PER_SECOND,
        "records_put": load.put,
        "goodput_bytes_per_second": stored / (end - load.started_at - 1.0),
        "goodput_fraction_of_capacity": stored
        / (end - load.started_at - 1.0)
        / _load.CAPACITY_BYTES_PER_SECOND,
        "percentiles_seconds": _load.percentiles(latencies),
        "requests_sent": statistics.requests_sent,
        "kinesis_records_sent": fake.entries,
        "kinesis_records_throttled": fake.throttled,
        "delivery": delivery.__dict__,
    }


def _virtual(ordering: str, fraction: float, seconds: float, aggregation: bool = True) -> Any:
    clock = trio.testing.MockClock(autojump_threshold=0)
    return anyio.run(
        _round_trip,
        ordering,
        fraction,
        seconds,
        aggregation,
        backend="trio",
        backend_options={"clock": clock},
    )


async def _cpu_once(ordering: str, count: int) -> float:
    fake = FakeKinesis()
    fake.add_stream("bench", shard_count=CPU_SHARDS)
    keys = [f"key-{i}" for i in range(_load.KEYS)]
    data = b"x" * CPU_DATA_SIZE
    config = Config(region="us-east-1", ordering=ordering)  # type: ignore[arg-type]
    async with Producer(config, client=fake) as producer:
        await (await producer.put_record(stream="bench", partition_key="warm-up", data=b"w"))
        put = producer.put_record
        started = time.perf_counter()
        for index in range(count):
            await put(stream="bench", partition_key=keys[index % _load.KEYS], data=data)
        await producer.flush()
        elapsed = time.perf_counter() - started
        failed = producer.statistics().records_failed
    if failed:
        raise RuntimeError(f"{failed} records failed in the CPU part ({ordering})")
    return elapsed


def _cpu(count: int, rounds: int) -> dict[str, float]:
    best = dict.fromkeys(MODES, float("inf"))
    for _ in range(rounds):
        for ordering in MODES:
            gc.collect()
            best[ordering] = min(best[ordering], anyio.run(_cpu_once, ordering, count))
    return {ordering: count / seconds for ordering, seconds in best.items()}


def run(quick: bool = False, http: bool = False) -> ScenarioResult:
    seconds = QUICK_SECONDS if quick else SECONDS
    result = ScenarioResult("ordering")
    half = {mode: _virtual(mode, 0.5, seconds) for mode in MODES}
    double = {mode: _virtual(mode, 2.0, seconds) for mode in MODES}
    raw = {mode: _virtual(mode, 0.5, seconds, aggregation=False) for mode in MODES}
    count = QUICK_CPU_RECORDS if quick else CPU_RECORDS
    cpu = _cpu(count, QUICK_CPU_ROUNDS if quick else CPU_ROUNDS)
    result.details = {
        "latency_ms": LATENCY_MS,
        "seconds": seconds,
        "clock": "virtual clock, trio MockClock (round trip); real clock, asyncio (CPU)",
        "half_capacity": half,
        "twice_capacity": double,
        "half_capacity_aggregation_off": raw,
        "cpu_records": count,
        "cpu_records_per_second": cpu,
        "http": http,
    }

    def latency(runs: dict[str, Any], label: str) -> None:
        p = {mode: runs[mode]["percentiles_seconds"] for mode in MODES}
        failed = {mode: sum(runs[mode]["delivery"]["failed_by_code"].values()) for mode in MODES}
        result.rows.append(
            Row(
                f"ordering/latency{label}",
                f"p50 {p['aggregate']['p50'] * 1000:.0f} → {p['shard']['p50'] * 1000:.0f} ms, "
                f"p99 {p['aggregate']['p99'] * 1000:.0f} → {p['shard']['p99'] * 1000:.0f} ms "
                f"(aggregate → shard; 50% of 4 shards, {LATENCY_MS} ms round trip; "
                f"failed {failed['aggregate']} → {failed['shard']})",
                "information",
                p["shard"]["p99"] / p["aggregate"]["p99"],
                "p99 shard/aggregate",
                None,
            )
        )

    latency(half, "")
    goodput = {mode: double[mode]["goodput_fraction_of_capacity"] for mode in MODES}
    result.rows.append(
        Row(
            "ordering/goodput",
            f"{goodput['aggregate']:.1%} → {goodput['shard']:.1%} of capacity delivered at 2× "
            f"offered (aggregate → shard; {LATENCY_MS} ms round trip)",
            "information",
            goodput["shard"] / goodput["aggregate"],
            "shard/aggregate",
            None,
        )
    )
    latency(raw, "/raw")
    result.rows.append(
        Row(
            "ordering/cpu",
            f"{cpu['aggregate']:,.0f} → {cpu['shard']:,.0f} records/s put → resolved "
            f"(aggregate → shard; {count:,} × {CPU_DATA_SIZE} B, {CPU_SHARDS} shards, asyncio)",
            "information",
            cpu["shard"] / cpu["aggregate"],
            "shard/aggregate",
            None,
        )
    )
    return result

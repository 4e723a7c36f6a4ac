"""Pipeline ceiling: how fast records go from ``put_record`` to a resolved outcome.

200k records of 100 bytes over 4096 partition keys go through a ``Producer`` (aggregation on)
into a 64-shard in-process ``FakeKinesis``; the clock runs from the first put to the end of
``flush()``, which returns once every outcome is resolved.

It is compared with a **bare loop** doing only the work no producer can avoid, with the
producer's own pieces, on the same records, the same fake, in the same event loop, a moment
before: for each record, encode the key, hash it (``hash_key_of``), look up its shard in a
``ShardTable``, add it to that shard's ``AggregateBuilder`` (``try_add``, the producer's own
call; ``encode()`` when the next record would not fit 51,200 bytes), and send the aggregates in
``put_records`` calls of at most 500 records and 5 MiB, awaited one after another. That is our
physical limit; pipeline time over bare-loop time is what the pipeline itself costs
(validation, outcomes, deadlines, rate limiting, collection, concurrency, result bookkeeping).

Each round runs, in one ``anyio.run`` per backend: bare loop, pipeline, then both again with the
garbage collector disabled (the headline figures are with it on). Rounds interleave the
backends (asyncio, trio, and asyncio on uvloop when it is installed) so that noise from other
processes hits them all alike; the best time of each is kept.
"""

from __future__ import annotations

import gc
import importlib.util
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import anyio

from aiokpl import Config, Producer
from aiokpl._core.encoder import AggregateBuilder
from aiokpl._core.hashing import hash_key_of
from aiokpl._core.shards import ShardTable
from aiokpl.aggregation import deaggregate_records
from aiokpl.testing import FakeKinesis

from .report import Row, ScenarioResult

RECORDS = 200_000
QUICK_RECORDS = 40_000
ROUNDS = 3
QUICK_ROUNDS = 1
KEYS = 4096
DATA_SIZE = 100
SHARDS = 64
AGGREGATE_MAX_SIZE = 51_200  # Config.aggregation_max_size's default
REQUEST_MAX_RECORDS = 500
REQUEST_MAX_BYTES = 5 * 1024 * 1024
AIM_RECORDS_PER_SECOND = 150_000
TARGET_BARE_RATIO = 2.0
TARGET_TRIO_RATIO = 0.8

_VARIANTS = ("bare", "pipeline", "bulk", "bare_nogc", "pipeline_nogc")
BULK_GROUP = 500  # records per put_records call in the "bulk" variant


def uvloop_available() -> bool:
    return importlib.util.find_spec("uvloop") is not None


async def bare_loop(fake: FakeKinesis, stream: str, keys: list[str], data: bytes, n: int) -> float:
    """The unavoidable work on ``n`` records; returns its time in seconds."""
    table = ShardTable.from_shards((await fake.list_shards(StreamName=stream))["Shards"])
    lookup = table.lookup
    put_records = fake.put_records
    nkeys = len(keys)
    open_aggregates: dict[str | None, tuple[AggregateBuilder, int]] = {}
    entries: list[dict[str, Any]] = []
    entries_size = 0
    failed = 0

    async def send() -> None:
        nonlocal entries, entries_size, failed
        answer = await put_records(StreamName=stream, Records=entries)
        failed += answer["FailedRecordCount"]
        entries = []
        entries_size = 0

    async def emit(builder: AggregateBuilder, first_hash: int) -> None:
        nonlocal entries_size
        blob = builder.encode()
        size = len(blob) + 1
        if len(entries) >= REQUEST_MAX_RECORDS or entries_size + size > REQUEST_MAX_BYTES:
            await send()
        entries.append({"Data": blob, "PartitionKey": "a", "ExplicitHashKey": str(first_hash)})
        entries_size += size

    start = time.perf_counter()
    for i in range(n):
        key = keys[i % nkeys].encode()
        hash_key = hash_key_of(key)
        shard = lookup(hash_key)
        slot = open_aggregates.get(shard)
        if slot is None:
            slot = open_aggregates[shard] = (AggregateBuilder(), hash_key)
        builder = slot[0]
        if not builder.try_add(key, data, None, AGGREGATE_MAX_SIZE):
            await emit(builder, slot[1])
            builder = AggregateBuilder()
            open_aggregates[shard] = (builder, hash_key)
            builder.add(key, data)
    for builder, first_hash in open_aggregates.values():
        await emit(builder, first_hash)
    if entries:
        await send()
    elapsed = time.perf_counter() - start
    if failed:
        raise RuntimeError(f"bare loop: {failed} Kinesis records failed")
    return elapsed


async def pipeline(
    fake: FakeKinesis,
    stream: str,
    keys: list[str],
    data: bytes,
    n: int,
    config: Config | None = None,
    cpu_seconds: list[float] | None = None,
    *,
    tracer_provider: Any = None,
    around: Callable[[], AbstractContextManager[Any]] | None = None,
) -> float:
    """``n`` records through a ``Producer``: put → every outcome resolved; returns seconds.

    ``cpu_seconds``, if given, receives the process's CPU time over the same span.
    ``tracer_provider`` goes to the producer (with ``config.tracing``); ``around``, if given,
    is entered around each put, e.g. an application's span (``bench/tracing.py``).
    """
    config = config or Config(region="us-east-1")
    options = {} if tracer_provider is None else {"tracer_provider": tracer_provider}
    async with Producer(config, client=fake, **options) as producer:
        # Load the shard map first: the clock measures the steady state, not start-up.
        warm_up = await producer.put_record(stream=stream, partition_key="warm-up", data=b"w")
        await producer.flush()  # sent now, whatever config.record_max_buffered_time_ms says
        await warm_up
        put = producer.put_record
        nkeys = len(keys)
        start = time.perf_counter()
        cpu_start = time.process_time()
        if around is None:
            outcomes = [
                await put(stream=stream, partition_key=keys[i % nkeys], data=data) for i in range(n)
            ]
        else:
            outcomes = []
            for i in range(n):
                with around():
                    outcomes.append(
                        await put(stream=stream, partition_key=keys[i % nkeys], data=data)
                    )
        await producer.flush()
        elapsed = time.perf_counter() - start
        if cpu_seconds is not None:
            cpu_seconds.append(time.process_time() - cpu_start)
    failed = sum(1 for outcome in outcomes if not outcome.result().success)
    if failed:
        raise RuntimeError(f"pipeline: {failed} of {n} records failed")
    return elapsed


async def bulk(fake: FakeKinesis, stream: str, keys: list[str], data: bytes, n: int) -> float:
    """As ``pipeline``, with ``put_records`` in groups of ``BULK_GROUP``; returns seconds."""
    async with Producer(Config(region="us-east-1"), client=fake) as producer:
        await (await producer.put_record(stream=stream, partition_key="warm-up", data=b"w"))
        nkeys = len(keys)
        groups = [
            [(keys[i % nkeys], data) for i in range(start, min(n, start + BULK_GROUP))]
            for start in range(0, n, BULK_GROUP)
        ]  # built before the clock starts: a caller of put_records holds its records already
        put_records = producer.put_records
        start = time.perf_counter()
        outcomes = [await put_records(stream=stream, records=group) for group in groups]
        await producer.flush()
        elapsed = time.perf_counter() - start
    failed = sum(1 for group in outcomes for outcome in group if not outcome.result().success)
    if failed:
        raise RuntimeError(f"bulk: {failed} of {n} records failed")
    return elapsed


def _check_stored(fake: FakeKinesis, stream: str, expected: int) -> None:
    stored = fake.stored_records(stream)
    user_records = len(
        deaggregate_records(
            [{"Data": r.data, "PartitionKey": r.partition_key} for r in stored]  # consumer shape
        )
    )
    if user_records != expected:
        raise RuntimeError(f"{stream}: {user_records} user records stored, expected {expected}")


async def _round(n: int) -> dict[str, float]:
    keys = [f"key-{i}" for i in range(KEYS)]
    data = bytes(range(DATA_SIZE))
    fake = FakeKinesis()
    for variant in _VARIANTS:
        fake.add_stream(variant, shard_count=SHARDS)
    times: dict[str, float] = {}
    for variant in _VARIANTS:
        run = bare_loop if variant.startswith("bare") else bulk if variant == "bulk" else pipeline
        gc.collect()
        if variant.endswith("nogc"):
            gc.disable()
        try:
            times[variant] = await run(fake, variant, keys, data, n)
        finally:
            gc.enable()
    _check_stored(fake, "bare", n)
    _check_stored(fake, "pipeline", n + 1)  # and the warm-up record
    _check_stored(fake, "bulk", n + 1)
    return times


def _backends() -> list[tuple[str, str, dict[str, Any]]]:
    backends: list[tuple[str, str, dict[str, Any]]] = [
        ("asyncio", "asyncio", {}),
        ("trio", "trio", {}),
    ]
    if uvloop_available():
        backends.append(("uvloop", "asyncio", {"use_uvloop": True}))
    return backends


def run(quick: bool = False, http: bool = False) -> ScenarioResult:
    """Run the scenario; ``http`` is ignored (the ceiling is measured in process)."""
    n = QUICK_RECORDS if quick else RECORDS
    rounds = QUICK_ROUNDS if quick else ROUNDS
    result = ScenarioResult("pipeline")
    samples: dict[str, dict[str, list[float]]] = {}
    for _ in range(rounds):
        for name, backend, options in _backends():
            times = anyio.run(_round, n, backend=backend, backend_options=options)
            for variant, seconds in times.items():
                samples.setdefault(name, {}).setdefault(variant, []).append(seconds)
    best = {name: {v: min(s) for v, s in runs.items()} for name, runs in samples.items()}
    result.details = {
        "records": n,
        "rounds": rounds,
        "keys": KEYS,
        "data_size": DATA_SIZE,
        "shards": SHARDS,
        "best_seconds": best,
        "median_seconds": {
            name: {v: statistics.median(s) for v, s in runs.items()}
            for name, runs in samples.items()
        },
        "samples_seconds": samples,
        "uvloop": "installed" if uvloop_available() else "not installed",
    }

    def rate(seconds: float) -> str:
        return f"{n / seconds / 1000:,.1f}k rec/s"

    for name, times in best.items():
        scenario = f"pipeline/{name}"
        bare, pipe = times["bare"], times["pipeline"]
        bare_nogc, pipe_nogc = times["bare_nogc"], times["pipeline_nogc"]
        result.details.setdefault("records_per_second", {})[name] = n / pipe
        result.rows.append(
            Row(
                scenario,
                f"pipeline {pipe:.2f} s ({rate(pipe)}); bare loop {bare:.2f} s ({rate(bare)})",
                f"pipeline ≤ {TARGET_BARE_RATIO:g}× bare loop",
                pipe / bare,
                "pipeline/bare",
                pipe / bare <= TARGET_BARE_RATIO,
            )
        )
        if name == "asyncio":
            result.rows.append(
                Row(
                    scenario,
                    f"pipeline {rate(pipe)} (absolute; gc on)",
                    f"aim ≥ {AIM_RECORDS_PER_SECOND // 1000}k rec/s",
                    n / pipe / AIM_RECORDS_PER_SECOND,
                    "of aim",
                    n / pipe >= AIM_RECORDS_PER_SECOND,
                )
            )
        grouped = times["bulk"]
        result.rows.append(
            Row(
                scenario,
                f"put_records in groups of {BULK_GROUP}: {grouped:.2f} s ({rate(grouped)})",
                "info (the bulk entry point)",
                grouped / bare,
                "bulk/bare",
            )
        )
        result.rows.append(
            Row(
                scenario,
                f"gc disabled: pipeline {rate(pipe_nogc)}, bare {rate(bare_nogc)}; "
                f"gc on/off {pipe / pipe_nogc:.2f}× time",
                "info (extra: garbage collector off)",
                pipe_nogc / bare_nogc,
                "pipeline/bare",
            )
        )
        if name != "asyncio" and "asyncio" in best:
            versus = best["asyncio"]["pipeline"] / pipe
            target = TARGET_TRIO_RATIO if name == "trio" else None
            result.rows.append(
                Row(
                    scenario,
                    f"{name} {rate(pipe)} vs asyncio {rate(best['asyncio']['pipeline'])}",
                    f"≥ {target:g}× asyncio" if target else "info",
                    versus,
                    f"{name}/asyncio",
                    versus >= target if target else None,
                )
            )
    if not uvloop_available():
        result.rows.append(
            Row("pipeline/uvloop", "not installed (pip install uvloop to measure)", "info")
        )
    return result

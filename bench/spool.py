"""The durable spool: what it costs the pipeline, how soon a record is durable, how fast a
start recovers, and what identities cost a consumer.

Rows (SPEC §6, "durable spool"):

* **throughput**: bench/pipeline.py's set-up (200k records of 100 bytes over 4096 keys,
  aggregation on, a 64-shard in-process ``FakeKinesis``, put → every outcome resolved) run with
  the spool under each fsync policy (``none``, ``interval``, ``batch``) beside the in-memory
  run, in the same ``anyio.run``, one after the other (the order turning from round to round);
  five rounds interleave asyncio and trio and the best time of each is kept (the process's
  CPU time per record too: on a loaded machine the steadier figure). Target: each spool run
  at least half the in-memory throughput. For information, ``interval`` with record
  identities too.
* **accepted → durable**: the same producer paced at ``PACED_RATE`` records a second (a load
  the spool keeps up with; at saturation the figure is queueing, the throughput rows' part):
  the time from ``put_record`` returning to ``record.durable`` becoming true, p50 and p99, for
  every record. One watcher task (no task per record) waits on the oldest record not yet
  durable and stamps it and every later one the same fsync made durable. Target: p99 at most
  the commit interval (``spool_fsync_interval_ms`` for ``interval``, 0 for ``batch`` and
  ``none``) plus 10 ms.
* **recovery**: 1M records (100 bytes each) appended by a ``SpoolWriter``, closed, then a
  start's work on them timed: ``scan`` (read and check every segment, rebuild what is
  resolved) and streaming every unresolved record back (``Recovery.unresolved()``). The page
  cache is warm (the bench cannot drop it): a cold disk adds its read time, about 150 MB here.
  A second pass under ``tracemalloc`` gives the peak memory, which should be about one segment
  (64 MiB), not the spool.
* **fsync** (information): a ``SpoolWriter`` flush of 100 appended records under each policy,
  p50 and p99: what a group commit costs on this disk.
* **Deduper**: ``filter`` then ``commit``, batch by batch, on 1M user records from 10
  producers with 1% copies, per record; and ``deaggregate`` per user record with and without
  the identity tag (aggregates of 100 records of 100 bytes).

Everything is written to a temporary directory on the real file system (``tempfile``'s, or
``AIOKPL_BENCH_SPOOL_DIR``), removed afterwards. ``--quick`` uses 40k pipeline records, one
round on asyncio, 100k records for recovery and the ``Deduper``, and says so in its rows.
"""

from __future__ import annotations

import gc
import os
import random
import shutil
import statistics
import tempfile
import time
import tracemalloc
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio

from aiokpl import Config, Producer
from aiokpl._spool import AckOutcome, FsyncPolicy, OsFiles, SpoolWriter, scan
from aiokpl._spool.policy import FSYNC_MODES, FsyncMode
from aiokpl.aggregation import (
    DeaggregatedRecord,
    Deduper,
    Tag,
    deaggregate,
    encode,
    identity_tag,
    new_producer_id,
)
from aiokpl.testing import FakeKinesis

from . import pipeline as pipeline_scenario
from .report import Row, ScenarioResult

RECOVERY_RECORDS = 1_000_000
QUICK_RECOVERY_RECORDS = 100_000
DEDUPE_RECORDS = 1_000_000
QUICK_DEDUPE_RECORDS = 100_000
DEDUPE_PRODUCERS = 10
DEDUPE_COPY_FRACTION = 0.01
DEDUPE_BATCH = 10_000
AGGREGATE_RECORDS = 100
DEAGGREGATE_AGGREGATES = 2_000
QUICK_DEAGGREGATE_AGGREGATES = 200
DATA_SIZE = 100
FLUSH_SAMPLES = 200
QUICK_FLUSH_SAMPLES = 50
FLUSH_RECORDS = 100
INTERVAL_MS = 50  # Config.spool_fsync_interval_ms in every run here
PACED_RATE = 2_000  # records a second in the latency run
PACED_SECONDS = 3.0
QUICK_PACED_SECONDS = 1.0
PACED_TICK = 0.01  # seconds between groups of puts
ROUNDS = 5  # of the throughput runs, each backend; the best of each variant is kept
TARGET_THROUGHPUT_RATIO = 0.5
TARGET_LATENCY_MARGIN_MS = 10.0

DIRECTORY_VARIABLE = "AIOKPL_BENCH_SPOOL_DIR"


@contextmanager
def _directory() -> Iterator[str]:
    """A new temporary directory on the real file system, removed afterwards."""
    path = tempfile.mkdtemp(prefix="aiokpl-bench-spool-", dir=os.environ.get(DIRECTORY_VARIABLE))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# -- storage: recovery, flush -------------------------------------------------------------------


def _fill(directory: str, n: int) -> int:
    """Append ``n`` records to a new spool at ``directory`` and close it; returns its bytes."""
    writer = SpoolWriter(scan(directory, OsFiles()), policy=FsyncPolicy("none"))
    data = bytes(range(DATA_SIZE))
    append = writer.append
    for i in range(n):
        append(stream="s", partition_key=f"key-{i % 4096}", data=data, accepted_at=0.0)
        if i % 10_000 == 9_999:
            writer.flush(0.0)
    size = writer.statistics().bytes_on_disk
    writer.close(0.0)
    return size


def _recover(directory: str) -> tuple[float, float, int]:
    """A start's work on ``directory``: (scan seconds, replay-stream seconds, records)."""
    start = time.perf_counter()
    recovery = scan(directory, OsFiles())
    scanned = time.perf_counter()
    count = sum(1 for _ in recovery.unresolved())
    streamed = time.perf_counter()
    return scanned - start, streamed - scanned, count


def recovery_figures(n: int) -> dict[str, Any]:
    with _directory() as directory:
        started = time.perf_counter()
        size = _fill(directory, n)
        fill_seconds = time.perf_counter() - started
        segments = sum(1 for name in os.listdir(directory) if name.endswith(".seg"))
        gc.collect()
        scan_seconds, stream_seconds, count = _recover(directory)
        if count != n:
            raise RuntimeError(f"recovery yielded {count} records of {n}")
        gc.collect()
        tracemalloc.start()
        try:
            _recover(directory)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    return {
        "records": n,
        "bytes_on_disk": size,
        "segments": segments,
        "fill_seconds": fill_seconds,
        "scan_seconds": scan_seconds,
        "stream_seconds": stream_seconds,
        "recovery_seconds": scan_seconds + stream_seconds,
        "peak_traced_bytes": peak,
    }


def flush_figures(samples: int) -> dict[str, dict[str, float]]:
    """A flush of ``FLUSH_RECORDS`` appended records, per policy: p50/p99 seconds."""
    data = bytes(range(DATA_SIZE))
    out: dict[str, dict[str, float]] = {}
    for mode in FSYNC_MODES:
        with _directory() as directory:
            writer = SpoolWriter(
                scan(directory, OsFiles()), policy=FsyncPolicy(mode, interval_ms=INTERVAL_MS)
            )
            times: list[float] = []
            fsyncs_before = writer.statistics().fsyncs
            for i in range(samples):
                for _ in range(FLUSH_RECORDS):
                    writer.append(stream="s", partition_key="k", data=data, accepted_at=0.0)
                now = time.perf_counter()
                writer.flush(now)
                times.append(time.perf_counter() - now)
                if i % 50 == 49:  # keep the records resolved, as a running producer does
                    durable = writer.durable_through
                    writer.acknowledge(
                        writer.producer_id, list(range(durable)), AckOutcome.DELIVERED
                    )
            fsyncs = writer.statistics().fsyncs - fsyncs_before
            writer.close(time.perf_counter())
        out[mode] = {
            "p50": _percentile(times, 0.5),
            "p99": _percentile(times, 0.99),
            "flushes": samples,
            "fsyncs": fsyncs,
        }
    return out


# -- the consumer's side: Deduper, deaggregate with identities ----------------------------------


def _dedupe_batches(n: int) -> Iterator[list[DeaggregatedRecord]]:
    """``n`` user records from ``DEDUPE_PRODUCERS`` producers (interleaved, each in its own
    order), 1% of them a copy of a record a little earlier, in batches."""
    rng = random.Random(7)
    ids = [new_producer_id() for _ in range(DEDUPE_PRODUCERS)]
    tags: dict[int, Tag] = {}
    data = bytes(DATA_SIZE)
    batch: list[DeaggregatedRecord] = []
    sent = 0
    i = 0
    while sent < n:
        if i > 1000 and rng.random() < DEDUPE_COPY_FRACTION:
            j = i - rng.randrange(1, 1000)  # a retry: a copy of a recent record
        else:
            j = i
            i += 1
        producer = ids[j % DEDUPE_PRODUCERS]
        sequence = j // DEDUPE_PRODUCERS
        tag = tags.get(j) or identity_tag(producer, sequence)
        tags[j] = tag
        if len(tags) > 4000:
            tags.pop(next(iter(tags)))
        batch.append(DeaggregatedRecord("k", data, None, "1", 0, True, None, (tag,)))
        sent += 1
        if len(batch) == DEDUPE_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def dedupe_figures(n: int) -> dict[str, Any]:
    deduper = Deduper()
    filter_seconds = commit_seconds = 0.0
    kept = 0
    for batch in _dedupe_batches(n):
        start = time.perf_counter()
        fresh = deduper.filter(batch)
        middle = time.perf_counter()
        deduper.commit(fresh)
        filter_seconds += middle - start
        commit_seconds += time.perf_counter() - middle
        kept += len(fresh)
    stats = deduper.statistics
    return {
        "records": n,
        "kept": kept,
        "dropped": stats.dropped,
        "filter_us_per_record": filter_seconds / n * 1e6,
        "commit_us_per_record": commit_seconds / n * 1e6,
        "us_per_record": (filter_seconds + commit_seconds) / n * 1e6,
        "statistics": repr(stats),
    }


def deaggregate_figures(aggregates: int) -> dict[str, Any]:
    producer = new_producer_id()
    data = bytes(range(DATA_SIZE))
    plain = [
        {
            "Data": encode([(f"key-{i}", data) for i in range(AGGREGATE_RECORDS)]),
            "PartitionKey": "a",
        }
        for _ in range(aggregates)
    ]
    tagged = [
        {
            "Data": encode(
                [
                    (f"key-{i}", data, None, [identity_tag(producer, a * AGGREGATE_RECORDS + i)])
                    for i in range(AGGREGATE_RECORDS)
                ]
            ),
            "PartitionKey": "a",
        }
        for a in range(aggregates)
    ]
    best: dict[str, float] = {}
    for _ in range(3):  # alternating, best of three
        for name, records in (("plain", plain), ("tagged", tagged)):
            gc.collect()
            start = time.perf_counter()
            for record in records:
                deaggregate(record)
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
    per = aggregates * AGGREGATE_RECORDS
    return {
        "user_records": per,
        "plain_us_per_record": best["plain"] / per * 1e6,
        "tagged_us_per_record": best["tagged"] / per * 1e6,
        "plain_aggregate_bytes": len(plain[0]["Data"]),
        "tagged_aggregate_bytes": len(tagged[0]["Data"]),
    }


# -- the pipeline with the spool ----------------------------------------------------------------

IDENTITIES = "interval-identities"  # information: what identities add to the spool's cost
VARIANTS = ("memory", *FSYNC_MODES, IDENTITIES)


def spool_wired() -> bool:
    """Whether ``Config`` has the spool (the storage rows run without it)."""
    return "spool_directory" in Config.__dataclass_fields__


def _config(variant: str, directory: str) -> Config:
    if variant == "memory":
        return Config(region="us-east-1")
    mode: FsyncMode = "none" if variant == "none" else "batch" if variant == "batch" else "interval"
    return Config(
        region="us-east-1",
        spool_directory=os.path.join(directory, variant),
        spool_fsync=mode,
        spool_fsync_interval_ms=INTERVAL_MS,
        record_identities=variant == IDENTITIES,
    )


async def _throughput_round(n: int, directory: str, shift: int) -> dict[str, tuple[float, float]]:
    """bench/pipeline.py's pipeline run, in memory and with the spool per policy; the order of
    the variants turns by ``shift`` from one round to the next, so none is always first.
    Returns ``(wall seconds, CPU seconds of the process)`` per variant."""
    keys = [f"key-{i}" for i in range(pipeline_scenario.KEYS)]
    data = bytes(range(pipeline_scenario.DATA_SIZE))
    fake = FakeKinesis()
    times: dict[str, tuple[float, float]] = {}
    for variant in VARIANTS[shift:] + VARIANTS[:shift]:
        fake.add_stream(variant, shard_count=pipeline_scenario.SHARDS)
        gc.collect()
        config = _config(variant, directory)
        cpu: list[float] = []
        wall = await pipeline_scenario.pipeline(fake, variant, keys, data, n, config, cpu)
        times[variant] = (wall, cpu[0])
        pipeline_scenario._check_stored(fake, variant, n + 1)  # and the warm-up record
        if config.spool_directory is not None and not os.listdir(config.spool_directory):
            raise RuntimeError(f"{variant}: the spool directory is empty")
    return times


async def _paced_latencies(variant: FsyncMode, seconds: float, directory: str) -> list[float]:
    """Accepted → durable of every record put at ``PACED_RATE``, in seconds."""
    fake = FakeKinesis()
    fake.add_stream("paced", shard_count=pipeline_scenario.SHARDS)
    per_tick = max(1, round(PACED_RATE * PACED_TICK))
    ticks = round(seconds / PACED_TICK)
    pending: deque[tuple[float, Any]] = deque()
    latencies: list[float] = []
    done = anyio.Event()
    arrived = anyio.Event()

    async def watch() -> None:
        nonlocal arrived
        while True:
            if not pending:
                if done.is_set():
                    return
                await arrived.wait()
                arrived = anyio.Event()
                continue
            await pending[0][1].wait_durable()
            now = time.perf_counter()
            while pending and pending[0][1].durable:
                latencies.append(now - pending.popleft()[0])

    async with Producer(_config(variant, directory), client=fake) as producer:
        await (await producer.put_record(stream="paced", partition_key="warm-up", data=b"w"))
        data = bytes(range(DATA_SIZE))
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watch)
            start = time.perf_counter()
            for tick in range(ticks):
                for i in range(per_tick):
                    record = await producer.put_record(
                        stream="paced", partition_key=f"key-{tick}-{i}", data=data
                    )
                    pending.append((time.perf_counter(), record))
                arrived.set()
                await anyio.sleep(max(0.0, start + (tick + 1) * PACED_TICK - time.perf_counter()))
            done.set()
            arrived.set()
        await producer.flush()
    if len(latencies) != ticks * per_tick:
        raise RuntimeError(f"{variant}: {len(latencies)} latencies of {ticks * per_tick} records")
    return latencies


async def _latency_run(seconds: float, directory: str) -> dict[str, list[float]]:
    return {mode: await _paced_latencies(mode, seconds, directory) for mode in FSYNC_MODES}


def pipeline_figures(quick: bool) -> dict[str, Any]:
    n = pipeline_scenario.QUICK_RECORDS if quick else pipeline_scenario.RECORDS
    rounds = 1 if quick else ROUNDS
    backends = ("asyncio",) if quick else ("asyncio", "trio")
    samples: dict[str, dict[str, list[float]]] = {}
    cpu: dict[str, dict[str, list[float]]] = {}
    latencies: dict[str, list[float]] = {}
    with _directory() as directory:
        for r in range(rounds):
            for backend in backends:
                sub = os.path.join(directory, f"{backend}-{r}")
                shift = (r * len(backends) + backends.index(backend)) % len(VARIANTS)
                times = anyio.run(_throughput_round, n, sub, shift, backend=backend)
                for variant, (seconds, cpu_seconds) in times.items():
                    samples.setdefault(backend, {}).setdefault(variant, []).append(seconds)
                    cpu.setdefault(backend, {}).setdefault(variant, []).append(cpu_seconds)
        paced = QUICK_PACED_SECONDS if quick else PACED_SECONDS
        latencies = anyio.run(_latency_run, paced, os.path.join(directory, "paced"))
    return {
        "records": n,
        "rounds": rounds,
        "best_seconds": {b: {v: min(s) for v, s in runs.items()} for b, runs in samples.items()},
        "samples_seconds": samples,
        "best_cpu_seconds": {b: {v: min(s) for v, s in runs.items()} for b, runs in cpu.items()},
        "cpu_samples_seconds": cpu,
        "paced_rate": PACED_RATE,
        "paced_seconds": paced,
        "durable_latency_seconds": {
            mode: {
                "records": len(values),
                "p50": _percentile(values, 0.5),
                "p99": _percentile(values, 0.99),
                "max": max(values),
                "mean": statistics.fmean(values),
            }
            for mode, values in latencies.items()
        },
    }


# -- the scenario -------------------------------------------------------------------------------


def _commit_interval_ms(mode: str) -> float:
    return float(INTERVAL_MS) if mode == "interval" else 0.0


def run(quick: bool = False, http: bool = False) -> ScenarioResult:
    """Run the scenario; ``http`` is ignored (the spool's cost is measured in process)."""
    result = ScenarioResult("spool")
    details = result.details
    details["directory"] = (
        tempfile.gettempdir()
        if not os.environ.get(DIRECTORY_VARIABLE)
        else (os.environ[DIRECTORY_VARIABLE])
    )
    note = " (quick)" if quick else ""

    if spool_wired():
        figures = details["pipeline"] = pipeline_figures(quick)
        n = figures["records"]
        for backend, best in figures["best_seconds"].items():
            memory = best["memory"]
            cpu = figures["best_cpu_seconds"][backend]
            for mode in FSYNC_MODES:
                ratio = memory / best[mode]
                result.rows.append(
                    Row(
                        f"spool/throughput/{backend}",
                        f"fsync {mode}: {n / best[mode] / 1000:,.1f}k rec/s; "
                        f"in memory {n / memory / 1000:,.1f}k rec/s ({n:,} records{note}); "
                        f"CPU {cpu[mode] / n * 1e6:.1f} vs {cpu['memory'] / n * 1e6:.1f} µs/rec",
                        f"≥ {TARGET_THROUGHPUT_RATIO:g}× in-memory throughput",
                        ratio,
                        f"{mode}/memory",
                        ratio >= TARGET_THROUGHPUT_RATIO,
                    )
                )
        for backend, best in figures["best_seconds"].items():
            ratio = best["interval"] / best[IDENTITIES]
            result.rows.append(
                Row(
                    f"spool/throughput/{backend}",
                    f"fsync interval with record identities: "
                    f"{n / best[IDENTITIES] / 1000:,.1f}k rec/s; CPU "
                    f"{figures['best_cpu_seconds'][backend][IDENTITIES] / n * 1e6:.1f} µs/rec",
                    "info (what identities add)",
                    ratio,
                    "identities/without",
                )
            )
        for mode, lat in figures["durable_latency_seconds"].items():
            bound = _commit_interval_ms(mode) + TARGET_LATENCY_MARGIN_MS
            p99_ms = lat["p99"] * 1000
            result.rows.append(
                Row(
                    "spool/durable",
                    f"fsync {mode}: accepted → durable p50 {lat['p50'] * 1000:.2f} ms, "
                    f"p99 {p99_ms:.2f} ms ({lat['records']:,} records at {PACED_RATE:,}/s{note})",
                    f"p99 ≤ {bound:g} ms (commit interval + {TARGET_LATENCY_MARGIN_MS:g} ms)",
                    p99_ms / bound,
                    "p99/bound",
                    p99_ms <= bound,
                )
            )
    else:
        result.rows.append(
            Row("spool/throughput", "not run: Config has no spool_directory yet", "info")
        )

    recovery = details["recovery"] = recovery_figures(
        QUICK_RECOVERY_RECORDS if quick else RECOVERY_RECORDS
    )
    n = recovery["records"]
    result.rows.append(
        Row(
            "spool/recovery",
            f"{n:,} records ({recovery['bytes_on_disk'] / 1e6:,.0f} MB, "
            f"{recovery['segments']} segment(s){note}): scan {recovery['scan_seconds']:.2f} s "
            f"+ replay stream {recovery['stream_seconds']:.2f} s; "
            f"peak {recovery['peak_traced_bytes'] / 2**20:,.0f} MiB traced",
            "timed (info; warm page cache)",
            recovery["recovery_seconds"] / n * 1e6,
            "µs/record",
        )
    )
    flushes = details["flush"] = flush_figures(QUICK_FLUSH_SAMPLES if quick else FLUSH_SAMPLES)
    result.rows.append(
        Row(
            "spool/flush",
            "flush of 100 records: "
            + "; ".join(
                f"{mode} p50 {f['p50'] * 1000:.2f} ms, p99 {f['p99'] * 1000:.2f} ms"
                for mode, f in flushes.items()
            ),
            "info (what a group commit costs on this disk)",
        )
    )
    dedupe = details["deduper"] = dedupe_figures(QUICK_DEDUPE_RECORDS if quick else DEDUPE_RECORDS)
    result.rows.append(
        Row(
            "spool/deduper",
            f"filter {dedupe['filter_us_per_record']:.2f} µs + commit "
            f"{dedupe['commit_us_per_record']:.2f} µs per record ({dedupe['records']:,} records, "
            f"{DEDUPE_PRODUCERS} producers, {DEDUPE_COPY_FRACTION:.0%} copies{note})",
            "info (cost per record)",
            dedupe["us_per_record"],
            "µs/record",
        )
    )
    deagg = details["deaggregate"] = deaggregate_figures(
        QUICK_DEAGGREGATE_AGGREGATES if quick else DEAGGREGATE_AGGREGATES
    )
    result.rows.append(
        Row(
            "spool/deaggregate",
            f"with the identity tag {deagg['tagged_us_per_record']:.2f} µs, without "
            f"{deagg['plain_us_per_record']:.2f} µs per user record "
            f"({AGGREGATE_RECORDS} records of {DATA_SIZE} bytes per aggregate)",
            "info (what identities cost a consumer)",
            deagg["tagged_us_per_record"] / deagg["plain_us_per_record"],
            "tagged/plain",
        )
    )
    return result

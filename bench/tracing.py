"""Tracing's cost (``Config.tracing``, issue 32): throughput, bytes on the wire, billing.

The pipeline scenario's records (:mod:`bench.pipeline`: 100 bytes over 4096 keys, a 64-shard
``FakeKinesis``, aggregation on, the clock from the first put to the end of ``flush()``) go
through four producers, one after another in one event loop, the order rotating from round to
round; rounds interleave the backends, and the best time of each is kept:

* ``off``: no tracing, the reference;
* ``span``: no tracing, each put inside an application span the bench opens (a request
  handler's): what the caller's own span costs, not aiokpl;
* ``context``: ``tracing="context"``, each put inside the application span: aiokpl carries
  its context in the record's ``aiokpl.trace`` tag and opens a "send" span per request;
* ``create``: ``tracing="create"``, each put inside the application span: also a "create"
  span per record, a child of the application's, ending with the record's result.

* ``shared``: ``tracing="context"``, every put under one caller's context (a remote span,
  current for the whole run, as in a batch job or a request that puts many records): no span
  opened per put, so compared with ``off`` its ratio is aiokpl's cost of carrying a context
  alone.

``context`` and ``create`` are compared with ``span``, ``shared`` with ``off``, so that each
ratio isolates aiokpl's cost (the target: at most 25% of the throughput, i.e. at least 0.75×
the records per second).
Spans go to an SDK ``TracerProvider`` whose processor is a ``BatchSpanProcessor`` with its
defaults (what a deployment runs: its worker thread's CPU time is in the figures) over an
exporter that counts the spans by kind and drops them.

Bytes on the wire, from one more, untimed, pass of ``off``, ``context`` and ``create`` (in the
first round, on the first backend: bytes do not depend on it), over 200,000 records as in
:mod:`bench.pipeline` (quick: as many as the timed runs), with ``record_max_buffered_time_ms`` at
60 s, so that aggregates are cut by size (51,200 bytes) and by the final flush only, as on a
busy stream, not by time (the timed runs' rates differ by variant, and so would their cuts).
The Kinesis records the fake stored (data + partition key) are summed and divided by the user
records stored; the difference with tracing is what the tag costs a record (the target: at
most 64 bytes). From the same stored records, the billing: a provisioned stream counts PUT
payload units of 25 KiB per Kinesis record, an on-demand stream bills each Kinesis record
rounded up to 1 KiB.
"""

from __future__ import annotations

import functools
import gc
import math
from collections import Counter
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Literal

import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from aiokpl import Config
from aiokpl._core.trace_context import TRACE_TAG_SIZE
from aiokpl.testing import FakeKinesis

from . import pipeline as pipeline_scenario
from .pipeline import DATA_SIZE, KEYS, SHARDS, pipeline
from .report import Row, ScenarioResult

RECORDS = 50_000  # a quarter of bench/pipeline.py's: "create" runs at a few thousand a second
QUICK_RECORDS = 10_000
WIRE_RECORDS = 200_000  # bench/pipeline.py's: as many aggregates as there
ROUNDS = 3
QUICK_ROUNDS = 1
VARIANTS = ("off", "span", "context", "create", "shared")
TARGET_THROUGHPUT = 0.75  # tracing costs at most 25% of the throughput
TARGET_BYTES = 64  # bytes a user record on the wire
PAYLOAD_UNIT = 25 * 1024  # a provisioned stream's PUT payload unit
ON_DEMAND_UNIT = 1024  # an on-demand stream rounds each Kinesis record up to this
MILLION = 1_000_000
_TRACING: dict[str, Literal["off", "context", "create"]] = {
    "off": "off",
    "span": "off",
    "context": "context",
    "create": "create",
    "shared": "context",
}


class CountingExporter(SpanExporter):
    """Counts the spans it is given by the first word of their names, and drops them."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.counts.update(span.name.partition(" ")[0] for span in spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _wire(fake: FakeKinesis, stream: str) -> dict[str, int]:
    """What ``stream`` holds, as Kinesis sizes it: data + partition key of each record."""
    sizes = [
        len(record.data) + len((record.partition_key or "").encode())
        for record in fake.stored_records(stream)
    ]
    return {
        "kinesis_records": len(sizes),
        "bytes": sum(sizes),
        "payload_units": sum(math.ceil(size / PAYLOAD_UNIT) for size in sizes),
        "on_demand_kib": sum(math.ceil(size / ON_DEMAND_UNIT) for size in sizes),
    }


async def _wire_pass(
    fake: FakeKinesis, keys: list[str], data: bytes, n: int, provider: TracerProvider, app_span: Any
) -> dict[str, dict[str, int]]:
    """Each variant's records with aggregates cut by size only: what they cost on the wire."""
    wire = {}
    for variant in ("off", "context", "create"):  # "span" traces nothing: its bytes are off's
        mode = _TRACING[variant]
        stream = f"wire-{variant}"
        fake.add_stream(stream, shard_count=SHARDS)
        config = Config(
            region="us-east-1",
            tracing=mode,
            record_max_buffered_time_ms=60_000,
            record_ttl_ms=120_000,
        )
        await pipeline(
            fake,
            stream,
            keys,
            data,
            n,
            config,
            tracer_provider=None if mode == "off" else provider,
            around=None if variant == "off" else app_span,
        )
        pipeline_scenario._check_stored(fake, stream, n + 1)  # and the warm-up record
        wire[variant] = _wire(fake, stream)
        fake.remove_stream(stream)
    return wire


def caller(variant: str) -> AbstractContextManager[Any]:
    """The context a run of ``variant`` is under: for ``shared``, one caller's span (remote),
    current for every put; for the others, none."""
    if variant != "shared":
        return nullcontext()
    span_context = trace.SpanContext(
        0x4BF92F3577B34DA6A3CE929D0E0E4736,
        0x00F067AA0BA902B7,
        is_remote=True,
        trace_flags=trace.TraceFlags(1),
    )
    return trace.use_span(trace.NonRecordingSpan(span_context))


async def _round(n: int, first: int, wire_records: int) -> dict[str, Any]:
    keys = [f"key-{i}" for i in range(KEYS)]
    data = bytes(range(DATA_SIZE))
    exporter = CountingExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    app_span = functools.partial(
        provider.get_tracer("the application").start_as_current_span, "handle request"
    )
    fake = FakeKinesis()
    try:
        fake.add_stream("warm-up", shard_count=SHARDS)
        config = Config(region="us-east-1", tracing="create")
        await pipeline(  # imports, caches: not measured
            fake, "warm-up", keys, data, n // 4, config, tracer_provider=provider, around=app_span
        )
        fake.remove_stream("warm-up")
        times: dict[str, float] = {}
        cpu: dict[str, float] = {}
        wire: dict[str, dict[str, int]] = {}
        spans: dict[str, dict[str, int]] = {}
        order = VARIANTS[first:] + VARIANTS[:first]
        for variant in order:
            fake.add_stream(variant, shard_count=SHARDS)
            mode = _TRACING[variant]
            provider.force_flush()
            exporter.counts.clear()
            gc.collect()
            cpu_seconds: list[float] = []
            with caller(variant):
                times[variant] = await pipeline(
                    fake,
                    variant,
                    keys,
                    data,
                    n,
                    Config(region="us-east-1", tracing=mode),
                    cpu_seconds,
                    tracer_provider=None if mode == "off" else provider,
                    around=None if variant in ("off", "shared") else app_span,
                )
            cpu[variant] = cpu_seconds[0]
            provider.force_flush()
            spans[variant] = dict(exporter.counts)
            pipeline_scenario._check_stored(fake, variant, n + 1)  # and the warm-up record
            fake.remove_stream(variant)  # frees the stored records before the next variant
        if wire_records:
            wire = await _wire_pass(fake, keys, data, wire_records, provider, app_span)
    finally:
        provider.shutdown()
    return {"seconds": times, "cpu_seconds": cpu, "wire": wire, "spans": spans}


def run(quick: bool = False, http: bool = False) -> ScenarioResult:
    """Run the scenario; ``http`` is ignored (measured in process)."""
    n = QUICK_RECORDS if quick else RECORDS
    wire_records = QUICK_RECORDS if quick else WIRE_RECORDS
    rounds = QUICK_ROUNDS if quick else ROUNDS
    samples: dict[str, dict[str, list[float]]] = {}
    cpu_samples: dict[str, dict[str, list[float]]] = {}
    wire: dict[str, dict[str, int]] = {}
    spans: dict[str, dict[str, dict[str, int]]] = {}
    for i in range(rounds):
        for name, backend, options in pipeline_scenario._backends():
            measured = anyio.run(
                _round,
                n,
                i % len(VARIANTS),
                0 if wire else wire_records,
                backend=backend,
                backend_options=options,
            )
            for variant in VARIANTS:
                samples.setdefault(name, {}).setdefault(variant, []).append(
                    measured["seconds"][variant]
                )
                cpu_samples.setdefault(name, {}).setdefault(variant, []).append(
                    measured["cpu_seconds"][variant]
                )
            wire = wire or measured["wire"]
            spans.setdefault(name, measured["spans"])
    best = {name: {v: min(s) for v, s in runs.items()} for name, runs in samples.items()}
    best_cpu = {name: {v: min(s) for v, s in runs.items()} for name, runs in cpu_samples.items()}
    result = ScenarioResult("tracing")
    result.details = {
        "records": n,
        "wire_records": wire_records,
        "rounds": rounds,
        "data_size": DATA_SIZE,
        "best_seconds": best,
        "best_cpu_seconds": best_cpu,
        "samples_seconds": samples,
        "samples_cpu_seconds": cpu_samples,
        "wire": wire,
        "spans_first_round": spans,
        "trace_tag_size": TRACE_TAG_SIZE,
    }
    for name, times in best.items():
        result.rows.extend(_throughput_rows(name, n, times, best_cpu[name]))
    result.rows.extend(_wire_rows(wire, wire_records + 1))  # and the warm-up record
    result.rows.append(_spans_row(spans, n))
    return result


def _throughput_rows(
    name: str, n: int, times: dict[str, float], cpu: dict[str, float]
) -> list[Row]:
    def rate(variant: str) -> str:
        return f"{n / times[variant] / 1000:,.1f}k rec/s"

    def cpu_us(variant: str, reference: str) -> str:
        return f"{(cpu[variant] - cpu[reference]) / n * 1e6:+.1f} µs CPU/record"

    scenario = f"tracing/{name}"
    rows = [
        Row(
            scenario,
            f"off {rate('off')}; the caller's span alone (tracing off) {rate('span')}, "
            f"{cpu_us('span', 'off')}",
            "info (the application's span, not aiokpl's cost)",
            times["off"] / times["span"],
            "span/off throughput",
        )
    ]
    ratio = times["off"] / times["shared"]
    rows.append(
        Row(
            scenario,
            f"context, every put under one caller's span {rate('shared')} vs off "
            f"{rate('off')} ({cpu_us('shared', 'off')}): aiokpl's cost of carrying a context",
            f"cost ≤ {1 - TARGET_THROUGHPUT:.0%} of throughput (≥ {TARGET_THROUGHPUT:g}× off)",
            ratio,
            "shared/off throughput",
            ratio >= TARGET_THROUGHPUT,
        )
    )
    for mode in ("context", "create"):
        ratio = times["span"] / times[mode]
        rows.append(
            Row(
                scenario,
                f"{mode} {rate(mode)} vs the caller's span alone {rate('span')} "
                f"({cpu_us(mode, 'span')}; vs off {times['off'] / times[mode]:.2f}×)",
                f"cost ≤ {1 - TARGET_THROUGHPUT:.0%} of throughput (≥ {TARGET_THROUGHPUT:g}× span)",
                ratio,
                f"{mode}/span throughput",
                ratio >= TARGET_THROUGHPUT,
            )
        )
    return rows


def _wire_rows(wire: dict[str, dict[str, int]], stored: int) -> list[Row]:
    off = wire["off"]
    per_record = {variant: figures["bytes"] / stored for variant, figures in wire.items()}
    extra = max(per_record["context"], per_record["create"]) - per_record["off"]
    rows = [
        Row(
            "tracing/wire",
            f"{per_record['off']:.1f} B a user record off, {per_record['context']:.1f} B "
            f"context, {per_record['create']:.1f} B create (Kinesis records' data + partition "
            f"keys / user records): +{extra:.1f} B = +{extra / DATA_SIZE:.0%} of the "
            f"{DATA_SIZE}-byte data (the tag: {TRACE_TAG_SIZE} B); "
            f"{off['kinesis_records']} → {wire['create']['kinesis_records']} Kinesis records",
            f"≤ {TARGET_BYTES} B a record",
            extra / TARGET_BYTES,
            "of limit",
            extra <= TARGET_BYTES,
        )
    ]
    traced = wire["create"]

    def per_million(key: str, figures: dict[str, int]) -> float:
        return figures[key] / stored * MILLION

    units_off, units_on = per_million("payload_units", off), per_million("payload_units", traced)
    kib_off, kib_on = per_million("on_demand_kib", off), per_million("on_demand_kib", traced)
    formula = extra * MILLION / PAYLOAD_UNIT
    rows.append(
        Row(
            "tracing/billing",
            f"provisioned: {units_off:,.0f} → {units_on:,.0f} PUT payload units per 1M user "
            f"records (+{units_on - units_off:,.0f}; formula: 1M × {extra:.1f} B / 25,600 B = "
            f"+{formula:,.0f}, as aggregates fill to 51,200 B = 2 units); on-demand (each "
            f"Kinesis record rounded up to 1 KiB): {kib_off / 1024**2:.3f} → "
            f"{kib_on / 1024**2:.3f} GiB billed per 1M user records",
            "info (the same bytes, as Kinesis bills them)",
            units_on / units_off - 1 if units_off else None,
            "more payload units",
        )
    )
    return rows


def _spans_row(spans: dict[str, dict[str, dict[str, int]]], n: int) -> Row:
    def per_thousand(counts: dict[str, int], kind: str) -> str:
        return f"{counts.get(kind, 0) * 1000 / n:.1f}"

    parts = []
    for name, variants in spans.items():
        context, create = variants["context"], variants["create"]
        parts.append(
            f"{name}: context {per_thousand(context, 'send')} send, "
            f"{per_thousand(context, 'create')} create; create "
            f"{per_thousand(create, 'send')} send, {per_thousand(create, 'create')} create "
            f"(caller's {per_thousand(create, 'handle')})"
        )
    return Row(
        "tracing/spans",
        f"per 1,000 records exported: {'; '.join(parts)}",
        "info (sanity: a create span per record, a send span per request)",
    )

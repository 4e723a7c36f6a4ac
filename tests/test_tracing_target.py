"""Issue 32's target: traced records through aggregation, throttled retries and a shard split,
read back and deaggregated: every record's trace context recovered exactly, every link
present, and AWS's ``aws_kinesis_agg`` decoding the same records byte for byte.

The full figure (100,000 records) is a ``scenario`` (about a minute on both backends); the
suite runs the same test with 5,000, in each tracing mode. Through a real ``Producer`` and a
throttling ``FakeKinesis`` under virtual clocks; the spans go to the OpenTelemetry SDK's
in-memory exporter. The callers' contexts are made up (a remote parent per record, as a
request from another service brings): the test checks what the producer does with them.
"""

from __future__ import annotations

import base64
import random
from collections import Counter
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aiokpl import Config, Outcome, Producer, RecordResult
from aiokpl._core.trace_context import TraceContext, trace_context_of
from aiokpl.aggregation import deaggregate
from aiokpl.testing import FakeKinesis, read_stream
from test_aggregation import aws_deaggregator

pytestmark = pytest.mark.anyio

THROTTLED = "ProvisionedThroughputExceededException"


def traceparent(context: Any) -> str:
    return (
        f"00-{trace.format_trace_id(context.trace_id)}-"
        f"{trace.format_span_id(context.span_id)}-{int(context.trace_flags):02x}"
    )


async def run_target(count: int, mode: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_links=100_000))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    fake = FakeKinesis()
    # Throttling shards (1,000 records and 1 MiB a second each), so that records are refused
    # and retried, besides the scripted throttles of the first requests.
    fake.add_stream("s", 4, throttle=True)
    for _ in range(3):
        fake.script_records([(THROTTLED, "scripted")] * 7)
    config = Config(
        region="us-east-1",
        tracing=mode,
        trace_max_links=100_000,
        record_ttl_ms=600_000,
        max_outstanding_records=count,
    )
    draw = random.Random(32)
    expected: dict[bytes, str] = {}
    outcomes: dict[bytes, Outcome[RecordResult]] = {}
    async with Producer(config, client=fake, tracer_provider=provider) as producer:
        for i in range(count):
            if i == count // 2:  # a split, mid-way: records predicted for the old shard
                first = fake.shards("s")[0]
                middle = (first.starting_hash_key + first.ending_hash_key) // 2
                fake.split("s", first.shard_id, middle)
            caller = trace.SpanContext(
                draw.getrandbits(128) or 1,
                draw.getrandbits(64) or 1,
                is_remote=True,
                trace_flags=trace.TraceFlags(i & 1),
            )
            data = f"record-{i}".encode()
            with trace.use_span(trace.NonRecordingSpan(caller)):
                outcomes[data] = await producer.put_record(
                    stream="s", partition_key=f"key-{i % 997}", data=data
                )
            expected[data] = traceparent(caller)
    spans = exporter.get_finished_spans()
    creates = {span.context.span_id: span for span in spans if span.name == "create s"}
    sends = [span for span in spans if span.name == "send s"]
    results = {data: await outcome for data, outcome in outcomes.items()}
    assert all(result.success for result in results.values())
    assert sum(len(result.attempts) > 1 for result in results.values()) >= 7  # retried

    # What the stream holds: each record where its result says, every copy with its context
    # (an aggregate predicted for the split shard, stored on a child that does not hold all
    # its keys, is put again: SPEC §4.9's "wrong shard" retry, which leaves a copy).
    stored = await read_stream(fake, "s")
    assert {shard for shard, _ in stored} >= {"shardId-000000000004"}  # a child got records
    carried: dict[bytes, TraceContext | None] = {}
    shards: dict[bytes, set[str]] = {}
    ours: list[tuple[str, bytes]] = []
    for shard, record in stored:
        for user in deaggregate(record):
            context = trace_context_of(user.tags)
            assert carried.setdefault(user.data, context) == context  # every copy alike
            shards.setdefault(user.data, set()).add(shard)
            ours.append((user.partition_key or "", user.data))
    assert len(carried) == count
    assert all(results[data].shard_id in where for data, where in shards.items())
    for data, parent in expected.items():
        context = carried[data]
        assert context is not None
        if mode == "context":
            assert context == TraceContext(parent)
        elif parent.endswith("-01"):  # its create span, a child of the parent's context
            create = creates[int(context.traceparent[36:52], 16)]
            assert create.parent is not None
            assert traceparent(create.parent) == parent
            assert traceparent(create.context) == context.traceparent
        else:  # a parent not sampled: its create span neither (nothing exported), yet the
            # record carries the span's context, in the parent's trace, not sampled
            assert int(context.traceparent[36:52], 16) not in creates
            assert context.traceparent[:36] == parent[:36]
            assert context.traceparent.endswith("-00")
    if mode == "create":
        assert len(creates) == count // 2
    # AWS's deaggregator reads the same user records, byte for byte (it skips the tags).
    theirs = [
        (user["kinesis"]["partitionKey"], base64.b64decode(user["kinesis"]["data"]))
        for user in aws_deaggregator.iter_deaggregate_records(
            [record for _, record in stored], data_format="Boto3"
        )
    ]
    assert theirs == ours

    # Every link present: each record is linked from one send span per attempt it made.
    links: Counter[str] = Counter(
        traceparent(link.context) for send in sends for link in send.links
    )
    for data, result in results.items():
        context = carried[data]
        assert context is not None
        assert links[context.traceparent] == len(result.attempts), data
    assert sum(links.values()) == sum(len(result.attempts) for result in results.values())
    assert all(send.attributes["aiokpl.unlinked_records"] == 0 for send in sends)  # type: ignore[index]
    assert any("error.type" in (send.attributes or {}) for send in sends)
    provider.shutdown()


@pytest.mark.parametrize("mode", ["context", "create"])
async def test_traced_records_through_retries_and_a_split_keep_their_context(mode: str) -> None:
    await run_target(5_000, mode)


@pytest.mark.scenario
async def test_the_issue_s_target_of_100_000_traced_records() -> None:
    await run_target(100_000, "context")

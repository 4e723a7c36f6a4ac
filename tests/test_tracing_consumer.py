"""``aiokpl.tracing``, the consumer half of issue 32: a user record's trace context read back
from the records ``deaggregate`` returns (boto3's ``get_records``, a Lambda Kinesis event), and
the "process" span tied to it, checked with the OpenTelemetry SDK's in-memory exporter (a
provider of the test's own, never the global one)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from aiokpl._core.decoder import decode_tags
from aiokpl._core.trace_context import trace_tags
from aiokpl.aggregation import (
    DeaggregatedRecord,
    Record,
    Tag,
    deaggregate,
    deaggregate_records,
    encode,
)
from aiokpl.tracing import (
    STATE_KEY,
    TRACE_KEY,
    TraceContext,
    context_tags,
    process_span,
    trace_context,
)
from test_aggregation import boto3_record, lambda_record

# The example of W3C Trace Context, section 3.2, and a second context.
EXAMPLE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
OTHER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
STATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"

PROCESS_ATTRIBUTES = {
    "messaging.system": "aws.kinesis",
    "messaging.operation.type": "process",
    "messaging.operation.name": "process",
}


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def finished(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    (span,) = [span for span in exporter.get_finished_spans() if span.name == name]
    return span


def aggregate_of_every_kind() -> tuple[bytes, list[TraceContext | None]]:
    """An aggregate of user records with a context (with and without a tracestate, beside
    other tags), with none, and with a damaged one; and the context each should read as."""
    records = [
        Record("a", b"0", None, context_tags(EXAMPLE)),
        Record("b", b"1", None, (Tag("team", "payments"), *context_tags(OTHER, STATE))),
        Record("c", b"2"),
        Record("d", b"3", None, (Tag("team", "payments"),)),
        Record("e", b"4", None, (Tag(TRACE_KEY, "not a context"), Tag(STATE_KEY, STATE))),
        Record("f", b"5", None, (Tag(TRACE_KEY, None),)),
    ]
    expected = [TraceContext(EXAMPLE), TraceContext(OTHER, STATE), None, None, None, None]
    return encode(records), expected


# --------------------------------------------------------------------------------------------
# trace_context
# --------------------------------------------------------------------------------------------


def test_context_tags_are_the_producers_tags() -> None:
    assert context_tags(EXAMPLE, STATE) == decode_tags(trace_tags(EXAMPLE, STATE))
    assert [tag.key for tag in context_tags(EXAMPLE)] == [TRACE_KEY]
    with pytest.raises(ValueError, match="lowercase hex"):
        context_tags(EXAMPLE.upper())


def test_contexts_come_back_from_records_read_by_boto3() -> None:
    blob, expected = aggregate_of_every_kind()
    records = deaggregate(boto3_record(blob))
    assert [record.data for record in records] == [b"0", b"1", b"2", b"3", b"4", b"5"]
    assert [trace_context(record) for record in records] == expected
    # The tags alone read the same.
    assert [trace_context(record.tags) for record in records] == expected
    pairs = [[(tag.key, tag.value) for tag in record.tags] for record in records]
    assert [trace_context(tags) for tags in pairs] == expected


def test_contexts_come_back_from_a_lambda_event() -> None:
    blob, expected = aggregate_of_every_kind()
    event = {"Records": [lambda_record(blob), lambda_record(blob)]}
    records = deaggregate_records(event)
    assert [trace_context(record) for record in records] == expected * 2


def test_a_record_that_was_not_aggregated_carries_no_context() -> None:
    # A plain Kinesis record has nowhere to carry one: boto3's or a Lambda event's alike.
    (plain,) = deaggregate(boto3_record(b"plain data"))
    assert not plain.aggregated
    assert trace_context(plain) is None
    (from_lambda,) = deaggregate_records({"Records": [lambda_record(b"plain data")]})
    assert trace_context(from_lambda) is None
    assert trace_context(()) is None


def test_a_record_built_with_a_mapping_of_tags_is_read_too() -> None:
    (trace_tag,) = context_tags(EXAMPLE)
    record = Record("k", b"x", None, {trace_tag.key: trace_tag.value})  # type: ignore[arg-type]
    assert trace_context(record) == TraceContext(EXAMPLE)
    assert trace_context(TraceContext(OTHER, STATE)) == TraceContext(OTHER, STATE)


@pytest.mark.parametrize(
    ("argument", "named"),
    [
        (boto3_record(b"x"), "not dict"),  # a Kinesis record not yet deaggregated
        ({"aiokpl.trace": "x"}, "not dict"),
        ("aiokpl.trace", "not str"),
        (b"aiokpl.trace", "not bytes"),
        (42, "not int"),
        (None, "not NoneType"),
        ([Tag(TRACE_KEY, "x"), "oops"], "pairs of str, not str"),
        ([(TRACE_KEY, "x", "y")], "pairs of str, not tuple"),
        ([(TRACE_KEY, b"x")], "pairs of str, not tuple"),
    ],
)
def test_an_argument_of_the_wrong_type_is_a_type_error_that_names_it(
    argument: Any, named: str
) -> None:
    with pytest.raises(TypeError, match=named):
        trace_context(argument)


# --------------------------------------------------------------------------------------------
# process_span
# --------------------------------------------------------------------------------------------


def record_with(traceparent: str, tracestate: str | None = None) -> DeaggregatedRecord:
    tags = context_tags(traceparent, tracestate)
    (record,) = deaggregate(boto3_record(encode([Record("k", b"x", None, tags)])))
    return record


def test_a_process_span_links_to_the_records_creation_context_by_default(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    record = record_with(EXAMPLE, STATE)
    tracer = provider.get_tracer("test")
    with (
        tracer.start_as_current_span("invocation") as invocation,
        process_span(record, tracer_provider=provider, stream="events") as span,
    ):
        assert trace.get_current_span() is span
    process = finished(exporter, "process events")
    assert process.kind is SpanKind.CONSUMER
    assert dict(process.attributes or {}) == {
        **PROCESS_ATTRIBUTES,
        "messaging.destination.name": "events",
        "aws.kinesis.stream_name": "events",
    }
    # The parent is the current span; the creation context is a link, tracestate included.
    assert process.parent is not None
    assert process.parent.span_id == invocation.get_span_context().span_id
    assert process.context is not None
    assert process.context.trace_id == invocation.get_span_context().trace_id
    (link,) = process.links
    assert f"{link.context.trace_id:032x}" == EXAMPLE[3:35]
    assert f"{link.context.span_id:016x}" == EXAMPLE[36:52]
    assert link.context.is_remote
    assert link.context.trace_flags.sampled
    assert link.context.trace_state.to_header() == STATE
    assert process.instrumentation_scope is not None
    assert process.instrumentation_scope.name == "aiokpl"


def test_a_process_span_is_the_records_child_when_asked(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    record = record_with(EXAMPLE)
    with process_span(record, tracer_provider=provider, stream="events", parent=True):
        pass
    process = finished(exporter, "process events")
    assert process.context is not None
    assert f"{process.context.trace_id:032x}" == EXAMPLE[3:35]  # one trace with the request
    assert process.parent is not None
    assert process.parent.is_remote
    assert f"{process.parent.span_id:016x}" == EXAMPLE[36:52]
    assert [(link.context.trace_id, link.context.span_id) for link in process.links] == [
        (process.parent.trace_id, process.parent.span_id)
    ]
    # Under a current span, that span is linked too (the conventions' opt-in form).
    exporter.clear()
    with (
        provider.get_tracer("test").start_as_current_span("invocation") as invocation,
        process_span(record, tracer_provider=provider, parent=True),
    ):
        pass
    process = finished(exporter, "process")
    assert process.parent is not None
    assert f"{process.parent.span_id:016x}" == EXAMPLE[36:52]
    assert [link.context.span_id for link in process.links] == [
        process.parent.span_id,
        invocation.get_span_context().span_id,
    ]


@pytest.mark.parametrize("parent", [False, True])
def test_a_record_without_a_context_gets_a_span_with_no_link(
    provider: TracerProvider, exporter: InMemorySpanExporter, parent: bool
) -> None:
    blob, expected = aggregate_of_every_kind()
    records = deaggregate(boto3_record(blob))
    without = [r for r, e in zip(records, expected, strict=True) if e is None]
    (plain,) = deaggregate(boto3_record(b"plain"))
    for record in [*without, plain, None]:
        with process_span(record, tracer_provider=provider, parent=parent):
            pass
    spans = exporter.get_finished_spans()
    assert len(spans) == len(without) + 2
    assert all(span.name == "process" and not span.links for span in spans)
    assert all(span.parent is None for span in spans)  # no current span: roots
    assert all(dict(span.attributes or {}) == PROCESS_ATTRIBUTES for span in spans)


def test_name_and_attributes_can_be_given(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    with process_span(
        TraceContext(EXAMPLE),
        tracer_provider=provider,
        stream="events",
        name="handle order",
        attributes={"messaging.destination.partition.id": "shardId-000000000001"},
    ):
        pass
    span = finished(exporter, "handle order")
    assert (span.attributes or {})["messaging.destination.partition.id"] == "shardId-000000000001"
    assert (span.attributes or {})["aws.kinesis.stream_name"] == "events"
    assert len(span.links) == 1


def test_an_exception_in_the_block_is_recorded_and_goes_on(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    record = record_with(EXAMPLE)
    with (
        pytest.raises(ZeroDivisionError),
        process_span(record, tracer_provider=provider, stream="events"),
    ):
        1 / 0  # noqa: B018
    span = finished(exporter, "process events")
    assert span.status.status_code is StatusCode.ERROR
    (event,) = span.events
    assert event.name == "exception"
    assert (event.attributes or {})["exception.type"] == "ZeroDivisionError"


@pytest.mark.anyio
async def test_a_process_span_spans_awaits_in_async_code(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    record = record_with(EXAMPLE)
    with process_span(record, tracer_provider=provider, stream="events") as span:
        await anyio.sleep(1)
        assert trace.get_current_span() is span
        with provider.get_tracer("test").start_as_current_span("write to database"):
            await anyio.sleep(1)
    process = finished(exporter, "process events")
    child = finished(exporter, "write to database")
    assert child.parent is not None
    assert process.context is not None
    assert child.parent.span_id == process.context.span_id
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_without_opentelemetry_process_span_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    record = record_with(EXAMPLE)
    with pytest.raises(ImportError, match=r"pip install 'aiokpl\[otel\]'") as raised:
        process_span(record)
    assert "opentelemetry-api" in str(raised.value)
    assert trace_context(record) == TraceContext(EXAMPLE)  # reading needs nothing


def test_importing_the_module_imports_no_opentelemetry() -> None:
    code = "import sys, aiokpl.tracing; print(sorted(m for m in sys.modules if 'opentel' in m))"
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "[]"

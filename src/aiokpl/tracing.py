"""Trace context on the consumer side: the W3C trace context of the request that put a user
record, read back from the record's tags, and an OpenTelemetry "process" span tied to it.

A ``PutRecords`` call carries no headers, so aiokpl's producer (with tracing on) writes each
user record's ``traceparent`` (and ``tracestate``) into reserved tags of the KPL aggregation
format (:data:`TRACE_KEY`, :data:`STATE_KEY`). A consumer gets it back from the records
``aiokpl.aggregation.deaggregate`` returns:

* ``trace_context``: a user record's :class:`TraceContext`, or ``None`` when it carries none
  (a record that was not aggregated: a plain Kinesis record has nowhere to carry one);
* ``process_span``: a context manager that starts a "process" span (OpenTelemetry's messaging
  conventions) linked to the record's creation context, or, with ``parent=True``, its child;
* ``context_tags``: the tags that carry a context, to build aggregates yourself
  (``aiokpl.aggregation.encode``, tests).

Who can read the context: anything that reads the aggregates' bytes and deaggregates them with
``aiokpl.aggregation``: boto3's ``get_records`` (``deaggregate``), a Lambda function reading a
Kinesis event (``deaggregate_records(event)``), ``aiokpl tail`` (its ``"trace"`` field). The
KCL cannot: its ``AggregatorUtil`` deaggregates before the record processor sees anything, and
its ``KinesisClientRecord`` has no tags (it keeps a user record's partition key, explicit hash
key and data only), so the context is dropped; records stay readable, only the trace is lost.
A KCL application would need the aggregate's raw bytes: a ``LifecycleConfig.aggregatorUtil``
of its own that passes records through undeaggregated, then a deaggregator that keeps tags.

``process_span`` needs ``opentelemetry-api`` (``pip install 'aiokpl[otel]'``), imported when
called; ``trace_context`` needs nothing.

Example:
    ```python
    from aiokpl.aggregation import deaggregate_records
    from aiokpl.tracing import process_span

    def process(partition_key: str | None, data: bytes) -> None: ...

    def handler(event, context):  # an AWS Lambda function reading a Kinesis stream
        for record in deaggregate_records(event):
            with process_span(record, stream="events"):
                process(record.partition_key, record.data)
    ```
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from ._core.decoder import decode_tags
from ._core.trace_context import MESSAGING_SYSTEM, SCHEMA_URL, trace_context_of, trace_tags
from ._core.trace_context import STATE_KEY as STATE_KEY
from ._core.trace_context import TRACE_KEY as TRACE_KEY
from ._core.trace_context import TraceContext as TraceContext
from ._core.wire import DeaggregatedRecord, Record, Tag
from ._public import present_as_public as _present_as_public

if TYPE_CHECKING:
    from opentelemetry.trace import Span, TracerProvider
    from opentelemetry.util.types import Attributes, AttributeValue

__all__ = (
    "STATE_KEY",
    "TRACE_KEY",
    "TraceContext",
    "context_tags",
    "process_span",
    "trace_context",
)


def trace_context(
    record: DeaggregatedRecord | Record | TraceContext | Iterable[Tag | tuple[str, str | None]],
) -> TraceContext | None:
    """The trace context a user record carries, or ``None`` if it carries none.

    Never raises on what a record carries: a record without tags, one that was not aggregated
    (a plain Kinesis record has no tags), or a trace tag that is damaged or was written by
    another program all read as ``None``.

    Args:
        record: a record ``aiokpl.aggregation.deaggregate`` or ``deaggregate_records`` returned
            (or anything with a ``tags`` attribute), or an iterable of its tags (``Tag``
            objects or ``(key, value)`` pairs). A ``TraceContext`` is returned as it is.

    Raises:
        TypeError: ``record`` is none of these: a Kinesis record as boto3 or Lambda gives it (a
            ``dict``) must go through ``deaggregate`` first.
    """
    if isinstance(record, DeaggregatedRecord):
        return trace_context_of(record.tags)  # Tag objects, as deaggregate makes them
    if isinstance(record, TraceContext):
        return record
    tags = getattr(record, "tags", record)
    if isinstance(tags, Mapping) and tags is not record:
        tags = tags.items()  # a Record built with a mapping of tags
    elif isinstance(tags, (str, bytes, bytearray, Mapping)) or not isinstance(tags, Iterable):
        raise TypeError(
            f"trace_context takes a record deaggregate() returned or its tags, not "
            f"{type(record).__name__}: a Kinesis record as boto3 or Lambda gives it goes "
            f"through aiokpl.aggregation.deaggregate first"
        )
    checked: list[tuple[str, str | None]] = []
    for tag in tags:
        if isinstance(tag, tuple) and len(tag) == 2:
            key, value = tag
            if isinstance(key, str) and (value is None or isinstance(value, str)):
                checked.append((key, value))
                continue
        raise TypeError(
            f"trace_context takes tags as Tag objects or (key, value) pairs of str, "
            f"not {type(tag).__name__}"
        )
    return trace_context_of(checked)


def context_tags(traceparent: str, tracestate: str | None = None) -> tuple[Tag, ...]:
    """The tags that carry a trace context, as aiokpl's producer writes them: ``aiokpl.trace``
    (the ``traceparent``, compact) and ``aiokpl.tracestate`` when ``tracestate`` is not empty.

    For aggregates built with ``aiokpl.aggregation.encode`` (``Record(..., tags=...)``).

    Raises:
        ValueError: ``traceparent`` is not one W3C Trace Context accepts.
        TypeError: ``traceparent`` is not a ``str``.
    """
    return decode_tags(trace_tags(traceparent, tracestate))


def process_span(
    record: DeaggregatedRecord
    | Record
    | TraceContext
    | Iterable[Tag | tuple[str, str | None]]
    | None,
    *,
    tracer_provider: TracerProvider | None = None,
    stream: str | None = None,
    parent: bool = False,
    name: str | None = None,
    attributes: Attributes = None,
) -> AbstractContextManager[Span]:
    """Start a "process" span for the handling of one user record: ``with process_span(record):``.

    The span follows OpenTelemetry's semantic conventions for messaging spans: kind
    ``CONSUMER``; attributes ``messaging.system`` = ``"aws.kinesis"`` (the conventions register
    no value for Kinesis), ``messaging.operation.type`` and ``messaging.operation.name`` =
    ``"process"``, and, when ``stream`` is given, ``messaging.destination.name`` and
    ``aws.kinesis.stream_name``; named ``"process {stream}"`` (``"process"`` without one).

    How it is tied to the record's creation context (the span of the request that put it):

    * by default, a **link** to it; the span's parent is the current span (a Lambda
      invocation's, a batch's), as the conventions recommend;
    * with ``parent=True``, its **child**, so that one trace runs from the request to the
      handler; it links to the creation context too and, when there is a current span, to that
      span (the conventions' opt-in form).

    A record without a context (see :func:`trace_context`) gets a span all the same, with no
    link. An exception raised in the block is recorded on the span, sets its status to error,
    and goes on. It is a plain context manager: ``with``, in sync and in async code alike.

    Args:
        record: a user record (as :func:`trace_context` takes it), its ``TraceContext``, or
            ``None``.
        tracer_provider: the provider of the span's tracer; the global one by default.
        stream: the stream the record was read from.
        parent: make the span a child of the record's creation context rather than link to it.
        name: the span's name, instead of ``"process {stream}"``.
        attributes: more attributes; they may replace the ones above.

    Returns:
        A context manager that gives the span and ends it on exit.

    Raises:
        ImportError: ``opentelemetry-api`` is not installed.
        TypeError: ``record`` is none of the above.
    """
    try:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError as exc:
        raise ImportError(
            "aiokpl.tracing.process_span needs opentelemetry-api: pip install 'aiokpl[otel]'"
        ) from exc
    from ._version import __version__

    context = None if record is None else trace_context(record)
    links: list[trace.Link] = []
    creation = None
    if context is not None:
        carrier = {"traceparent": context.traceparent}
        if context.tracestate:
            carrier["tracestate"] = context.tracestate
        extracted = TraceContextTextMapPropagator().extract(carrier)
        remote = trace.get_current_span(extracted).get_span_context()
        if remote.is_valid:  # not so only for a TraceContext made by hand, and wrong
            creation = extracted
            links.append(trace.Link(remote))
    if parent and creation is not None:
        ambient = trace.get_current_span().get_span_context()
        if ambient.is_valid:
            links.append(trace.Link(ambient))
    span_attributes: dict[str, AttributeValue] = {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
    }
    if stream is not None:
        span_attributes["messaging.destination.name"] = stream
        span_attributes["aws.kinesis.stream_name"] = stream
    span_attributes.update(attributes or {})
    tracer = trace.get_tracer(
        "aiokpl", __version__, tracer_provider=tracer_provider, schema_url=SCHEMA_URL
    )
    return tracer.start_as_current_span(
        name or (f"process {stream}" if stream is not None else "process"),
        context=creation if parent else None,
        kind=trace.SpanKind.CONSUMER,
        attributes=span_attributes,
        links=links,
    )


# Tracebacks and reprs name aiokpl.tracing.X, the name to import, not the private module.
_present_as_public(__name__, globals(), __all__)

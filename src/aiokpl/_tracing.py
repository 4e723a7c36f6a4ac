"""A producer's OpenTelemetry tracing (``Config.tracing``): the trace context each record
carries, its "create" span, and a "send" span per ``PutRecords`` attempt.

A ``PutRecords`` call carries no headers and an aggregate packs records of many requests, so
the context travels with each user record, in reserved tags of its aggregate
(``_core/trace_context.py``). :class:`Tracing` acts at three moments:

* **a put**, in the caller's thread, where its context is current (``Admission.check`` calls
  :meth:`Tracing.capture`): with ``"context"`` the current span's context becomes the record's
  (``record.trace``, and ``record.trace_tags`` its tags); with ``"create"`` the current context
  is kept, the parent of the record's create span;
* **a record entering** (``"create"`` only; ``Marks.mark`` calls :meth:`Tracing.create`, once
  every check has passed, so a refused put leaves no span open): its "create" span starts, a
  child of the kept context; the record carries the span's context, and the span ends with the
  record's result (a done-callback: delivered with its shard and sequence number, failed with
  its code, or its outcome unknown);
* **a request** (the sender calls :meth:`Tracing.send` and :meth:`Tracing.sent` around each
  ``PutRecords`` attempt): a "send" span, a root linked to the contexts of the records it
  carries, up to ``Config.trace_max_links`` (the rest counted), with the request's outcome.
  A retried record is linked again from each further attempt's span.

Attributes follow OpenTelemetry's messaging semantic conventions, version 1.44.0 (the tracer's
schema URL). ``messaging.system`` is ``"aws.kinesis"``: the conventions register no value for
Kinesis. Without tracing (``"off"``) nothing here is imported or called: the put path reads
one attribute that is ``None``.

Needs ``opentelemetry-api`` (the ``otel`` extra), imported when a producer with tracing is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from ._core.answers import Answer, Answered, Refused
from ._core.trace_context import MESSAGING_SYSTEM, SCHEMA_URL, span_tags
from ._version import __version__

if TYPE_CHECKING:
    from ._core.records import KinesisRecord
    from ._outcome import Outcome
    from ._record import TaggedRecord

__all__ = ("Tracing",)

_EMPTY = otel_context.Context()  # a send span's parent: none (it is linked, not parented)


class Tracing:
    """One producer's tracing: what a record carries, and the spans of its life.

    Args:
        mode: ``Config.tracing``, ``"context"`` or ``"create"``.
        max_links: ``Config.trace_max_links``.
        tracer_provider: where the spans go; ``None``: OpenTelemetry's global provider.
        endpoint: the URL requests go to, if known (the spans' ``server.address`` and
            ``server.port``).
    """

    __slots__ = ("_create", "_last", "_max_links", "_server", "_tracer")

    def __init__(
        self,
        mode: str,
        max_links: int,
        tracer_provider: Any = None,
        endpoint: str | None = None,
    ) -> None:
        self._tracer = trace.get_tracer(
            "aiokpl", __version__, tracer_provider=tracer_provider, schema_url=SCHEMA_URL
        )
        self._create = mode == "create"
        # The span context of the last put with one, and its tags (see capture).
        self._last: tuple[object, bytes] = (None, b"")
        self._max_links = max_links
        self._server: dict[str, Any] = {}
        if endpoint is not None:
            parts = urlsplit(endpoint)
            if parts.hostname:
                self._server["server.address"] = parts.hostname
            if parts.port is not None:
                self._server["server.port"] = parts.port

    @property
    def creates(self) -> bool:
        """Whether each record gets a "create" span (``Config.tracing == "create"``)."""
        return self._create

    # --- a put ---------------------------------------------------------------------------
    def capture(self, record: TaggedRecord) -> None:
        """Give a record being put the context current in the caller (see the module).
        *Mutates* the record (a ``TaggedRecord``)."""
        if self._create:
            record.trace = otel_context.get_current()
            return
        context = trace.get_current_span().get_span_context()
        last = self._last  # one tuple: callers' threads (a SyncProducer's) may race here
        if context is last[0]:  # the same caller's span as the last put: its tags made once
            record.trace = context
            record.trace_tags = last[1]
        elif context.is_valid:
            tags = _tags_of(context)
            self._last = (context, tags)
            record.trace = context
            record.trace_tags = tags

    # --- a record entering ---------------------------------------------------------------
    def create(self, record: TaggedRecord) -> None:
        """Start the "create" span of a record entering the producer (``"create"`` only), a
        child of the context :meth:`capture` kept; it ends with the record's result.
        *Mutates* the record: it carries the span's context from now on."""
        parent = record.trace
        span = self._tracer.start_span(
            f"create {record.stream}",
            context=parent if isinstance(parent, otel_context.Context) else None,
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": MESSAGING_SYSTEM,
                "messaging.operation.type": "create",
                "messaging.operation.name": "create",
                "messaging.destination.name": record.stream,
                "aws.kinesis.stream_name": record.stream,
            },
        )
        record.trace = span
        context = span.get_span_context()
        if context.is_valid:  # not so without an SDK (OpenTelemetry's API alone) nor parent
            record.trace_tags = _tags_of(context)
        record.add_done_callback(_end_create)

    # --- a request -----------------------------------------------------------------------
    def send(self, stream: str, records: Sequence[KinesisRecord]) -> Any:
        """Start the "send" span of one ``PutRecords`` attempt to ``stream`` carrying
        ``records``; end it with :meth:`sent`."""
        links: list[Link] = []
        most = self._max_links
        count = traced = retried = 0
        create = self._create
        for kinesis_record in records:
            for record in kinesis_record.records:
                count += 1
                if record.attempts:
                    retried += 1
                carried = record.trace  # type: ignore[attr-defined]
                if carried is None:
                    continue  # no context where it was put (or replayed from the spool)
                if create:
                    carried = carried.get_span_context()
                    if not carried.is_valid:  # a span of no SDK, without a parent
                        continue
                traced += 1
                if len(links) < most:
                    links.append(Link(carried))
        attributes: dict[str, Any] = {
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": stream,
            "aws.kinesis.stream_name": stream,
            "messaging.batch.message_count": count,
            "rpc.system": "aws-api",
            "rpc.service": "Kinesis",
            "rpc.method": "PutRecords",
            "aiokpl.kinesis_records": len(records),
            "aiokpl.retried_records": retried,
            "aiokpl.unlinked_records": traced - len(links),
            **self._server,
        }
        return self._tracer.start_span(
            f"send {stream}",
            context=_EMPTY,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            links=links,
        )

    def sent(self, span: Any, answer: Answer) -> None:
        """End a "send" span with its request's ``answer``: refused Kinesis records counted
        (``aiokpl.failed_kinesis_records``, the first one's code as ``error.type``; an error
        status only if every one was refused), or the request's failure."""
        if isinstance(answer, Answered):
            entries = answer.entries
            refused = [entry for entry in entries if isinstance(entry, Refused)]
            if refused:
                span.set_attributes(
                    {"aiokpl.failed_kinesis_records": len(refused), "error.type": refused[0].code}
                )
                if len(refused) == len(entries):
                    span.set_status(Status(StatusCode.ERROR, refused[0].message))
        else:
            span.set_attribute("error.type", answer.code)
            span.set_status(Status(StatusCode.ERROR, answer.message))
        span.end()


def _tags_of(context: Any) -> bytes:
    """A span context's tags (``_core.trace_context.span_tags``)."""
    state = context.trace_state
    return span_tags(
        context.trace_id,
        context.span_id,
        context.trace_flags,
        state.to_header() if state else None,
    )


def _end_create(outcome: Outcome[Any]) -> None:
    """End a record's "create" span with its result (the record's done-callback)."""
    record: Any = outcome
    span = record.trace
    result = outcome.result()
    if result.success:  # one call: the SDK takes a lock for each
        span.set_attributes(
            {
                "aiokpl.outcome": "delivered",
                "messaging.destination.partition.id": result.shard_id,
                "messaging.message.id": result.sequence_number,
            }
        )
    else:
        span.set_attributes(
            {
                "aiokpl.outcome": "unknown" if result.outcome_unknown else "failed",
                "error.type": result.error_code or "Unknown",
            }
        )
        span.set_status(Status(StatusCode.ERROR, result.error_message))
    span.end()
    # Resolved: no attempt will link to it again, and an outcome the caller keeps must not
    # keep its ended span (the garbage collector's work, measured in bench/tracing.py).
    record.trace = None

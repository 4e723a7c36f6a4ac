"""A producer's OpenTelemetry tracing (``Config.tracing``, SPEC §4.19, issue 32): the trace
context each user record carries in its aggregate's tags, the "create" span of each record and
the "send" span of each ``PutRecords`` attempt.

Through a real ``Producer`` (and ``SyncProducer``) and ``FakeKinesis``, on asyncio and trio
under virtual clocks; spans go to the OpenTelemetry SDK's in-memory exporter of a provider of
the test's own (never the global one); what the stream holds is read back and deaggregated.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, format_span_id, format_trace_id
from opentelemetry.trace.span import TraceState

from aiokpl import Config, ConfigError, Outcome, Producer, RecordResult, SyncProducer
from aiokpl._core.decoder import decode_tags, is_aggregated
from aiokpl._core.trace_context import TraceContext, trace_context_of
from aiokpl._record import TaggedRecord, UserRecord
from aiokpl.aggregation import deaggregate
from aiokpl.testing import FakeKinesis, read_stream
from running import running

pytestmark = pytest.mark.anyio


class Spans:
    """A tracer provider of the test's own and what it exported."""

    def __init__(self, max_links: int = 128) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(span_limits=SpanLimits(max_links=max_links))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("the application")

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]


@pytest.fixture
def spans() -> Iterator[Spans]:
    found = Spans()
    yield found
    found.provider.shutdown()


def header(span_context: Any) -> str:
    """A span context's ``traceparent``."""
    return (
        f"00-{format_trace_id(span_context.trace_id)}-{format_span_id(span_context.span_id)}-"
        f"{int(span_context.trace_flags):02x}"
    )


def stream(shards: int = 2, **options: Any) -> FakeKinesis:
    fake = FakeKinesis()
    fake.add_stream("s", shards, **options)
    return fake


async def carried(fake: FakeKinesis) -> dict[str, TraceContext | None]:
    """Each user record the stream holds, by its data, with the trace context it carries."""
    found: dict[str, TraceContext | None] = {}
    for _, record in await read_stream(fake, "s"):
        for user in deaggregate(record):
            found[user.data.decode()] = trace_context_of(user.tags)
    return found


async def test_with_tracing_off_nothing_is_traced_or_carried(spans: Spans) -> None:
    # The default: records are the plain class (no slot for a context), nothing is imported
    # for tracing, no span starts even inside the caller's span, and a tracer provider
    # given without tracing is refused (it would say nothing).
    fake = stream()
    async with Producer(Config(region="us-east-1"), client=fake) as producer:
        assert running(producer).admission.tracing is None
        with spans.tracer.start_as_current_span("request"):
            outcome = await producer.put_record(stream="s", partition_key="k", data=b"r")
        assert type(outcome) is UserRecord
    assert (await outcome).success
    assert await carried(fake) == {"r": None}
    assert [s.name for s in spans.exporter.get_finished_spans()] == ["request"]
    with pytest.raises(ConfigError, match=r"tracer_provider needs Config\.tracing"):
        Producer(Config(region="us-east-1"), client=fake, tracer_provider=spans.provider)


async def test_each_record_carries_its_caller_s_context_and_each_send_links_to_them(
    spans: Spans,
) -> None:
    fake = stream()
    config = Config(region="us-east-1", tracing="context")
    contexts: dict[str, str] = {}
    async with Producer(config, client=fake, tracer_provider=spans.provider) as producer:
        for i in range(40):
            with spans.tracer.start_as_current_span(f"request {i}") as request:
                await producer.put_record(stream="s", partition_key=f"k{i}", data=f"{i}".encode())
                contexts[str(i)] = header(request.get_span_context())
        # Put outside any span: nothing to carry.
        await producer.put_record(stream="s", partition_key="k", data=b"untraced")
    found = await carried(fake)
    assert found.pop("untraced") is None
    assert found == {data: TraceContext(parent) for data, parent in contexts.items()}
    # No "create" span in this mode; each send span is a root, linked to what it carried.
    assert spans.named("create") == []
    sends = spans.named("send s")
    linked = [header(link.context) for send in sends for link in send.links]
    assert sorted(linked) == sorted(contexts.values())
    for send in sends:
        assert send.kind is SpanKind.CLIENT
        assert send.parent is None
        attributes = dict(send.attributes or {})
        assert attributes["messaging.system"] == "aws.kinesis"
        assert attributes["messaging.operation.type"] == "send"
        assert attributes["messaging.destination.name"] == "s"
        assert attributes["aws.kinesis.stream_name"] == "s"
        assert attributes["rpc.method"] == "PutRecords"
        assert attributes["aiokpl.unlinked_records"] == 0
    assert sum(s.attributes["messaging.batch.message_count"] for s in sends) == 41  # type: ignore[index,misc]


async def test_a_tracestate_travels_with_its_traceparent(spans: Spans) -> None:
    from opentelemetry import trace

    fake = stream(1)
    config = Config(region="us-east-1", tracing="context")
    parent = spans.tracer.start_span("upstream")
    state = TraceState([("vendor", "value-1")])
    context = trace.SpanContext(
        parent.get_span_context().trace_id,
        parent.get_span_context().span_id,
        is_remote=True,
        trace_flags=trace.TraceFlags(1),
        trace_state=state,
    )
    async with Producer(config, client=fake, tracer_provider=spans.provider) as producer:
        with trace.use_span(trace.NonRecordingSpan(context)):
            await producer.put_record(stream="s", partition_key="k", data=b"r")
    assert await carried(fake) == {"r": TraceContext(header(context), "vendor=value-1")}


async def test_each_record_s_create_span_is_the_context_it_carries_and_ends_with_its_result(
    spans: Spans,
) -> None:
    fake = stream()
    config = Config(region="us-east-1", tracing="create")
    requests: dict[str, Any] = {}
    outcomes: list[Outcome[RecordResult]] = []
    async with Producer(config, client=fake, tracer_provider=spans.provider) as producer:
        for i in range(10):
            with spans.tracer.start_as_current_span(f"request {i}") as request:
                outcomes.append(
                    await producer.put_record(
                        stream="s", partition_key=f"k{i}", data=f"{i}".encode()
                    )
                )
            requests[str(i)] = request.get_span_context()
        assert isinstance(outcomes[0], TaggedRecord)
    creates = spans.named("create s")
    assert len(creates) == 10
    by_parent = {c.parent.span_id: c for c in creates if c.parent is not None}
    found = await carried(fake)
    for data, request in requests.items():
        create = by_parent[request.span_id]  # a child of its caller's span
        assert create.kind is SpanKind.PRODUCER
        assert create.context.trace_id == request.trace_id
        assert found[data] == TraceContext(header(create.context))
        result = await outcomes[int(data)]
        attributes = dict(create.attributes or {})
        assert attributes["aiokpl.outcome"] == "delivered"
        assert attributes["messaging.destination.partition.id"] == result.shard_id
        assert attributes["messaging.message.id"] == result.sequence_number
        assert attributes["messaging.operation.type"] == "create"
    # A resolved record keeps no span (an outcome held by its caller keeps no ended span).
    assert all(outcome.trace is None for outcome in outcomes)  # type: ignore[attr-defined]
    # The send spans link to the create spans, not to the callers'.
    linked = {link.context.span_id for send in spans.named("send s") for link in send.links}
    assert linked == {c.context.span_id for c in creates}


async def test_a_failed_record_s_create_span_says_its_code(spans: Spans) -> None:
    fake = stream(1)
    config = Config(region="us-east-1", tracing="create")
    fake.fail_requests(100, code="AccessDeniedException", message="no", http_status=400)
    async with Producer(config, client=fake, tracer_provider=spans.provider) as producer:
        outcome = await producer.put_record(stream="s", partition_key="k", data=b"r")
    result = await outcome
    assert not result.success
    (create,) = spans.named("create s")
    assert create.attributes is not None
    assert create.attributes["aiokpl.outcome"] == "failed"
    assert create.attributes["error.type"] == result.error_code == "AccessDeniedException"
    assert create.status.status_code is StatusCode.ERROR
    send = spans.named("send s")[0]
    assert send.attributes is not None
    assert send.attributes["error.type"] == "AccessDeniedException"
    assert send.status.status_code is StatusCode.ERROR


async def test_a_retried_record_is_linked_from_each_attempt(spans: Spans) -> None:
    fake = stream(1)
    # The first request's one Kinesis record is throttled; the retry stores it.
    fake.script_records([("ProvisionedThroughputExceededException", "slow down")])
    config = Config(region="us-east-1", tracing="context")
    async with Producer(config, client=fake, tracer_provider=spans.provider) as producer:
        with spans.tracer.start_as_current_span("request") as request:
            outcome = await producer.put_record(stream="s", partition_key="k", data=b"r")
    result = await outcome
    assert result.success
    assert len(result.attempts) == 2
    first, second = sorted(spans.named("send s"), key=lambda s: s.start_time or 0)
    for send in (first, second):
        assert [link.context.span_id for link in send.links] == [request.get_span_context().span_id]
    assert first.attributes is not None
    assert second.attributes is not None
    assert first.attributes["error.type"] == "ProvisionedThroughputExceededException"
    assert first.attributes["aiokpl.failed_kinesis_records"] == 1
    assert first.status.status_code is StatusCode.ERROR  # every record of it refused
    assert first.attributes["aiokpl.retried_records"] == 0
    assert second.attributes["aiokpl.retried_records"] == 1
    assert "error.type" not in second.attributes


async def test_links_stop_at_the_cap_and_the_rest_are_counted() -> None:
    spans = Spans(max_links=1000)
    fake = stream(1)
    config = Config(region="us-east-1", tracing="context", trace_max_links=3)
    async with Producer(config, client=fake, tracer_provider=spans.provider) as producer:
        for i in range(10):
            with spans.tracer.start_as_current_span(f"request {i}"):
                producer.put_record_nowait(stream="s", partition_key="k", data=b"r")
    (send,) = spans.named("send s")
    assert len(send.links) == 3
    assert send.attributes is not None
    assert send.attributes["aiokpl.unlinked_records"] == 7
    assert send.attributes["messaging.batch.message_count"] == 10
    assert send.attributes["aiokpl.kinesis_records"] == 1


async def test_a_record_sent_alone_goes_without_its_context_and_never_fails_for_it(
    spans: Spans,
) -> None:
    # Where a record travels raw (aggregation off; a stream that places records itself; a
    # record too large to aggregate), it has nowhere to carry its context: it goes as it
    # is, unrefused, and its send span still links to it.
    raw = stream(1)
    auto = FakeKinesis()
    auto.add_stream("s", 2, on_demand=True, record_distribution="AUTO")
    large = stream(1)
    cases = [
        (raw, Config(region="us-east-1", tracing="context", aggregation_enabled=False), 10),
        (auto, Config(region="us-east-1", tracing="create"), 10),
        (large, Config(region="us-east-1", tracing="context", aggregation_max_size=64), 100),
    ]
    for fake, config, size in cases:
        async with Producer(config, client=fake, tracer_provider=spans.provider) as producer:
            with spans.tracer.start_as_current_span("request"):
                outcome = await producer.put_record(stream="s", partition_key="k", data=b"x" * size)
        assert (await outcome).success, config
        ((_, stored),) = await read_stream(fake, "s")
        assert not is_aggregated(stored["Data"])
        assert stored["Data"] == b"x" * size
    assert len(spans.named("send s")) == 3
    assert all(len(send.links) == 1 for send in spans.named("send s"))


async def test_a_stream_that_aggregates_anywhere_carries_the_context(spans: Spans) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", 2, on_demand=True, record_distribution="AUTO")
    config = Config(region="us-east-1", tracing="context", aggregation_on_auto_streams=True)
    async with Producer(config, client=fake, tracer_provider=spans.provider) as producer:
        with spans.tracer.start_as_current_span("request") as request:
            await producer.put_record(stream="s", partition_key="k", data=b"r")
    assert await carried(fake) == {"r": TraceContext(header(request.get_span_context()))}


async def test_a_record_alone_in_its_batch_goes_as_an_aggregate_of_one(spans: Spans) -> None:
    # The common case at a low rate: its batch closes at its deadline with it alone.
    fake = stream(1)
    config = Config(region="us-east-1", tracing="context")
    async with Producer(config, client=fake, tracer_provider=spans.provider) as producer:
        with spans.tracer.start_as_current_span("request") as request:
            await (await producer.put_record(stream="s", partition_key="k", data=b"r"))
    ((_, stored),) = await read_stream(fake, "s")
    assert is_aggregated(stored["Data"])
    assert await carried(fake) == {"r": TraceContext(header(request.get_span_context()))}


async def test_a_group_s_records_each_carry_their_context_and_user_tags_stay(
    spans: Spans,
) -> None:
    fake = stream(1)
    config = Config(region="us-east-1", tracing="create", record_identities=True)
    async with Producer(config, client=fake, tracer_provider=spans.provider) as producer:
        with spans.tracer.start_as_current_span("request"):
            await producer.put_records(
                stream="s",
                records=[("k", b"a", None, [("mine", "1")]), ("k", b"b")],
            )
    creates = {span.context.span_id: span for span in spans.named("create s")}
    assert len(creates) == 2
    for _, record in await read_stream(fake, "s"):
        for user in deaggregate(record):
            keys = [tag.key for tag in user.tags]
            assert "aiokpl.id" in keys
            assert "aiokpl.trace" in keys
            assert ("mine" in keys) == (user.data == b"a")
            context = trace_context_of(user.tags)
            assert context is not None
            assert int(context.traceparent[36:52], 16) in creates


def test_a_sync_producer_s_records_carry_the_context_of_the_thread_that_put_them() -> None:
    spans = Spans()
    fake = stream(1)
    config = Config(region="us-east-1", tracing="create")
    with SyncProducer(config, client=fake, tracer_provider=spans.provider) as producer:
        with spans.tracer.start_as_current_span("request") as request:
            future = producer.put_record(stream="s", partition_key="k", data=b"r")
        assert future.result(timeout=30).success
    (create,) = spans.named("create s")
    assert create.parent is not None
    assert create.parent.span_id == request.get_span_context().span_id
    (send,) = spans.named("send s")
    assert [link.context.span_id for link in send.links] == [create.context.span_id]


def test_tracing_without_opentelemetry_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    with pytest.raises(ImportError, match=r"pip install 'aiokpl\[otel\]'"):
        Producer(Config(region="us-east-1", tracing="context"), client=FakeKinesis())
    with pytest.raises(ImportError, match=r"pip install 'aiokpl\[otel\]'"):
        SyncProducer(Config(region="us-east-1", tracing="create"), client=FakeKinesis())


def test_the_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="tracing must be one of 'off', 'context', 'create'"):
        Config(tracing="on")
    with pytest.raises(ConfigError, match="trace_max_links"):
        Config(trace_max_links=-1)


async def test_a_send_cancelled_with_its_producer_ends_its_span(spans: Spans) -> None:
    # A request under way when the surrounding scope is cancelled: its span ends, failed.
    import anyio

    fake = stream(1)
    fake.latency = 1_000.0
    config = Config(region="us-east-1", tracing="context")
    with anyio.move_on_after(5):
        async with Producer(config, client=fake, tracer_provider=spans.provider) as producer:
            outcome = await producer.put_record(stream="s", partition_key="k", data=b"r")
            await producer.flush()
    assert (await outcome).error_code == "Cancelled"
    (send,) = spans.named("send s")
    assert send.end_time is not None
    assert send.attributes is not None
    assert send.attributes["error.type"] == "Cancelled"
    assert send.status.status_code is StatusCode.ERROR


def test_the_send_spans_name_the_server_they_went_to(spans: Spans) -> None:
    from aiokpl._core.answers import Answered
    from aiokpl._core.records import KinesisRecord
    from aiokpl._tracing import Tracing

    tracing = Tracing("context", 128, spans.provider, "https://kinesis.eu-west-1.amazonaws.com")
    record = UserRecord("s", "k", b"r", None, 2)
    record.deadline = record.expires_at = 1.0
    span = tracing.send("s", [KinesisRecord.single(record, 0)])
    tracing.sent(span, Answered([("shardId-000000000000", "1")]))
    (send,) = spans.named("send s")
    assert send.attributes is not None
    assert send.attributes["server.address"] == "kinesis.eu-west-1.amazonaws.com"
    assert "server.port" not in send.attributes
    assert send.status.status_code is StatusCode.UNSET
    local = Tracing("context", 128, spans.provider, "http://127.0.0.1:4567")
    local.sent(local.send("s", []), Answered([]))
    assert spans.named("send s")[1].attributes == {
        **{k: v for k, v in (send.attributes or {}).items() if not k.startswith("server.")},
        "server.address": "127.0.0.1",
        "server.port": 4567,
        "messaging.batch.message_count": 0,
        "aiokpl.kinesis_records": 0,
    }


async def test_a_record_replayed_from_the_spool_keeps_its_context_and_its_tags(
    spans: Spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first run spools records whose stream fails, and is cancelled; the next one
    # replays them, each with its own tags and its context apart (in its aggregate, as
    # sent by the first run), under a tracing producer or not.
    import anyio

    from aiokpl import _spooling
    from aiokpl.testing._spool_files import MemoryFiles

    files = MemoryFiles()

    async def inline(function: Any, *args: Any) -> Any:
        await anyio.lowlevel.checkpoint()
        return function(*args)

    monkeypatch.setattr(_spooling, "spool_files", lambda config: files)
    monkeypatch.setattr(_spooling, "run_sync", inline)
    config = Config(region="us-east-1", spool_directory="/spool", tracing="create")
    failing = stream(1)
    failing.fail_requests(10**9, stream="s")
    contexts = {}
    with anyio.move_on_after(2):
        async with Producer(config, client=failing, tracer_provider=spans.provider) as producer:
            for i, tags in enumerate([None, [("mine", "1")]]):
                with spans.tracer.start_as_current_span("request"):
                    outcome = await producer.put_record(
                        stream="s", partition_key="k", data=f"{i}".encode(), tags=tags
                    )
                assert isinstance(outcome, TaggedRecord)
                contexts[f"{i}"] = trace_context_of(decode_tags(outcome.trace_tags))
            await producer.wait_durable()
            await anyio.sleep_forever()
    fake = stream(1)
    async with Producer(config.replace(tracing="off"), client=fake) as producer:
        await producer.flush()
    assert await carried(fake) == contexts
    assert None not in contexts.values()
    users = {user.data: user for _, r in await read_stream(fake, "s") for user in deaggregate(r)}
    assert [tag.key for tag in users[b"1"].tags] == ["mine", "aiokpl.trace"]
    assert [tag.key for tag in users[b"0"].tags] == ["aiokpl.trace"]


async def test_with_opentelemetry_s_api_alone_records_carry_only_a_caller_s_context() -> None:
    # No SDK: the API's tracer makes no spans. A record put inside a caller's (remote) span
    # carries that context; one put outside any carries nothing, never a zero context.
    from opentelemetry import trace
    from opentelemetry.trace import NoOpTracerProvider

    fake = stream(1)
    config = Config(region="us-east-1", tracing="create")
    caller = trace.SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=trace.TraceFlags(1))
    async with Producer(config, client=fake, tracer_provider=NoOpTracerProvider()) as producer:
        with trace.use_span(trace.NonRecordingSpan(caller)):
            await producer.put_record(stream="s", partition_key="k", data=b"inside")
        await producer.put_record(stream="s", partition_key="k", data=b"outside")
    assert await carried(fake) == {"inside": TraceContext(header(caller)), "outside": None}
    users = {user.data: user for _, r in await read_stream(fake, "s") for user in deaggregate(r)}
    assert users[b"outside"].tags == ()

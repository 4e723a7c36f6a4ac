"""The trace context codec (``aiokpl._core.trace_context``): a ``traceparent`` and
``tracestate`` written into a record's reserved tags and read back, through the aggregation
format (encoded, aggregated, decoded by ours and by AWS's ``aws_kinesis_agg``)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokpl._core.decoder import decode_tags
from aiokpl._core.encoder import encode_tags
from aiokpl._core.identity import is_reserved_key
from aiokpl._core.trace_context import (
    STATE_KEY,
    TRACE_KEY,
    TRACE_TAG_SIZE,
    TraceContext,
    check_traceparent,
    span_tags,
    split_trace_tags,
    trace_context_of,
    trace_tags,
)
from aiokpl.aggregation import Record, Tag, deaggregate, encode
from test_aggregation import aws_deaggregator, boto3_record

# The example of W3C Trace Context, section 3.2.
EXAMPLE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_traceparent_goes_into_one_reserved_tag_and_comes_back_whole() -> None:
    encoded = trace_tags(EXAMPLE)
    (tag,) = decode_tags(encoded)
    assert tag.key == TRACE_KEY
    assert is_reserved_key(TRACE_KEY)
    assert tag.value is not None
    assert len(tag.value) == 34  # compact: the header text is 55
    assert len(encoded) == TRACE_TAG_SIZE == 52
    assert trace_context_of(decode_tags(encoded)) == TraceContext(EXAMPLE, None)


def test_a_tracestate_goes_beside_it_only_when_there_is_one() -> None:
    state = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
    tags = decode_tags(trace_tags(EXAMPLE, state))
    assert [tag.key for tag in tags] == [TRACE_KEY, STATE_KEY]
    assert trace_context_of(tags) == TraceContext(EXAMPLE, state)
    assert [tag.key for tag in decode_tags(trace_tags(EXAMPLE, ""))] == [TRACE_KEY]


@given(
    trace=st.binary(min_size=16, max_size=16).filter(any),
    parent=st.binary(min_size=8, max_size=8).filter(any),
    flags=st.integers(0, 255),
)
def test_every_valid_traceparent_comes_back_exactly(
    trace: bytes, parent: bytes, flags: int
) -> None:
    header = f"00-{trace.hex()}-{parent.hex()}-{flags:02x}"
    assert trace_context_of(decode_tags(trace_tags(header))) == TraceContext(header)


def test_the_context_survives_aggregation_and_aws_kinesis_agg_reads_the_records() -> None:
    user_tags = (Tag("team", "payments"),)
    records = [
        Record(f"k{i}", b"data %d" % i, None, user_tags + tuple(decode_tags(trace_tags(EXAMPLE))))
        for i in range(3)
    ]
    kinesis_record = boto3_record(encode(records))
    ours = deaggregate(kinesis_record)
    assert [trace_context_of(record.tags) for record in ours] == [TraceContext(EXAMPLE)] * 3
    assert [record.tags[0] for record in ours] == [Tag("team", "payments")] * 3
    # AWS's deaggregator ignores tags: it reads the same user records.
    theirs = list(aws_deaggregator.iter_deaggregate_records([kinesis_record], data_format="Boto3"))
    datas = [base64.b64decode(record["kinesis"]["data"]) for record in theirs]  # as it returns
    assert datas == [record.data for record in ours]


@pytest.mark.parametrize(
    ("header", "why"),
    [
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "VERSION-TRACE_ID"),
        ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "lowercase"),
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", "trace id must not be all"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "parent id must not be all"),
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version ff"),
        (EXAMPLE + "-extra", "exactly four fields"),
        (" " + EXAMPLE, "VERSION-TRACE_ID"),
    ],
)
def test_a_traceparent_w3c_refuses_is_refused(header: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        trace_tags(header)


def test_a_later_versions_traceparent_is_carried_as_its_first_four_fields() -> None:
    later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next"
    assert check_traceparent(later) == EXAMPLE
    assert trace_context_of(decode_tags(trace_tags(later))) == TraceContext(EXAMPLE)


def test_a_traceparent_is_a_str() -> None:
    with pytest.raises(TypeError, match="traceparent must be a str, not bytes"):
        check_traceparent(EXAMPLE.encode())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "tags",
    [
        [],
        [Tag("team", "payments")],
        [Tag(TRACE_KEY, None)],
        [Tag(TRACE_KEY, "short")],
        [Tag(TRACE_KEY, "!" * 34)],
        [Tag(TRACE_KEY, "A" * 33 + "=")],  # padding inside: undecodable
        [Tag(TRACE_KEY, "é" * 34)],  # not ASCII
        [Tag(TRACE_KEY, "A" * 34)],  # all zeros: no valid trace id
        [Tag(TRACE_KEY, "S_kvNXe0TaajzpKdDg5HNgDwZ6oLqQK3AQ"[:-1] + "B")],  # not canonical
    ],
)
def test_what_is_not_a_valid_context_reads_as_none(tags: list[Tag]) -> None:
    assert trace_context_of(tags) is None


def test_the_first_context_tag_counts_and_an_empty_tracestate_is_none() -> None:
    (first,) = decode_tags(trace_tags(EXAMPLE))
    other = decode_tags(trace_tags("00-11111111111111111111111111111111-2222222222222222-00"))
    tags = [first, *other, Tag(STATE_KEY, "")]
    assert trace_context_of(tags) == TraceContext(EXAMPLE, None)


@given(
    trace_id=st.integers(1, 2**128 - 1),
    span_id=st.integers(1, 2**64 - 1),
    flags=st.integers(0, 255),
    tracestate=st.none() | st.text(min_size=1, max_size=64),
)
def test_a_span_s_integers_encode_as_its_traceparent_does(
    trace_id: int, span_id: int, flags: int, tracestate: str | None
) -> None:
    # The producer's fast path (OpenTelemetry's SpanContext holds integers) writes exactly
    # what the header's encoding writes, and reads back as that header.
    header = f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"
    assert span_tags(trace_id, span_id, flags, tracestate) == trace_tags(header, tracestate)
    assert trace_context_of(decode_tags(span_tags(trace_id, span_id, flags, tracestate))) == (
        TraceContext(header, tracestate)
    )


def test_a_record_s_trace_tags_split_from_its_others_in_their_order() -> None:
    mine = encode_tags([("a", "1"), ("b", None)])
    traced = span_tags(1, 2, 1, "k=v")
    assert split_trace_tags(mine + traced) == (mine, traced)
    assert split_trace_tags(traced + mine) == (mine, traced)
    assert split_trace_tags(mine) == (mine, b"")
    assert split_trace_tags(b"") == (b"", b"")

"""Producer identities in record tags (``_core/identity``): their form, their cost in bytes, and
their trip through the real encoder, our ``deaggregate`` and AWS's ``aws_kinesis_agg``."""

from __future__ import annotations

import base64
import datetime
import sys
from types import ModuleType
from typing import Any

import pytest

from aiokpl._core.encoder import AggregateBuilder, encode_tags
from aiokpl._core.identity import (
    IDENTITY_TAG_OVERHEAD,
    MAX_SEQUENCE,
    IdentityEncoder,
    identity_tag_size,
    is_reserved_key,
    parse_identity,
    read_identity,
)
from aiokpl.aggregation import (
    IDENTITY_KEY,
    AggregationFormatError,
    Identity,
    IdentityTagError,
    Record,
    Tag,
    deaggregate,
    deaggregate_records,
    encode,
    identity_of,
    identity_tag,
    new_producer_id,
)

PID = "AAECAwQFBgcICQoLDA0ODw"  # bytes 0 … 15


def _aws_kinesis_agg() -> tuple[ModuleType, ModuleType]:
    saved = sys.path[:]  # its modules put their own directory on sys.path
    try:
        from aws_kinesis_agg import deaggregator, messages_pb2
    finally:
        sys.path[:] = saved
    return deaggregator, messages_pb2


def test_a_producer_id_is_16_random_bytes_in_22_characters() -> None:
    ids = {new_producer_id() for _ in range(100)}
    assert len(ids) == 100
    for producer_id in ids:
        assert len(producer_id) == 22
        assert len(base64.urlsafe_b64decode(producer_id + "==")) == 16
        assert identity_tag(producer_id, 0).value == f"{producer_id}.0"
    assert base64.urlsafe_b64decode(PID + "==") == bytes(range(16))


def test_the_tag_is_one_key_and_the_id_dot_decimal_sequence() -> None:
    assert IDENTITY_KEY == "aiokpl.id"
    assert identity_tag(PID, 0) == Tag("aiokpl.id", f"{PID}.0")
    assert identity_tag(PID, 1042) == Tag("aiokpl.id", f"{PID}.1042")
    assert identity_tag(PID, MAX_SEQUENCE) == Tag("aiokpl.id", f"{PID}.9223372036854775807")


@pytest.mark.parametrize(
    "producer_id",
    [
        "",
        PID[:21],
        PID + "A",
        PID[:21] + "B",  # 16 bytes leave the last character's low 4 bits zero: not canonical
        PID[:20] + "+A",  # standard base64, not URL-safe
        PID[:20] + ".A",
        PID.encode(),
        None,
    ],
)
def test_a_malformed_producer_id_is_refused_when_building(producer_id: Any) -> None:
    with pytest.raises(ValueError, match="producer_id must be 22 characters"):
        identity_tag(producer_id, 0)
    with pytest.raises(ValueError, match="producer_id must be 22 characters"):
        IdentityEncoder(producer_id)


@pytest.mark.parametrize("sequence", [-1, MAX_SEQUENCE + 1, True, 1.0, "1", None])
def test_a_sequence_outside_0_to_2_63_minus_1_is_refused(sequence: Any) -> None:
    with pytest.raises(ValueError, match="sequence must be an int"):
        identity_tag(PID, sequence)
    with pytest.raises(ValueError, match="sequence must be an int"):
        IdentityEncoder(PID).encode(sequence)


@pytest.mark.parametrize("sequence", [0, 9, 10, 999_999, 1_000_000, 10**9 - 1, MAX_SEQUENCE])
def test_the_encoder_writes_what_encode_tags_writes_and_its_size_is_exact(sequence: int) -> None:
    encoded = IdentityEncoder(PID).encode(sequence)
    assert encoded == encode_tags([identity_tag(PID, sequence)])
    assert len(encoded) == identity_tag_size(sequence) == IDENTITY_TAG_OVERHEAD + len(str(sequence))
    # What it adds to a user record inside an aggregate, measured on the aggregate itself: its
    # own bytes, and one more where the record's length varint grows a byte (at 128 and 16384).
    for data, extra in [(b"x" * 1000, 0), (b"x" * 10, 0), (b"x" * 100, 1)]:
        plain, tagged = AggregateBuilder(), AggregateBuilder()
        plain.add("k", data)
        tagged.add("k", data, tags=[identity_tag(PID, sequence)])
        assert tagged.size - plain.size == len(encoded) + extra


def test_the_bytes_per_record_are_44_below_a_million_and_47_below_a_billion() -> None:
    assert IDENTITY_TAG_OVERHEAD == 38
    assert identity_tag_size(0) == 39
    assert identity_tag_size(999_999) == 44
    assert identity_tag_size(10**9 - 1) == 47
    assert identity_tag_size(MAX_SEQUENCE) == 57


@pytest.mark.parametrize(
    "value",
    [
        f"{PID}.01",  # leading zero: 1 has one spelling
        f"{PID}.+1",
        f"{PID}.-1",
        f"{PID}. 1",
        f"{PID}.1_0",
        f"{PID}.\u0661",  # an Arabic-Indic digit, which int() accepts
        f"{PID}.",
        f"{PID}.{MAX_SEQUENCE + 1}",  # 19 digits, over 2**63-1
        f"{PID}.{10**19}",  # 20 digits
        f"{PID}1",
        f"{PID[:21]}B.1",
        f"{PID}.1.",
        f".1{PID}",
        "",
    ],
)
def test_a_malformed_value_raises_identity_tag_error(value: str) -> None:
    with pytest.raises(IdentityTagError, match=r"malformed aiokpl\.id tag") as caught:
        parse_identity(value)
    assert isinstance(caught.value, AggregationFormatError)
    assert isinstance(caught.value, ValueError)
    with pytest.raises(IdentityTagError):
        identity_of(Record("k", b"", None, (Tag(IDENTITY_KEY, value),)))


def test_identity_of_reads_the_tag_among_user_tags_in_any_order() -> None:
    ours = identity_tag(PID, 7)
    expected = Identity(PID, 7)
    for tags in [
        (ours,),
        (Tag("env", "prod"), ours),
        (ours, Tag("env", "prod"), Tag("flag")),
        (Tag("a"), Tag("b", "c"), ours),
    ]:
        assert identity_of(Record("k", b"", None, tags)) == expected
        assert read_identity(tags) == (PID, 7)


def test_a_record_without_the_tag_has_no_identity() -> None:
    for tags in [(), (Tag("env", "prod"),), (Tag("aiokpl.idx", "1"), Tag("x", None))]:
        assert identity_of(Record("k", b"", None, tags)) is None
        assert read_identity(tags) is None


def test_the_tag_twice_or_without_value_is_malformed() -> None:
    with pytest.raises(IdentityTagError, match="has two"):
        read_identity((identity_tag(PID, 1), identity_tag(PID, 1)))
    with pytest.raises(IdentityTagError, match="no value"):
        read_identity((Tag(IDENTITY_KEY),))
    with pytest.raises(IdentityTagError, match="no value"):
        read_identity((Tag("env", "prod"), Tag(IDENTITY_KEY)))


def test_every_aiokpl_prefixed_key_is_reserved_and_no_other() -> None:
    assert is_reserved_key("aiokpl.id")
    assert is_reserved_key("aiokpl.anything")
    assert not is_reserved_key("aiokpl")
    assert not is_reserved_key("aiokplid")
    assert not is_reserved_key("env")
    assert not is_reserved_key("x.aiokpl.id")


def _records_with_identities() -> list[Record]:
    other = new_producer_id()
    return [
        Record("a", b"0", None, (identity_tag(PID, 0),)),
        Record("b", b"1", "7", (Tag("env", "prod"), identity_tag(PID, 1))),
        Record("a", b"plain"),
        Record("c", b"2", None, (identity_tag(other, 123_456), Tag("flag"))),
    ]


def test_identities_survive_the_real_encoder_and_deaggregate() -> None:
    records = _records_with_identities()
    blob = encode(records)
    lambda_event = {
        "Records": [
            {
                "eventSource": "aws:kinesis",
                "kinesis": {
                    "data": base64.b64encode(blob).decode(),
                    "partitionKey": "a",
                    "sequenceNumber": "1",
                },
            }
        ]
    }
    for read in [
        deaggregate({"Data": blob, "PartitionKey": "a", "SequenceNumber": "1"}),
        deaggregate_records(lambda_event),
    ]:
        assert [identity_of(r) for r in read] == [identity_of(r) for r in records]
        assert [r.tags for r in read] == [r.tags for r in records]
        assert identity_of(read[3]) == Identity(records[3].tags[0].value[:22], 123_456)  # type: ignore[index]


def test_aws_kinesis_agg_reads_records_with_identities_and_its_protobuf_sees_the_tag() -> None:
    """AWS's Python deaggregator passes over the tags (it returns none) and gives back every
    record intact; AWS's protobuf schema (the one the KCL compiles) reads the tag's key and value,
    so any consumer that parses the aggregate itself sees the identity."""
    deaggregator, messages_pb2 = _aws_kinesis_agg()
    records = _records_with_identities()
    blob = encode(records)
    out = list(
        deaggregator.iter_deaggregate_records(
            [
                {
                    "Data": blob,
                    "PartitionKey": "a",
                    "SequenceNumber": "1",
                    "ApproximateArrivalTimestamp": datetime.datetime(
                        2026, 1, 1, tzinfo=datetime.timezone.utc
                    ),
                }
            ],
            data_format="Boto3",
        )
    )
    assert [base64.b64decode(r["kinesis"]["data"]) for r in out] == [r.data for r in records]
    assert [r["kinesis"]["partitionKey"] for r in out] == [r.partition_key for r in records]
    message = messages_pb2.AggregatedRecord()
    message.ParseFromString(blob[4:-16])
    read = [[(t.key, t.value) for t in r.tags if t.key == IDENTITY_KEY] for r in message.records]
    assert read == [
        [(IDENTITY_KEY, tag.value)] if tag is not None else []
        for tag in (next((t for t in r.tags if t.key == IDENTITY_KEY), None) for r in records)
    ]
    assert read[1] == [(IDENTITY_KEY, f"{PID}.1")]


@pytest.mark.parametrize("ehk", [None, "12345678901234567890"])
@pytest.mark.parametrize("data_size", [0, 100, 200_000])
def test_alone_size_is_what_an_aggregate_of_one_measures(ehk: str | None, data_size: int) -> None:
    from aiokpl._core.identity import alone_size

    key = "pärtition"
    tags = encode_tags([("u", "v")]) + IdentityEncoder(new_producer_id()).encode(10**12)
    builder = AggregateBuilder()
    builder.try_add(key, b"x" * data_size, ehk, float("inf"), tags)
    measured = len(key.encode()) + len(builder.encode())
    assert alone_size(len(key.encode()), data_size, ehk, len(tags)) == measured

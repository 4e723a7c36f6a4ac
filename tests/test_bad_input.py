"""SPEC §5: bad input gets a clear error, and nothing is lost.

One test per rejected input, each followed by a valid put that must still succeed; then
malformed answers from the service, which must become retries or failed results, never crashes
or unresolved outcomes.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokpl import (
    Config,
    InvalidRecordError,
    InvalidRecordTypeError,
    Producer,
    ProducerClosedError,
)
from aiokpl.testing import FakeKinesis

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1", record_ttl_ms=2_000)
MiB = 1024 * 1024


async def assert_still_works(producer: Producer, fake: FakeKinesis) -> None:
    before = len(fake.stored_records("s"))
    result = await (await producer.put_record(stream="s", partition_key="ok", data=b"fine"))
    assert result.success
    assert producer.outstanding_records == 0
    assert len(fake.stored_records("s")) == before + 1


BAD_PUTS: list[Any] = [
    pytest.param(
        {"partition_key": ""},
        InvalidRecordError,
        "partition_key must be 1 … 256 UTF-16 code units long, as Kinesis counts .*; got 0$",
        id="empty-key",
    ),
    pytest.param(
        {"partition_key": "k" * 257},
        InvalidRecordError,
        "partition_key must be 1 … 256 UTF-16 code units long, as Kinesis counts .*; got 257$",
        id="long-key",
    ),
    pytest.param(
        {"partition_key": 42},
        InvalidRecordTypeError,
        "partition_key must be a str, not int",
        id="int-key",
    ),
    pytest.param(
        {"partition_key": b"k"},
        InvalidRecordTypeError,
        "partition_key must be a str, not bytes",
        id="bytes-key",
    ),
    pytest.param({"partition_key": "\ud800"}, InvalidRecordError, "UTF-8", id="surrogate-key"),
    pytest.param(
        {"data": "text"},
        InvalidRecordTypeError,
        "data must be bytes, bytearray or memoryview, not str; encode it first",
        id="str-data",
    ),
    pytest.param(
        {"data": None},
        InvalidRecordTypeError,
        "data must be bytes, bytearray or memoryview, not NoneType",
        id="none-data",
    ),
    pytest.param({"data": [1, 2]}, InvalidRecordTypeError, "not list", id="list-data"),
    pytest.param(
        {"data": b"x" * MiB},
        InvalidRecordError,
        r"1048577 bytes, over max_record_size \(1048576\)",
        id="too-large",
    ),
    pytest.param(
        {"explicit_hash_key": "12a"},
        InvalidRecordError,
        "explicit_hash_key must be a decimal integer",
        id="ehk-not-decimal",
    ),
    pytest.param(
        {"explicit_hash_key": "-5"},
        InvalidRecordError,
        "explicit_hash_key must be a decimal integer",
        id="ehk-negative",
    ),
    pytest.param(
        {"explicit_hash_key": str(2**128)},
        InvalidRecordError,
        r"explicit_hash_key must be in 0 … 2\*\*128-1",
        id="ehk-too-large",
    ),
    pytest.param(
        {"explicit_hash_key": 1.5},
        InvalidRecordTypeError,
        "explicit_hash_key must be a decimal str or an int, not float",
        id="ehk-float",
    ),
    pytest.param(
        {"stream": ""}, InvalidRecordError, "stream must be 1 … 128 characters", id="empty-stream"
    ),
    pytest.param(
        {"stream": "has space"},
        InvalidRecordError,
        "stream must be 1 … 128 characters",
        id="invalid-stream",
    ),
    pytest.param(
        {"stream": "s" * 129},
        InvalidRecordError,
        "stream must be 1 … 128 characters",
        id="long-stream",
    ),
    pytest.param(
        {"stream": None},
        InvalidRecordTypeError,
        "stream must be a str, not NoneType",
        id="none-stream",
    ),
    pytest.param(
        {"stream": ["s"]},
        InvalidRecordTypeError,
        "stream must be a str, not list",
        id="unhashable-stream",
    ),
]


@pytest.mark.parametrize(("changes", "error", "message"), BAD_PUTS)
async def test_rejected_put_names_the_field_and_leaves_the_producer_working(
    changes: dict[str, Any], error: type[Exception], message: str
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    kwargs: dict[str, Any] = {"stream": "s", "partition_key": "k", "data": b"d", **changes}
    async with Producer(CONFIG, client=fake) as producer:
        with pytest.raises(error, match=message):
            await producer.put_record(**kwargs)
        with pytest.raises(error, match=message):
            producer.put_record_nowait(**kwargs)
        assert producer.outstanding_records == 0
        await assert_still_works(producer, fake)


async def test_a_larger_limit_accepts_larger_records() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", max_record_size=2 * MiB)
    async with Producer(CONFIG.replace(max_record_size=2 * MiB), client=fake) as producer:
        result = await (await producer.put_record(stream="s", partition_key="k", data=b"x" * MiB))
        assert result.success
        await assert_still_works(producer, fake)


async def test_put_after_exit() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    async with Producer(CONFIG, client=fake) as producer:
        await assert_still_works(producer, fake)
    with pytest.raises(ProducerClosedError, match="closed"):
        await producer.put_record(stream="s", partition_key="k", data=b"d")


class Malformed:
    """A client whose PutRecords answers are broken in a scripted way, then correct."""

    def __init__(self, fake: FakeKinesis, answers: list[Any]) -> None:
        self.fake = fake
        self.answers = answers

    async def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        return await self.fake.list_shards(**kwargs)

    async def describe_stream(self, **kwargs: Any) -> dict[str, Any]:
        return await self.fake.describe_stream(**kwargs)

    async def describe_stream_summary(self, **kwargs: Any) -> dict[str, Any]:
        return await self.fake.describe_stream_summary(**kwargs)

    async def put_records(self, **kwargs: Any) -> Any:
        if self.answers:
            answer = self.answers.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer(kwargs) if callable(answer) else answer
        return await self.fake.put_records(**kwargs)


def fewer_results(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {
        "FailedRecordCount": 0,
        "Records": [{"SequenceNumber": "1", "ShardId": "shardId-000000000000"}]
        * (len(kwargs["Records"]) - 1),
    }


MALFORMED: list[Any] = [
    pytest.param(None, "Internal", id="none"),
    pytest.param("not json", "Internal", id="string"),
    pytest.param({}, "Internal", id="no-records"),
    pytest.param({"Records": "x"}, "Internal", id="records-not-a-list"),
    pytest.param(fewer_results, "RecordCountMismatch", id="count-mismatch"),
    pytest.param(
        lambda kw: {"Records": [{} for _ in kw["Records"]]}, "Internal", id="empty-entries"
    ),
    pytest.param(
        lambda kw: {"Records": [None for _ in kw["Records"]]}, "Internal", id="null-entries"
    ),
    pytest.param(
        lambda kw: {"Records": [{"SequenceNumber": "5"} for _ in kw["Records"]]},
        "Internal",
        id="no-shard-id",
    ),
    pytest.param(ValueError("JSON decode error"), "Internal", id="exception"),
    pytest.param(ConnectionResetError("reset"), "Internal", id="reset"),
    pytest.param(TimeoutError(), "Internal", id="timeout"),
]


@pytest.mark.parametrize(("answer", "code"), MALFORMED)
async def test_malformed_answers_become_retries(answer: Any, code: str) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    client = Malformed(fake, [answer])
    async with Producer(CONFIG.replace(aggregation_enabled=False), client=client) as producer:
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"d")
            for i in range(3)
        ]
        results = [await outcome for outcome in outcomes]
        await assert_still_works(producer, fake)
    assert all(result.success for result in results)
    first_attempt_codes = {result.attempts[0].error_code for result in results}
    assert code in first_attempt_codes
    keys = sorted(str(s.partition_key) for s in fake.stored_records("s"))
    assert keys == ["k0", "k1", "k2", "ok"]


async def test_answers_that_stay_broken_fail_at_the_ttl() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    client = Malformed(fake, [{}] * 1000)
    async with Producer(CONFIG, client=client) as producer:
        t0 = anyio.current_time()
        result = await (await producer.put_record(stream="s", partition_key="k", data=b"d"))
    assert not result.success
    assert result.error_code == "Expired"
    assert result.attempts[-1].ended_at == pytest.approx(t0 + 2.0, abs=1e-6)
    assert {a.error_code for a in result.attempts[:-1]} == {"Internal"}

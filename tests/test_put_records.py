"""``Producer.put_records``: many records in one call, all or nothing (asyncio and trio)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, overload

import anyio
import pytest

from aiokpl import Config, InvalidRecordError, InvalidRecordTypeError, ProducerClosedError
from aiokpl._core.hashing import MAX_HASH_KEY
from aiokpl._producer.producer import Producer
from aiokpl.testing import FakeKinesis
from test_producer import user_records, warm_up

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1")


async def test_a_group_lands_intact_in_order_with_one_outcome_each() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=4)
    group: list[tuple[str, bytes] | tuple[str, bytes, str]]
    group = [(f"key-{i % 7}", b"%d" % i) for i in range(1000)]
    group[3] = ("pinned", b"3", str(MAX_HASH_KEY))  # a 3-item record: explicit hash key
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        outcomes = await producer.put_records(stream="s", records=group)
        assert producer.outstanding_records == len(group)
        results = [await outcome for outcome in outcomes]
    assert all(result.success for result in results)
    assert results[3].shard_id == "shardId-000000000003"  # the last shard holds 2**128 - 1
    stored = Counter((key, data) for _, key, data in user_records(fake, "s"))
    assert stored == Counter([("warm-up", b"")] + [(r[0], r[1]) for r in group])  # once each
    # Records of one group share their timestamps: one clock reading for all of them.
    assert len({r.attempts[-1].started_at - r.attempts[-1].delay for r in results}) == 1


async def test_one_bad_record_rejects_the_group_and_names_it() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG, client=fake) as producer:
        with pytest.raises(InvalidRecordError, match=r"^records\[2\]: partition_key must be 1"):
            await producer.put_records(stream="s", records=[("a", b"1"), ("b", b"2"), ("", b"")])
        with pytest.raises(InvalidRecordTypeError, match=r"^records\[1\]: data must be bytes"):
            await producer.put_records(stream="s", records=[("a", b"1"), ("b", "text")])
        with pytest.raises(
            InvalidRecordTypeError, match=r"^records\[0\]: a record is a .* not str"
        ):
            await producer.put_records(stream="s", records=["ab"])
        with pytest.raises(InvalidRecordTypeError, match="not one of length 5"):
            await producer.put_records(stream="s", records=[["a", b"1", None, None, "x"]])
        with pytest.raises(InvalidRecordError, match="stream must be"):
            await producer.put_records(stream="bad name", records=[("a", b"1")])
        assert producer.outstanding_records == 0  # nothing was enqueued
        ok = await producer.put_records(stream="s", records=[["a", b"1", None], ("b", b"2")])
        assert all([(await outcome).success for outcome in ok])  # and the producer works on
    assert producer.statistics().records_put == 2


@pytest.mark.parametrize(
    "records",
    [None, "abc", b"abc", bytearray(b"ab"), 5, {"k": b"x"}],
    ids=["None", "str", "bytes", "bytearray", "int", "dict"],
)
async def test_records_that_are_not_a_collection_of_records_are_refused_by_name(
    records: object,
) -> None:
    # None or an int used to raise Python's bare "not iterable"; a string, bytes or a dict
    # were iterated and refused as records[0], hiding that the argument itself is wrong.
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG, client=fake) as producer:
        with pytest.raises(InvalidRecordTypeError) as info:
            await producer.put_records(stream="s", records=records)  # type: ignore[arg-type]
        assert str(info.value).startswith("records must be an iterable (a list, say) of records")
        assert str(info.value).endswith(f"; got {type(records).__name__}")
        assert producer.outstanding_records == 0
        # Any iterable of records is fine: a generator, a tuple.
        ok = await producer.put_records(stream="s", records=((k, b"x") for k in "ab"))
        assert all([(await outcome).success for outcome in ok])
    assert fake.calls("PutRecords") == 1


async def test_a_group_waits_for_room_for_all_of_it() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(max_outstanding_records=10)
    async with Producer(config, client=fake) as producer:
        first = await producer.put_records(stream="s", records=[("a", b"x")] * 8)
        assert producer.outstanding_records == 8
        # 8 + 5 > 10: the group waits until the first one's results free the room.
        second = await producer.put_records(stream="s", records=[("b", b"y")] * 5)
        assert all(outcome.done() for outcome in first)
        assert producer.outstanding_records == 5
        with pytest.raises(InvalidRecordError, match="can never be outstanding at once"):
            await producer.put_records(stream="s", records=[("c", b"z")] * 11)
        assert all([(await outcome).success for outcome in second])


class _LengthOnly(Sequence[tuple[str, bytes]]):
    """A group that says how long it is, and fails the test if a record of it is read."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> tuple[str, bytes]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[str, bytes]]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, int) and index >= self.length:
            raise IndexError(index)  # the end, for iteration
        raise AssertionError("a record of a group over the bound was read")


async def test_a_group_over_the_bound_is_refused_before_its_records_are_checked() -> None:
    # Before, a group of 1,000,000 records was checked record by record (3.9 s) only to be
    # refused on its count (now 1 ms).
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(max_outstanding_records=10)
    async with Producer(config, client=fake) as producer:
        with pytest.raises(
            InvalidRecordError,
            match=r"^records: 11 records can never be outstanding at once "
            r"\(max_outstanding_records=10, ",
        ):
            await producer.put_records(stream="s", records=_LengthOnly(11))
        drawn = 0

        def records() -> Iterator[tuple[str, bytes]]:
            nonlocal drawn
            for _ in range(1_000):
                drawn += 1
                yield ("k", b"x")

        # Without a length: drawn one past the bound, not to the end.
        with pytest.raises(InvalidRecordError, match=r"^records: 11 or more records can never"):
            await producer.put_records(stream="s", records=records())
        assert drawn == 11
        assert producer.outstanding_records == 0
        outcomes = await producer.put_records(stream="s", records=_LengthOnly(0))
        assert outcomes == []


async def test_cancelled_while_waiting_enqueues_nothing() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(max_outstanding_records=4, record_max_buffered_time_ms=10_000)
    async with Producer(config, client=fake) as producer:
        await producer.put_records(stream="s", records=[("a", b"x")] * 3)
        with anyio.move_on_after(1.0) as scope:  # results come after 10 s: no room before
            await producer.put_records(stream="s", records=[("b", b"y")] * 2)
        assert scope.cancelled_caught
        assert producer.outstanding_records == 3
    assert producer.statistics().records_put == 3


async def test_put_records_after_exit_raises() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG, client=fake) as producer:
        pass
    with pytest.raises(ProducerClosedError):
        await producer.put_records(stream="s", records=[("a", b"1")])

"""``aiokpl.testing.deaggregate_as_kcl`` and ``read_as_kcl``: what a KCL consumer keeps.

The KCL's ``AggregatorUtil.deaggregate(records, startingHashKey, endingHashKey)`` keeps an
aggregate whole only if every user record's effective hash key lies in the shard it was read
from, drops it whole otherwise, and passes anything that is not an aggregate through. The pure
function is compared with expectations worked out by hand; ``read_as_kcl`` reads a fake
(asyncio and trio, virtual clock); over HTTP it is in ``tests/integration/test_local_auto.py``.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import pytest

from aiokpl._core.hashing import MAX_HASH_KEY, hash_key_of
from aiokpl.aggregation import MAGIC, deaggregate, encode
from aiokpl.testing import FakeKinesis, deaggregate_as_kcl, read_as_kcl

pytestmark = pytest.mark.anyio

HALF = (MAX_HASH_KEY + 1) // 2
LOWER, UPPER = "shardId-000000000000", "shardId-000000000001"
RANGES: dict[str, Any] = {LOWER: (0, HALF - 1), UPPER: (HALF, MAX_HASH_KEY)}


def test_the_keys_used_here_hash_where_the_expectations_say() -> None:
    # k1 and k3 belong to the upper half, k2 to the lower: the hand-worked cases rely on it.
    assert hash_key_of(b"k1") >= HALF
    assert hash_key_of(b"k3") >= HALF
    assert hash_key_of(b"k2") < HALF


def read(data: bytes, sequence: str, key: str | None = "outer") -> dict[str, Any]:
    """A record as ``GetRecords`` answers it."""
    record: dict[str, Any] = {"Data": data, "SequenceNumber": sequence}
    if key is not None:
        record["PartitionKey"] = key
    return record


def kept(found: list[tuple[str, Any]]) -> list[tuple[str, bytes, int, bool]]:
    return [(shard, r.data, r.sub_sequence_number, r.aggregated) for shard, r in found]


def test_an_aggregate_is_kept_whole_or_dropped_whole() -> None:
    records = [
        # Both keys in the upper shard: kept, both.
        (UPPER, read(encode([("k1", b"a"), ("k3", b"b")]), "1")),
        # k2 is not the upper shard's: c goes with d, though c's key is in range.
        (UPPER, read(encode([("k1", b"c"), ("k2", b"d")]), "2")),
        # On the lower shard, k1 is out: f goes too, though its explicit key 0 is in.
        (LOWER, read(encode([("k1", b"e"), ("x", b"f", "0")]), "3")),
        # An explicit hash key wins over the partition key: g's 5 is the lower shard's.
        (LOWER, read(encode([("k1", b"g", "5"), ("k2", b"h")]), "4")),
        # The last user record is the one out of range: the first goes as well.
        (LOWER, read(encode([("k2", b"i"), ("k2", b"j", str(HALF))]), "5")),
        # A negative explicit key is a number below every range: out.
        (UPPER, read(encode([("k1", b"k", "-1")]), "6")),
    ]
    assert kept(deaggregate_as_kcl(records, RANGES)) == [
        (UPPER, b"a", 0, True),
        (UPPER, b"b", 1, True),
        (LOWER, b"g", 0, True),
        (LOWER, b"h", 1, True),
    ]
    # aiokpl.aggregation.deaggregate(shard=) drops only the user records out of range.
    assert [r.data for r in deaggregate(records[1][1], shard=RANGES[UPPER])] == [b"c"]
    assert [r.data for r in deaggregate(records[2][1], shard=RANGES[LOWER])] == [b"f"]


def test_a_record_that_is_not_an_aggregate_passes_whatever_its_shard() -> None:
    body = b"\xff\xff\xff\xff"
    spoiled = MAGIC + body + hashlib.md5(body).digest()  # framed, but no protobuf behind
    no_digest = encode([("k2", b"z")])[:-1]
    records = [
        (LOWER, read(b"raw", "1", key="k1")),  # k1 is the upper shard's: passed all the same
        (UPPER, read(b"keyless", "2", key=None)),  # stored without a key (an AUTO stream)
        (UPPER, read(spoiled, "3", key="p")),
        (LOWER, read(no_digest, "4", key="q")),
        (LOWER, read(b"", "5", key="r")),
    ]
    found = deaggregate_as_kcl(records, RANGES)
    assert [(shard, r.partition_key, r.data, r.aggregated) for shard, r in found] == [
        (LOWER, "k1", b"raw", False),
        (UPPER, None, b"keyless", False),
        (UPPER, "p", spoiled, False),
        (LOWER, "q", no_digest, False),
        (LOWER, "r", b"", False),
    ]
    assert [r.sequence_number for _, r in found] == ["1", "2", "3", "4", "5"]


def test_an_explicit_hash_key_that_is_no_number_ends_the_aggregate_there() -> None:
    # The KCL's BigInteger throws: it logs the error and keeps what it took before.
    aggregate = encode([("k2", b"i"), ("k2", b"j", "12x"), ("k2", b"l")])
    assert kept(deaggregate_as_kcl([(LOWER, read(aggregate, "1"))], RANGES)) == [
        (LOWER, b"i", 0, True)
    ]
    assert deaggregate_as_kcl([(LOWER, read(encode([("k2", b"j", "")]), "2"))], RANGES) == []


def test_shard_ranges_may_be_pairs_of_text_key_ranges_or_list_shards_entries() -> None:
    aggregate = read(encode([("k2", b"a")]), "1")
    shapes: list[Any] = [
        (str(0), str(HALF - 1)),
        {"StartingHashKey": "0", "EndingHashKey": str(HALF - 1)},
        {
            "ShardId": LOWER,
            "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": str(HALF - 1)},
        },
    ]
    for shape in shapes:
        assert kept(deaggregate_as_kcl([(LOWER, aggregate)], {LOWER: shape})) == [
            (LOWER, b"a", 0, True)
        ]
    with pytest.raises(
        ValueError, match="no hash-key range given for shard 'shardId-000000000007'"
    ):
        deaggregate_as_kcl([("shardId-000000000007", aggregate)], RANGES)
    with pytest.raises(ValueError, match="above the ending one"):
        deaggregate_as_kcl([], {LOWER: (5, 4)})
    with pytest.raises(ValueError, match="not a Kinesis record"):
        deaggregate_as_kcl([(LOWER, {"PartitionKey": "k"})], RANGES)


# -- reading a stream ----------------------------------------------------------------------------


async def test_read_as_kcl_keeps_an_aggregate_only_where_all_its_keys_belong() -> None:
    """On an AUTO stream the service places aggregates anywhere: a KCL consumer keeps each one
    only on the shard all its keys hash into, and every plain record wherever it is."""
    fake = FakeKinesis(placement_seed=1)
    fake.add_stream("auto", 2, on_demand=True, record_distribution="AUTO")
    upper = encode([("k1", b"u1"), ("k3", b"u2")])
    lower = encode([("k2", b"l1"), ("k2", b"l2")])
    answer = await fake.put_records(
        StreamName="auto",
        Records=[{"PartitionKey": "k1", "Data": upper}] * 20
        + [{"PartitionKey": "k2", "Data": lower}] * 20
        + [{"Data": b"plain"}] * 10,
    )
    landed = [entry["ShardId"] for entry in answer["Records"]]
    expected = Counter(
        {
            b"u1": landed[:20].count(UPPER),
            b"u2": landed[:20].count(UPPER),
            b"l1": landed[20:40].count(LOWER),
            b"l2": landed[20:40].count(LOWER),
            b"plain": 10,
        }
    )
    found = await read_as_kcl(fake, "auto")
    assert Counter(r.data for _, r in found) == +expected
    # The draws put aggregates of both kinds on both shards: some of each kept, some dropped.
    assert 0 < expected[b"u1"] < 20
    assert 0 < expected[b"l1"] < 20
    assert {(shard, r.data) for shard, r in found if r.aggregated} == {
        (UPPER, b"u1"),
        (UPPER, b"u2"),
        (LOWER, b"l1"),
        (LOWER, b"l2"),
    }
    assert all(r.partition_key is None for _, r in found if r.data == b"plain")


class SmallPages:
    """A client whose ``ListShards`` answers one shard a page (then ``NextToken``)."""

    def __init__(self, fake: FakeKinesis) -> None:
        self.fake = fake
        self.pages = 0

    async def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        self.pages += 1
        return await self.fake.list_shards(MaxResults=1, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fake, name)


async def test_read_as_kcl_takes_the_ranges_of_every_page_of_shards() -> None:
    fake = FakeKinesis()
    fake.add_stream("keyed", 3)
    third = (MAX_HASH_KEY + 1) // 3
    key = next(k for k in (f"k{n}" for n in range(100)) if hash_key_of(k.encode()) < third)
    await fake.put_records(
        StreamName="keyed", Records=[{"PartitionKey": key, "Data": encode([(key, b"x")])}]
    )
    client = SmallPages(fake)
    # read_stream reads the first page's shard; the ranges come from all three pages.
    found = await read_as_kcl(client, fake.stream_arn("keyed"))
    assert client.pages == 1 + 3
    assert [(shard, r.data, r.aggregated) for shard, r in found] == [(LOWER, b"x", True)]

"""Reading a stream back as the KCL does: :func:`read_as_kcl` and :func:`deaggregate_as_kcl`.

The rule mirrored is the Kinesis Client Library's (Java, ``AggregatorUtil.deaggregate(records,
startingHashKey, endingHashKey)`` in ``software.amazon.kinesis.retrieval``), which a KCL
consumer applies to every page it reads from a shard, with that shard's hash-key range:

* a Kinesis record that is not framed as a KPL aggregate (the magic ``F3 89 9A C2``, a body,
  and the MD5 of that body as its last 16 bytes) is passed through whole, whatever shard it
  is on: the service placed it. So is one framed as an aggregate whose body is not a protobuf
  it can parse;
* each user record of an aggregate has an *effective hash key*: its explicit hash key if it
  has one, else the MD5 of its partition key's UTF-8 bytes as a big-endian unsigned integer;
* as soon as one user record's effective hash key lies outside ``[StartingHashKey,
  EndingHashKey]`` of the shard the aggregate was read from, the KCL removes the user records
  it already took from that aggregate and skips the rest: a consumer keeps all of an
  aggregate or none of it. (An explicit hash key that is not a number makes the KCL log an
  error and stop that aggregate there, keeping the user records before it: that too.)

Where this differs from :func:`aiokpl.aggregation.deaggregate` with ``shard=``: that one drops
exactly the user records out of range and keeps the others, which is what a producer that
resends only those (aiokpl, the KPL) needs of its own consumers; this one shows what a KCL
consumer sees. On a stream whose record distribution strategy is ``AUTO`` the service places
an aggregate on any shard, whatever the keys inside it, so a KCL consumer drops every
aggregate whose user records do not all hash into the shard it landed on.

Invariants: :func:`deaggregate_as_kcl` is pure (no I/O); :func:`read_as_kcl` only lists the
shards and reads them through :func:`aiokpl.testing.read_stream`, as a consumer would.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .._core.deaggregation import ShardLike, deaggregate, hash_key_range
from .._core.errors import AggregationFormatError
from .._core.hashing import hash_key_of
from .._core.wire import DeaggregatedRecord
from .._kinesis import stream_argument
from ._read import read_stream

__all__ = ("deaggregate_as_kcl", "read_as_kcl")

# What Java's BigInteger(String) parses: an optional sign, then decimal digits.
_JAVA_INTEGER = re.compile(r"[+-]?\d+")


def deaggregate_as_kcl(
    records: Iterable[tuple[str, Mapping[str, Any]]], shards: Mapping[str, ShardLike]
) -> list[tuple[str, DeaggregatedRecord]]:
    """The user records a KCL consumer gets from ``records``, each with its shard id.

    Applies the rule of the KCL's ``AggregatorUtil.deaggregate``: a record that is not a KPL
    aggregate is passed through whole; an aggregate is kept whole only if the effective hash
    key of every user record in it (its explicit hash key, else the MD5 of its partition key)
    lies in the hash-key range of the shard it was read from, and dropped whole otherwise.
    :func:`read_as_kcl` reads a stream and applies it.

    Args:
        records: ``(shard_id, record)`` pairs as :func:`read_stream` returns them: records of
            ``GetRecords`` (``Data``, and ``PartitionKey``, ``SequenceNumber``,
            ``ApproximateArrivalTimestamp`` when present).
        shards: The hash-key range of every shard named in ``records``, by shard id: a
            ``(starting, ending)`` pair (inclusive, ``int`` or decimal ``str``), a
            ``HashKeyRange`` mapping, or a shard entry of ``ListShards``.

    Returns:
        ``(shard_id, user_record)`` pairs, in the order of ``records``. A record stored
        without a partition key (on an ``AUTO`` stream) comes back with ``partition_key=None``.

    Raises:
        ValueError: A record's shard has no range in ``shards``, a range is not a valid
            hash-key range, or a record has no ``Data``.
    """
    ranges = {shard_id: hash_key_range(shard) for shard_id, shard in shards.items()}
    found: list[tuple[str, DeaggregatedRecord]] = []
    for shard_id, record in records:
        key_range = ranges.get(shard_id)
        if key_range is None:
            raise ValueError(f"no hash-key range given for shard {shard_id!r}")
        found.extend((shard_id, user) for user in _as_kcl(record, key_range))
    return found


async def read_as_kcl(
    client: Any, stream: str, *, limit: int = 10_000
) -> list[tuple[str, DeaggregatedRecord]]:
    """Read every shard of ``stream`` and keep the user records a KCL consumer would.

    Reads as :func:`read_stream` does (every shard, open or closed, from ``TRIM_HORIZON``; call
    it once the writers are done), takes each shard's hash-key range from ``ListShards``, and
    applies :func:`deaggregate_as_kcl`: every aggregate is kept whole or dropped whole.

    Example:
        ```python
        from aiokpl.aggregation import encode
        from aiokpl.testing import FakeKinesis, read_as_kcl

        fake = FakeKinesis()
        fake.add_stream("events", shard_count=2)
        # "k1" and "k3" hash into the upper half of the key space (shard 1), "k2" does not.
        await fake.put_records(
            StreamName="events",
            Records=[
                {"PartitionKey": "k1", "Data": encode([("k1", b"a"), ("k3", b"b")])},
                {"PartitionKey": "k1", "Data": encode([("k1", b"c"), ("k2", b"d")])},
                {"PartitionKey": "k1", "Data": b"raw"},
            ],
        )
        kept = await read_as_kcl(fake, "events")
        # The second aggregate is dropped whole, "c" with "d": "d" is not shard 1's.
        assert [user.data for _, user in kept] == [b"a", b"b", b"raw"]
        ```

    Args:
        client: A Kinesis client: a :class:`FakeKinesis`, or an aiobotocore client pointed at a
            local server.
        stream: The stream name, or its ARN.
        limit: ``Limit`` of each ``GetRecords`` call.

    Returns:
        ``(shard_id, user_record)`` pairs, shard by shard, oldest first within a shard.

    Raises:
        botocore.exceptions.ClientError: What the client's calls raise (an unknown stream:
            ``ResourceNotFoundException``).
    """
    records = await read_stream(client, stream, limit=limit)
    shards: dict[str, ShardLike] = {}
    named: dict[str, Any] = stream_argument(stream)
    while True:
        page = await client.list_shards(**named)
        shards.update((shard["ShardId"], shard) for shard in page["Shards"])
        token = page.get("NextToken")
        if not token:
            break
        named = {"NextToken": token}
    return deaggregate_as_kcl(records, shards)


def _as_kcl(record: Mapping[str, Any], key_range: tuple[int, int]) -> list[DeaggregatedRecord]:
    """What the KCL keeps of one Kinesis record read from a shard of ``key_range``."""
    try:
        users = deaggregate(record)
    except AggregationFormatError:
        # Framed as an aggregate, but not a protobuf that parses: the KCL passes it through.
        data = record["Data"]
        return [
            DeaggregatedRecord(
                record.get("PartitionKey"),
                data if type(data) is bytes else bytes(data),
                None,
                record.get("SequenceNumber"),
                0,
                False,
                record.get("ApproximateArrivalTimestamp"),
            )
        ]
    if not users or not users[0].aggregated:
        return users
    start, end = key_range
    kept: list[DeaggregatedRecord] = []
    for user in users:
        explicit = user.explicit_hash_key
        if explicit is None:
            key = user.partition_key
            assert key is not None  # a user record of an aggregate: the format requires one
            hash_key = hash_key_of(key.encode(errors="replace"))
        elif _JAVA_INTEGER.fullmatch(explicit):
            hash_key = int(explicit)
        else:
            # new BigInteger(...) throws: the KCL logs it, and keeps what it took so far.
            return kept
        if not start <= hash_key <= end:
            return []  # one out of range: the whole aggregate goes
        kept.append(user)
    return kept

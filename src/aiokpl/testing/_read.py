"""Reading a stream back: :func:`read_stream`, through any client that speaks the Kinesis API.

Invariants: it only calls ``ListShards``, ``GetShardIterator`` and ``GetRecords`` as a consumer
would, so it reads a :class:`~aiokpl.testing.FakeKinesis`, moto's server and kinesalite alike;
every shard, open or closed, is read from ``TRIM_HORIZON`` until a page comes back empty.
"""

from __future__ import annotations

from typing import Any

from .._kinesis import arn_argument, stream_argument

__all__ = ("read_stream",)


async def read_stream(
    client: Any, stream: str, *, limit: int = 10_000
) -> list[tuple[str, dict[str, Any]]]:
    """Read every record of every shard of ``stream``, each with the id of its shard.

    Works with any client that speaks the Kinesis API: a :class:`FakeKinesis`, or an
    aiobotocore client pointed at a local server (moto, kinesalite). Each shard, open or
    closed, is read from ``TRIM_HORIZON`` until a page comes back empty, so call it once the
    writers are done. Deaggregate the records with :func:`aiokpl.aggregation.deaggregate`.

    Args:
        client: the Kinesis client.
        stream: the stream name, or its ARN (then sent as ``StreamARN``).
        limit: ``Limit`` of each ``GetRecords`` call.

    Returns:
        ``(shard_id, record)`` pairs, shard by shard, oldest record first within a shard.
    """
    found: list[tuple[str, dict[str, Any]]] = []
    named = stream_argument(stream)
    for shard in (await client.list_shards(**named))["Shards"]:
        shard_id = shard["ShardId"]
        iterator = (
            await client.get_shard_iterator(
                **named, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
            )
        )["ShardIterator"]
        while iterator:
            page = await client.get_records(
                ShardIterator=iterator, Limit=limit, **arn_argument(stream)
            )
            found.extend((shard_id, record) for record in page["Records"])
            if not page["Records"]:
                break
            iterator = page.get("NextShardIterator")
    return found

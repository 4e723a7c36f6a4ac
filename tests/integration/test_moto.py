"""moto's quirks that the integration suite works around, pinned here.

The producer's own tests against moto's server run in ``test_servers`` (over both servers) and
``test_resharding``. These pin the behaviours of moto 5.2 that those tests step around, so a moto
upgrade that fixes one fails here and the workaround can go.
"""

from __future__ import annotations

import botocore.exceptions
import pytest

from .helpers import admin_client, create_stream, stream_name

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_moto_answers_500_for_the_last_hash_key(moto_endpoint: str) -> None:
    """moto treats a shard's ending hash key as exclusive (``test_servers.LAST_KEY``)."""
    stream = stream_name("moto")
    async with admin_client(moto_endpoint) as admin:
        await create_stream(admin, stream, 1)
        with pytest.raises(botocore.exceptions.ClientError) as raised:
            await admin.put_record(
                StreamName=stream, PartitionKey="k", Data=b"d", ExplicitHashKey=str(2**128 - 1)
            )
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500


@pytest.mark.parametrize("change", ["split", "merge"])
async def test_moto_routes_a_resharded_range_to_the_closed_parent(
    moto_endpoint: str, change: str
) -> None:
    """Why ``test_resharding`` skips moto: its children never receive a record."""
    stream = stream_name("moto")
    async with admin_client(moto_endpoint) as admin:
        await create_stream(admin, stream, 2)
        if change == "split":
            await admin.split_shard(
                StreamName=stream,
                ShardToSplit="shardId-000000000000",
                NewStartingHashKey=str(2**126),
            )
        else:
            await admin.merge_shards(
                StreamName=stream,
                ShardToMerge="shardId-000000000000",
                AdjacentShardToMerge="shardId-000000000001",
            )
        shards = (await admin.list_shards(StreamName=stream))["Shards"]
        parent = shards[0]
        assert parent["ShardId"] == "shardId-000000000000"
        assert "EndingSequenceNumber" in parent["SequenceNumberRange"]  # closed
        landed = await admin.put_record(
            StreamName=stream, PartitionKey="k", Data=b"d", ExplicitHashKey=str(2**126 + 1)
        )
    assert landed["ShardId"] == "shardId-000000000000"

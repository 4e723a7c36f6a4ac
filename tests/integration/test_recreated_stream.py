"""A stream deleted and created again with fewer shards under a running producer, over HTTP
against moto's server and kinesalite, on asyncio and trio; records read back.

Both servers (like the service) number the new stream's shards from 0 again, over other
ranges: ``shardId-000000000001`` of the new stream is not the old one. The producer used to
judge records that landed on the new stream by the old map's ranges and store 11 to 15 of them
twice each run ("Wrong Shard" retries, no timed-out attempt). Now every user record is stored
once, on the shard and at the sequence number its result names.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import anyio
import botocore.exceptions
import pytest

from aiokpl import Producer
from aiokpl.testing import read_stream

from .helpers import admin_client, config, create_stream, stream_name, user_records

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

COUNT = 600


async def wait_until_gone(admin: Any, stream: str) -> None:
    """Poll until the stream is not found (kinesalite is ``DELETING`` for a moment)."""
    with anyio.fail_after(10):
        while True:
            try:
                await admin.describe_stream_summary(StreamName=stream)
            except botocore.exceptions.ClientError as exc:
                if exc.response["Error"]["Code"] == "ResourceNotFoundException":
                    return
                raise
            await anyio.sleep(0.01)


async def put_all(producer: Producer, stream: str, rng: random.Random, tag: str) -> dict[Any, Any]:
    """Put COUNT records of keys spread over the key space; ``{(key, data): outcome}``."""
    sent = {}
    for i in range(COUNT):
        key, data = f"{tag}-{i}", f"{tag}:{i}:".encode() + rng.randbytes(rng.randrange(100))
        sent[(key, data)] = await producer.put_record(stream=stream, partition_key=key, data=data)
    await producer.flush()
    return sent


@pytest.mark.parametrize("missing_meanwhile", [False, True], ids=["at-once", "missing-meanwhile"])
async def test_a_recreated_stream_stores_each_record_once_where_its_result_says(
    kinesis_server: tuple[str, str], missing_meanwhile: bool
) -> None:
    _, endpoint = kinesis_server
    stream = stream_name("recreated")
    rng = random.Random(stream)
    producer_config = config(endpoint, record_max_buffered_time_ms=50)
    async with admin_client(endpoint) as admin:
        await create_stream(admin, stream, 4)
        async with Producer(producer_config) as producer:
            before = await put_all(producer, stream, rng, "before")
            assert all([(await outcome).success for outcome in before.values()])
            await admin.delete_stream(StreamName=stream)
            await wait_until_gone(admin, stream)
            if missing_meanwhile:
                # The producer learns that the stream is missing: its map goes.
                gone = await producer.put_record(stream=stream, partition_key="k", data=b"x")
                await producer.flush()
                assert (await gone).error_code == "ResourceNotFoundException"
                assert producer.statistics().streams[0].open_shards == 0
            await create_stream(admin, stream, 2)
            sent = await put_all(producer, stream, rng, "after")
            sent |= await put_all(producer, stream, rng, "later")
            results = {identity: await outcome for identity, outcome in sent.items()}
            [statistics] = producer.statistics().streams
        assert (statistics.shard_map_state, statistics.open_shards) == ("READY", 2)
        delivered = user_records(await read_stream(admin, stream))
    # The new stream holds each record once, where its result says; none twice.
    counts = Counter((record.partition_key, record.data) for record in delivered)
    assert [identity for identity, count in counts.items() if count > 1] == []
    assert counts == Counter(list(sent))
    for record in delivered:
        result = results[(record.partition_key, record.data)]
        assert result.success, result
        assert (record.shard_id, record.sequence_number) == (
            result.shard_id,
            result.sequence_number,
        )
        assert "Wrong Shard" not in [attempt.error_code for attempt in result.attempts]

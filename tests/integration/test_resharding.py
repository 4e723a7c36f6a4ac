"""Resharding under a running producer, on a real server over HTTP, on asyncio and trio.

While a producer is producing, an admin client splits a shard (or merges two adjacent ones) and
the producer keeps going. Then every record must have been delivered exactly once, records put
after the change must have landed on the children, and the producer's shard map must have been
refreshed a few times at most for the change, not in a storm.

Counting deliveries: an aggregate the producer packed for a parent may reach a child whose range
holds only some of its user records. A KCL consumer drops such an aggregate whole, and the
producer sends all of its records again; so deliveries are counted as a KCL consumer reads
them (``aiokpl.testing.deaggregate_as_kcl``).
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from aiokpl import Producer
from aiokpl._core.hashing import hash_key_of
from aiokpl.testing import deaggregate_as_kcl, read_stream

from .helpers import (
    admin_client,
    config,
    create_stream,
    shard_ranges,
    stream_name,
    user_records,
    wait_until_active,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

MOTO_ROUTES_TO_CLOSED_PARENTS = (
    "moto 5.2 routes records for a split or merged range to the closed parent shard, not to "
    "the children (kinesalite and the service do not): the children never receive anything"
)


class ShardMapStuck(Exception):
    """The producer's shard map could not load the stream's shards after the change."""


BEFORE = 1000  # records put before the change
DURING = 1000  # records put while the change is requested and settles
AFTER = 1000  # records put once the stream is ACTIVE again
MAX_REFRESHES_PER_CHANGE = 3


async def _reshard(admin: Any, stream: str, change: str) -> tuple[set[str], set[str]]:
    """Apply ``change``; return (parents, children) once the stream is ACTIVE again."""
    before = await shard_ranges(admin, stream)
    if change == "split":
        low, high = before["shardId-000000000000"]
        await admin.split_shard(
            StreamName=stream,
            ShardToSplit="shardId-000000000000",
            NewStartingHashKey=str((low + high) // 2),
        )
        parents = {"shardId-000000000000"}
    else:
        await admin.merge_shards(
            StreamName=stream,
            ShardToMerge="shardId-000000000000",
            AdjacentShardToMerge="shardId-000000000001",
        )
        parents = {"shardId-000000000000", "shardId-000000000001"}
    await wait_until_active(admin, stream)
    children = set(await shard_ranges(admin, stream)) - set(before)
    assert len(children) == (2 if change == "split" else 1)
    return parents, children


async def _wait_for_new_map(
    producer: Producer, open_shards: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Wait until the producer's map holds the stream's new open shards.

    Raises:
        ShardMapStuck: the producer logged that it could not load the map.
    """
    with anyio.fail_after(10):
        while True:
            for entry in caplog.records:
                if entry.name == "aiokpl.shard_map" and entry.levelno >= logging.WARNING:
                    raise ShardMapStuck(entry.getMessage())
            statistics = producer.statistics().streams[0]
            if statistics.shard_map_state == "READY" and statistics.open_shards == open_shards:
                return
            await anyio.sleep(0.01)


@pytest.mark.parametrize("change", ["split", "merge"])
@pytest.mark.parametrize(
    "server",
    [
        pytest.param("moto", marks=pytest.mark.skip(reason=MOTO_ROUTES_TO_CLOSED_PARENTS)),
        pytest.param("kinesalite"),
    ],
)
async def test_resharding_while_producing(
    server: str, change: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint: str = request.getfixturevalue(f"{server}_endpoint")
    stream = stream_name(change)
    open_after = 4 if change == "split" else 2  # of 3
    rng = random.Random(change)
    # identity (partition key, data) -> (hash key, outcome, put after the change settled)
    sent: dict[tuple[str | None, bytes], tuple[int, Any, bool]] = {}
    settled = False
    parents_and_children: list[tuple[set[str], set[str]]] = []

    async def put(producer: Producer, i: int) -> None:
        key = f"key-{rng.randrange(10**6)}"
        data = f"{i}:".encode() + rng.randbytes(rng.randrange(0, 100))
        # One record in ten names its hash key instead.
        explicit = rng.randrange(2**128) if i % 10 == 0 else None
        outcome = await producer.put_record(
            stream=stream, partition_key=key, data=data, explicit_hash_key=explicit
        )
        hash_key = explicit if explicit is not None else hash_key_of(key.encode())
        sent[(key, data)] = (hash_key, outcome, settled)
        if i % 50 == 0:
            await anyio.sleep(0.002)  # produce over time, not in one burst

    async def reshard(admin: Any) -> None:
        nonlocal settled
        parents_and_children.append(await _reshard(admin, stream, change))
        settled = True

    async with admin_client(endpoint) as admin:
        await create_stream(admin, stream, 3)
        stuck: ShardMapStuck | None = None
        # A stuck map would hold the producer's exit for a whole TTL: cancel it instead.
        with anyio.CancelScope() as producing:
            async with Producer(config(endpoint)) as producer:
                for i in range(BEFORE):
                    await put(producer, i)
                await producer.flush()
                refreshes_before = producer.statistics().streams[0].shard_map_refreshes
                assert refreshes_before >= 1
                async with anyio.create_task_group() as group:
                    group.start_soon(reshard, admin)
                    for i in range(BEFORE, BEFORE + DURING):
                        await put(producer, i)
                for i in range(BEFORE + DURING, BEFORE + DURING + AFTER):
                    await put(producer, i)
                try:
                    await _wait_for_new_map(producer, open_after, caplog)
                except ShardMapStuck as exc:
                    stuck = exc
                    producing.cancel()
                    await anyio.lowlevel.checkpoint()
                with anyio.fail_after(30):
                    await producer.flush()
                statistics = producer.statistics().streams[0]
        if stuck is not None:
            raise stuck
        stored = await read_stream(admin, stream)
        shards = await shard_ranges(admin, stream)

    [(parents, children)] = parents_and_children
    # The map caught up with the change, with a few refreshes at most: no storm.
    assert statistics.shard_map_state == "READY"
    assert statistics.open_shards == open_after
    refreshes = statistics.shard_map_refreshes - refreshes_before
    assert 1 <= refreshes <= MAX_REFRESHES_PER_CHANGE, refreshes

    results = {}
    for identity, (hash_key, outcome, after) in sent.items():
        result = outcome.result()
        assert result.success, (identity, result)
        low, high = shards[result.shard_id]
        assert low <= hash_key <= high, (identity, result.shard_id)
        if after:
            assert result.shard_id not in parents, (identity, result.shard_id)
        results[identity] = result
    assert sum(1 for _, _, after in sent.values() if after) >= AFTER
    # Every record read by a KCL consumer exactly once, where its result says (a stale
    # aggregate, sent again whole, is dropped whole by it). Ours and AWS's deaggregators agree.
    user_records(stored)
    delivered: Counter[tuple[str | None, bytes]] = Counter()
    for shard_id, record in deaggregate_as_kcl(stored, shards):
        identity = (record.partition_key, record.data)
        hash_key, _, _ = sent[identity]  # nothing that was not sent
        low, high = shards[shard_id]
        assert low <= hash_key <= high, identity
        delivered[identity] += 1
        result = results[identity]
        assert (shard_id, record.sequence_number) == (result.shard_id, result.sequence_number)
    assert all(delivered[identity] == 1 for identity in sent)
    assert len(delivered) == len(sent) == BEFORE + DURING + AFTER
    # Records put after the change reached the children.
    assert any(result.shard_id in children for result in results.values())


async def test_both_servers_list_closed_shards_despite_at_latest(
    kinesis_server: tuple[str, str],
) -> None:
    """Pins the server behaviour the shard map works around by dropping closed shards.

    The service answers ``ShardFilter={"Type": "AT_LATEST"}`` with the open shards only; both
    local servers list the closed parent too, overlapping its children.
    """
    _, endpoint = kinesis_server
    stream = stream_name("filter")
    async with admin_client(endpoint) as admin:
        await create_stream(admin, stream, 2)
        await _reshard(admin, stream, "split")
        listed = await admin.list_shards(StreamName=stream, ShardFilter={"Type": "AT_LATEST"})
    closed = [
        shard["ShardId"]
        for shard in listed["Shards"]
        if "EndingSequenceNumber" in shard["SequenceNumberRange"]
    ]
    assert closed == ["shardId-000000000000"]

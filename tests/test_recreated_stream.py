"""A stream deleted and created again under the same name, with fewer shards (asyncio and trio,
virtual clock, ``FakeKinesis``).

The service (and moto, and kinesalite) numbers the new stream's shards from 0 again, over other
hash-key ranges, so an id of the old map names another range in the new stream. The producer
used to keep its old map through ``ResourceNotFoundException`` and judge records that had
landed where they belong by the old ranges, retrying them as ``"Wrong Shard"``: each retried
user record was stored twice, without any timed-out attempt. Here: a stream known to be
missing has no map, a range is trusted only if it holds the key the record was routed by, and
no state of the old stream's shards survives.
"""

from __future__ import annotations

import random
from collections import Counter

import anyio
import pytest

from aiokpl import Config, Producer, RecordResult
from aiokpl._core.hashing import hash_key_of
from aiokpl.testing import FakeKinesis
from running import running
from test_producer import user_records, warm_up

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1", record_max_buffered_time_ms=100)
SHARD_1 = "shardId-000000000001"


async def put_many(producer: Producer, count: int, seed: int) -> list[RecordResult]:
    """Put ``count`` records of distinct keys spread over the key space; their results."""
    rng = random.Random(seed)
    outcomes = [
        await producer.put_record(
            stream="s", partition_key=f"key-{seed}-{i}", data=rng.randbytes(rng.randrange(1, 50))
        )
        for i in range(count)
    ]
    await producer.flush()
    return [await outcome for outcome in outcomes]


def check_stored_once_where_results_say(fake: FakeKinesis, results: list[RecordResult]) -> None:
    """Every delivered record is stored once, on the shard its result names, inside that
    shard's hash-key range; no record was retried for a wrong shard."""
    stored = user_records(fake, "s")
    counts = Counter((key, data) for _, key, data in stored)
    twice = [entry for entry, count in counts.items() if count > 1]
    assert twice == [], f"{len(twice)} user records stored twice"
    where = {(key, data): shard for shard, key, data in stored}
    ranges = {shard.shard_id: shard for shard in fake.shards("s")}
    for result in results:
        assert result.success, result
        assert "Wrong Shard" not in [attempt.error_code for attempt in result.attempts]
    shard_ids = {result.shard_id for result in results}
    assert shard_ids <= set(ranges)
    for (key, _data), shard_id in where.items():
        if key is not None and key.startswith("key-"):
            shard = ranges[shard_id]
            assert shard.starting_hash_key <= hash_key_of(key.encode()) <= shard.ending_hash_key


ORDERINGS = pytest.mark.parametrize("ordering", ["aggregate", "shard"])


@ORDERINGS
async def test_a_missing_stream_has_no_map_and_its_successor_gets_no_duplicates(
    ordering: str,
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=4)
    async with Producer(CONFIG.replace(ordering=ordering), client=fake) as producer:
        await warm_up(producer, "s")
        before = await put_many(producer, 200, seed=1)
        fake.remove_stream("s")
        [gone] = await put_many(producer, 1, seed=2)
        assert gone.error_code == "ResourceNotFoundException"
        [stream] = producer.statistics().streams
        # Known to be missing: no map, and no shard's state.
        assert (stream.shard_map_state, stream.open_shards) == ("INVALID", 0)
        assert stream.rates_by_shard == {}
        assert stream.shard_map_last_error is not None
        assert stream.shard_map_last_error[1] == "ResourceNotFoundException"
        fake.add_stream("s", shard_count=2)  # shardId-000000000000 and -001 again, in halves
        results = await put_many(producer, 400, seed=3)
        await anyio.sleep(2)  # the map of the new stream loads (after its backoff)
        results += await put_many(producer, 400, seed=4)
        [stream] = producer.statistics().streams
        assert (stream.shard_map_state, stream.open_shards) == ("READY", 2)
    assert all(result.success for result in before)
    check_stored_once_where_results_say(fake, results)


@ORDERINGS
async def test_a_stream_recreated_between_two_requests_gets_no_duplicates(ordering: str) -> None:
    # Nothing was put while the stream was missing: the first answer of the new stream comes
    # while the producer still holds the old map.
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=4)
    async with Producer(CONFIG.replace(ordering=ordering), client=fake) as producer:
        await warm_up(producer, "s")
        fake.remove_stream("s")
        fake.add_stream("s", shard_count=2)
        results = await put_many(producer, 400, seed=5)
        results += await put_many(producer, 400, seed=6)
        [stream] = producer.statistics().streams
        assert (stream.shard_map_state, stream.open_shards) == ("READY", 2)
    check_stored_once_where_results_say(fake, results)


async def test_no_state_of_the_old_streams_shards_survives_the_new_map() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=4)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        await put_many(producer, 100, seed=7)
        fresh = producer.statistics().streams[0]
        configured = fresh.rates_by_shard[SHARD_1]
        # The old stream's shard 1 was throttled, and given a ceiling (coordination).
        limiter = running(producer).streams.pipelines["s"].limiter
        limiter.throttled(SHARD_1, anyio.current_time())
        limiter.set_ceiling(SHARD_1, 100.0, 100_000.0)
        lowered = producer.statistics().streams[0]
        assert lowered.rates_by_shard[SHARD_1] != configured
        assert lowered.ceilings_by_shard[SHARD_1] == (100.0, 100_000.0)
        fake.remove_stream("s")
        fake.add_stream("s", shard_count=2)  # a shard 1 again, another one
        results = await put_many(producer, 400, seed=8)
        await anyio.sleep(1)
        results += await put_many(producer, 400, seed=9)
        [stream] = producer.statistics().streams
        assert stream.open_shards == 2
        assert stream.rates_by_shard[SHARD_1] == configured
        assert stream.ceilings_by_shard[SHARD_1] == fresh.ceilings_by_shard[SHARD_1]
    check_stored_once_where_results_say(fake, results)


async def test_a_refresh_that_finds_the_stream_missing_drops_the_map() -> None:
    # A split starts a refresh; the stream is deleted before it asks ListShards.
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        shard_map = running(producer).streams.pipelines["s"].shard_map
        refreshed = anyio.Event()
        shard_map.after_refresh(refreshed.set)
        fake.remove_stream("s")
        await refreshed.wait()
        [stream] = producer.statistics().streams
        assert (stream.shard_map_state, stream.open_shards) == ("INVALID", 0)
        assert stream.rates_by_shard == {}
        assert shard_map.hash_range("shardId-000000000000") is None


async def test_a_not_found_answer_to_a_request_older_than_the_map_keeps_it() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        shard_map = running(producer).streams.pipelines["s"].shard_map
        await anyio.sleep(1)
        # A request sent before the map loaded: the stream has been found since.
        shard_map.missing(shard_map.updated_at - 0.5)
        assert producer.statistics().streams[0].shard_map_state == "READY"
        shard_map.missing(shard_map.updated_at)
        assert producer.statistics().streams[0].shard_map_state == "INVALID"
        shard_map.missing(anyio.current_time())  # no map to drop: nothing more happens
        assert producer.statistics().streams[0].shard_map_state == "INVALID"

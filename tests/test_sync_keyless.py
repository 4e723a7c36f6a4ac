"""SyncProducer: records put without a partition key, on a stream that routes by key and on one
that places records itself (``AUTO``).

As in ``test_sync.py``, these tests are not async: the producer runs its own loop, asyncio or
trio, in a background thread, and every wait is bounded.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Literal

import anyio
import pytest

from aiokpl import Config, InvalidRecordError, SyncProducer
from aiokpl.aggregation import deaggregate
from aiokpl.testing import FakeKinesis, read_stream

WAIT = 30.0  # bound on every wait for the background thread (seconds); never reached
Backend = Literal["asyncio", "trio"]


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    before = set(threading.enumerate())
    yield request.param
    assert set(threading.enumerate()) <= before  # each producer took its thread with it


def shard_ranges(fake: FakeKinesis, stream: str) -> dict[str, tuple[int, int]]:
    return {
        shard.shard_id: (shard.starting_hash_key, shard.ending_hash_key)
        for shard in fake.shards(stream)
    }


def test_a_keyless_record_goes_with_the_key_dash_and_a_hash_key_of_its_shard(
    backend: Backend,
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=4)
    config = Config(region="us-east-1", aggregation_enabled=False)  # stored as it was put
    with SyncProducer(config, client=fake, backend=backend) as producer:
        futures = [producer.put_record(stream="s", data=b"r%d" % i) for i in range(8)]
        results = [future.result(WAIT) for future in futures]
    assert all(result.success for result in results)
    stored = fake.stored_records("s")
    assert sorted(record.data for record in stored) == [b"r%d" % i for i in range(8)]
    ranges = shard_ranges(fake, "s")
    for record in stored:
        assert record.partition_key == "-"
        assert record.explicit_hash_key is not None
        start, end = ranges[record.shard_id]
        assert start <= int(record.explicit_hash_key) <= end
    by_data = {record.data: record.shard_id for record in stored}
    assert [result.shard_id for result in results] == [by_data[b"r%d" % i] for i in range(8)]


def test_keyless_records_aggregate_and_read_back_with_the_key_dash(backend: Backend) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    with SyncProducer(Config(region="us-east-1"), client=fake, backend=backend) as producer:
        futures = [producer.put_record(stream="s", data=b"r%d" % i) for i in range(50)]
        assert all(future.result(WAIT).success for future in futures)
    kinesis_records = anyio.run(read_stream, fake, "s")
    assert len(kinesis_records) < 50  # aggregated, not one Kinesis record each
    ranges = shard_ranges(fake, "s")
    found = []
    for shard_id, kinesis_record in kinesis_records:
        # shard=: every user record's explicit hash key lies in the range of its shard
        users = deaggregate(kinesis_record, shard=ranges[shard_id])
        assert users == deaggregate(kinesis_record)
        found += users
    assert sorted(user.data for user in found) == sorted(b"r%d" % i for i in range(50))
    assert {user.partition_key for user in found} == {"-"}
    assert all(user.aggregated and user.explicit_hash_key is not None for user in found)


def test_a_keyless_record_with_an_explicit_hash_key_goes_to_that_hash_key(
    backend: Backend,
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=4)
    config = Config(region="us-east-1", aggregation_enabled=False)
    last_shard = fake.shards("s")[-1]
    with SyncProducer(config, client=fake, backend=backend) as producer:
        result = producer.put_record(
            stream="s", data=b"x", explicit_hash_key=last_shard.ending_hash_key
        ).result(WAIT)
    assert result.success
    assert result.shard_id == last_shard.shard_id
    (record,) = fake.stored_records("s")
    assert record.partition_key == "-"
    assert record.explicit_hash_key == str(last_shard.ending_hash_key)


def test_a_keyless_record_goes_without_a_key_to_a_stream_that_places_records(
    backend: Backend,
) -> None:
    fake = FakeKinesis()
    fake.add_stream("auto", shard_count=2, on_demand=True, record_distribution="AUTO")
    config = Config(region="us-east-1", aggregation_enabled=False)
    with SyncProducer(config, client=fake, backend=backend) as producer:
        result = producer.put_record(stream="auto", data=b"x").result(WAIT)
    assert result.success
    (record,) = fake.stored_records("auto")
    assert record.partition_key is None
    assert record.explicit_hash_key is None
    ((shard_id, kinesis_record),) = anyio.run(read_stream, fake, "auto")
    assert shard_id == result.shard_id
    assert "PartitionKey" not in kinesis_record
    (user,) = deaggregate(kinesis_record)
    assert (user.partition_key, user.data, user.aggregated) == (None, b"x", False)


def test_a_keyless_record_counts_one_byte_for_its_key(backend: Backend) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    config = Config(region="us-east-1", max_record_size=100)
    with SyncProducer(config, client=fake, backend=backend) as producer:
        with pytest.raises(InvalidRecordError, match="max_record_size"):
            producer.put_record(stream="s", data=bytes(100))
        assert producer.outstanding_records == 0  # nothing was enqueued
        result = producer.put_record(stream="s", data=bytes(99)).result(WAIT)
    assert result.success
    (record,) = fake.stored_records("s")
    assert (record.partition_key, record.data) == ("-", bytes(99))

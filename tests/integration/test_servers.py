"""The producer through aiobotocore over real HTTP to moto's server and to kinesalite.

Every test runs against both servers on both backends. Records are read back with GetRecords
and deaggregated twice, by ``aiokpl.aggregation`` and by AWS's own ``aws_kinesis_agg``, to
prove they landed intact, once each, on the shard their results name.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import botocore.exceptions
import pytest

from aiokpl import InvalidRecordError, Producer, RecordResult
from aiokpl._core.hashing import hash_key_of
from aiokpl.testing import read_stream
from aiokpl.testing._servers import kinesalite_dir

from .helpers import admin_client, config, create_stream, shard_ranges, stream_name, user_records


def test_kinesalite_is_looked_for_where_make_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # `make kinesalite` installs into .cache/kinesalite beside the Makefile; the launcher's
    # default must find it there wherever the launcher module sits in the package.
    monkeypatch.delenv("AIOKPL_KINESALITE_DIR", raising=False)
    checkout = Path(__file__).resolve().parents[2]
    assert kinesalite_dir() == checkout / ".cache" / "kinesalite"
    assert (kinesalite_dir().parents[1] / "Makefile").is_file()


pytestmark = [pytest.mark.anyio, pytest.mark.integration]

COUNT = 2000

# moto treats a shard's ending hash key as exclusive and answers 500 for the very last key,
# 2**128 - 1 (test_producer covers that key against FakeKinesis); kinesalite accepts it.
LAST_KEY = {"moto": 2**128 - 2, "kinesalite": 2**128 - 1}


async def test_thousands_of_records_land_intact_where_predicted(
    kinesis_server: tuple[str, str],
) -> None:
    name, endpoint = kinesis_server
    stream = stream_name()
    rng = random.Random(3)
    async with admin_client(endpoint) as admin:
        await create_stream(admin, stream, 4)
        shards = await shard_ranges(admin, stream)
        # identity (partition key, data) -> (hash key, outcome)
        sent: dict[tuple[str | None, bytes], tuple[int, Any]] = {}
        async with Producer(config(endpoint)) as producer:
            # Let the shard map load, so most records are aggregated.
            first = await producer.put_record(stream=stream, partition_key="first", data=b"0")
            sent[("first", b"0")] = (hash_key_of(b"first"), first)
            await first
            for i in range(COUNT):
                key = f"user-{rng.randrange(300)}"
                data = f"{i}:".encode() + rng.randbytes(rng.randrange(0, 300))
                # One record in eight names its hash key, anywhere in the key space.
                explicit = rng.randrange(LAST_KEY[name] + 1) if i % 8 == 0 else None
                outcome = await producer.put_record(
                    stream=stream, partition_key=key, data=data, explicit_hash_key=explicit
                )
                hash_key = explicit if explicit is not None else hash_key_of(key.encode())
                sent[(key, data)] = (hash_key, outcome)
        stored = await read_stream(admin, stream)

    results: dict[tuple[str | None, bytes], RecordResult] = {}
    for identity, (hash_key, outcome) in sent.items():
        result = outcome.result()
        assert result.success, result
        low, high = shards[result.shard_id]
        assert low <= hash_key <= high, (identity, result.shard_id)
        results[identity] = result
    # Aggregation happened: far fewer Kinesis records than user records.
    assert len(stored) < COUNT / 5
    seen: Counter[tuple[str | None, bytes]] = Counter()
    for record in user_records(stored):
        identity = (record.partition_key, record.data)
        seen[identity] += 1
        result = results[identity]  # nothing that was not sent
        assert (record.shard_id, record.sequence_number) == (
            result.shard_id,
            result.sequence_number,
        )
    assert all(seen[identity] == 1 for identity in sent)
    assert sum(seen.values()) == COUNT + 1  # the first record too; nothing else, nothing twice


async def test_explicit_hash_keys_and_single_records(kinesis_server: tuple[str, str]) -> None:
    name, endpoint = kinesis_server
    stream = stream_name()
    async with admin_client(endpoint) as admin:
        await create_stream(admin, stream, 2)
        async with Producer(config(endpoint, aggregation_enabled=False)) as producer:
            low = await producer.put_record(
                stream=stream, partition_key="k", data=b"low", explicit_hash_key=0
            )
            high = await producer.put_record(
                stream=stream, partition_key="k", data=b"high", explicit_hash_key=LAST_KEY[name]
            )
        stored = await read_stream(admin, stream)
    assert low.result().success, low.result().attempts
    assert high.result().success, high.result().attempts
    assert low.result().shard_id == "shardId-000000000000"
    assert high.result().shard_id == "shardId-000000000001"
    assert sorted((shard, record["Data"]) for shard, record in stored) == [
        ("shardId-000000000000", b"low"),
        ("shardId-000000000001", b"high"),
    ]
    assert not any(record.aggregated for record in user_records(stored))


async def test_missing_stream_fails_promptly(kinesis_server: tuple[str, str]) -> None:
    _, endpoint = kinesis_server
    async with Producer(config(endpoint)) as producer:
        outcome = await producer.put_record(stream="does-not-exist", partition_key="k", data=b"d")
        with anyio.fail_after(10):
            result = await outcome
    assert not result.success
    assert result.error_code == "ResourceNotFoundException"
    assert len(result.attempts) == 1


async def test_a_key_of_128_emoji_is_delivered_raw_and_129_are_refused_at_put(
    kinesis_server: tuple[str, str],
) -> None:
    """Kinesis counts a partition key in UTF-16 code units: 128 emoji (256 units) is the
    longest key; the server takes it sent raw, and one more emoji is refused at the put,
    before it could fail a request (kinesalite refuses 129 emoji as the service does)."""
    name, endpoint = kinesis_server
    stream = stream_name()
    longest = "\U0001f600" * 128
    async with admin_client(endpoint) as admin:
        await create_stream(admin, stream, 1)
        async with Producer(config(endpoint, aggregation_enabled=False)) as producer:
            outcome = await producer.put_record(stream=stream, partition_key=longest, data=b"d")
            with pytest.raises(InvalidRecordError, match="UTF-16 code units"):
                await producer.put_record(stream=stream, partition_key=longest + "k", data=b"d")
        if name == "kinesalite":  # moto does not check key lengths
            with pytest.raises(botocore.exceptions.ClientError, match="ValidationException"):
                await admin.put_record(
                    StreamName=stream, Data=b"d", PartitionKey=longest + "\U0001f600"
                )
        stored = await read_stream(admin, stream)
    assert outcome.result().success, outcome.result().attempts
    assert [record["PartitionKey"] for _, record in stored] == [longest]


def test_kinesalite_survives_a_client_that_resets_mid_request() -> None:
    # kinesalite rethrows a request stream's error: a client resetting its connection in the
    # middle of a request body (a request cancelled at a producer's exit) killed the server,
    # and every later test on it failed with "connection refused".
    import socket
    import struct
    import time
    from urllib.parse import urlsplit

    from aiokpl.testing._servers import kinesalite_server

    head = (
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-amz-json-1.1\r\n"
        b"X-Amz-Target: Kinesis_20131202.ListStreams\r\nContent-Length: 100\r\n\r\n{"
    )
    with kinesalite_server() as endpoint:
        address = urlsplit(endpoint)
        assert address.port is not None
        for _ in range(3):
            with socket.create_connection((address.hostname, address.port), timeout=5) as sock:
                sock.sendall(head)  # 1 byte of the 100 announced: the server waits for more
                # Linger 0: close() sends a reset, as an aborted client does.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        time.sleep(0.2)  # the resets reach the server before the request below
        with socket.create_connection((address.hostname, address.port), timeout=5) as sock:
            sock.sendall(
                b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/x-amz-json-1.1\r\n"
                b"X-Amz-Target: Kinesis_20131202.ListStreams\r\nContent-Length: 2\r\n"
                b"Connection: close\r\n\r\n{}"
            )
            answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 "), answer[:80]

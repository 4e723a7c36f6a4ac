"""The durable spool against moto's server, through aiobotocore over HTTP on 127.0.0.1.

A producer with a spool accepts records it cannot deliver (its endpoint has nothing
listening), makes them durable and is cancelled: they fail ``"Cancelled"`` by the exit and stay
in the spool. A second producer on the same directory, pointed at moto, replays them; every
record is read back from the stream (checked with AWS's deaggregator too), each with the
identity its first run gave it (the id in that run's segments), once through the ``Deduper``.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from aiokpl import Producer
from aiokpl._producer.marks import encoder_of
from aiokpl._spool.format import decode_header
from aiokpl.aggregation import Deduper, deaggregate, identity_of
from aiokpl.testing import read_stream
from aiokpl.testing._servers import free_port

from .helpers import admin_client, config, create_stream, stream_name, user_records

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

COUNT = 200


async def test_records_left_at_exit_are_replayed_after_a_restart(
    moto_endpoint: str, tmp_path: Path
) -> None:
    stream = stream_name("spool")
    async with admin_client(moto_endpoint) as admin:
        await create_stream(admin, stream, 2)
    spool = tmp_path / "spool"
    data = [b"record-%d" % i for i in range(COUNT)]
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens: nothing is delivered
    first = config(nowhere, spool_directory=spool, record_identities=True, record_ttl_ms=60_000)
    with anyio.move_on_after(2):
        async with Producer(first) as producer:
            outcomes = [
                await producer.put_record(stream=stream, partition_key=f"k{i}", data=d)
                for i, d in enumerate(data)
            ]
            await producer.wait_durable()
            assert all(outcome.durable for outcome in outcomes)
            await anyio.sleep_forever()
    assert {outcome.result().error_code for outcome in outcomes} == {"Cancelled"}
    # The first run's producer id, as its segments hold it (and as its identity tags name it).
    [first_id] = {decode_header(p.read_bytes()) for p in spool.iterdir() if p.suffix == ".seg"}
    first_run = encoder_of(first_id).producer_id

    second = config(moto_endpoint, spool_directory=spool, record_identities=True)
    async with Producer(second) as producer:
        with anyio.fail_after(60):
            await producer.flush()
        statistics = producer.statistics().spool
        assert statistics is not None
        assert statistics.records_recovered == statistics.records_replayed == COUNT
        assert statistics.frames_lost == 0

    async with admin_client(moto_endpoint) as admin:
        stored = await read_stream(admin, stream)
    delivered = user_records(stored)  # AWS's deaggregator reads the same records
    assert sorted(record.data for record in delivered) == sorted(data)
    users = [user for _, kinesis_record in stored for user in deaggregate(kinesis_record)]
    # Each record carries the identity the first run gave it, not one of the replaying run.
    identities = {user.data: identity_of(user) for user in users}
    assert [identities[d] for d in data] == [(first_run, n) for n in range(COUNT)]
    assert len(Deduper().filter(users + users)) == COUNT

    async with Producer(second) as producer:  # everything was acknowledged
        assert producer.statistics().spool.records_recovered == 0  # type: ignore[union-attr]

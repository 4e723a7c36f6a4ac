"""The connection budget over real HTTP: a request given up frees a connection of the pool.

``test_isolation.py`` proves the budget on a virtual clock against the in-process fake, where a
connection is only the sender's count. Here the producer's own aiobotocore client (aiohttp on
asyncio, httpx on trio) talks to ``LoopbackKinesis`` on 127.0.0.1, and its pool has
``max_connections`` sockets: a request the sender gives up must give its socket back, or the
waiting stream's request would queue in the pool behind it. Real sockets, so real event loops:
no timed assertion, only the order of events (the healthy record is answered while the hung
stream's other request is still in flight, 30 s from its timeout).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import pytest

from aiokpl import Config, Producer
from aiokpl.testing import FakeKinesis, LoopbackKinesis
from running import running

pytestmark = pytest.mark.anyio

HANG_S = 60.0
TIMEOUT_S = 30.0


@pytest.fixture(params=[pytest.param("asyncio", id="asyncio"), pytest.param("trio", id="trio")])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return (request.param, {})


class HangsFor(FakeKinesis):
    """A fake whose ``PutRecords`` to one stream answer only after ``HANG_S``."""

    def __init__(self, stream: str) -> None:
        super().__init__()
        self.hung_stream = stream
        self.hung_calls = 0

    async def put_records(
        self,
        *,
        Records: Sequence[Mapping[str, Any]],
        StreamName: str | None = None,
        StreamARN: str | None = None,
        StreamId: str | None = None,
        DryRun: bool | None = None,
    ) -> dict[str, Any]:
        # The parameters spelled out: the server passes a method those it declares.
        if StreamName == self.hung_stream:
            self.hung_calls += 1
            await anyio.sleep(HANG_S)
        return await super().put_records(
            Records=Records,
            StreamName=StreamName,
            StreamARN=StreamARN,
            StreamId=StreamId,
            DryRun=DryRun,
        )


async def test_a_request_given_up_frees_its_socket_for_a_waiting_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(os.environ, "AWS_EC2_METADATA_DISABLED", "true")
    fake = HangsFor("hung")
    fake.add_stream("hung", shard_count=1)
    fake.add_stream("good", shard_count=1)
    async with LoopbackKinesis(fake) as server:
        config = Config(
            region="us-east-1",
            endpoint_url=server.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            max_connections=2,
            request_timeout_ms=int(TIMEOUT_S * 1000),
            record_ttl_ms=120_000,
            aggregation_enabled=False,
            collection_max_count=1,
        )
        with anyio.CancelScope() as exit_now:
            async with Producer(config) as producer:
                # Alone, the hung stream takes both sockets.
                for i in range(2):
                    await producer.put_record(stream="hung", partition_key=f"k{i}", data=b"x")
                while fake.hung_calls < 2:  # noqa: ASYNC110 (the server's count, no event)
                    await anyio.sleep(0.01)
                good = await (
                    await producer.put_record(stream="good", partition_key="k", data=b"x")
                )
                statistics = producer.statistics()
                preempted = running(producer).sender.requests_preempted
                exit_now.cancel()  # the hung records fail as cancelled: no wait for them
    assert good.success
    assert len(good.attempts) == 1
    # One of the hung stream's requests was given up; the other is still under way (its
    # timeout is 30 s off), so the healthy request went through the socket given back.
    assert preempted == 1
    assert statistics.requests_in_flight == 1

"""Chaos over real HTTP: the producer's own aiobotocore client against LoopbackKinesis.

The same invariants as ``test_chaos.py``, with the faults that live in the HTTP layer: 5xx
answers, connection resets, answers slower than the request timeout, on top of exact per-shard
throttling and per-record failures. (Malformed bodies are covered by ``test_loopback.py``: one
sent after the request was applied is a lost answer, which may duplicate a record without any
timeout, so it does not belong in a mix asserting "duplicates only after a timeout".)
Real sockets on 127.0.0.1, so real event loops (no virtual clock): kept to a few seconds.
"""

from __future__ import annotations

from typing import Any

import pytest

from aiokpl import Config
from aiokpl.testing import FakeKinesis, FaultPlan, HttpFaultPlan, LoopbackKinesis
from test_chaos import TIMEOUT_S, TTL_S, check_invariants, produce

pytestmark = pytest.mark.anyio


@pytest.fixture(params=[pytest.param("asyncio", id="asyncio"), pytest.param("trio", id="trio")])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return (request.param, {})


async def test_http_faults_throttling_and_record_failures() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=3, throttle=True)
    fake.faults = FaultPlan(record_failure_rate=0.05, seed=21)
    async with LoopbackKinesis(fake) as server:
        server.http_faults = HttpFaultPlan(
            reset_rate=0.05,
            error_5xx_rate=0.05,
            slow_rate=0.05,
            slow_seconds=TIMEOUT_S * 1.5,
            seed=22,
        )
        config = Config(
            region="us-east-1",
            endpoint_url=server.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            request_timeout_ms=int(TIMEOUT_S * 1000),
            record_ttl_ms=int(TTL_S * 1000),
            max_outstanding_records=1_000,
            max_outstanding_bytes=2 * 1024 * 1024,
            # Raw records, 10 a request: about 200 requests, so every fault kind happens.
            aggregation_enabled=False,
            collection_max_count=10,
        )
        # No client given: the producer opens its own aiobotocore client (aiohttp or httpx).
        run = await produce(None, config, count=2_000, size=200, per_tick=50, tick=0.01, seed=21)
        statistics = server.statistics()
    assert not check_invariants(run, fake, config, allowed_failures=set())
    # Every kind of fault happened.
    assert set(statistics.faults) >= {"reset_connection", "fail_http", "delay_response"}, (
        statistics.faults
    )

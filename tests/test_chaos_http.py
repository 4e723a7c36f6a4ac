"""Chaos over real HTTP: the producer's own aiobotocore client against LoopbackKinesis.

The same invariants as ``test_chaos.py``, with the faults that live in the HTTP layer: 5xx
answers, connection resets, answers slower than the request timeout, on top of exact per-shard
throttling and per-record failures. (Malformed bodies are covered by ``test_loopback.py``: one
sent after the request was applied is a lost answer, which may duplicate a record without any
timeout, so it does not belong in a mix asserting "duplicates only after a timeout".)
Real sockets on 127.0.0.1, so real event loops (no virtual clock): kept to a few seconds.
The same mix runs with ``ordering="shard"`` too, checking put order per key and per shard.
"""

from __future__ import annotations

from typing import Any

import pytest

from aiokpl import Config
from aiokpl.testing import FakeKinesis, FaultPlan, HttpFaultPlan, LoopbackKinesis
from test_chaos import TIMEOUT_S, TTL_S, check_invariants, order_violations, produce

pytestmark = pytest.mark.anyio


@pytest.fixture(params=[pytest.param("asyncio", id="asyncio"), pytest.param("trio", id="trio")])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return (request.param, {})


def faulty_fake(seed: int) -> FakeKinesis:
    """Three throttling shards failing 5% of records, as both tests below use them."""
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=3, throttle=True)
    fake.faults = FaultPlan(record_failure_rate=0.05, seed=seed)
    return fake


def with_http_faults(server: LoopbackKinesis, seed: int) -> None:
    """Resets, 5xx answers and answers slower than the request timeout, 5% each."""
    server.http_faults = HttpFaultPlan(
        reset_rate=0.05,
        error_5xx_rate=0.05,
        slow_rate=0.05,
        slow_seconds=TIMEOUT_S * 1.5,
        seed=seed,
    )


def config_for(server: LoopbackKinesis, **settings: Any) -> Config:
    """The producer's settings for ``server``: its own client, short timeouts, small bounds."""
    return Config(
        region="us-east-1",
        endpoint_url=server.endpoint_url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        request_timeout_ms=int(TIMEOUT_S * 1000),
        record_ttl_ms=int(TTL_S * 1000),
        max_outstanding_records=1_000,
        max_outstanding_bytes=2 * 1024 * 1024,
        **settings,
    )


async def test_http_faults_throttling_and_record_failures() -> None:
    fake = faulty_fake(seed=21)
    async with LoopbackKinesis(fake) as server:
        with_http_faults(server, seed=22)
        # Raw records, 10 a request: about 200 requests, so every fault kind happens.
        config = config_for(server, aggregation_enabled=False, collection_max_count=10)
        # No client given: the producer opens its own aiobotocore client (aiohttp or httpx).
        run = await produce(None, config, count=2_000, size=200, per_tick=50, tick=0.01, seed=21)
        statistics = server.statistics()
    assert not check_invariants(run, fake, config, allowed_failures=set())
    # Every kind of fault happened.
    assert set(statistics.faults) >= {"reset_connection", "fail_http", "delay_response"}, (
        statistics.faults
    )


async def test_http_ordered_faults_throttling_and_record_failures() -> None:
    # ordering="shard" through the same faults: every key's and every shard's records in put
    # order. Small aggregates (about 9 records) so that a few hundred requests meet the faults.
    fake = faulty_fake(seed=23)
    async with LoopbackKinesis(fake) as server:
        with_http_faults(server, seed=24)
        config = config_for(
            server,
            ordering="shard",
            aggregation_max_size=2_000,
            # Above the shards' own limit, so that they throttle too.
            rate_limit_bytes_per_sec_per_shard=4 * 1024 * 1024,
        )
        run = await produce(None, config, count=2_000, size=200, per_tick=50, tick=0.01)
        statistics = server.statistics()
    assert not check_invariants(run, fake, config, allowed_failures=set())
    assert not order_violations(run, fake, per_shard=True)
    assert set(statistics.faults) >= {"reset_connection", "fail_http", "delay_response"}, (
        statistics.faults
    )

"""Fixtures for tests that talk to real servers over HTTP on 127.0.0.1.

Unlike the unit tests, these run on the real event loops (asyncio and trio, no virtual clock):
aiobotocore opens real sockets. Every server is started by a session fixture on a free port
and stopped by it: moto's server (a Python process) and kinesalite (a Node.js process, installed
by ``make test`` into ``.cache/kinesalite``; see ``aiokpl.testing._servers``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from aiokpl.testing._servers import kinesalite_server, moto_server
from aiokpl.testing._throttling import ShardLimits

SERVERS = ("moto", "kinesalite")


@pytest.fixture(params=[pytest.param("asyncio", id="asyncio"), pytest.param("trio", id="trio")])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return (request.param, {})


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """moto's server (behind a lock: see ``aiokpl.testing._servers``) on a free 127.0.0.1 port."""
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def slow_endpoint() -> Iterator[str]:
    """moto's server with AWS's write limits at 100 records a second per shard: a producer
    closing with a few hundred records to deliver is still sending seconds later."""
    with moto_server(limits=ShardLimits(records_per_second=100.0)) as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def kinesalite_endpoint() -> Iterator[str]:
    """kinesalite (in memory, no stream-state delays) on a free 127.0.0.1 port."""
    with kinesalite_server() as endpoint:
        yield endpoint


@pytest.fixture(params=SERVERS)
def kinesis_server(request: pytest.FixtureRequest) -> tuple[str, str]:
    """``(name, endpoint)`` of each server in turn: parametrises a test over both."""
    name: str = request.param
    endpoint: str = request.getfixturevalue(f"{name}_endpoint")
    return name, endpoint

"""``AWS_ENDPOINT_URL_KINESIS`` points the producer's own client at a local server.

botocore reads the per-service endpoint variable (``AWS_ENDPOINT_URL_<SERVICE>``, and
``AWS_ENDPOINT_URL`` for every service) when a client is created without ``endpoint_url``.
Getting started relies on it: with that variable, the dummy credentials and a region exported,
every example of the docs runs unchanged against ``aiokpl local``. These tests pin that the
producer, whose client :func:`aiokpl._kinesis.create_client` opens, honours it.
"""

from __future__ import annotations

import pytest

from aiokpl import Config, Producer, SyncProducer
from aiokpl.testing import read_stream
from aiokpl.testing._servers import DUMMY_CREDENTIALS

from .helpers import admin_client, create_stream, stream_name

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture
def exported(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The environment Getting started exports, pointing at moto's server."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_KINESIS", moto_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY_CREDENTIALS["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_CREDENTIALS["aws_secret_access_key"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", DUMMY_CREDENTIALS["region"])
    return moto_endpoint


async def _stored(endpoint: str, stream: str) -> list[bytes]:
    from aiokpl.aggregation import deaggregate

    async with admin_client(endpoint) as admin:
        records = await read_stream(admin, stream)
    return [user.data for _, record in records for user in deaggregate(record)]


async def test_a_producer_without_client_or_endpoint_writes_where_the_variable_says(
    exported: str,
) -> None:
    stream = stream_name("endpoint-env")
    async with admin_client(exported) as admin:
        await create_stream(admin, stream, 2)
    async with Producer(Config()) as producer:  # no client, no endpoint_url, no region
        outcome = await producer.put_record(stream=stream, partition_key="k", data=b"via env")
    result = await outcome
    assert result.success, (result.error_code, result.error_message)
    assert await _stored(exported, stream) == [b"via env"]


async def test_config_endpoint_url_wins_over_the_variable(
    exported: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The variable names a port nothing listens on; the Config's endpoint is used instead.
    monkeypatch.setenv("AWS_ENDPOINT_URL_KINESIS", "http://127.0.0.1:9")
    stream = stream_name("endpoint-env")
    async with admin_client(exported) as admin:
        await create_stream(admin, stream, 1)
    async with Producer(Config(endpoint_url=exported)) as producer:
        outcome = await producer.put_record(stream=stream, partition_key="k", data=b"config")
    assert (await outcome).success
    assert await _stored(exported, stream) == [b"config"]


async def test_a_sync_producer_honours_the_variable_too(exported: str) -> None:
    stream = stream_name("endpoint-env")
    async with admin_client(exported) as admin:
        await create_stream(admin, stream, 1)
    with SyncProducer(Config()) as producer:
        future = producer.put_record(stream=stream, partition_key="k", data=b"sync")
    assert future.result().success
    assert await _stored(exported, stream) == [b"sync"]

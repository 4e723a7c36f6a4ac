"""The SDK boundary: error mapping, and the client the producer opens for itself.

The client tests build real aiobotocore clients (no request is sent), so they run on the real
event loops rather than the virtual-time ones.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from aiokpl import Config, ConfigError, Producer
from aiokpl._core.answers import (
    UNKNOWN_OUTCOME,
    Answered,
    Malformed,
    Refused,
    RequestFailed,
)
from aiokpl._kinesis import (
    answer_of,
    client_error,
    create_client,
    error_of,
    failure_of,
    never_sent,
)

ENDPOINT = "http://127.0.0.1:9"  # nothing listens there; no test sends a request


@pytest.fixture(params=[pytest.param("asyncio", id="asyncio"), pytest.param("trio", id="trio")])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return (request.param, {})


def test_service_errors_keep_code_and_message() -> None:
    error = client_error("ProvisionedThroughputExceededException", "Rate exceeded", "PutRecords")
    assert error_of(error) == ("ProvisionedThroughputExceededException", "Rate exceeded")
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_anything_else_is_internal_with_its_type() -> None:
    assert error_of(ConnectionResetError("peer reset")) == (
        "Internal",
        "ConnectionResetError: peer reset",
    )
    assert error_of(TimeoutError()) == ("Internal", "TimeoutError")


def _wrapped(wrapper: Any, cause: BaseException) -> Exception:
    """``wrapper`` raised as aiobotocore raises it: from inside ``except cause``."""
    try:
        try:
            raise cause
        except BaseException as exc:
            raise wrapper(endpoint_url="http://127.0.0.1:9/", error=exc) from None
    except Exception as exc:
        return exc


def _aiohttp_connector_error(os_error: OSError) -> Exception:
    import aiohttp
    from aiohttp.client_reqrep import ConnectionKey

    key = ConnectionKey("127.0.0.1", 9, False, True, None, None, None, None)
    return aiohttp.ClientConnectorError(key, os_error)


def test_failures_before_the_request_left_keep_their_name_and_are_known() -> None:
    import aiohttp
    import botocore.exceptions as bce
    import httpx2

    refused = ConnectionRefusedError(111, "Connect call failed")
    never_sent_ones = [
        # Refused and DNS, as aiohttp (asyncio) and httpx (trio) report them.
        _wrapped(bce.EndpointConnectionError, _aiohttp_connector_error(refused)),
        _wrapped(bce.EndpointConnectionError, httpx2.ConnectError("all attempts failed")),
        _wrapped(bce.EndpointConnectionError, socket.gaierror(-2, "Name or service not known")),
        # The connect timeout, and waiting for a pooled connection.
        _wrapped(bce.ConnectTimeoutError, aiohttp.ConnectionTimeoutError("Connection timeout")),
        _wrapped(bce.ConnectTimeoutError, httpx2.ConnectTimeout("timed out")),
        _wrapped(bce.ConnectTimeoutError, httpx2.PoolTimeout("timed out")),
        bce.ProxyConnectionError(proxy_url="http://proxy:3128", error="refused"),
        refused,
    ]
    for exc in never_sent_ones:
        assert never_sent(exc), repr(exc)
        code, _ = error_of(exc)
        assert code == type(exc).__name__ != "Internal"
        assert code not in UNKNOWN_OUTCOME
    assert error_of(never_sent_ones[0]) == (
        "EndpointConnectionError",
        'Could not connect to the endpoint URL: "http://127.0.0.1:9/"',
    )


def test_failures_once_the_request_may_have_left_stay_internal_and_unknown() -> None:
    import aiohttp
    import botocore.exceptions as bce
    import httpx2

    reset = ConnectionResetError(104, "Connection reset by peer")
    may_have_arrived = [
        # aiohttp maps a reset on an open connection to EndpointConnectionError too.
        _wrapped(bce.EndpointConnectionError, aiohttp.ClientOSError(104, "reset")),
        _wrapped(bce.ConnectionClosedError, aiohttp.ServerDisconnectedError()),
        _wrapped(bce.ReadTimeoutError, httpx2.ReadTimeout("timed out")),
        # httpx maps every timeout but a read one to ConnectTimeoutError, writes included.
        _wrapped(bce.ConnectTimeoutError, httpx2.WriteTimeout("timed out")),
        _wrapped(bce.SSLError, reset),
        bce.HTTPClientError(error=reset),
        reset,
    ]
    for exc in may_have_arrived:
        assert not never_sent(exc), repr(exc)
        assert error_of(exc)[0] == "Internal"
        assert "Internal" in UNKNOWN_OUTCOME


def test_no_credentials_says_where_they_are_looked_for() -> None:
    import botocore.exceptions

    code, message = error_of(botocore.exceptions.NoCredentialsError())
    assert code == "NoCredentialsError"
    for place in ("Config", "AWS_ACCESS_KEY_ID", "AWS_PROFILE", "~/.aws/credentials", "EC2"):
        assert place in message, place


def test_error_without_code_or_message() -> None:
    import botocore.exceptions

    bare = botocore.exceptions.ClientError({}, "PutRecords")
    code, message = error_of(bare)
    assert code == "Unknown"
    assert "PutRecords" in message


def test_long_messages_are_bounded() -> None:
    code, message = error_of(
        client_error("500", "<html>" + "x" * 5000, "PutRecords", http_status=500)
    )
    assert code == "500"
    assert len(message) == 1000


@pytest.mark.anyio
async def test_client_backend_follows_the_event_loop(
    anyio_backend: tuple[str, dict[str, Any]],
) -> None:
    expected = "HttpxSession" if anyio_backend[0] == "trio" else "AIOHTTPSession"
    async with create_client(Config(region="us-east-1", endpoint_url=ENDPOINT)) as client:
        assert type(client._endpoint.http_session).__name__ == expected
        assert client.meta.config.retries["total_max_attempts"] == 1  # the retrier owns retries
        assert client.meta.config.max_pool_connections == 24
        assert client.meta.config.read_timeout == 6.0
        assert client.meta.config.connect_timeout == 6.0


@pytest.mark.anyio
async def test_httpx_can_be_chosen_on_asyncio_too() -> None:
    config = Config(
        region="us-east-1", endpoint_url=ENDPOINT, http_backend="httpx", max_connections=3
    )
    async with create_client(config) as client:
        assert type(client._endpoint.http_session).__name__ == "HttpxSession"
        assert client.meta.config.max_pool_connections == 3


@pytest.mark.anyio
async def test_credentials_from_the_environment_work_on_both_loops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "example-secret")
    async with create_client(Config(region="eu-west-1", endpoint_url=ENDPOINT)) as client:
        credentials = await client._get_credentials().get_frozen_credentials()
        assert credentials.access_key == "AKIDEXAMPLE"
        assert client.meta.region_name == "eu-west-1"


@pytest.mark.anyio
async def test_endpoint_without_region_gets_a_placeholder_region() -> None:
    async with create_client(Config(endpoint_url=ENDPOINT)) as client:
        assert client.meta.region_name == "us-east-1"


@pytest.mark.anyio
async def test_no_region_is_a_clear_error_at_start() -> None:
    with pytest.raises(ConfigError, match=r"no AWS region: set Config\(region=...\)"):
        async with Producer(Config()):
            pass


@pytest.mark.anyio
async def test_a_region_that_cannot_be_an_aws_region_is_refused_at_start() -> None:
    with pytest.raises(ConfigError, match=r"region 'useast1' is not an AWS region"):
        async with Producer(Config(region="useast1")):
            pass


@pytest.mark.anyio
async def test_a_region_botocore_does_not_know_is_named_at_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with Producer(Config(region="us-east-11")):  # nothing put: nothing sent
        pass
    [warning] = [r for r in caplog.records if r.name == "aiokpl"]
    assert warning.levelname == "WARNING"
    assert warning.getMessage().startswith("region 'us-east-11' is not one botocore ")
    assert "(did you mean 'us-east-1'" in warning.getMessage()
    assert "requests go to kinesis.us-east-11.amazonaws.com" in warning.getMessage()


@pytest.mark.anyio
async def test_a_server_of_your_own_takes_any_region(caplog: pytest.LogCaptureFixture) -> None:
    for region in ("us-east-11", "local"):
        async with Producer(Config(region=region, endpoint_url=ENDPOINT)):
            pass
    assert not [r for r in caplog.records if r.name == "aiokpl"]


@pytest.mark.anyio
async def test_profile_name_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config_file = tmp_path / "config"
    config_file.write_text("[profile staging]\nregion = ap-southeast-2\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config_file))
    async with create_client(Config(profile_name="staging", endpoint_url=ENDPOINT)) as client:
        assert client.meta.region_name == "ap-southeast-2"


SHARD = "shardId-000000000000"


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (None, Malformed("Internal", "malformed PutRecords response: NoneType")),
        ("<html>", Malformed("Internal", "malformed PutRecords response: str")),
        ({}, Malformed("Internal", "malformed PutRecords response: no Records list")),
        (
            {"Records": None},
            Malformed("Internal", "malformed PutRecords response: no Records list"),
        ),
        (
            {"Records": [{"SequenceNumber": "1", "ShardId": SHARD}]},
            Malformed("RecordCountMismatch", "PutRecords answered with 1 results for 2 records"),
        ),
        (
            {
                "Records": [
                    {"SequenceNumber": 7, "ShardId": SHARD},
                    {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "x"},
                ]
            },
            Answered([(SHARD, "7"), Refused("ProvisionedThroughputExceededException", "x")]),
        ),
        (
            {"Records": [{"ErrorCode": "InternalFailure"}, {"SequenceNumber": "1"}]},
            Answered(
                [
                    Refused("InternalFailure", ""),
                    Refused(
                        "Internal", "malformed PutRecords result entry: {'SequenceNumber': '1'}"
                    ),
                ]
            ),
        ),
        (
            {"Records": [None, "junk"]},
            Answered(
                [
                    Refused("Internal", "malformed PutRecords result entry: None"),
                    Refused("Internal", "malformed PutRecords result entry: 'junk'"),
                ]
            ),
        ),
    ],
)
def test_a_put_records_response_is_read_once_into_a_typed_answer(
    response: object, expected: object
) -> None:
    assert answer_of(response, 2) == expected


def test_a_failed_call_is_a_typed_failure_whose_outcome_is_unknown_only_if_it_may_have_left() -> (
    None
):
    throttled = client_error("ProvisionedThroughputExceededException", "slow", "PutRecords")
    assert failure_of(throttled) == RequestFailed(
        "ProvisionedThroughputExceededException", "slow", outcome_unknown=False
    )
    assert failure_of(ConnectionResetError("reset")) == RequestFailed(
        "Internal", "ConnectionResetError: reset", outcome_unknown=True
    )
    assert failure_of(ConnectionRefusedError("refused")) == RequestFailed(
        "ConnectionRefusedError", "refused", outcome_unknown=False
    )

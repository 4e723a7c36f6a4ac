"""The boundary with the AWS SDK: the only module that imports aiobotocore or botocore.

Everything the pipeline needs from the SDK passes through here:

* :class:`KinesisClient`, the protocol of the client methods the pipeline calls; an aiobotocore
  client satisfies it, and so does :class:`aiokpl.testing.FakeKinesis`;
* :func:`error_of`, which turns any exception raised by a client call into ``(code, message)``
  data, once, in one place (like httpcore's ``map_exceptions``): the sender and retrier never
  see an exception type;
* :func:`client_error`, which builds the exception a real client raises for a service error, so
  fakes behave like the SDK;
* :func:`create_client`, which opens the producer's own aiobotocore client with SDK retries
  off (the retrier owns retries) and the HTTP backend that suits the running event loop;
  :func:`create_cloudwatch_client` opens a CloudWatch client the same way, for the metrics.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

import botocore.exceptions

from ._backend import current_backend
from ._core.errors import ConfigError

if TYPE_CHECKING:
    from ._core.config import Config

__all__ = (
    "KinesisClient",
    "KinesisReader",
    "client_error",
    "create_client",
    "create_cloudwatch_client",
    "error_of",
)


class KinesisClient(Protocol):
    """The Kinesis client methods the producer calls (keyword arguments as in botocore).

    ``describe_stream`` is called only when ``list_shards`` fails (see
    ``aiokpl._pipeline.shard_map``); a client without it works while ``list_shards`` does.
    """

    async def list_shards(self, *args: Any, **kwargs: Any) -> dict[str, Any]: ...

    async def describe_stream(self, *args: Any, **kwargs: Any) -> dict[str, Any]: ...

    async def put_records(self, *args: Any, **kwargs: Any) -> dict[str, Any]: ...


class KinesisReader(Protocol):
    """The Kinesis client methods ``aiokpl tail`` calls (keyword arguments as in botocore)."""

    async def list_shards(self, *args: Any, **kwargs: Any) -> dict[str, Any]: ...

    async def get_shard_iterator(self, *args: Any, **kwargs: Any) -> dict[str, Any]: ...

    async def get_records(self, *args: Any, **kwargs: Any) -> dict[str, Any]: ...


# Message of a credential-bearing exception is never repeated: botocore's own messages for
# these never contain secrets, but we keep the policy explicit.
_MAX_MESSAGE = 1000


NO_CREDENTIALS_MESSAGE = (
    "no AWS credentials found. They are looked for, in order: in Config "
    "(aws_access_key_id and aws_secret_access_key); in the environment (AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY, with AWS_SESSION_TOKEN); in the profile (Config.profile_name, else "
    "AWS_PROFILE, else 'default') of the shared files ~/.aws/credentials and ~/.aws/config "
    "(AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE move them), including its SSO, web "
    "identity and credential_process settings; then the container (ECS) and instance (EC2 "
    "metadata) roles"
)
"""What a record that failed for want of credentials says (code ``"NoCredentialsError"``)."""


def error_of(exc: BaseException) -> tuple[str, str]:
    """Map an exception from a client call to ``(error_code, error_message)``.

    ``ClientError`` (a service error, including throttling) keeps the service's code and
    message. botocore's ``NoCredentialsError`` (raised before anything is sent) becomes
    ``"NoCredentialsError"`` with where credentials are looked for. Anything else becomes
    ``"Internal"`` with the exception's type and text, which is what the KPL reports for
    errors it cannot classify.
    """
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code") or "Unknown")
        message = str(error.get("Message") or exc)
        return code, message[:_MAX_MESSAGE]
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return "NoCredentialsError", NO_CREDENTIALS_MESSAGE
    text = str(exc)
    described = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return "Internal", described[:_MAX_MESSAGE]


def client_error(
    code: str, message: str, operation: str, *, http_status: int = 400
) -> botocore.exceptions.ClientError:
    """Build the ``ClientError`` botocore raises when the service answers with an error."""
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": http_status},
    }
    return botocore.exceptions.ClientError(response, operation)


def create_cloudwatch_client(
    config: Config, *, endpoint_url: str | None = None
) -> contextlib.AbstractAsyncContextManager[Any]:
    """Open an aiobotocore CloudWatch client with ``config``'s region and credentials.

    ``config.endpoint_url`` is Kinesis's, so it is not used: pass ``endpoint_url`` instead.

    Raises:
        ConfigError: no region is configured or resolvable and no ``endpoint_url`` is set.
    """
    return create_client(config.replace(endpoint_url=endpoint_url), "cloudwatch")


@contextlib.asynccontextmanager
async def create_client(config: Config, service: str = "kinesis") -> AsyncIterator[Any]:
    """Open an aiobotocore client configured from ``config``; close it on exit.

    ``service`` is ``"kinesis"`` for the producer; coordination opens ``"s3"`` and
    ``"dynamodb"`` clients the same way (same credentials, timeouts and HTTP backend), and
    the metrics ``"cloudwatch"`` (:func:`create_cloudwatch_client`).

    Raises:
        ConfigError: no region is configured or resolvable and no ``endpoint_url`` is set.
    """
    from aiobotocore.config import AioConfig
    from aiobotocore.session import get_session

    backend = config.http_backend
    if backend == "auto":
        backend = "httpx" if current_backend() == "trio" else "aiohttp"
    options: dict[str, Any] = {
        "connect_timeout": config.connect_timeout_ms / 1000,
        "read_timeout": config.request_timeout_ms / 1000,
        "max_pool_connections": config.max_connections,
        "retries": {"total_max_attempts": 1, "mode": "standard"},
    }
    if backend == "httpx":
        from aiobotocore.httpxsession import HttpxSession

        options["http_session_cls"] = HttpxSession
    session = get_session()
    client_config = AioConfig(**options)
    # The session's default client config decides which HTTP stack the credential chain
    # (instance metadata, container, assume-role) uses: with httpx it is anyio-based and so
    # works on trio, where aiohttp cannot run.
    session.set_default_client_config(client_config)
    if config.profile_name is not None:
        session.set_config_variable("profile", config.profile_name)
    region = config.region
    if (
        region is None
        and config.endpoint_url is not None
        and session.get_config_variable("region") is None
    ):
        # A custom endpoint (a local server) needs no real region, but botocore wants one.
        region = "us-east-1"
    client_context = session.create_client(
        service,
        region_name=region,
        endpoint_url=config.endpoint_url,
        verify=config.verify_ssl,
        aws_access_key_id=config.aws_access_key_id,
        aws_secret_access_key=config.aws_secret_access_key,
        aws_session_token=config.aws_session_token,
        config=client_config,
    )
    try:
        client = await client_context.__aenter__()
    except botocore.exceptions.NoRegionError as exc:
        raise ConfigError(
            "no AWS region: set Config(region=...), the AWS_DEFAULT_REGION variable, or a "
            "region in your AWS profile"
        ) from exc
    try:
        yield client
    finally:
        await client_context.__aexit__(None, None, None)

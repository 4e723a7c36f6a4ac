"""The boundary with the AWS SDK: the only module that imports aiobotocore or botocore.

Everything the pipeline needs from the SDK passes through here:

* :class:`KinesisClient`, the protocol of the client methods the pipeline calls; an aiobotocore
  client satisfies it, and so does :class:`aiokpl.testing.FakeKinesis`;
* :func:`error_of`, which turns any exception raised by a client call into ``(code, message)``
  data, once, in one place (like httpcore's ``map_exceptions``): the sender and retrier never
  see an exception type; :func:`failure_of` makes it a typed ``RequestFailed``;
* :func:`call_control`, a control-plane read (``ListShards``, ``DescribeStream``,
  ``DescribeStreamSummary``) within a timeout, whose failure is
  ``_core.listings.UnusableAnswer`` with :func:`error_of`'s code;
* :func:`answer_of`, which reads a ``PutRecords`` response once, into a typed answer
  (``_core.answers``): answered record by record, or malformed; nothing below reads the dict;
* :func:`client_error`, which builds the exception a real client raises for a service error, so
  fakes behave like the SDK;
* :func:`create_client`, which opens the producer's own aiobotocore client with SDK retries
  off (the retrier owns retries), the HTTP backend that suits the running event loop, and
  TLS verified as the AWS CLI does (:func:`tls_verify`: ``AWS_CA_BUNDLE`` and the profile's
  ``ca_bundle`` count unless ``Config.ca_bundle`` is given);
  :func:`create_cloudwatch_client` opens a CloudWatch client the same way, for the metrics;
* :func:`stream_argument`, which names a stream in a request as the service wants it:
  ``StreamARN`` for a stream ARN, ``StreamName`` for a name;
* :class:`RegionalClients`, the producer's own clients: the client of its region, opened at
  start, and, when ``Config.region`` is unset, one more per region of the stream ARNs it is
  given, each opened on first use. botocore sends a request to the client's region whatever
  region its ``StreamARN`` names, so a stream in another region needs a client of its own.

The producer's own client's region is judged at start: :func:`check_known_region`.

Regions (:func:`check_region`): a stream named by name is in the producer's region. A stream
named by ARN is in the ARN's region: when ``Config.region`` is set (or a client with a region
was given), an ARN of another region is refused at the put that names it, as a mistake to
report at once rather than a ``ResourceNotFoundException`` on every record; when it is unset,
the ARN's region wins over the environment's or profile's (the ARN is the more specific
statement) and its own client serves it. The KPL has one region per producer
(``KinesisProducerConfiguration.setRegion``, else the EC2 instance's region) and sends both
``StreamName`` and ``StreamARN``; we send the ARN alone, which the service resolves the same
way, and which a name could contradict.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import anyio
import botocore
import botocore.exceptions

from ._backend import current_backend
from ._core.answers import (
    COUNT_MISMATCH,
    INTERNAL,
    Answered,
    Entry,
    Malformed,
    Refused,
    RequestFailed,
)
from ._core.errors import ConfigError, InvalidRecordError
from ._core.hashing import StreamArn
from ._core.listings import UnusableAnswer
from ._core.regions import NOT_A_REGION, region_problem

if TYPE_CHECKING:
    from ._core.config import Config

logger = logging.getLogger("aiokpl")

INSECURE_WARNING = (
    "verify_ssl=False: the TLS certificates of AWS endpoints are not verified, so anyone on "
    "the network path can read and change what is sent, the session token included"
)
"""What the producer logs, once as it opens its clients, when verification is off."""

__all__ = (
    "INSECURE_WARNING",
    "KinesisClient",
    "KinesisReader",
    "RegionalClients",
    "answer_of",
    "arn_argument",
    "call_control",
    "check_known_region",
    "check_region",
    "client_error",
    "create_client",
    "create_cloudwatch_client",
    "endpoint_of",
    "error_of",
    "failure_of",
    "fixed_region",
    "never_sent",
    "stream_argument",
    "tls_verify",
)


logger = logging.getLogger("aiokpl")


class KinesisClient(Protocol):
    """The Kinesis client methods the producer calls (keyword arguments as in botocore).

    ``describe_stream`` is called only when ``list_shards`` fails, and
    ``describe_stream_summary`` to learn each stream's record distribution and capacity mode
    (``aiokpl._pipeline.shard_map``, ``distribution``); a client without them works while
    ``list_shards`` does (its streams are then taken to place records by key).
    """

    async def list_shards(self, *args: Any, **kwargs: Any) -> dict[str, Any]: ...

    async def describe_stream(self, *args: Any, **kwargs: Any) -> dict[str, Any]: ...

    async def describe_stream_summary(self, *args: Any, **kwargs: Any) -> dict[str, Any]: ...

    async def put_records(self, *args: Any, **kwargs: Any) -> dict[str, Any]: ...


def stream_argument(stream: str) -> dict[str, str]:
    """How a request names ``stream``: ``{"StreamARN": stream}`` for an ARN, else by name."""
    if stream.startswith("arn:"):
        return {"StreamARN": stream}
    return {"StreamName": stream}


def arn_argument(stream: str) -> dict[str, str]:
    """``{"StreamARN": stream}`` for a stream ARN, else nothing: for ``GetRecords``.

    ``GetRecords`` names its stream by the shard iterator alone, but takes a ``StreamARN`` too
    (no ``StreamName``); moto 5.2 needs it to read an iterator it issued for a ``StreamARN``.
    """
    return {"StreamARN": stream} if stream.startswith("arn:") else {}


def _region_of(client: object) -> str | None:
    """The region of a client: an aiobotocore client's, a fake's, or ``None`` if unknown."""
    meta = getattr(client, "meta", None)
    region = getattr(meta, "region_name", None) if meta is not None else None
    if region is None:
        region = getattr(client, "region", None)
    return region if isinstance(region, str) else None


def endpoint_of(client: object) -> str | None:
    """The endpoint URL ``client`` (or a :class:`RegionalClients`' home) sends to, if any."""
    if isinstance(client, RegionalClients):
        client = client._home
    url = getattr(getattr(client, "meta", None), "endpoint_url", None)
    return url if isinstance(url, str) else None


@functools.cache
def _partitions() -> list[dict[str, Any]]:
    """botocore's partitions (``partitions.json``), read once."""
    from botocore.loaders import create_loader

    partitions: list[dict[str, Any]] = create_loader().load_data("partitions")["partitions"]
    return partitions


def check_known_region(client: object) -> None:
    """Judge the region of the producer's own ``client`` (``_core.regions``): warn about one
    botocore does not know, refuse one that cannot be an AWS region.

    Raises:
        ConfigError: the region has the shape of no partition's regions and the client
            sends to AWS (no endpoint URL of a server of your own).
    """
    region = _region_of(client)
    host = urlsplit(endpoint_of(client) or "").hostname
    if region is None or host is None:
        return
    problem = region_problem(region, host, _partitions(), botocore.__version__)
    if problem is not None and problem.kind == NOT_A_REGION:
        raise ConfigError(problem.message)
    if problem is not None:
        logger.warning("%s", problem.message)


def fixed_region(config: Config, client: object) -> str | None:
    """The one region a producer can write to, or ``None`` if it serves any ARN's region.

    ``Config.region`` when set; else, for a client the producer was given (not one it opened:
    those are :class:`RegionalClients`), that client's region when it has one.
    """
    if config.region is not None:
        return config.region
    if isinstance(client, RegionalClients):
        return None
    return _region_of(client)


def check_region(arn: StreamArn, stream: str, region: str | None) -> None:
    """Refuse a stream ARN in another region than ``region``, the producer's fixed region.

    Raises:
        InvalidRecordError: ``region`` is set and the ARN names another region.
    """
    if region is not None and arn.region != region:
        raise InvalidRecordError(
            f"stream {stream!r} is in region {arn.region!r}, but this producer writes to "
            f"{region!r} (Config.region, or its client's region): a producer with a region "
            "writes to that region only. Use one producer per region, or leave Config.region "
            "unset: each stream ARN is then written to in its own region"
        )


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


# Exceptions of the HTTP stacks under aiobotocore that are raised only while a connection is
# being opened, before a byte of the request is written: (top-level package, class name), so
# that neither stack needs to be importable. aiohttp's ClientConnectorError covers refused
# connections, DNS failures (ClientConnectorDNSError), TLS handshakes (ClientSSLError) and
# proxies that cannot be reached; its ConnectionTimeoutError is the connect timeout (which
# includes waiting for a pooled connection). httpx's ConnectError, ConnectTimeout and
# PoolTimeout are the same phases. Not here: aiohttp's ClientOSError or ServerDisconnectedError
# and httpx's WriteError or ReadError, which come once the request may have left.
_CONNECT_PHASE = frozenset(
    {
        ("aiohttp", "ClientConnectorError"),
        ("aiohttp", "ConnectionTimeoutError"),
        ("httpx", "ConnectError"),
        ("httpx", "ConnectTimeout"),
        ("httpx", "PoolTimeout"),
        ("httpx2", "ConnectError"),
        ("httpx2", "ConnectTimeout"),
        ("httpx2", "PoolTimeout"),
    }
)
# botocore's wrappers of those (the code a record then fails with is the wrapper's name), and
# exceptions that, raised by a client call, can only mean that nothing was sent.
_WRAPPERS = (
    botocore.exceptions.EndpointConnectionError,
    botocore.exceptions.ConnectTimeoutError,
    botocore.exceptions.SSLError,
    botocore.exceptions.ProxyConnectionError,
)
_NEVER_SENT = (
    ConnectionRefusedError,
    socket.gaierror,
    botocore.exceptions.ProxyConnectionError,
    botocore.exceptions.CredentialRetrievalError,
    botocore.exceptions.PartialCredentialsError,
)


def _in_connect_phase(exc: BaseException) -> bool:
    """Whether ``exc``, or what it wraps, was raised before the request was written."""
    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        link = todo.pop()
        if not isinstance(link, BaseException) or id(link) in seen:
            continue
        seen.add(id(link))
        if isinstance(link, ConnectionRefusedError | socket.gaierror):
            return True
        for kind in type(link).__mro__:
            if (kind.__module__.partition(".")[0], kind.__name__) in _CONNECT_PHASE:
                return True
        kwargs = getattr(link, "kwargs", None)  # botocore keeps the cause as kwargs["error"]
        todo += [link.__cause__, link.__context__]
        if isinstance(kwargs, dict):
            todo.append(kwargs.get("error"))
    return False


def never_sent(exc: BaseException) -> bool:
    """Whether a client call that raised ``exc`` certainly sent nothing to the service.

    True for a connection refused, a name that did not resolve, a connect timeout, a failed
    TLS handshake or proxy, and credentials that could not be fetched; false for whatever may
    come after a byte of the request left (a reset, a read timeout, a closed connection, an
    unknown error), where Kinesis may have stored the records.
    """
    if isinstance(exc, _NEVER_SENT):
        return True
    return isinstance(exc, _WRAPPERS) and _in_connect_phase(exc)


def error_of(exc: BaseException) -> tuple[str, str]:
    """Map an exception from a client call to ``(error_code, error_message)``.

    ``ClientError`` (a service error, including throttling) keeps the service's code and
    message. botocore's ``NoCredentialsError`` (raised before anything is sent) becomes
    ``"NoCredentialsError"`` with where credentials are looked for. A failure that certainly
    sent nothing (:func:`never_sent`: a refused connection, a DNS failure, a connect timeout …)
    keeps the exception's name as its code (``"EndpointConnectionError"``,
    ``"ConnectTimeoutError"`` …), so the record's outcome is known: it is not in the stream.
    Anything else becomes ``"Internal"`` with the exception's type and text, which is what the
    KPL reports for errors it cannot classify; a record whose request ended so may have been
    stored (``outcome_unknown``).
    """
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code") or "Unknown")
        message = str(error.get("Message") or exc)
        return code, message[:_MAX_MESSAGE]
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return "NoCredentialsError", NO_CREDENTIALS_MESSAGE
    if never_sent(exc):
        text = str(exc) or type(exc).__name__
        return type(exc).__name__, text[:_MAX_MESSAGE]
    text = str(exc)
    described = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return "Internal", described[:_MAX_MESSAGE]


async def call_control(client: Any, operation: str, time_limit: float, **arguments: Any) -> object:
    """Call ``operation`` of ``client`` within ``time_limit`` seconds.

    Only the call is caught: what it raises becomes :class:`UnusableAnswer` with
    :func:`error_of`'s code (a client without the method too: its ``__cause__`` is the
    ``AttributeError``); reading the answer is the caller's, and a bug there propagates.
    """
    try:
        method = getattr(client, operation)  # a client may lack describe_stream(_summary)
        with anyio.fail_after(time_limit):
            response: object = await method(**arguments)
    except Exception as exc:
        raise UnusableAnswer(*error_of(exc)) from exc
    return response


def failure_of(exc: BaseException) -> RequestFailed:
    """A ``PutRecords`` call that raised ``exc``, as the typed failure (:func:`error_of`)."""
    return RequestFailed.of(*error_of(exc))


def answer_of(response: object, count: int) -> Answered | Malformed:
    """Read the ``PutRecords`` ``response`` to a request of ``count`` Kinesis records.

    Only a dict with a ``Records`` list of ``count`` results is an answer; anything else is
    :class:`~aiokpl._core.answers.Malformed`, with the code and message its records' attempts
    carry (``"Internal"``, or ``"RecordCountMismatch"``). A result entry is a delivery (a
    sequence number and a shard id), else a refusal with its ``ErrorCode``, else (neither) a
    refusal as ``"Internal"`` quoting the entry.
    """
    if not isinstance(response, dict):
        return Malformed(INTERNAL, f"malformed PutRecords response: {type(response).__name__}")
    entries = response.get("Records")
    if not isinstance(entries, list):
        return Malformed(INTERNAL, "malformed PutRecords response: no Records list")
    if len(entries) != count:
        return Malformed(
            COUNT_MISMATCH, f"PutRecords answered with {len(entries)} results for {count} records"
        )
    # One pass, no call per entry: this runs for every Kinesis record answered.
    read: list[Entry] = []
    append = read.append
    for entry in entries:
        if isinstance(entry, dict):
            sequence_number = entry.get("SequenceNumber")
            shard_id = entry.get("ShardId")
            if sequence_number and type(shard_id) is str:
                if type(sequence_number) is not str:
                    sequence_number = str(sequence_number)
                append((shard_id, sequence_number))
                continue
            code = entry.get("ErrorCode")
            if code:
                append(Refused(str(code), str(entry.get("ErrorMessage") or "")))
                continue
        append(Refused(INTERNAL, f"malformed PutRecords result entry: {entry!r:.200}"))
    return Answered(read)


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


def tls_verify(config: Config) -> bool | str | None:
    """What botocore's ``verify`` is given: ``False`` with ``verify_ssl=False``, the bundle's
    path with ``ca_bundle``, else ``None``, with which botocore looks for a bundle as the AWS
    CLI does (``AWS_CA_BUNDLE``, the profile's ``ca_bundle``, then ``REQUESTS_CA_BUNDLE``) and
    verifies with the system's certificates when there is none. ``True`` would skip that
    search: botocore reads those settings only when ``verify`` is ``None``.

    Raises:
        ConfigError: ``Config.ca_bundle`` names no file.
    """
    if not config.verify_ssl:
        return False
    if config.ca_bundle is None:
        return None
    bundle = os.fspath(config.ca_bundle)
    if not os.path.isfile(bundle):
        raise ConfigError(f"ca_bundle: no such file: {bundle!r}")
    return bundle


@contextlib.asynccontextmanager
async def create_client(config: Config, service: str = "kinesis") -> AsyncIterator[Any]:
    """Open an aiobotocore client configured from ``config``; close it on exit.

    ``service`` is ``"kinesis"`` for the producer; coordination opens ``"s3"`` and
    ``"dynamodb"`` clients the same way (same credentials, timeouts and HTTP backend), and
    the metrics ``"cloudwatch"`` (:func:`create_cloudwatch_client`).

    Raises:
        ConfigError: no region is configured or resolvable and no ``endpoint_url`` is set,
            or ``Config.ca_bundle`` names no file.
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
        verify=tls_verify(config),
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


ClientOpener = Callable[["Config"], contextlib.AbstractAsyncContextManager[Any]]


class _LazyClient:
    """A client of one region, opened by its first call (and closed with the others).

    ``opener`` opens the region's client; ``lock`` is the owner's, held while one opens.
    """

    def __init__(
        self, region: str, lock: anyio.Lock, opener: Callable[[str], Awaitable[Any]]
    ) -> None:
        self.region = region
        self._lock = lock
        self._open = opener
        self._client: Any = None

    async def _get(self) -> Any:
        client = self._client
        if client is None:
            async with self._lock:
                if self._client is None:
                    self._client = await self._open(self.region)
            client = self._client
        return client

    async def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        response: dict[str, Any] = await (await self._get()).list_shards(**kwargs)
        return response

    async def describe_stream(self, **kwargs: Any) -> dict[str, Any]:
        response: dict[str, Any] = await (await self._get()).describe_stream(**kwargs)
        return response

    async def describe_stream_summary(self, **kwargs: Any) -> dict[str, Any]:
        client = await self._get()
        response: dict[str, Any] = await client.describe_stream_summary(**kwargs)
        return response

    async def put_records(self, **kwargs: Any) -> dict[str, Any]:
        response: dict[str, Any] = await (await self._get()).put_records(**kwargs)
        return response


class RegionalClients:
    """The producer's own Kinesis clients, one per region, behind the client interface.

    The client of the producer's region (``Config.region``, else botocore's: environment,
    profile) is opened on entry, with the error of :func:`create_client` if there is none. A
    stream ARN of another region (allowed only when ``Config.region`` is unset: see
    :func:`check_region`) gets a client of its region, with the same settings, opened by the
    first call that needs it (shielded: a cancelled caller cannot leave it half open) and
    closed on exit with the rest. Calls go to the client of the region of their ``StreamARN``;
    the others (``StreamName``, or a ``NextToken`` alone) to the producer's region, so a
    stream's shard map pages through its own client (:meth:`client_for`).

    Args:
        config: the producer's settings; a region's client gets ``config`` with that region.
        open_client: opens one client from a ``Config`` (:func:`create_client`).
    """

    def __init__(self, config: Config, open_client: ClientOpener) -> None:
        self._config = config
        self._open_client = open_client
        self._stack = contextlib.AsyncExitStack()
        self._lock = anyio.Lock()
        self._home: Any = None
        self.region: str | None = None
        self._regions: dict[str, _LazyClient] = {}

    async def __aenter__(self) -> RegionalClients:
        if not self._config.verify_ssl:
            logger.warning(INSECURE_WARNING)
        try:
            self._home = await self._stack.enter_async_context(self._open_client(self._config))
            check_known_region(self._home)
        except BaseException:
            await self._stack.aclose()
            raise
        self.region = _region_of(self._home) or self._config.region
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):
            await self._stack.aclose()

    async def _open(self, region: str) -> Any:
        with anyio.CancelScope(shield=True):
            return await self._stack.enter_async_context(
                self._open_client(self._config.replace(region=region))
            )

    def client_for(self, stream: str) -> Any:
        """The client that serves ``stream`` (a name, or a checked stream ARN)."""
        if not stream.startswith("arn:"):
            return self._home
        region = stream.split(":", 4)[3]  # checked at put: arn:partition:kinesis:region:…
        if region == self.region:
            return self._home
        client = self._regions.get(region)
        if client is None:
            # One per region ever named (a few dozen at most), not per stream.
            client = self._regions[region] = _LazyClient(region, self._lock, self._open)
        return client

    def _route(self, kwargs: dict[str, Any]) -> Any:
        arn = kwargs.get("StreamARN")
        return self._home if arn is None else self.client_for(arn)

    async def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        response: dict[str, Any] = await self._route(kwargs).list_shards(**kwargs)
        return response

    async def describe_stream(self, **kwargs: Any) -> dict[str, Any]:
        response: dict[str, Any] = await self._route(kwargs).describe_stream(**kwargs)
        return response

    async def describe_stream_summary(self, **kwargs: Any) -> dict[str, Any]:
        client = self._route(kwargs)
        response: dict[str, Any] = await client.describe_stream_summary(**kwargs)
        return response

    async def put_records(self, **kwargs: Any) -> dict[str, Any]:
        response: dict[str, Any] = await self._route(kwargs).put_records(**kwargs)
        return response

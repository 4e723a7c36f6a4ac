"""The producer's configuration: one frozen, validated dataclass.

Every field has a default that suits a typical service; each is checked when the ``Config`` is
built, and a bad value raises :class:`~aiokpl.ConfigError` naming the field, the value and the
allowed range, so mistakes surface at start-up rather than as odd behaviour under load.

The names follow the KPL's configuration (``aws/kinesis/core/configuration.h``) in Python
spelling, with units in the names. Credentials are never shown by ``repr``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

from .errors import ConfigError

if TYPE_CHECKING:
    from .results import RecordResult

__all__ = ("Config",)

KiB = 1024
MiB = 1024 * KiB

_SECRET_FIELDS = frozenset({"aws_access_key_id", "aws_secret_access_key", "aws_session_token"})
_HTTP_BACKENDS = ("auto", "aiohttp", "httpx")
_CHOICES = {
    "metrics_level": ("none", "summary", "detailed"),
    "metrics_granularity": ("global", "stream", "shard"),
    "ordering": ("aggregate", "shard"),
    "spool_fsync": ("batch", "interval", "none"),
    "tracing": ("off", "context", "create"),
}


@dataclass(frozen=True, slots=True, repr=False, kw_only=True)
class Config:
    """Settings of a :class:`~aiokpl.Producer`. Frozen; validated when built.

    Use ``dataclasses.replace(config, field=value)`` (or :meth:`replace`) to derive a changed
    copy; the copy is validated too.

    Raises:
        ConfigError: a value is outside its allowed range (the message names the field).
        TypeError: a value has the wrong type.
    """

    # --- AWS connection ------------------------------------------------------------------
    region: str | None = None
    """AWS region, e.g. ``"us-east-1"``. ``None`` resolves it like botocore does (the
    ``AWS_DEFAULT_REGION`` variable, then the profile); the producer fails at start if it is
    still unknown and no ``endpoint_url`` is set (KPL ``Region``)."""

    endpoint_url: str | None = None
    """Kinesis endpoint to use instead of the region's, e.g. a local test server
    (KPL ``KinesisEndpoint`` and ``KinesisPort``, as one URL)."""

    verify_ssl: bool = True
    """Verify the endpoint's TLS certificate (KPL ``VerifyCertificate``). Turning it off logs a
    warning when the producer starts: anyone on the network path can then read and change
    what is sent, the session token included."""

    ca_bundle: str | os.PathLike[str] | None = None
    """A PEM file of the certificate authorities to trust instead of the default ones, e.g. a
    company proxy's private CA (KPL ``CaCertFile``; the KPL's ``CaCertPath``, a directory, has
    no equivalent: concatenate its files into one). ``None`` (the default) lets botocore find
    one as the AWS CLI does: the ``AWS_CA_BUNDLE`` environment variable, then ``ca_bundle`` in
    the profile, else the system's. A file that does not exist fails the producer's start;
    with ``verify_ssl=False`` it is refused, as it would be ignored."""

    aws_access_key_id: str | None = None
    """Access key id. ``None`` uses the default credential chain (environment, profile,
    container or instance role), whose credentials refresh themselves. Never shown by
    ``repr``."""

    aws_secret_access_key: str | None = None
    """Secret access key that goes with ``aws_access_key_id``. Never shown by ``repr``."""

    aws_session_token: str | None = None
    """Session token for temporary credentials. Never shown by ``repr``."""

    profile_name: str | None = None
    """Named profile from the AWS config files."""

    # --- Aggregation ---------------------------------------------------------------------
    aggregation_enabled: bool = True
    """Pack several user records into one Kinesis record (KPL ``AggregationEnabled``)."""

    aggregation_max_count: int = 4_294_967_295
    """Most user records in one aggregate, 1 … 4,294,967,295 (KPL ``AggregationMaxCount``)."""

    aggregation_max_size: int = 51_200
    """Largest aggregate in bytes, 64 … 1 MiB, counted exactly as sent (magic, protobuf body
    and digest). A single user record larger than this is sent on its own
    (KPL ``AggregationMaxSize``)."""

    aggregation_on_auto_streams: bool = False
    """Aggregate on streams that place records themselves (``RecordDistributionStrategy``
    ``AUTO``) too. Off by default: there an aggregate lands on a shard whose hash key range
    does not hold its user records, and a KCL consumer drops them all. Turn it on only if
    every consumer of such streams reads aggregates without checking ranges
    (:func:`aiokpl.aggregation.deaggregate` without ``shard=``, ``aws_kinesis_agg`` in a
    Lambda): aggregation then saves what it saves elsewhere (on-demand billing rounds every
    Kinesis record up to 1 KiB). Records with tags travel only in aggregates, so without it
    they fail on such streams (``"TagsOnAutoStream"``)."""

    dry_run_check: bool = False
    """Before a stream's first record is sent, ask ``PutRecords`` with ``DryRun=True``: a
    missing permission (``kinesis:PutRecords``, a KMS key's) is then one line in the log
    before the first record, rather than a failed result for each. Records wait for its
    answer as for the first shard map (within their deadline). Off by default: the call is
    billed and limited like a ``PutRecords``, and a server that does not know ``DryRun``
    (moto, kinesalite) stores its empty record."""

    record_distribution_check_ms: int = 300_000
    """How often each stream's record distribution (does the service place records itself?)
    is read again with ``DescribeStreamSummary``, in milliseconds, 1,000 … 86,400,000. It is
    also read when a stream is first put to, and at once when a record is seen stored where
    its key does not route. A stream switched back to placing records by key is aggregated
    again at the next reading at the latest."""

    # --- Collection into PutRecords requests --------------------------------------------
    collection_max_count: int = 500
    """Most Kinesis records in one ``PutRecords`` request, 1 … 500
    (KPL ``CollectionMaxCount``)."""

    collection_max_size: int = 5 * MiB
    """Most bytes (partition keys plus data) in one ``PutRecords`` request,
    52,224 … 10 MiB (KPL ``CollectionMaxSize``)."""

    # --- Timing --------------------------------------------------------------------------
    record_max_buffered_time_ms: int = 100
    """How long a record may wait to be batched before it is sent, in milliseconds,
    0 … 86,400,000 (KPL ``RecordMaxBufferedTime``). Larger values batch better; smaller
    values lower latency. Counted from the first put of the millisecond the record was put
    in, so it may end up to 1 ms early, never late."""

    record_ttl_ms: int = 30_000
    """How long a record may take, retries included, before it fails with ``"Expired"``,
    in milliseconds, 100 … 86,400,000 (KPL ``RecordTtl``). Counted like
    ``record_max_buffered_time_ms``: up to 1 ms early, never late. It must exceed
    ``record_max_buffered_time_ms`` plus the time a record needs after its deadline to reach
    the wire (the collector's grace, min(50 ms, 20% of the buffered time) with aggregation,
    and one ``drain_interval_ms``): a shorter TTL would expire every record not sent early
    for size, so it is refused."""

    # --- Rate limiting -------------------------------------------------------------------
    rate_limit_records_per_sec_per_shard: float = 1000.0
    """Kinesis records per second the producer sends to one shard (the service limit is
    1,000). At least 1: a record takes one token, and a shard's bucket holds one second of the
    rate (KPL ``RateLimit``, there a percentage of the service limit)."""

    rate_limit_bytes_per_sec_per_shard: float = 1_048_576.0
    """Bytes per second the producer sends to one shard (the service limit is 1 MiB).
    At least 1 (KPL ``RateLimit``, there a percentage of the service limit)."""

    drain_interval_ms: int = 25
    """Period of the rate limiter's drain of queued records, in milliseconds, 1 … 1,000."""

    fail_if_throttled: bool = False
    """Fail a throttled record at once instead of retrying it until its TTL
    (KPL ``FailIfThrottled``)."""

    # --- Ordering ------------------------------------------------------------------------
    ordering: Literal["aggregate", "shard"] = "aggregate"
    """Which put order the stream keeps. ``"aggregate"``: user records keep their put order
    within one aggregate, as in the KPL; across aggregates and requests, retries and
    concurrent requests may reorder them. ``"shard"``: every shard's records (so every
    partition key's) are stored in put order, retries and resharding included: at most one
    request in flight per shard, carrying one Kinesis record for it, and a failed record is
    resent before any later one. It costs throughput per shard (one round trip per aggregate);
    see the guarantees page."""

    # --- Back-pressure and limits --------------------------------------------------------
    max_outstanding_records: int = 100_000
    """Most records between ``put_record`` and their result; ``put_record`` waits while this
    many are outstanding. 1 … 100,000,000."""

    max_outstanding_bytes: int = 256 * MiB
    """Most bytes (data plus partition keys) between ``put_record`` and their result;
    ``put_record`` waits while this many are outstanding. At least ``max_record_size``,
    at most 64 GiB."""

    max_record_size: int = 1 * MiB
    """Largest user record accepted by ``put_record`` (data plus partition key in UTF-8),
    1 … 10 MiB. Kinesis accepts 1 MiB unless the stream's limit was raised
    (``UpdateMaxRecordSize``)."""

    # --- HTTP ----------------------------------------------------------------------------
    request_timeout_ms: int = 6_000
    """Time allowed for one request to Kinesis, in milliseconds, 100 … 600,000
    (KPL ``RequestTimeout``)."""

    connect_timeout_ms: int = 6_000
    """Time allowed to open a connection, in milliseconds, 100 … 300,000
    (KPL ``ConnectTimeout``)."""

    max_connections: int = 24
    """Most concurrent requests (and HTTP connections) to Kinesis, 1 … 256
    (KPL ``MaxConnections``)."""

    http_backend: Literal["auto", "aiohttp", "httpx"] = "auto"
    """HTTP client under aiobotocore: ``"aiohttp"``, ``"httpx"``, or ``"auto"``: aiohttp on
    asyncio and httpx on trio."""

    # --- Failed records ------------------------------------------------------------------
    return_record_on_failure: bool = False
    """Attach the record itself (a :class:`~aiokpl.FailedRecord`: stream, partition key,
    data, explicit hash key, tags) to every failed :class:`~aiokpl.RecordResult`, as
    ``result.record`` (KPL ``ReturnUserRecordOnFailure``). Off by default: a failed result
    then holds no payload."""

    on_record_failure: Callable[[RecordResult], object] | None = None
    """Called once with the :class:`~aiokpl.RecordResult` of every record that fails, whatever
    the cause (a service error, ``"Expired"``, ``"Cancelled"`` at exit, …), never for a
    delivered record. A plain function runs in the producer's task as the record fails; an
    ``async def`` function runs in the producer's task group, at most 16 at a time, and the
    record counts as outstanding until it returns; at exit, callbacks of records failed by the
    exit itself get at most ``request_timeout_ms``. Exceptions it raises are logged and
    counted, never raised into the pipeline. Use it with ``return_record_on_failure=True`` to
    route failed records to a dead-letter store."""

    # --- Metrics -------------------------------------------------------------------------
    metrics_level: Literal["none", "summary", "detailed"] = "none"
    """Which metrics the producer records (KPL ``MetricsLevel``): ``"none"``, ``"summary"``
    (the main counts, errors and buffering time) or ``"detailed"`` (all of them). Off by
    default, unlike the KPL: metrics cost CPU, and sending them to CloudWatch costs money and
    needs a permission, so both are opted into. See the metrics page."""

    metrics_granularity: Literal["global", "stream", "shard"] = "shard"
    """The most detailed dimensions metrics are kept with (KPL ``MetricsGranularity``):
    ``"global"``, ``"stream"`` (adds ``StreamName``) or ``"shard"`` (adds ``ShardId``);
    the less detailed series are always there too."""

    metrics_namespace: str = "KinesisProducerLibrary"
    """CloudWatch namespace of the uploaded metrics, 1 … 255 characters
    (KPL ``MetricsNamespace``)."""

    metrics_upload_interval_ms: int = 60_000
    """How often metrics are handed to the sinks, in milliseconds, 1,000 … 60,000
    (KPL ``MetricsUploadDelay``)."""

    # --- Durable spool and identities --------------------------------------------------
    spool_directory: str | os.PathLike[str] | None = None
    """A directory where every accepted record is written before it is sent, so that what the
    producer held survives a crash and is sent again at the next start (created if missing).
    ``None`` (the default): no spool, records are kept in memory only. Give each producer
    process its own directory. See the spool page."""

    spool_check_permissions: bool = True
    """Trust the spool directory only if this process's user owns it and no one else may
    write it, and set aside unread any segment another user owns (as PostgreSQL treats its
    data directory and OpenSSH a private key): what the spool holds is sent again with this
    producer's credentials, so a file someone else could plant there is a record they send as
    you. A directory that fails is refused at start, in one line saying why. ``False``
    accepts other owners and modes, for file systems that have no POSIX owners (some network
    and FUSE mounts show every file as one user's, mode 0777); links, FIFOs, devices and
    oversized segments are refused either way. See the spool page."""

    spool_fsync: Literal["batch", "interval", "none"] = "batch"
    """When the spool fsyncs (group commit: one fsync covers every record written since the
    last). ``"batch"``: after every write, as soon as the previous fsync returned;
    ``"interval"``: at most once per ``spool_fsync_interval_ms``; ``"none"``: never (a record
    is durable once written to the operating system: it survives the process being killed,
    not a power loss)."""

    spool_fsync_interval_ms: int = 50
    """With ``spool_fsync="interval"``, the shortest time between two fsyncs, in
    milliseconds, 1 … 60,000: the most a record waits, after it is written, to be durable."""

    record_identities: bool = False
    """Give every user record an identity in its tags (``aiokpl.id``: a producer id and a
    sequence number) so that consumers can drop copies with
    :class:`aiokpl.aggregation.Deduper`. Needs ``aggregation_enabled``. With a spool, a record
    replayed after a restart keeps its identity. See the dedupe page."""

    tracing: str = "off"
    """OpenTelemetry tracing (needs the ``otel`` extra). ``"off"``: none, and the put path is
    as without it. ``"context"``: each record carries the W3C trace context current where it
    is put (the caller's span) in a reserved tag (``aiokpl.trace``) of its aggregate, and
    every ``PutRecords`` attempt is a "send" span linked to the contexts of the records it
    carries. ``"create"``: as ``"context"``, and each record gets a "create" span of its own
    (a child of the caller's context, ending with the record's result), whose context the
    record carries. A record sent alone, outside an aggregate, has nowhere to carry its
    context. See the tracing page."""

    trace_max_links: int = 128
    """With ``tracing``, most links from one "send" span to the records it carries,
    0 … 1,000,000; the records past it are counted in the span's ``aiokpl.unlinked_records``
    attribute (OpenTelemetry's SDK keeps 128 links a span unless its limits say more)."""

    def __post_init__(self) -> None:
        for name, kind, low, high in _RULES:
            _check(name, getattr(self, name), kind, low, high)
        for name, allowed in _CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(
                    f"{name} must be one of {', '.join(map(repr, allowed))}; "
                    f"got {getattr(self, name)!r}"
                )
        if not 1 <= len(self.metrics_namespace) <= 255:
            raise ConfigError(
                f"metrics_namespace must be 1 … 255 characters; got {self.metrics_namespace!r}"
            )
        if self.http_backend not in _HTTP_BACKENDS:
            raise ConfigError(
                f"http_backend must be one of {', '.join(map(repr, _HTTP_BACKENDS))}; "
                f"got {self.http_backend!r}"
            )
        if self.max_outstanding_bytes < self.max_record_size:
            raise ConfigError(
                f"max_outstanding_bytes ({self.max_outstanding_bytes}) must be at least "
                f"max_record_size ({self.max_record_size}), or a largest record could never "
                "be accepted"
            )
        margin = _send_margin_ms(self)
        if self.record_ttl_ms <= self.record_max_buffered_time_ms + margin:
            raise ConfigError(
                f"record_ttl_ms ({self.record_ttl_ms}) must be greater than "
                f"record_max_buffered_time_ms ({self.record_max_buffered_time_ms}) plus "
                f"{margin:g} ms (the collector's grace and one drain_interval_ms), or a record "
                "that is not sent early for size would expire before it could be sent"
            )
        if self.on_record_failure is not None and not callable(self.on_record_failure):
            raise TypeError(
                "on_record_failure must be a callable taking a RecordResult (a function or an "
                f"async function), or None; got {type(self.on_record_failure).__name__}"
            )
        _check_ca_bundle(self)
        if (self.aws_access_key_id is None) != (self.aws_secret_access_key is None):
            raise ConfigError("aws_access_key_id and aws_secret_access_key must be given together")
        _check_spool(self)

    def replace(self, **changes: Any) -> Config:
        """A copy with ``changes`` applied, validated like a new ``Config``."""
        return dataclasses.replace(self, **changes)

    def __repr__(self) -> str:
        parts = []
        for field in fields(self):
            value = getattr(self, field.name)
            if value == field.default:
                continue
            if field.name in _SECRET_FIELDS and value is not None:
                shown = "'***'"
            elif callable(value):
                # A function's repr carries its address, which changes between runs.
                shown = getattr(value, "__qualname__", None) or type(value).__qualname__
            else:
                shown = repr(value)
            parts.append(f"{field.name}={shown}")
        return f"Config({', '.join(parts)})"

    __str__ = __repr__


def _check_path(name: str, value: object, none_means: str) -> None:
    """A path field (the rules table has no path kind): ``None``, or a non-empty ``str`` or
    ``os.PathLike`` of ``str``. Nothing is looked for on disk here."""
    if value is None:
        return
    if not isinstance(value, str | os.PathLike) or isinstance(os.fspath(value), bytes):
        raise TypeError(
            f"{name} must be a str or an os.PathLike of str (a pathlib.Path), or None; got "
            f"{type(value).__name__}"
        )
    if not os.fspath(value):
        raise ConfigError(f"{name} must not be empty (use None for {none_means})")


def _check_ca_bundle(config: Config) -> None:
    """The CA bundle: a path (its file is looked for when a client is opened), and only with
    verification on."""
    _check_path("ca_bundle", config.ca_bundle, "the default")
    if config.ca_bundle is not None and not config.verify_ssl:
        raise ConfigError(
            "ca_bundle is given with verify_ssl=False, which ignores it: keep verification on "
            "to use the bundle"
        )


def _check_spool(config: Config) -> None:
    """The spool's and the identities' fields."""
    _check_path("spool_directory", config.spool_directory, "no spool")
    if config.record_identities and not config.aggregation_enabled:
        raise ConfigError(
            "record_identities needs aggregation_enabled=True: the identity travels in the "
            "record's tags, which only an aggregate carries"
        )


def _send_margin_ms(config: Config) -> float:
    """What a record must have left to live, in ms, after its deadline, to be sent in time:
    the collector's grace (with aggregation) and one drain interval (see the limiter)."""
    buffered = config.record_max_buffered_time_ms
    grace = min(50.0, 0.2 * buffered) if config.aggregation_enabled else 0.0
    return grace + config.drain_interval_ms


_OPTIONAL_STR = "optional str"

# (field, kind, lowest allowed, highest allowed); bounds are inclusive.
_RULES: tuple[tuple[str, str, float, float], ...] = (
    ("region", _OPTIONAL_STR, 0, 0),
    ("endpoint_url", _OPTIONAL_STR, 0, 0),
    ("aws_access_key_id", _OPTIONAL_STR, 0, 0),
    ("aws_secret_access_key", _OPTIONAL_STR, 0, 0),
    ("aws_session_token", _OPTIONAL_STR, 0, 0),
    ("profile_name", _OPTIONAL_STR, 0, 0),
    ("verify_ssl", "bool", 0, 0),
    ("aggregation_enabled", "bool", 0, 0),
    ("aggregation_on_auto_streams", "bool", 0, 0),
    ("dry_run_check", "bool", 0, 0),
    ("fail_if_throttled", "bool", 0, 0),
    ("record_identities", "bool", 0, 0),
    ("trace_max_links", "int", 0, 1_000_000),
    ("spool_check_permissions", "bool", 0, 0),
    ("return_record_on_failure", "bool", 0, 0),
    ("aggregation_max_count", "int", 1, 4_294_967_295),
    ("aggregation_max_size", "int", 64, 1 * MiB),
    ("record_distribution_check_ms", "int", 1_000, 86_400_000),
    ("collection_max_count", "int", 1, 500),
    ("collection_max_size", "int", 52_224, 10 * MiB),
    ("record_max_buffered_time_ms", "int", 0, 86_400_000),
    ("record_ttl_ms", "int", 100, 86_400_000),
    # A record takes 1 record token and the bucket holds one second of the rate: below 1
    # record/s no record could ever be admitted. 1 byte/s is the matching floor for bytes.
    ("rate_limit_records_per_sec_per_shard", "float", 1.0, math.inf),
    ("rate_limit_bytes_per_sec_per_shard", "float", 1.0, math.inf),
    ("drain_interval_ms", "int", 1, 1_000),
    ("max_outstanding_records", "int", 1, 100_000_000),
    ("max_outstanding_bytes", "int", 1, 64 * 1024 * MiB),
    ("max_record_size", "int", 1, 10 * MiB),
    ("request_timeout_ms", "int", 100, 600_000),
    ("connect_timeout_ms", "int", 100, 300_000),
    ("max_connections", "int", 1, 256),
    ("metrics_namespace", "str", 0, 0),
    ("metrics_upload_interval_ms", "int", 1_000, 60_000),
    ("spool_fsync_interval_ms", "int", 1, 60_000),
)


def _check(name: str, value: object, kind: str, low: float, high: float) -> None:
    if kind == _OPTIONAL_STR:
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")
        if value == "":
            raise ConfigError(f"{name} must not be empty (use None for the default)")
        return
    if kind == "bool":
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
        return
    if kind == "str":
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, not {type(value).__name__}")
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (kind == "int" and not isinstance(value, int))
    ):
        raise TypeError(f"{name} must be an {kind}, not {type(value).__name__}")
    if not (low <= value <= high) or (kind == "float" and not math.isfinite(value)):
        span = f"at least {low:g} and finite" if kind == "float" else f"{low:,} … {high:,}"
        raise ConfigError(f"{name} must be {span}; got {value!r}")

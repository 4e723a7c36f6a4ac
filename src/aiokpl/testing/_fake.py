"""An in-process fake of Amazon Kinesis Data Streams, for tests.

:class:`FakeKinesis` has the methods of an aiobotocore Kinesis client that producers and simple
consumers call, takes the same keyword arguments, returns the same dictionaries, and raises the
same ``botocore.exceptions.ClientError`` for service errors (built by ``aiokpl._kinesis``, so
``error_of`` sees a fake error exactly as it sees a real one). Pass it wherever a client goes,
``Producer(config, client=fake)``, then read back what landed, throttle shards, reshard the
stream, or script failures.

What it models faithfully:

* **routing**: a record goes to the open shard whose hash-key range contains its explicit hash
  key, or else the MD5 of its partition key (big-endian, 0 … 2**128 - 1); new streams split the
  key space evenly, exactly as ``CreateStream`` does;
* **sequence numbers**: decimal strings of a fixed 56 digits without leading zeros, strictly
  increasing in the order records are stored, so string order is numeric order;
* **ListShards pagination**: ``ShardFilter`` types, ``MaxResults`` (default 1000, at most
  10000), ``NextToken`` valid for 300 seconds and only alone (with ``MaxResults`` at most): with
  ``StreamName``, ``StreamARN``, ``ShardFilter``, ``ExclusiveStartShardId`` or
  ``StreamCreationTimestamp`` it is an ``InvalidArgumentException``, as on the service;
* **DescribeStream pagination**: ``Limit`` 1 … 10000 (default 100), yet at most 100 shards a
  page, as the service answers; ``HasMoreShards`` says more remain, and the next page starts
  after ``ExclusiveStartShardId`` (shard id order); closed shards are listed, with their
  ending sequence numbers, as by the service (which lists them until they pass retention);
* **IAM denials**: :meth:`FakeKinesis.deny` makes an operation fail with
  ``AccessDeniedException`` until :meth:`FakeKinesis.allow`, as a policy without the
  permission does;
* **validation**: 1 … 500 records, partition keys of 1 … 256 UTF-16 code units, explicit hash keys
  in range, records within the stream's maximum record size (partition key plus data, 1 MiB
  unless raised), requests within 5 MiB; model constraints answer ``ValidationException``, the
  service's own rules ``InvalidArgumentException``; unknown streams and shards
  ``ResourceNotFoundException``;
* **throttling** (per stream, opt-in): every shard has an exact token bucket of records per
  second and bytes (partition key plus data) per second, 1000 and 1 MiB by default, holding
  ``burst_seconds`` of each; a record that does not fit fails with
  ``ProvisionedThroughputExceededException`` and is not stored, and the clock is
  ``anyio.current_time`` so under a virtual clock the limit is exact;
* **resharding**: ``SplitShard`` and ``MergeShards`` close their parents (which keep their
  records and get an ending sequence number) and open children with the next shard ids;
  ``GetRecords`` at the end of a closed shard returns no ``NextShardIterator`` and lists the
  ``ChildShards``; shard iterators expire after 300 seconds;
* **stream ARNs, one region, one account**: every call takes ``StreamARN`` as it takes
  ``StreamName``; the streams live in the fake's region and account, seen as through a client
  of that region: an ARN outside the service's pattern is a ``ValidationException``, one of
  another region ``ResourceNotFoundException``, one of another account
  ``AccessDeniedException`` (no resource policy grants it);
* **capacity modes**: a stream is ``PROVISIONED`` or ``ON_DEMAND`` (``DescribeStreamSummary``,
  ``DescribeStream``), with the same per-shard limits; :meth:`FakeKinesis.auto_reshard` stands
  in for the service's own scaling of an on-demand stream: it splits the hottest shard (and
  now and then merges the coldest pair) every few seconds of the fake's clock under load.

What it does not model: persistence (everything lives in this object), retention (records
never expire, so the trim horizon is the first record), enhanced fan-out
(``SubscribeToShard``, consumers), encryption, tags, the service's exact on-demand scaling
rules, resource policies (other accounts), transitional stream states (creating, deleting and
resharding are instantaneous), read throughput limits, and control-plane and account limits.
Where botocore itself refuses a request before sending it (a parameter of the wrong type,
missing or unknown), the fake raises ``TypeError``; like botocore's ``ParamValidationError`` it
is not a ``ClientError``.

Every call is logged in :attr:`FakeKinesis.requests`, passes exactly one checkpoint (or sleeps
:attr:`FakeKinesis.latency` seconds) before doing anything, so concurrent callers interleave as
they do with real I/O, then fails if its operation is denied (:meth:`FakeKinesis.deny`), then
consumes the earliest scripted fault that applies to it (faults may be scoped to one
stream), then the random ones of :attr:`FakeKinesis.faults`.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import math
import random
import re
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, NamedTuple

import anyio
import anyio.lowlevel

from .._core.hashing import MAX_HASH_KEY, hash_key_of, partition_key_length
from .._core.shards import ShardRange, ShardTable
from .._core.token_bucket import TokenBucket
from .._kinesis import arn_argument, client_error, stream_argument

__all__ = ("FakeKinesis", "FakeShard", "FaultPlan", "Request", "StoredRecord", "read_stream")

_ACCOUNT_ID = "123456789012"
_REGION = "us-east-1"
_ON_DEMAND = "ON_DEMAND"
_PROVISIONED = "PROVISIONED"

_OPERATIONS = frozenset(
    {
        "CreateStream",
        "DeleteStream",
        "DescribeStream",
        "DescribeStreamSummary",
        "GetRecords",
        "GetShardIterator",
        "ListShards",
        "MergeShards",
        "PutRecord",
        "PutRecords",
        "SplitShard",
        "UpdateMaxRecordSize",
    }
)

_MIB = 1024 * 1024
_DEFAULT_MAX_RECORD_SIZE = _MIB
_LARGEST_MAX_RECORD_SIZE = 10 * _MIB
_MAX_REQUEST_SIZE = 5 * _MIB
_MAX_RECORDS_PER_REQUEST = 500
_MAX_PARTITION_KEY_LENGTH = 256
_MAX_RESULTS_DEFAULT = 1000
_MAX_RESULTS_LIMIT = 10_000
_DESCRIBE_LIMIT_DEFAULT = 100
_DESCRIBE_LIMIT_MAX = 10_000
# DescribeStream accepts a Limit up to 10000 but answers at most 100 shards a page.
_DESCRIBE_PAGE_MAX = 100
_GET_RECORDS_LIMIT = 10_000
_GET_RECORDS_MAX_BYTES = 10 * _MIB
_TOKEN_LIFETIME = 300.0
_ON_DEMAND_SHARDS = 4

# 56 digits like the service's, starting "49", without leading zeros: string order is numeric
# order for as long as anyone will run a test.
_SEQUENCE_BASE = 49 * 10**54

_STREAM_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,128}")
_REGION_NAME = re.compile(r"[a-z]{2}(-[a-z]+)+-\d{1,2}")
# The service's own pattern for StreamARN (a request outside it is a ValidationException).
_STREAM_ARN_PATTERN = "arn:aws.*:kinesis:.*:\\d{12}:stream/\\S+"
_STREAM_ARN = re.compile(r"arn:aws.*:kinesis:.*:\d{12}:stream/\S+")
# The parts the fake resolves: partition, region, account, name.
_STREAM_ARN_PARTS = re.compile(r"arn:(aws[^:]*):kinesis:([^:]*):(\d{12}):stream/(\S+)")
_HASH_KEY = re.compile(r"0|[1-9][0-9]{0,38}")
_SEQUENCE_NUMBER = re.compile(r"0|[1-9][0-9]{0,128}")
_ITERATOR_TYPES = (
    "AT_SEQUENCE_NUMBER",
    "AFTER_SEQUENCE_NUMBER",
    "TRIM_HORIZON",
    "LATEST",
    "AT_TIMESTAMP",
)
_FILTER_TYPES = (
    "AFTER_SHARD_ID",
    "AT_TRIM_HORIZON",
    "FROM_TRIM_HORIZON",
    "AT_LATEST",
    "AT_TIMESTAMP",
    "FROM_TIMESTAMP",
)
_ENTRY_KEYS = ("Data", "ExplicitHashKey", "PartitionKey")

_stream_uids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record as the fake stored it.

    Attributes:
        stream: The stream name.
        shard_id: The shard the record was routed to.
        sequence_number: Its sequence number, as returned by ``PutRecords``.
        partition_key: The partition key it was put with.
        explicit_hash_key: The explicit hash key it was put with, or ``None``.
        data: The data blob.
        arrival_time: The fake's clock reading when the record was stored (seconds).
    """

    stream: str
    shard_id: str
    sequence_number: str
    partition_key: str
    explicit_hash_key: str | None
    data: bytes
    arrival_time: float


@dataclass(frozen=True, slots=True)
class FakeShard:
    """A snapshot of one shard of a fake stream.

    Attributes:
        shard_id: ``shardId-000000000000`` and so on, in creation order.
        starting_hash_key: The first hash key the shard owns.
        ending_hash_key: The last hash key the shard owns (inclusive).
        parent_shard_id: The shard it was split from, or the first of the two it was merged
            from; ``None`` for an original shard.
        adjacent_parent_shard_id: The second shard of a merge; ``None`` otherwise.
        starting_sequence_number: The shard's ``StartingSequenceNumber``.
        ending_sequence_number: The shard's ``EndingSequenceNumber``; ``None`` while it is open.
        record_count: How many records the shard holds.
        created_at: The fake's clock reading when the shard was created.
        closed_at: The clock reading when it was split or merged; ``None`` while it is open.

    ``hash_key in shard`` tells whether the shard's range contains an ``int`` hash key.
    """

    shard_id: str
    starting_hash_key: int
    ending_hash_key: int
    parent_shard_id: str | None
    adjacent_parent_shard_id: str | None
    starting_sequence_number: str
    ending_sequence_number: str | None
    record_count: int
    created_at: float = 0.0
    closed_at: float | None = None

    @property
    def is_open(self) -> bool:
        """Whether the shard accepts new records (it has not been split or merged)."""
        return self.ending_sequence_number is None

    def __contains__(self, hash_key: object) -> bool:
        return isinstance(hash_key, int) and (
            self.starting_hash_key <= hash_key <= self.ending_hash_key
        )


@dataclass(frozen=True)
class FaultPlan:
    """Random faults, drawn from ``random.Random(seed)``: the same seed fails the same calls.

    Assign one to :attr:`FakeKinesis.faults`; assigning restarts the random sequence. Scripted
    faults are consumed first, and a call or record they decide draws no random number.

    Attributes:
        record_failure_rate: The probability that a record of a ``PutRecords`` call fails with
            ``record_error`` (it is then not stored and takes no throughput).
        request_failure_rate: The probability that a call of one of ``operations`` raises a
            ``ClientError`` made from ``request_error``.
        seed: The seed of the random sequence.
        record_error: ``(code, message)`` of a failed record.
        request_error: ``(code, message, http_status)`` of a failed request.
        operations: The operations that ``request_failure_rate`` applies to.

    Raises:
        ValueError: A rate is not in 0 … 1, or an operation name is unknown.
    """

    record_failure_rate: float = 0.0
    request_failure_rate: float = 0.0
    seed: int = 0
    record_error: tuple[str, str] = ("InternalFailure", "Internal service failure.")
    request_error: tuple[str, str, int] = ("InternalFailure", "Internal service failure.", 500)
    operations: tuple[str, ...] = ("PutRecords",)

    def __post_init__(self) -> None:
        for name in ("record_failure_rate", "request_failure_rate"):
            rate = getattr(self, name)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"FaultPlan.{name} must be in 0 … 1, got {rate!r}")
        for operation in self.operations:
            _check_operation(operation)


class Request(NamedTuple):
    """One call made to a :class:`FakeKinesis`, as logged in :attr:`FakeKinesis.requests`.

    Attributes:
        operation: The API operation name, e.g. ``"PutRecords"``.
        kwargs: The keyword arguments the caller passed, without those left at ``None``
            (botocore never sends a ``None``). Values are the caller's objects, not copies.
    """

    operation: str
    kwargs: dict[str, Any]


class _Rejected(Exception):
    """A service error, raised by the model and turned into a ``ClientError`` at the edge."""

    def __init__(self, code: str, message: str, http_status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.http_status = http_status


class _Shard:
    __slots__ = (
        "adjacent_parent",
        "bucket",
        "closed_at",
        "created_at",
        "end",
        "ending_sequence",
        "parent",
        "records",
        "sequences",
        "shard_id",
        "start",
        "starting_sequence",
    )

    def __init__(
        self,
        shard_id: str,
        start: int,
        end: int,
        starting_sequence: int,
        created_at: float,
        bucket: TokenBucket | None,
        parent: str | None = None,
        adjacent_parent: str | None = None,
    ) -> None:
        self.shard_id = shard_id
        self.start = start
        self.end = end
        self.parent = parent
        self.adjacent_parent = adjacent_parent
        self.starting_sequence = starting_sequence
        self.ending_sequence: int | None = None
        self.created_at = created_at
        self.closed_at: float | None = None
        self.bucket = bucket
        self.records: list[StoredRecord] = []
        self.sequences: list[int] = []

    def describe(self) -> dict[str, Any]:
        shard: dict[str, Any] = {"ShardId": self.shard_id}
        if self.parent is not None:
            shard["ParentShardId"] = self.parent
        if self.adjacent_parent is not None:
            shard["AdjacentParentShardId"] = self.adjacent_parent
        shard["HashKeyRange"] = {
            "StartingHashKey": str(self.start),
            "EndingHashKey": str(self.end),
        }
        sequence_range = {"StartingSequenceNumber": _sequence_str(self.starting_sequence)}
        if self.ending_sequence is not None:
            sequence_range["EndingSequenceNumber"] = _sequence_str(self.ending_sequence)
        shard["SequenceNumberRange"] = sequence_range
        return shard

    def snapshot(self) -> FakeShard:
        return FakeShard(
            shard_id=self.shard_id,
            starting_hash_key=self.start,
            ending_hash_key=self.end,
            parent_shard_id=self.parent,
            adjacent_parent_shard_id=self.adjacent_parent,
            starting_sequence_number=_sequence_str(self.starting_sequence),
            ending_sequence_number=(
                None if self.ending_sequence is None else _sequence_str(self.ending_sequence)
            ),
            record_count=len(self.records),
            created_at=self.created_at,
            closed_at=self.closed_at,
        )


@dataclass(frozen=True)
class _Throttle:
    records_per_second: float
    bytes_per_second: float
    burst_seconds: float

    def bucket(self) -> TokenBucket:
        return TokenBucket(
            [
                (self.records_per_second, self.records_per_second * self.burst_seconds),
                (self.bytes_per_second, self.bytes_per_second * self.burst_seconds),
            ]
        )


class _Stream:
    __slots__ = (
        "account",
        "arn",
        "autoscale",
        "created_at",
        "max_record_size",
        "mode",
        "name",
        "next_shard_index",
        "open_table",
        "shards",
        "throttle",
        "uid",
    )

    def __init__(
        self,
        name: str,
        created_at: float,
        throttle: _Throttle | None,
        max_record_size: int,
        mode: str,
        account: str,
        region: str,
    ) -> None:
        self.name = name
        self.account = account
        self.arn = f"arn:{_partition_of(region)}:kinesis:{region}:{account}:stream/{name}"
        self.autoscale: _Autoscale | None = None
        self.uid = next(_stream_uids)
        self.created_at = created_at
        self.throttle = throttle
        self.max_record_size = max_record_size
        self.mode = mode
        self.shards: dict[str, _Shard] = {}
        self.next_shard_index = 0
        self.open_table = ShardTable()

    def new_shard(
        self,
        start: int,
        end: int,
        sequence: int,
        now: float,
        parent: str | None = None,
        adjacent_parent: str | None = None,
    ) -> _Shard:
        shard_id = f"shardId-{self.next_shard_index:012d}"
        self.next_shard_index += 1
        bucket = None if self.throttle is None else self.throttle.bucket()
        shard = _Shard(shard_id, start, end, sequence, now, bucket, parent, adjacent_parent)
        self.shards[shard_id] = shard
        return shard

    def close(self, shard: _Shard, sequence: int, now: float) -> None:
        shard.ending_sequence = sequence
        shard.closed_at = now

    def reindex(self) -> None:
        self.open_table = ShardTable(
            ShardRange(s.shard_id, s.start, s.end)
            for s in self.shards.values()
            if s.ending_sequence is None
        )

    def route(self, hash_key: int) -> _Shard:
        shard_id = self.open_table.lookup(hash_key)
        # The open shards always cover the whole key space: split and merge keep it so.
        assert shard_id is not None
        return self.shards[shard_id]

    def shard(self, shard_id: str) -> _Shard:
        shard = self.shards.get(shard_id)
        if shard is None:
            raise _Rejected(
                "ResourceNotFoundException",
                f"Shard {shard_id} in stream {self.name} under account {self.account} "
                "does not exist",
            )
        return shard


class _Autoscale:
    """The automatic resharding of one stream (see :meth:`FakeKinesis.auto_reshard`)."""

    __slots__ = ("events", "every", "marks", "max_open", "merge_every", "min_open", "next_at")

    def __init__(
        self, every: float, merge_every: int, min_open: int, max_open: int, now: float
    ) -> None:
        self.every = every
        self.merge_every = merge_every
        self.min_open = min_open
        self.max_open = max_open
        self.next_at = now + every
        self.events = 0
        # Records each shard held at the last reshard: its load since is the difference.
        self.marks: dict[str, int] = {}


class FakeKinesis:
    """An in-memory Kinesis Data Streams service with the interface of an aiobotocore client.

    Set it up with the synchronous helpers (:meth:`add_stream`, :meth:`split`, :meth:`merge`,
    :meth:`remove_stream`), or through the API as a real client would (``create_stream``,
    ``split_shard`` …). Every API method is a coroutine taking botocore's keyword arguments and
    returning botocore's response dictionary (including a ``ResponseMetadata``); service errors
    are raised as ``botocore.exceptions.ClientError`` with the service's code, message and HTTP
    status. Streams live in one account and one region (``123456789012``, ``us-east-1`` unless
    told otherwise), as seen through a client of that region: a ``StreamARN`` of another region
    is not found (``ResourceNotFoundException``), one of another account is not authorized
    (``AccessDeniedException``: no resource policy grants it), and one that does not match the
    service's pattern is a ``ValidationException``. See the module documentation for what is
    and is not modelled.

    Example:
        ```python
        from aiokpl import Config, Producer
        from aiokpl.testing import FakeKinesis

        fake = FakeKinesis()
        fake.add_stream("events", shard_count=4, throttle=True)
        config = Config(region="us-east-1", aggregation_enabled=False)
        async with Producer(config, client=fake) as producer:
            for i in range(1000):
                await producer.put_record(stream="events", partition_key=str(i), data=b"x")
        assert len(fake.stored_records("events")) == 1000
        ```

    Args:
        clock: Returns the current time in seconds; it stamps records, drives throttling and
            expires iterators and pagination tokens. Defaults to ``anyio.current_time``, so a
            virtual clock makes throttling exact. Readings are shown as seconds since the Unix
            epoch wherever the API returns a datetime.
        region: The region of the streams (and of the client the fake stands for).
        account_id: The 12-digit account that owns the streams.

    Raises:
        ValueError: ``account_id`` is not 12 digits, or ``region`` is not a region name.

    Attributes:
        requests: Every call made, in order, as :class:`Request` ``(operation, kwargs)``
            tuples. Clear it freely.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] | None = None,
        region: str = _REGION,
        account_id: str = _ACCOUNT_ID,
    ) -> None:
        if not isinstance(account_id, str) or re.fullmatch(r"\d{12}", account_id) is None:
            raise ValueError(f"account_id must be 12 digits, got {account_id!r}")
        if not isinstance(region, str) or _REGION_NAME.fullmatch(region) is None:
            raise ValueError(f"region must be a region name such as 'us-east-1', got {region!r}")
        self._clock: Callable[[], float] = anyio.current_time if clock is None else clock
        self._region = region
        self._account = account_id
        self._streams: dict[str, _Stream] = {}
        self._sequence = 0
        self._request_ids = itertools.count(1)
        self._latency = 0.0
        self._request_faults: dict[str, deque[_ScriptedFault]] = {}
        self._record_scripts: deque[list[tuple[str, str] | None]] = deque()
        self._denied: dict[str, tuple[str, str | None, int]] = {}
        self._faults = FaultPlan()
        self._random = random.Random(self._faults.seed)
        self._operation = ""  # of the call being served, for messages
        self.requests: list[Request] = []

    def __repr__(self) -> str:
        records = sum(
            len(shard.records)
            for stream in self._streams.values()
            for shard in stream.shards.values()
        )
        return (
            f"<FakeKinesis streams={len(self._streams)} records={records} "
            f"requests={len(self.requests)}>"
        )

    # -- settings ----------------------------------------------------------------------------

    @property
    def region(self) -> str:
        """The region of the fake's streams, as given to the constructor."""
        return self._region

    @property
    def account_id(self) -> str:
        """The account that owns the fake's streams, as given to the constructor."""
        return self._account

    @property
    def latency(self) -> float:
        """Seconds every call sleeps (``anyio.sleep``) before it is served; default 0.

        Raises:
            ValueError: On assignment of a negative or non-finite number.
        """
        return self._latency

    @latency.setter
    def latency(self, seconds: float) -> None:
        if not 0.0 <= seconds < math.inf:
            raise ValueError(f"latency must be a finite number of seconds >= 0, got {seconds!r}")
        self._latency = float(seconds)

    @property
    def faults(self) -> FaultPlan:
        """The random faults in force; assigning a :class:`FaultPlan` restarts its sequence."""
        return self._faults

    @faults.setter
    def faults(self, plan: FaultPlan) -> None:
        self._faults = plan
        self._random = random.Random(plan.seed)

    # -- setup helpers -----------------------------------------------------------------------

    def add_stream(
        self,
        name: str,
        shard_count: int = 1,
        *,
        throttle: bool = False,
        records_per_second: float = 1000.0,
        bytes_per_second: float = 1048576.0,
        burst_seconds: float = 1.0,
        max_record_size: int = _DEFAULT_MAX_RECORD_SIZE,
        on_demand: bool = False,
    ) -> None:
        """Create an active stream whose shards split the hash-key space evenly.

        Args:
            name: The stream name (1 … 128 characters of ``a-z A-Z 0-9 _ . -``).
            shard_count: How many shards; ids are ``shardId-000000000000`` onwards.
            throttle: Whether each shard enforces ``records_per_second`` and
                ``bytes_per_second`` (partition key plus data). Shards created later by
                resharding inherit the setting, each with its own full bucket.
            records_per_second: The per-shard record rate when throttling.
            bytes_per_second: The per-shard byte rate when throttling.
            burst_seconds: How many seconds of each rate a shard can absorb at once; each
                bucket holds ``rate * burst_seconds`` and starts full.
            max_record_size: The stream's limit on partition key plus data, in bytes, at most
                10 MiB (the service's ``MaxRecordSizeInKiB`` times 1024).
            on_demand: Whether the stream is in on-demand capacity mode
                (``StreamModeDetails.StreamMode`` is ``ON_DEMAND`` in ``DescribeStream`` and
                ``DescribeStreamSummary``) rather than provisioned. Its shards keep their
                per-shard limits either way; add :meth:`auto_reshard` for the resharding the
                service does on its own as an on-demand stream's traffic changes.

        Raises:
            ValueError: The name is invalid or taken, or a number is out of range.
        """
        if _STREAM_NAME.fullmatch(name) is None:
            raise ValueError(
                f"stream name must be 1 … 128 characters of a-z A-Z 0-9 _ . -, got {name!r}"
            )
        if name in self._streams:
            raise ValueError(f"stream {name!r} already exists")
        if shard_count < 1:
            raise ValueError(f"shard_count must be at least 1, got {shard_count!r}")
        for label, value in (
            ("records_per_second", records_per_second),
            ("bytes_per_second", bytes_per_second),
            ("burst_seconds", burst_seconds),
        ):
            if not 0.0 < value < math.inf:
                raise ValueError(f"{label} must be a positive finite number, got {value!r}")
        if not 1 <= max_record_size <= _LARGEST_MAX_RECORD_SIZE:
            raise ValueError(
                f"max_record_size must be 1 … {_LARGEST_MAX_RECORD_SIZE} bytes, "
                f"got {max_record_size!r}"
            )
        limits = (
            _Throttle(records_per_second, bytes_per_second, burst_seconds) if throttle else None
        )
        mode = _ON_DEMAND if on_demand else _PROVISIONED
        self._create(name, shard_count, limits, max_record_size, mode)

    def auto_reshard(
        self,
        stream: str,
        *,
        every_seconds: float = 3.0,
        merge_every: int = 3,
        min_open_shards: int = 1,
        max_open_shards: int = 64,
    ) -> None:
        """Reshard ``stream`` on its own under load, as the service scales an on-demand stream.

        Once ``every_seconds`` have passed on the fake's clock since the last reshard (or since
        this call), the next ``PutRecords`` or ``PutRecord`` to the stream first reshards it,
        provided records were stored since the last reshard: it splits the open shard that
        stored the most since then, at the middle of its hash-key range; every
        ``merge_every``-th reshard it instead merges the adjacent pair of open shards that
        stored the least (so the stream both grows and shrinks, and parents of both kinds
        appear). It never goes above ``max_open_shards`` (it merges instead) nor below
        ``min_open_shards`` (it splits instead). Resharding is instantaneous, as with
        :meth:`split` and :meth:`merge`; :meth:`shards` shows each shard's ``created_at`` and
        ``closed_at``, so a test can tell when each reshard happened. The service's own
        on-demand scaling is not documented in this detail: this is a stand-in, frequent
        enough to exercise a producer's reaction to resharding.

        Args:
            stream: The stream name (or ARN).
            every_seconds: Seconds between two reshards, at least.
            merge_every: Every how many reshards one is a merge; 0 never merges.
            min_open_shards: The fewest open shards merging may leave.
            max_open_shards: The most open shards splitting may make.

        Raises:
            ValueError: The stream does not exist, or a number is out of range.
        """
        state = self._setup_stream(stream)
        if not 0.0 < every_seconds < math.inf:
            raise ValueError(f"every_seconds must be a positive number, got {every_seconds!r}")
        if merge_every < 0:
            raise ValueError(f"merge_every must be >= 0, got {merge_every!r}")
        if not 1 <= min_open_shards <= max_open_shards:
            raise ValueError(
                "need 1 <= min_open_shards <= max_open_shards, got "
                f"{min_open_shards!r} and {max_open_shards!r}"
            )
        autoscale = _Autoscale(
            every_seconds, merge_every, min_open_shards, max_open_shards, self._setup_now()
        )
        autoscale.marks = {shard_id: len(s.records) for shard_id, s in state.shards.items()}
        state.autoscale = autoscale

    def _auto_reshard(self, stream: _Stream, autoscale: _Autoscale, now: float) -> None:
        marks = autoscale.marks
        open_shards = sorted(
            (shard for shard in stream.shards.values() if shard.ending_sequence is None),
            key=lambda shard: shard.start,
        )
        load = {
            shard.shard_id: len(shard.records) - marks.get(shard.shard_id, 0)
            for shard in open_shards
        }
        if not any(load.values()):
            return  # no load since the last reshard: nothing to scale for
        autoscale.events += 1
        autoscale.next_at = now + autoscale.every
        count = len(open_shards)
        merge = (
            autoscale.merge_every > 0 and autoscale.events % autoscale.merge_every == 0
        ) or count >= autoscale.max_open
        if count <= autoscale.min_open:
            merge = False
        if merge and count >= 2:
            pairs = list(itertools.pairwise(open_shards))
            first, second = min(pairs, key=lambda p: load[p[0].shard_id] + load[p[1].shard_id])
            self._merge(stream, first.shard_id, second.shard_id)
        else:
            hottest = max(open_shards, key=lambda shard: (load[shard.shard_id], -shard.start))
            if hottest.end > hottest.start:
                self._split(stream, hottest.shard_id, (hottest.start + hottest.end + 1) // 2)
        autoscale.marks = {shard_id: len(s.records) for shard_id, s in stream.shards.items()}

    def remove_stream(self, name: str) -> None:
        """Delete a stream at once, as if someone deleted it while you were using it.

        Later calls naming it fail with ``ResourceNotFoundException``, and so do iterators and
        pagination tokens issued for it, even if a stream of the same name is created again.

        Raises:
            ValueError: There is no such stream.
        """
        self._setup_stream(name)
        del self._streams[name]

    def split(self, stream: str, shard_id: str, new_starting_hash_key: int) -> tuple[str, str]:
        """Split an open shard in two, as ``SplitShard`` does.

        The parent is closed (it keeps its records and gets an ending sequence number). The
        children get the next two shard ids: the first owns the parent's keys below
        ``new_starting_hash_key``, the second the rest.

        Returns:
            The ids of the lower and the upper child.

        Raises:
            ValueError: The stream or shard does not exist, the shard is closed, or the key is
                not above the shard's starting hash key and within its range.
        """
        try:
            return self._split(self._setup_stream(stream), shard_id, new_starting_hash_key)
        except _Rejected as rejected:
            raise ValueError(rejected.message) from None

    def merge(self, stream: str, shard_id: str, adjacent_shard_id: str) -> str:
        """Merge two open shards with adjacent ranges, as ``MergeShards`` does.

        Both parents are closed; the child gets the next shard id, ``ParentShardId`` =
        ``shard_id`` and ``AdjacentParentShardId`` = ``adjacent_shard_id``.

        Returns:
            The id of the child shard.

        Raises:
            ValueError: A shard does not exist or is closed, or the ranges are not adjacent.
        """
        try:
            return self._merge(self._setup_stream(stream), shard_id, adjacent_shard_id)
        except _Rejected as rejected:
            raise ValueError(rejected.message) from None

    def stream_arn(self, name: str) -> str:
        """The ARN of stream ``name`` in the fake's region and account (it need not exist)."""
        partition = _partition_of(self._region)
        return f"arn:{partition}:kinesis:{self._region}:{self._account}:stream/{name}"

    # -- scripted faults ---------------------------------------------------------------------

    def fail_requests(
        self,
        count: int = 1,
        *,
        code: str = "InternalFailure",
        message: str = "Internal service failure.",
        http_status: int = 500,
        operation: str = "PutRecords",
        stream: str | None = None,
    ) -> None:
        """Make the next ``count`` calls of ``operation`` raise a ``ClientError``.

        The calls do nothing else (nothing is stored). Faults scripted for one operation with
        this method and :meth:`raise_next` are consumed in the order they were scripted: each
        call takes the earliest one that applies to it.

        With ``stream``, only calls naming that stream (by ``StreamName`` or ``StreamARN``)
        fail; calls to other streams pass these faults by untouched, so one stream can fail
        while the others work. Calls that name no stream (``ListShards`` with ``NextToken``,
        ``GetRecords``) never match a stream's faults. A large ``count`` costs no memory:
        ``fail_requests(10**9, stream="a")`` fails stream ``a`` for the rest of a test.

        Args:
            count: How many calls fail.
            code: The error code, e.g. ``"ProvisionedThroughputExceededException"``.
            message: The error message.
            http_status: The HTTP status of the error response.
            operation: The API operation name, e.g. ``"ListShards"``.
            stream: Fail only calls to this stream (its name or ARN); ``None`` for any call.

        Raises:
            ValueError: ``count`` is negative, the operation is unknown, or ``stream`` is
                neither a stream name nor a stream ARN.
        """
        _check_operation(operation)
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count!r}")
        scope = _fault_stream(stream)

        def make() -> BaseException:
            error: BaseException = client_error(code, message, operation, http_status=http_status)
            return error

        self._script_fault(operation, _ScriptedFault(make, False, scope, count))

    def raise_next(
        self,
        exc: BaseException,
        operation: str = "PutRecords",
        *,
        after_processing: bool = False,
        stream: str | None = None,
    ) -> None:
        """Make the next call of ``operation`` raise ``exc`` as it is.

        Use it for transport failures: ``ConnectionResetError()``, ``TimeoutError()``, or an
        exception of your HTTP client.

        Args:
            exc: The exception to raise.
            operation: The API operation name.
            after_processing: If true, the call is served first (records are stored) and the
                exception replaces its response: the response was lost on the way back.
            stream: Only the next call to this stream (its name or ARN) raises, as with
                :meth:`fail_requests`; ``None`` for the next call whatever its stream.

        Raises:
            ValueError: The operation is unknown, or ``stream`` is neither a stream name nor
                a stream ARN.
        """
        _check_operation(operation)
        scope = _fault_stream(stream)
        self._script_fault(operation, _ScriptedFault(lambda: exc, after_processing, scope, 1))

    def _script_fault(self, operation: str, fault: _ScriptedFault) -> None:
        if fault.remaining:
            self._request_faults.setdefault(operation, deque()).append(fault)

    def deny(
        self,
        operation: str,
        *,
        code: str = "AccessDeniedException",
        message: str | None = None,
        http_status: int = 400,
    ) -> None:
        """Make every later call of ``operation`` fail, until :meth:`allow`: an IAM denial.

        Unlike :meth:`fail_requests`, which fails a number of calls, this lasts: the way an
        IAM policy without the operation's permission answers every call. A denied call is
        logged in :attr:`requests` and passes its checkpoint (or latency), then fails before
        anything else: it consumes no scripted fault and draws no random number.

        Args:
            operation: The API operation name, e.g. ``"ListShards"``.
            code: The error code; the service's for a missing permission by default.
            message: The error message; by default the service's, naming the permission
                (``kinesis:<operation>``) and the stream.
            http_status: The HTTP status of the error response.

        Raises:
            ValueError: The operation is unknown.
        """
        _check_operation(operation)
        self._denied[operation] = (code, message, http_status)

    def allow(self, operation: str) -> None:
        """Stop denying ``operation`` (see :meth:`deny`); nothing happens if it was not denied.

        Raises:
            ValueError: The operation is unknown.
        """
        _check_operation(operation)
        self._denied.pop(operation, None)

    def script_records(self, outcomes: Sequence[tuple[str, str] | None]) -> None:
        """Decide the fate of the records of the next ``PutRecords`` call that is served.

        Each call of this method scripts one more call. ``outcomes`` is aligned with that
        call's records: ``None`` processes the record normally (routing, throttling, random
        faults), ``(code, message)`` fails it with that error. Records past the end of
        ``outcomes`` are processed normally; extra outcomes are ignored. A call that fails as
        a whole (a request fault or a validation error) does not consume a script.

        Raises:
            ValueError: An outcome is neither ``None`` nor a ``(code, message)`` pair of
                strings.
        """
        script: list[tuple[str, str] | None] = []
        for outcome in outcomes:
            if outcome is not None and not (
                isinstance(outcome, tuple)
                and len(outcome) == 2
                and all(isinstance(part, str) for part in outcome)
            ):
                raise ValueError(f"an outcome is None or (code, message), got {outcome!r}")
            script.append(outcome)
        self._record_scripts.append(script)

    # -- read-back ---------------------------------------------------------------------------

    def stored_records(self, stream: str, shard_id: str | None = None) -> list[StoredRecord]:
        """The records a stream holds, in the order they were stored.

        Args:
            stream: The stream name.
            shard_id: Only this shard's records (closed shards keep theirs).

        Raises:
            ValueError: The stream or shard does not exist.
        """
        state = self._setup_stream(stream)
        if shard_id is not None:
            try:
                return list(state.shard(shard_id).records)
            except _Rejected as rejected:
                raise ValueError(rejected.message) from None
        records = [record for shard in state.shards.values() for record in shard.records]
        records.sort(key=lambda record: record.sequence_number)
        return records

    def shards(self, stream: str) -> list[FakeShard]:
        """Every shard of a stream, open and closed, in shard id order.

        Raises:
            ValueError: The stream does not exist.
        """
        return [shard.snapshot() for shard in self._setup_stream(stream).shards.values()]

    def calls(self, operation: str) -> int:
        """How many calls of ``operation`` :attr:`requests` holds."""
        return sum(1 for request in self.requests if request.operation == operation)

    # -- client lifecycle --------------------------------------------------------------------

    async def __aenter__(self) -> FakeKinesis:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    async def close(self) -> None:
        """Do nothing, like closing a client that holds no connections."""

    # -- the API -----------------------------------------------------------------------------

    async def create_stream(
        self,
        *,
        StreamName: str,
        ShardCount: int | None = None,
        StreamModeDetails: Mapping[str, str] | None = None,
        MaxRecordSizeInKiB: int | None = None,
    ) -> dict[str, Any]:
        """Create a stream, active at once, like ``CreateStream``.

        Without ``ShardCount``, an ``ON_DEMAND`` stream starts with 4 shards. Streams created
        here are not throttled; use :meth:`add_stream` for that.

        Raises:
            botocore.exceptions.ClientError: ``ResourceInUseException`` if the name is taken,
                ``ValidationException`` for a bad name or number, ``InvalidArgumentException``
                for a provisioned stream without ``ShardCount``.
        """
        return await self._call(
            "CreateStream",
            self._create_stream,
            StreamName=StreamName,
            ShardCount=ShardCount,
            StreamModeDetails=StreamModeDetails,
            MaxRecordSizeInKiB=MaxRecordSizeInKiB,
        )

    async def delete_stream(
        self,
        *,
        StreamName: str | None = None,
        StreamARN: str | None = None,
        EnforceConsumerDeletion: bool | None = None,
    ) -> dict[str, Any]:
        """Delete a stream at once, like ``DeleteStream``.

        Raises:
            botocore.exceptions.ClientError: ``ResourceNotFoundException`` for an unknown
                stream.
        """
        return await self._call(
            "DeleteStream",
            self._delete_stream,
            StreamName=StreamName,
            StreamARN=StreamARN,
            EnforceConsumerDeletion=EnforceConsumerDeletion,
        )

    async def describe_stream(
        self,
        *,
        StreamName: str | None = None,
        Limit: int | None = None,
        ExclusiveStartShardId: str | None = None,
        StreamARN: str | None = None,
    ) -> dict[str, Any]:
        """Describe a stream and a page of its shards, like ``DescribeStream``.

        ``StreamDescription.Shards`` lists every shard, closed ones included (with their
        ``EndingSequenceNumber``), in shard id order, starting after ``ExclusiveStartShardId``
        if given. ``Limit`` may be 1 … 10000 (default 100), but a page holds at most 100
        shards, as on the service; ``HasMoreShards`` is true when more remain: ask again with
        the last shard id as ``ExclusiveStartShardId``. ``StreamStatus`` is ``ACTIVE``
        (resharding is instantaneous here).

        Raises:
            botocore.exceptions.ClientError: ``ResourceNotFoundException`` for an unknown
                stream, ``ValidationException`` for a ``Limit`` outside 1 … 10000 or a bad
                name, ``InvalidArgumentException`` without a stream name or ARN.
        """
        return await self._call(
            "DescribeStream",
            self._describe_stream,
            StreamName=StreamName,
            Limit=Limit,
            ExclusiveStartShardId=ExclusiveStartShardId,
            StreamARN=StreamARN,
        )

    async def describe_stream_summary(
        self, *, StreamName: str | None = None, StreamARN: str | None = None
    ) -> dict[str, Any]:
        """Describe a stream, like ``DescribeStreamSummary``.

        Raises:
            botocore.exceptions.ClientError: ``ResourceNotFoundException`` for an unknown
                stream.
        """
        return await self._call(
            "DescribeStreamSummary",
            self._describe_stream_summary,
            StreamName=StreamName,
            StreamARN=StreamARN,
        )

    async def update_max_record_size(
        self, *, MaxRecordSizeInKiB: int, StreamARN: str | None = None
    ) -> dict[str, Any]:
        """Change a stream's maximum record size, like ``UpdateMaxRecordSize``.

        Raises:
            botocore.exceptions.ClientError: ``ValidationException`` for a size outside
                1024 … 10240 KiB, ``ResourceNotFoundException`` for an unknown stream.
        """
        return await self._call(
            "UpdateMaxRecordSize",
            self._update_max_record_size,
            MaxRecordSizeInKiB=MaxRecordSizeInKiB,
            StreamARN=StreamARN,
        )

    async def list_shards(
        self,
        *,
        StreamName: str | None = None,
        StreamARN: str | None = None,
        NextToken: str | None = None,
        ExclusiveStartShardId: str | None = None,
        MaxResults: int | None = None,
        StreamCreationTimestamp: datetime | float | None = None,
        ShardFilter: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """List shards a page at a time, like ``ListShards``.

        Pages hold at most ``MaxResults`` shards (default 1000, at most 10000), in shard id
        order; when more remain the response has a ``NextToken``, valid for 300 seconds, which
        must then be passed alone (``MaxResults`` allowed). Without ``ShardFilter`` every
        shard is listed, closed ones included; ``AT_LATEST`` lists open shards only;
        ``AT_TRIM_HORIZON`` and ``FROM_TRIM_HORIZON`` list all (nothing expires here);
        ``AFTER_SHARD_ID`` is ``ExclusiveStartShardId``; ``AT_TIMESTAMP`` lists the shards
        open at ``Timestamp`` and ``FROM_TIMESTAMP`` those open at or after it.
        ``StreamCreationTimestamp`` is accepted and otherwise ignored.

        Raises:
            botocore.exceptions.ClientError: ``InvalidArgumentException`` when ``NextToken``
                comes with another argument than ``MaxResults``, or is not a token;
                ``ExpiredNextTokenException`` after 300 seconds; ``ResourceNotFoundException``
                for an unknown stream; ``ValidationException`` for a bad ``MaxResults`` or
                filter type.
        """
        return await self._call(
            "ListShards",
            self._list_shards,
            StreamName=StreamName,
            StreamARN=StreamARN,
            NextToken=NextToken,
            ExclusiveStartShardId=ExclusiveStartShardId,
            MaxResults=MaxResults,
            StreamCreationTimestamp=StreamCreationTimestamp,
            ShardFilter=ShardFilter,
        )

    async def put_records(
        self,
        *,
        Records: Sequence[Mapping[str, Any]],
        StreamName: str | None = None,
        StreamARN: str | None = None,
    ) -> dict[str, Any]:
        """Put up to 500 records, like ``PutRecords``.

        Each record is routed, throttled and stored on its own; the response's ``Records``
        are aligned with the request's: ``{"SequenceNumber", "ShardId"}`` for a stored record,
        ``{"ErrorCode", "ErrorMessage"}`` for a failed one, counted in ``FailedRecordCount``.

        Raises:
            botocore.exceptions.ClientError: ``ValidationException`` for a request outside the
                API's constraints (0 or over 500 records, a partition key of 0 or over 256
                characters, a malformed explicit hash key, data over 10 MiB),
                ``InvalidArgumentException`` for an explicit hash key over 2**128 - 1, a record
                over the stream's maximum record size, or a request over 5 MiB;
                ``ResourceNotFoundException`` for an unknown stream; and anything scripted.
            TypeError: A parameter botocore would refuse to send (wrong type, missing or
                unknown key).
        """
        return await self._call(
            "PutRecords",
            self._put_records,
            Records=Records,
            StreamName=StreamName,
            StreamARN=StreamARN,
        )

    async def put_record(
        self,
        *,
        PartitionKey: str,
        Data: bytes | bytearray | str,
        StreamName: str | None = None,
        StreamARN: str | None = None,
        ExplicitHashKey: str | None = None,
        SequenceNumberForOrdering: str | None = None,
    ) -> dict[str, Any]:
        """Put one record, like ``PutRecord``.

        ``SequenceNumberForOrdering`` is checked for form only: sequence numbers here always
        increase anyway.

        Raises:
            botocore.exceptions.ClientError: as :meth:`put_records` for the request, and
                ``ProvisionedThroughputExceededException`` when the record is throttled.
            TypeError: A parameter botocore would refuse to send.
        """
        return await self._call(
            "PutRecord",
            self._put_record,
            PartitionKey=PartitionKey,
            Data=Data,
            StreamName=StreamName,
            StreamARN=StreamARN,
            ExplicitHashKey=ExplicitHashKey,
            SequenceNumberForOrdering=SequenceNumberForOrdering,
        )

    async def get_shard_iterator(
        self,
        *,
        ShardId: str,
        ShardIteratorType: str,
        StreamName: str | None = None,
        StreamARN: str | None = None,
        StartingSequenceNumber: str | None = None,
        Timestamp: datetime | float | None = None,
    ) -> dict[str, Any]:
        """Get an iterator into a shard, like ``GetShardIterator``.

        ``TRIM_HORIZON`` starts at the shard's first record, ``LATEST`` after its last one,
        ``AT_SEQUENCE_NUMBER``/``AFTER_SEQUENCE_NUMBER`` at/after ``StartingSequenceNumber``,
        ``AT_TIMESTAMP`` at the first record that arrived at or after ``Timestamp``.

        Raises:
            botocore.exceptions.ClientError: ``ResourceNotFoundException`` for an unknown
                stream or shard, ``ValidationException`` for an unknown iterator type or a
                malformed sequence number, ``InvalidArgumentException`` for a missing or
                foreign sequence number or a missing timestamp.
        """
        return await self._call(
            "GetShardIterator",
            self._get_shard_iterator,
            ShardId=ShardId,
            ShardIteratorType=ShardIteratorType,
            StreamName=StreamName,
            StreamARN=StreamARN,
            StartingSequenceNumber=StartingSequenceNumber,
            Timestamp=Timestamp,
        )

    async def get_records(
        self, *, ShardIterator: str, Limit: int | None = None, StreamARN: str | None = None
    ) -> dict[str, Any]:
        """Read records from a shard iterator, like ``GetRecords``.

        Returns at most ``Limit`` records (default and maximum 10000) and at most 10 MiB of
        data (at least one record), with ``NextShardIterator`` (absent once a closed shard is
        read to its end, when ``ChildShards`` lists its children instead) and
        ``MillisBehindLatest``: how old the first record not returned is, 0 when caught up.
        Each record has ``SequenceNumber``, ``ApproximateArrivalTimestamp`` (a UTC datetime of
        the clock reading), ``Data`` and ``PartitionKey``, as from the service.

        Raises:
            botocore.exceptions.ClientError: ``ExpiredIteratorException`` for an iterator
                older than 300 seconds, ``InvalidArgumentException`` for one that is not an
                iterator, ``ResourceNotFoundException`` if its stream was deleted,
                ``ValidationException`` for a bad ``Limit``.
        """
        return await self._call(
            "GetRecords",
            self._get_records,
            ShardIterator=ShardIterator,
            Limit=Limit,
            StreamARN=StreamARN,
        )

    async def split_shard(
        self,
        *,
        ShardToSplit: str,
        NewStartingHashKey: str,
        StreamName: str | None = None,
        StreamARN: str | None = None,
    ) -> dict[str, Any]:
        """Split a shard at once, like ``SplitShard`` (see :meth:`split`).

        Raises:
            botocore.exceptions.ClientError: ``ResourceNotFoundException`` for an unknown
                stream or shard, ``InvalidArgumentException`` for a closed shard or a key
                outside it, ``ValidationException`` for a key that is not a decimal.
        """
        return await self._call(
            "SplitShard",
            self._split_shard,
            ShardToSplit=ShardToSplit,
            NewStartingHashKey=NewStartingHashKey,
            StreamName=StreamName,
            StreamARN=StreamARN,
        )

    async def merge_shards(
        self,
        *,
        ShardToMerge: str,
        AdjacentShardToMerge: str,
        StreamName: str | None = None,
        StreamARN: str | None = None,
    ) -> dict[str, Any]:
        """Merge two adjacent shards at once, like ``MergeShards`` (see :meth:`merge`).

        Raises:
            botocore.exceptions.ClientError: ``ResourceNotFoundException`` for an unknown
                stream or shard, ``InvalidArgumentException`` for a closed shard or shards
                that are not adjacent.
        """
        return await self._call(
            "MergeShards",
            self._merge_shards,
            ShardToMerge=ShardToMerge,
            AdjacentShardToMerge=AdjacentShardToMerge,
            StreamName=StreamName,
            StreamARN=StreamARN,
        )

    # -- the call path -----------------------------------------------------------------------

    async def _call(
        self, operation: str, handler: Callable[..., dict[str, Any]], **kwargs: Any
    ) -> dict[str, Any]:
        self.requests.append(
            Request(operation, {key: value for key, value in kwargs.items() if value is not None})
        )
        if self._latency > 0.0:
            await anyio.sleep(self._latency)
        else:
            await anyio.lowlevel.checkpoint()
        denied = self._denied.get(operation)
        if denied is not None:
            code, message, status = denied
            if message is None:
                message = self._denied_message(operation, kwargs)
            raise client_error(code, message, operation, http_status=status)
        lost_response: BaseException | None = None
        queue = self._request_faults.get(operation)
        fault = _take_fault(queue, kwargs) if queue else None
        if fault is not None:
            if not fault.after_processing:
                raise fault.make()
            lost_response = fault.make()
        else:
            plan = self._faults
            if (
                plan.request_failure_rate > 0.0
                and operation in plan.operations
                and self._random.random() < plan.request_failure_rate
            ):
                code, message, status = plan.request_error
                raise client_error(code, message, operation, http_status=status)
        self._operation = operation
        try:
            response = handler(**kwargs)
        except _Rejected as rejected:
            raise client_error(
                rejected.code, rejected.message, operation, http_status=rejected.http_status
            ) from None
        if lost_response is not None:
            raise lost_response
        request_id = next(self._request_ids)
        response["ResponseMetadata"] = {
            "RequestId": f"00000000-0000-4000-8000-{request_id:012x}",
            "HTTPStatusCode": 200,
            "HTTPHeaders": {},
            "RetryAttempts": 0,
        }
        return response

    # -- the model (synchronous; raises _Rejected) -------------------------------------------

    def _now(self) -> float:
        return self._clock()

    def _setup_now(self) -> float:
        # Setup helpers may run outside an event loop, where anyio has no clock.
        try:
            return self._clock()
        except RuntimeError:
            return 0.0

    def _setup_stream(self, name: str) -> _Stream:
        stream = self._streams.get(name)
        if stream is None and isinstance(name, str) and name.startswith("arn:"):
            # A stream named by its ARN (this fake's region and account only).
            stream = self._streams.get(name.rpartition("/")[2])
            if stream is not None and stream.arn != name:
                stream = None
        if stream is None:
            raise ValueError(f"no stream named {name!r}")
        return stream

    def _denied_message(self, operation: str, kwargs: Mapping[str, Any]) -> str:
        """What the service says to a caller whose IAM policy lacks ``kinesis:<operation>``."""
        arn = kwargs.get("StreamARN")
        name = kwargs.get("StreamName")
        if not isinstance(arn, str):
            arn = self.stream_arn(name if isinstance(name, str) else "*")
        return (
            f"User: arn:aws:iam::{self._account}:user/fake is not authorized to perform: "
            f"kinesis:{operation} on resource: {arn} because no identity-based policy allows "
            f"the kinesis:{operation} action"
        )

    def _create(
        self,
        name: str,
        shard_count: int,
        throttle: _Throttle | None,
        max_record_size: int,
        mode: str,
    ) -> None:
        now = self._setup_now()
        stream = _Stream(name, now, throttle, max_record_size, mode, self._account, self._region)
        width = (MAX_HASH_KEY + 1) // shard_count
        for index in range(shard_count):
            start = index * width
            end = MAX_HASH_KEY if index == shard_count - 1 else start + width - 1
            stream.new_shard(start, end, self._sequence, now)
        stream.reindex()
        self._streams[name] = stream

    def _stream(self, name: str | None, arn: str | None) -> _Stream:
        if arn is not None:
            parts = _STREAM_ARN_PARTS.fullmatch(arn) if isinstance(arn, str) else None
            if parts is None or _STREAM_ARN.fullmatch(arn) is None:
                raise _validation(
                    arn, "streamARN", f"satisfy regular expression pattern: {_STREAM_ARN_PATTERN}"
                )
            partition, region, account, from_arn = parts.groups()
            if account != self._account:
                # Another account's stream: without a resource policy that grants this
                # account access, the service denies the call.
                raise _Rejected(
                    "AccessDeniedException",
                    f"User: arn:aws:iam::{self._account}:user/fake is not authorized to perform: "
                    f"kinesis:{self._operation} on resource: {arn} because no resource-based "
                    f"policy allows the kinesis:{self._operation} action",
                )
            if region != self._region or partition != _partition_of(self._region):
                # Another region's stream, asked of this region's endpoint.
                raise _Rejected(
                    "ResourceNotFoundException",
                    f"Stream {from_arn} under account {account} not found.",
                )
            if name is not None and name != from_arn:
                raise _Rejected(
                    "InvalidArgumentException",
                    f"StreamARN {arn} and StreamName {name} do not name the same stream.",
                )
            name = from_arn
        if name is None:
            raise _Rejected(
                "InvalidArgumentException", "Either StreamName or StreamARN must be provided."
            )
        if not isinstance(name, str) or _STREAM_NAME.fullmatch(name) is None:
            raise _validation(
                name, "streamName", "satisfy regular expression pattern: [a-zA-Z0-9_.-]+"
            )
        stream = self._streams.get(name)
        if stream is None:
            raise _Rejected(
                "ResourceNotFoundException",
                f"Stream {name} under account {self._account} not found.",
            )
        return stream

    def _next_sequence(self) -> int:
        self._sequence += 1
        return self._sequence

    def _create_stream(
        self,
        StreamName: str,
        ShardCount: int | None,
        StreamModeDetails: Mapping[str, str] | None,
        MaxRecordSizeInKiB: int | None,
    ) -> dict[str, Any]:
        if not isinstance(StreamName, str) or _STREAM_NAME.fullmatch(StreamName) is None:
            raise _validation(
                StreamName, "streamName", "satisfy regular expression pattern: [a-zA-Z0-9_.-]+"
            )
        mode = "PROVISIONED"
        if StreamModeDetails is not None:
            mode = StreamModeDetails.get("StreamMode", "")
            if mode not in ("PROVISIONED", "ON_DEMAND"):
                raise _validation(
                    mode,
                    "streamModeDetails.streamMode",
                    "satisfy enum value set: [PROVISIONED, ON_DEMAND]",
                )
        if ShardCount is None:
            if mode != "ON_DEMAND":
                raise _Rejected(
                    "InvalidArgumentException",
                    "ShardCount is required for a stream in PROVISIONED mode.",
                )
            ShardCount = _ON_DEMAND_SHARDS
        if ShardCount < 1:
            raise _validation(ShardCount, "shardCount", "have value greater than or equal to 1")
        max_record_size = _DEFAULT_MAX_RECORD_SIZE
        if MaxRecordSizeInKiB is not None:
            max_record_size = _max_record_size_of(MaxRecordSizeInKiB)
        if StreamName in self._streams:
            raise _Rejected(
                "ResourceInUseException",
                f"Stream {StreamName} under account {self._account} already exists.",
            )
        self._create(StreamName, ShardCount, None, max_record_size, mode)
        return {}

    def _delete_stream(
        self, StreamName: str | None, StreamARN: str | None, EnforceConsumerDeletion: bool | None
    ) -> dict[str, Any]:
        stream = self._stream(StreamName, StreamARN)
        del self._streams[stream.name]
        return {}

    def _describe_stream(
        self,
        StreamName: str | None,
        Limit: int | None,
        ExclusiveStartShardId: str | None,
        StreamARN: str | None,
    ) -> dict[str, Any]:
        # Up to 10,000 is valid, but a page holds 100 shards at most, as the service answers.
        limit = min(
            _page_size(Limit, "limit", _DESCRIBE_LIMIT_DEFAULT, _DESCRIBE_LIMIT_MAX),
            _DESCRIBE_PAGE_MAX,
        )
        stream = self._stream(StreamName, StreamARN)
        after = ExclusiveStartShardId
        selected = [
            shard for shard in stream.shards.values() if after is None or shard.shard_id > after
        ]
        page = selected[:limit]
        return {
            "StreamDescription": {
                "StreamName": stream.name,
                "StreamARN": stream.arn,
                "StreamStatus": "ACTIVE",
                "StreamModeDetails": {"StreamMode": stream.mode},
                "Shards": [shard.describe() for shard in page],
                "HasMoreShards": len(selected) > limit,
                "RetentionPeriodHours": 24,
                "StreamCreationTimestamp": _datetime(stream.created_at),
                "EnhancedMonitoring": [{"ShardLevelMetrics": []}],
                "EncryptionType": "NONE",
            }
        }

    def _describe_stream_summary(
        self, StreamName: str | None, StreamARN: str | None
    ) -> dict[str, Any]:
        stream = self._stream(StreamName, StreamARN)
        open_count = sum(1 for s in stream.shards.values() if s.ending_sequence is None)
        return {
            "StreamDescriptionSummary": {
                "StreamName": stream.name,
                "StreamARN": stream.arn,
                "StreamStatus": "ACTIVE",
                "StreamModeDetails": {"StreamMode": stream.mode},
                "RetentionPeriodHours": 24,
                "StreamCreationTimestamp": _datetime(stream.created_at),
                "EnhancedMonitoring": [{"ShardLevelMetrics": []}],
                "EncryptionType": "NONE",
                "OpenShardCount": open_count,
                "ConsumerCount": 0,
                "MaxRecordSizeInKiB": stream.max_record_size // 1024,
            }
        }

    def _update_max_record_size(
        self, MaxRecordSizeInKiB: int, StreamARN: str | None
    ) -> dict[str, Any]:
        size = _max_record_size_of(MaxRecordSizeInKiB)
        self._stream(None, StreamARN).max_record_size = size
        return {}

    def _list_shards(
        self,
        StreamName: str | None,
        StreamARN: str | None,
        NextToken: str | None,
        ExclusiveStartShardId: str | None,
        MaxResults: int | None,
        StreamCreationTimestamp: datetime | float | None,
        ShardFilter: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        now = self._now()
        limit = _page_size(MaxResults, "maxResults", _MAX_RESULTS_DEFAULT, _MAX_RESULTS_LIMIT)
        if NextToken is not None:
            for label, value in (
                ("StreamName", StreamName),
                ("StreamARN", StreamARN),
                ("ExclusiveStartShardId", ExclusiveStartShardId),
                ("StreamCreationTimestamp", StreamCreationTimestamp),
                ("ShardFilter", ShardFilter),
            ):
                if value is not None:
                    raise _Rejected(
                        "InvalidArgumentException",
                        f"NextToken and {label} cannot be provided together.",
                    )
            name, uid, after, filter_type, at, issued = _decode(NextToken, "NextToken", 6)
            if now - issued > _TOKEN_LIFETIME:
                raise _Rejected(
                    "ExpiredNextTokenException",
                    f"The NextToken has expired: it was issued {now - issued:.3f} s ago, "
                    f"more than {_TOKEN_LIFETIME:.0f} s.",
                )
            stream = self._streams.get(name)
            if stream is None or stream.uid != uid:
                raise _Rejected(
                    "ResourceNotFoundException",
                    f"Stream {name} under account {self._account} not found.",
                )
        else:
            stream = self._stream(StreamName, StreamARN)
            after = ExclusiveStartShardId
            filter_type = None
            at = None
            if ShardFilter is not None:
                filter_type = ShardFilter.get("Type")
                if filter_type not in _FILTER_TYPES:
                    raise _validation(
                        filter_type,
                        "shardFilter.type",
                        f"satisfy enum value set: [{', '.join(_FILTER_TYPES)}]",
                    )
                if filter_type == "AFTER_SHARD_ID":
                    shard_id = ShardFilter.get("ShardId")
                    if shard_id is None:
                        raise _Rejected(
                            "InvalidArgumentException",
                            "ShardId must be provided with the AFTER_SHARD_ID shard filter.",
                        )
                    after = shard_id if after is None else max(after, shard_id)
                elif filter_type in ("AT_TIMESTAMP", "FROM_TIMESTAMP"):
                    timestamp = ShardFilter.get("Timestamp")
                    if timestamp is None:
                        raise _Rejected(
                            "InvalidArgumentException",
                            f"Timestamp must be provided with the {filter_type} shard filter.",
                        )
                    at = _seconds(timestamp, "ShardFilter.Timestamp")
        selected = [
            shard
            for shard in stream.shards.values()
            if (after is None or shard.shard_id > after) and _passes(shard, filter_type, at)
        ]
        page = selected[:limit]
        response: dict[str, Any] = {"Shards": [shard.describe() for shard in page]}
        if len(selected) > limit:
            response["NextToken"] = _encode(
                "NextToken", [stream.name, stream.uid, page[-1].shard_id, filter_type, at, now]
            )
        return response

    def _put_records(
        self,
        Records: Sequence[Mapping[str, Any]],
        StreamName: str | None,
        StreamARN: str | None,
    ) -> dict[str, Any]:
        if not isinstance(Records, list | tuple):
            raise TypeError(
                f"Invalid type for parameter Records, value: {Records!r}, "
                f"type: {type(Records)}, valid types: <class 'list'>, <class 'tuple'>"
            )
        count = len(Records)
        if count < 1:
            raise _validation("[]", "records", "have length greater than or equal to 1")
        if count > _MAX_RECORDS_PER_REQUEST:
            raise _validation(
                f"[... {count} records]",
                "records",
                f"have length less than or equal to {_MAX_RECORDS_PER_REQUEST}",
            )
        entries = [
            _check_entry(entry, f"Records[{index}].", f"records.{index + 1}.member.")
            for index, entry in enumerate(Records)
        ]
        stream = self._stream(StreamName, StreamARN)
        autoscale = stream.autoscale
        if autoscale is not None and self._now() >= autoscale.next_at:
            self._auto_reshard(stream, autoscale, self._now())
        total = 0
        for index, (_, data, explicit_hash_key, key_bytes) in enumerate(entries):
            total += _check_record_rules(stream, key_bytes, data, explicit_hash_key, index)
        request_limit = max(_MAX_REQUEST_SIZE, stream.max_record_size)
        if total > request_limit:
            raise _Rejected(
                "InvalidArgumentException",
                f"Records size exceeds {request_limit // _MIB} MB limit",
            )
        script = self._record_scripts.popleft() if self._record_scripts else None
        plan = self._faults
        record_rate = plan.record_failure_rate
        draw = self._random.random
        now = self._now()
        results: list[dict[str, str]] = []
        failed = 0
        for index, (partition_key, data, explicit_hash_key, key_bytes) in enumerate(entries):
            outcome = script[index] if script is not None and index < len(script) else None
            if outcome is None and record_rate > 0.0 and draw() < record_rate:
                outcome = plan.record_error
            if outcome is None:
                hash_key = (
                    hash_key_of(key_bytes) if explicit_hash_key is None else int(explicit_hash_key)
                )
                shard = stream.route(hash_key)
                if shard.bucket is not None and not shard.bucket.try_take(
                    (1.0, float(len(key_bytes) + len(data))), now
                ):
                    outcome = _throttled(stream, shard)
                else:
                    sequence = self._store(
                        stream, shard, partition_key, explicit_hash_key, data, now
                    )
                    results.append({"SequenceNumber": sequence, "ShardId": shard.shard_id})
                    continue
            failed += 1
            results.append({"ErrorCode": outcome[0], "ErrorMessage": outcome[1]})
        return {"FailedRecordCount": failed, "Records": results, "EncryptionType": "NONE"}

    def _put_record(
        self,
        PartitionKey: str,
        Data: bytes | bytearray | str,
        StreamName: str | None,
        StreamARN: str | None,
        ExplicitHashKey: str | None,
        SequenceNumberForOrdering: str | None,
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {"PartitionKey": PartitionKey, "Data": Data}
        if ExplicitHashKey is not None:
            entry["ExplicitHashKey"] = ExplicitHashKey
        partition_key, data, explicit_hash_key, key_bytes = _check_entry(entry, "", "")
        if SequenceNumberForOrdering is not None:
            _check_sequence_number(SequenceNumberForOrdering, "sequenceNumberForOrdering")
        stream = self._stream(StreamName, StreamARN)
        autoscale = stream.autoscale
        if autoscale is not None and self._now() >= autoscale.next_at:
            self._auto_reshard(stream, autoscale, self._now())
        _check_record_rules(stream, key_bytes, data, explicit_hash_key, None)
        hash_key = hash_key_of(key_bytes) if explicit_hash_key is None else int(explicit_hash_key)
        shard = stream.route(hash_key)
        now = self._now()
        if shard.bucket is not None and not shard.bucket.try_take(
            (1.0, float(len(key_bytes) + len(data))), now
        ):
            code, message = _throttled(stream, shard)
            raise _Rejected(code, message)
        sequence = self._store(stream, shard, partition_key, explicit_hash_key, data, now)
        return {"ShardId": shard.shard_id, "SequenceNumber": sequence, "EncryptionType": "NONE"}

    def _store(
        self,
        stream: _Stream,
        shard: _Shard,
        partition_key: str,
        explicit_hash_key: str | None,
        data: bytes,
        now: float,
    ) -> str:
        number = self._next_sequence()
        sequence = _sequence_str(number)
        shard.records.append(
            StoredRecord(
                stream.name, shard.shard_id, sequence, partition_key, explicit_hash_key, data, now
            )
        )
        shard.sequences.append(number)
        return sequence

    def _get_shard_iterator(
        self,
        ShardId: str,
        ShardIteratorType: str,
        StreamName: str | None,
        StreamARN: str | None,
        StartingSequenceNumber: str | None,
        Timestamp: datetime | float | None,
    ) -> dict[str, Any]:
        if ShardIteratorType not in _ITERATOR_TYPES:
            raise _validation(
                ShardIteratorType,
                "shardIteratorType",
                f"satisfy enum value set: [{', '.join(_ITERATOR_TYPES)}]",
            )
        if StartingSequenceNumber is not None:
            _check_sequence_number(StartingSequenceNumber, "startingSequenceNumber")
        stream = self._stream(StreamName, StreamARN)
        shard = stream.shard(ShardId)
        if ShardIteratorType == "TRIM_HORIZON":
            position = 0
        elif ShardIteratorType == "LATEST":
            position = len(shard.records)
        elif ShardIteratorType == "AT_TIMESTAMP":
            if Timestamp is None:
                raise _Rejected(
                    "InvalidArgumentException",
                    "Must specify timestampInMillis parameter for iterator of type AT_TIMESTAMP. "
                    "Current request has no timestamp parameter.",
                )
            at = _seconds(Timestamp, "Timestamp")
            position = bisect_left(shard.records, at, key=lambda record: record.arrival_time)
        else:
            if StartingSequenceNumber is None:
                raise _Rejected(
                    "InvalidArgumentException",
                    f"Must specify a StartingSequenceNumber for iterator of type "
                    f"{ShardIteratorType}.",
                )
            number = int(StartingSequenceNumber) - _SEQUENCE_BASE
            ending = shard.ending_sequence
            if number < shard.starting_sequence or (ending is not None and number > ending):
                raise _Rejected(
                    "InvalidArgumentException",
                    f"StartingSequenceNumber {StartingSequenceNumber} used in GetShardIterator "
                    f"on shard {ShardId} in stream {stream.name} under account {self._account} is "
                    "invalid because it did not come from this shard.",
                )
            if ShardIteratorType == "AT_SEQUENCE_NUMBER":
                position = bisect_left(shard.sequences, number)
            else:
                position = bisect_right(shard.sequences, number)
        iterator = _encode(
            "ShardIterator", [stream.name, stream.uid, shard.shard_id, position, self._now()]
        )
        return {"ShardIterator": iterator}

    def _get_records(
        self, ShardIterator: str, Limit: int | None, StreamARN: str | None
    ) -> dict[str, Any]:
        limit = _page_size(Limit, "limit", _GET_RECORDS_LIMIT, _GET_RECORDS_LIMIT)
        name, uid, shard_id, position, issued = _decode(ShardIterator, "ShardIterator", 5)
        now = self._now()
        if now - issued > _TOKEN_LIFETIME:
            raise _Rejected(
                "ExpiredIteratorException",
                f"Iterator expired. The iterator was created at time {_datetime(issued)} while "
                f"right now it is {_datetime(now)} which is further in the future than the "
                f"tolerated delay of {_TOKEN_LIFETIME * 1000:.0f} milliseconds.",
            )
        stream = self._streams.get(name)
        if stream is None or stream.uid != uid:
            raise _Rejected(
                "ResourceNotFoundException",
                f"Stream {name} under account {self._account} not found.",
            )
        if StreamARN is not None and StreamARN != stream.arn:
            raise _Rejected(
                "InvalidArgumentException",
                f"StreamARN {StreamARN} does not match the stream of the shard iterator.",
            )
        shard = stream.shard(shard_id)
        stored = shard.records
        records: list[dict[str, Any]] = []
        size = 0
        end = min(len(stored), position + limit)
        while position < end:
            record = stored[position]
            size += len(record.data) + len(record.partition_key.encode())
            if records and size > _GET_RECORDS_MAX_BYTES:
                break
            records.append(
                {
                    "SequenceNumber": record.sequence_number,
                    "ApproximateArrivalTimestamp": _datetime(record.arrival_time),
                    "Data": record.data,
                    "PartitionKey": record.partition_key,
                }
            )
            position += 1
        behind = 0
        if position < len(stored):
            behind = max(0, int((now - stored[position].arrival_time) * 1000))
        response: dict[str, Any] = {"Records": records, "MillisBehindLatest": behind}
        if shard.ending_sequence is not None and position == len(stored):
            response["ChildShards"] = [
                {
                    "ShardId": child.shard_id,
                    "ParentShards": [
                        parent for parent in (child.parent, child.adjacent_parent) if parent
                    ],
                    "HashKeyRange": {
                        "StartingHashKey": str(child.start),
                        "EndingHashKey": str(child.end),
                    },
                }
                for child in stream.shards.values()
                if shard_id in (child.parent, child.adjacent_parent)
            ]
        else:
            response["NextShardIterator"] = _encode(
                "ShardIterator", [stream.name, stream.uid, shard_id, position, now]
            )
        return response

    def _split_shard(
        self,
        ShardToSplit: str,
        NewStartingHashKey: str,
        StreamName: str | None,
        StreamARN: str | None,
    ) -> dict[str, Any]:
        if (
            not isinstance(NewStartingHashKey, str)
            or _HASH_KEY.fullmatch(NewStartingHashKey) is None
        ):
            raise _validation(
                NewStartingHashKey,
                "newStartingHashKey",
                "satisfy regular expression pattern: 0|([1-9]\\d{0,38})",
            )
        stream = self._stream(StreamName, StreamARN)
        self._split(stream, ShardToSplit, int(NewStartingHashKey))
        return {}

    def _merge_shards(
        self,
        ShardToMerge: str,
        AdjacentShardToMerge: str,
        StreamName: str | None,
        StreamARN: str | None,
    ) -> dict[str, Any]:
        stream = self._stream(StreamName, StreamARN)
        self._merge(stream, ShardToMerge, AdjacentShardToMerge)
        return {}

    def _open_shard(self, stream: _Stream, shard_id: str) -> _Shard:
        shard = stream.shard(shard_id)
        if shard.ending_sequence is not None:
            raise _Rejected(
                "InvalidArgumentException",
                f"Shard {shard_id} in stream {stream.name} under account {self._account} has "
                "already been merged or split, and thus is not eligible for merging or splitting.",
            )
        return shard

    def _split(self, stream: _Stream, shard_id: str, new_starting_hash_key: int) -> tuple[str, str]:
        parent = self._open_shard(stream, shard_id)
        if not parent.start < new_starting_hash_key <= parent.end:
            raise _Rejected(
                "InvalidArgumentException",
                f"NewStartingHashKey {new_starting_hash_key} used in SplitShard on shard "
                f"{shard_id} in stream {stream.name} under account {self._account} is not both "
                f"greater than one plus the shard's StartingHashKey {parent.start} and less "
                f"than the shard's EndingHashKey {parent.end}.",
            )
        now = self._setup_now()
        stream.close(parent, self._sequence, now)
        lower = stream.new_shard(
            parent.start, new_starting_hash_key - 1, self._sequence, now, parent=shard_id
        )
        upper = stream.new_shard(
            new_starting_hash_key, parent.end, self._sequence, now, parent=shard_id
        )
        stream.reindex()
        return lower.shard_id, upper.shard_id

    def _merge(self, stream: _Stream, shard_id: str, adjacent_shard_id: str) -> str:
        first = self._open_shard(stream, shard_id)
        second = self._open_shard(stream, adjacent_shard_id)
        if first.end + 1 != second.start and second.end + 1 != first.start:
            raise _Rejected(
                "InvalidArgumentException",
                f"Shards {shard_id} and {adjacent_shard_id} in stream {stream.name} under "
                f"account {stream.account} are not an adjacent pair of shards eligible for merging",
            )
        now = self._setup_now()
        stream.close(first, self._sequence, now)
        stream.close(second, self._sequence, now)
        child = stream.new_shard(
            min(first.start, second.start),
            max(first.end, second.end),
            self._sequence,
            now,
            parent=shard_id,
            adjacent_parent=adjacent_shard_id,
        )
        stream.reindex()
        return child.shard_id


# -- helpers ---------------------------------------------------------------------------------


class _ScriptedFault:
    """``remaining`` calls of one operation (to one stream, or to any) that fail alike."""

    __slots__ = ("after_processing", "make", "remaining", "stream")

    def __init__(
        self,
        make: Callable[[], BaseException],
        after_processing: bool,
        stream: str | None,
        remaining: int,
    ) -> None:
        self.make = make
        self.after_processing = after_processing
        self.stream = stream
        self.remaining = remaining


def _fault_stream(stream: str | None) -> str | None:
    """The stream name a fault is scoped to, given its name or ARN (``None``: any stream)."""
    if stream is None:
        return None
    if isinstance(stream, str):
        match = _STREAM_ARN_PARTS.fullmatch(stream)
        if match is not None:
            return match.group(4)
        if _STREAM_NAME.fullmatch(stream) is not None:
            return stream
    raise ValueError(f"stream must be a stream name or ARN, got {stream!r}")


def _called_stream(kwargs: Mapping[str, Any]) -> str | None:
    """The stream a call names (``StreamName``, else the name in ``StreamARN``), if any."""
    name = kwargs.get("StreamName")
    if name is None:
        arn = kwargs.get("StreamARN")
        match = _STREAM_ARN_PARTS.fullmatch(arn) if isinstance(arn, str) else None
        name = match.group(4) if match is not None else None
    return name if isinstance(name, str) else None


def _take_fault(queue: deque[_ScriptedFault], kwargs: Mapping[str, Any]) -> _ScriptedFault | None:
    """Use up one call of the earliest scripted fault that applies to a call's ``kwargs``."""
    called: str | None = None
    looked = False
    for index, fault in enumerate(queue):
        if fault.stream is not None:
            if not looked:
                called, looked = _called_stream(kwargs), True
            if fault.stream != called:
                continue
        fault.remaining -= 1
        if not fault.remaining:
            del queue[index]
        return fault
    return None


def _check_operation(operation: str) -> None:
    if operation not in _OPERATIONS:
        raise ValueError(
            f"unknown operation {operation!r}; FakeKinesis serves {', '.join(sorted(_OPERATIONS))}"
        )


def _partition_of(region: str) -> str:
    """The partition of a region: ``aws-cn`` for China, ``aws-us-gov`` for GovCloud …"""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    if region.startswith("us-isob-"):
        return "aws-iso-b"
    if region.startswith("us-iso-"):
        return "aws-iso"
    return "aws"


def _sequence_str(number: int) -> str:
    return str(_SEQUENCE_BASE + number)


def _datetime(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def _seconds(timestamp: object, parameter: str) -> float:
    if isinstance(timestamp, datetime):
        if timestamp.tzinfo is None:
            timestamp = timestamp.replace(tzinfo=timezone.utc)
        return timestamp.timestamp()
    if isinstance(timestamp, int | float) and not isinstance(timestamp, bool):
        return float(timestamp)
    raise TypeError(
        f"Invalid type for parameter {parameter}, value: {timestamp!r}, "
        f"type: {type(timestamp)}, valid types: <class 'datetime.datetime'>, timestamp"
    )


def _page_size(value: int | None, field: str, default: int, maximum: int) -> int:
    """A page-size parameter (``Limit``, ``MaxResults``): ``default`` when absent, else checked
    to be 1 … ``maximum`` as the service checks it."""
    if value is None:
        return default
    if value < 1:
        raise _validation(value, field, "have value greater than or equal to 1")
    if value > maximum:
        raise _validation(value, field, f"have value less than or equal to {maximum}")
    return value


def _validation(value: object, field: str, constraint: str) -> _Rejected:
    return _Rejected(
        "ValidationException",
        f"1 validation error detected: Value '{value}' at '{field}' failed to satisfy "
        f"constraint: Member must {constraint}",
    )


def _max_record_size_of(kib: int) -> int:
    if not 1024 <= kib <= 10240:
        raise _validation(
            kib, "maxRecordSizeInKiB", "have value between 1024 and 10240 (inclusive)"
        )
    return kib * 1024


def _check_sequence_number(value: object, field: str) -> None:
    if not isinstance(value, str) or _SEQUENCE_NUMBER.fullmatch(value) is None:
        raise _validation(value, field, "satisfy regular expression pattern: 0|([1-9]\\d{0,128})")


def _throttled(stream: _Stream, shard: _Shard) -> tuple[str, str]:
    return (
        "ProvisionedThroughputExceededException",
        f"Rate exceeded for shard {shard.shard_id} in stream {stream.name} "
        f"under account {stream.account}.",
    )


def _check_entry(entry: object, parameter: str, field: str) -> tuple[str, bytes, str | None, bytes]:
    """Check one record as botocore and then the API front end would.

    Returns ``(partition_key, data, explicit_hash_key, partition_key_utf8)``.
    """
    where = parameter.rstrip(".") or "input"
    if not isinstance(entry, Mapping):
        raise TypeError(
            f"Invalid type for parameter {where}, value: {entry!r}, type: {type(entry)}, "
            "valid types: <class 'dict'>"
        )
    for key in entry:
        if key not in _ENTRY_KEYS:
            raise TypeError(
                f'Unknown parameter in {where}: "{key}", must be one of: {", ".join(_ENTRY_KEYS)}'
            )
    for key in ("Data", "PartitionKey"):
        if key not in entry:
            raise TypeError(f'Missing required parameter in {where}: "{key}"')
    partition_key = entry["PartitionKey"]
    if not isinstance(partition_key, str):
        raise TypeError(
            f"Invalid type for parameter {parameter}PartitionKey, value: {partition_key!r}, "
            f"type: {type(partition_key)}, valid types: <class 'str'>"
        )
    data = entry["Data"]
    if isinstance(data, str):
        data = data.encode()
    elif isinstance(data, bytearray):
        data = bytes(data)
    elif not isinstance(data, bytes):
        if callable(getattr(data, "read", None)):
            data = data.read()
            data = data.encode() if isinstance(data, str) else bytes(data)
        else:
            # botocore accepts bytes, bytearray, str and file-like objects; not memoryview.
            raise TypeError(
                f"Invalid type for parameter {parameter}Data, value: {data!r}, "
                f"type: {type(data)}, valid types: <class 'bytes'>, <class 'bytearray'>, "
                "file-like object"
            )
    explicit_hash_key = entry.get("ExplicitHashKey")
    if "ExplicitHashKey" in entry and not isinstance(explicit_hash_key, str):
        raise TypeError(
            f"Invalid type for parameter {parameter}ExplicitHashKey, "
            f"value: {explicit_hash_key!r}, type: {type(explicit_hash_key)}, "
            "valid types: <class 'str'>"
        )
    length = partition_key_length(partition_key)  # UTF-16 code units, as the service counts
    if length < 1:
        raise _validation(
            partition_key, f"{field}partitionKey", "have length greater than or equal to 1"
        )
    if length > _MAX_PARTITION_KEY_LENGTH:
        raise _validation(
            partition_key,
            f"{field}partitionKey",
            f"have length less than or equal to {_MAX_PARTITION_KEY_LENGTH}",
        )
    if len(data) > _LARGEST_MAX_RECORD_SIZE:
        raise _validation(
            f"java.nio.HeapByteBuffer[pos=0 lim={len(data)} cap={len(data)}]",
            f"{field}data",
            f"have length less than or equal to {_LARGEST_MAX_RECORD_SIZE}",
        )
    if explicit_hash_key is not None and _HASH_KEY.fullmatch(explicit_hash_key) is None:
        raise _validation(
            explicit_hash_key,
            f"{field}explicitHashKey",
            "satisfy regular expression pattern: 0|([1-9]\\d{0,38})",
        )
    try:
        key_bytes = partition_key.encode()
    except UnicodeEncodeError:
        raise _validation(
            partition_key.encode(errors="backslashreplace").decode(),
            f"{field}partitionKey",
            "be valid Unicode (it contains a lone surrogate)",
        ) from None
    return partition_key, data, explicit_hash_key, key_bytes


def _check_record_rules(
    stream: _Stream,
    key_bytes: bytes,
    data: bytes,
    explicit_hash_key: str | None,
    index: int | None,
) -> int:
    """The service's own rules for one record, past the API constraints; returns its size."""
    if explicit_hash_key is not None and int(explicit_hash_key) > MAX_HASH_KEY:
        raise _Rejected(
            "InvalidArgumentException",
            "Invalid ExplicitHashKey. ExplicitHashKey must be in the range: [0, 2^128-1]. "
            f"Specified value was {explicit_hash_key}",
        )
    size = len(key_bytes) + len(data)
    if size > stream.max_record_size:
        which = "The record" if index is None else f"Record {index}"
        raise _Rejected(
            "InvalidArgumentException",
            f"{which} is {size} bytes (partition key plus data), over the maximum record "
            f"size of stream {stream.name}: {stream.max_record_size} bytes.",
        )
    return size


def _passes(shard: _Shard, filter_type: str | None, at: float | None) -> bool:
    if filter_type == "AT_LATEST":
        return shard.ending_sequence is None
    if filter_type == "AT_TIMESTAMP":
        assert at is not None
        return shard.created_at <= at and (shard.closed_at is None or shard.closed_at > at)
    if filter_type == "FROM_TIMESTAMP":
        assert at is not None
        return shard.closed_at is None or shard.closed_at > at
    return True


def _encode(kind: str, fields: list[Any]) -> str:
    # Opaque to callers, stateless here: a token needs no memory in the fake.
    text = json.dumps([kind, *fields], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode()


def _decode(token: object, kind: str, count: int) -> list[Any]:
    if isinstance(token, str):
        try:
            fields = json.loads(base64.urlsafe_b64decode(token.encode()))
        except (binascii.Error, ValueError):
            pass
        else:
            if isinstance(fields, list) and len(fields) == count + 1 and fields[0] == kind:
                return fields[1:]
    raise _Rejected("InvalidArgumentException", f"Invalid {kind}: {str(token)[:100]!r}.")


async def read_stream(
    client: Any, stream: str, *, limit: int = 10_000
) -> list[tuple[str, dict[str, Any]]]:
    """Read every record of every shard of ``stream``, each with the id of its shard.

    Works with any client that speaks the Kinesis API: a :class:`FakeKinesis`, or an
    aiobotocore client pointed at a local server (moto, kinesalite). Each shard, open or
    closed, is read from ``TRIM_HORIZON`` until a page comes back empty, so call it once the
    writers are done. Deaggregate the records with :func:`aiokpl.aggregation.deaggregate`.

    Args:
        client: the Kinesis client.
        stream: the stream name, or its ARN (then sent as ``StreamARN``).
        limit: ``Limit`` of each ``GetRecords`` call.

    Returns:
        ``(shard_id, record)`` pairs, shard by shard, oldest record first within a shard.
    """
    found: list[tuple[str, dict[str, Any]]] = []
    named = stream_argument(stream)
    for shard in (await client.list_shards(**named))["Shards"]:
        shard_id = shard["ShardId"]
        iterator = (
            await client.get_shard_iterator(
                **named, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
            )
        )["ShardIterator"]
        while iterator:
            page = await client.get_records(
                ShardIterator=iterator, Limit=limit, **arn_argument(stream)
            )
            found.extend((shard_id, record) for record in page["Records"])
            if not page["Records"]:
                break
            iterator = page.get("NextShardIterator")
    return found

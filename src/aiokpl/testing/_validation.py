"""The service's limits and the checks of request arguments, for the fake's operations.

What is here: the limits the service enforces (records per request, partition key length,
record and request sizes, page sizes, token lifetime), the patterns of names, ARNs, hash keys
and sequence numbers, the checks of one record as botocore and then the API front end make
them (:func:`_check_entry`), page-size parameters (:func:`_page_size`), the opaque paging
tokens and shard iterators (:func:`_encode`, :func:`_decode`), and the conversions between the
fake's clock readings and the API's datetimes.

Invariants: everything here is a pure function of its arguments, with no state and no clock.
A service error is raised as :class:`_Rejected` (``ValidationException`` for the API's model
constraints, ``InvalidArgumentException`` for the service's own rules), which only the facade
(``_fake.FakeKinesis._call``) turns into a ``ClientError``; what botocore itself would refuse to
send is a ``TypeError``, as botocore's ``ParamValidationError`` is not a ``ClientError`` either.
Tokens are stateless (base64 JSON naming what they point at and when they were issued): the
fake keeps no memory of the tokens it issued, so they cost nothing and never leak.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from .._core.hashing import partition_key_length

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
        "UpdateStreamRecordDistributionStrategy",
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
_REGION_NAME = re.compile(r"[a-z]{2,}(-[a-z]+)+-\d{1,2}")
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
# RecordDistributionStrategy: the service places records on AUTO streams (on-demand only),
# by their keys on the others.
_AUTO = "AUTO"
_USER_PARTITION_KEY = "USER_PARTITION_KEY"
_DISTRIBUTIONS = (_AUTO, _USER_PARTITION_KEY)
_DRY_RUN = "DryRunOperationException"
_DRY_RUN_MESSAGE = "The request was rejected because the DryRun parameter was specified."


class _Rejected(Exception):
    """A service error, raised by the model and turned into a ``ClientError`` at the edge."""

    def __init__(self, code: str, message: str, http_status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.http_status = http_status


def _check_operation(operation: str) -> None:
    if operation not in _OPERATIONS:
        raise ValueError(
            f"unknown operation {operation!r}; FakeKinesis serves {', '.join(sorted(_OPERATIONS))}"
        )


# Region prefixes of the partitions other than ``aws``, as botocore's ``partitions.json``
# gives them (its ``regionRegex``); the most specific first (``us-isob-`` before ``us-iso-``).
_PARTITION_PREFIXES = (
    ("cn-", "aws-cn"),
    ("us-gov-", "aws-us-gov"),
    ("us-isob-", "aws-iso-b"),
    ("us-isof-", "aws-iso-f"),
    ("us-iso-", "aws-iso"),
    ("eu-isoe-", "aws-iso-e"),
    ("eusc-", "aws-eusc"),
)


def _partition_of(region: str) -> str:
    """The partition of a region: ``aws-cn`` for China, ``aws-us-gov`` for GovCloud …"""
    for prefix, partition in _PARTITION_PREFIXES:
        if region.startswith(prefix):
            return partition
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


def _missing(field: str) -> _Rejected:
    """The service's answer to a member that must be given and is not."""
    return _Rejected(
        "ValidationException",
        f"1 validation error detected: Value null at '{field}' failed to satisfy constraint: "
        "Member must not be null",
    )


def _check_distribution(value: object) -> str:
    """A ``RecordDistributionStrategy``, checked against the model's enum."""
    if value not in _DISTRIBUTIONS:
        raise _validation(
            value,
            "recordDistributionStrategy",
            f"satisfy enum value set: [{', '.join(_DISTRIBUTIONS)}]",
        )
    return str(value)


def _created_distribution(value: object, mode: str) -> str:
    """``CreateStream``'s ``RecordDistributionStrategy``: checked, and ``AUTO`` refused for a
    stream that is not ``ON_DEMAND``; ``USER_PARTITION_KEY`` when not given."""
    if value is None:
        return _USER_PARTITION_KEY
    strategy = _check_distribution(value)
    if strategy == _AUTO and mode != "ON_DEMAND":
        raise _Rejected(
            "InvalidArgumentException",
            "RecordDistributionStrategy AUTO is supported only for streams in ON_DEMAND mode.",
        )
    return strategy


def _require_keys(entries: list[tuple[str | None, bytes, str | None, bytes]]) -> None:
    """Refuse a ``PutRecords`` (of a stream that is not ``AUTO``) with a record without a
    partition key, as a whole: the member must not be null there."""
    for index, entry in enumerate(entries):
        if entry[0] is None:
            raise _missing(f"records.{index + 1}.member.partitionKey")


def _dry_run(value: object) -> bool:
    """Whether a request's ``DryRun`` asks for a dry run (botocore sends only a boolean)."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise TypeError(
            f"Invalid type for parameter DryRun, value: {value!r}, type: {type(value)}, "
            "valid types: <class 'bool'>"
        )
    return value


def _max_record_size_of(kib: int) -> int:
    if not 1024 <= kib <= 10240:
        raise _validation(
            kib, "maxRecordSizeInKiB", "have value between 1024 and 10240 (inclusive)"
        )
    return kib * 1024


def _check_sequence_number(value: object, field: str) -> None:
    if not isinstance(value, str) or _SEQUENCE_NUMBER.fullmatch(value) is None:
        raise _validation(value, field, "satisfy regular expression pattern: 0|([1-9]\\d{0,128})")


def _check_entry(
    entry: object, parameter: str, field: str
) -> tuple[str | None, bytes, str | None, bytes]:
    """Check one record as botocore and then the API front end would.

    Returns ``(partition_key, data, explicit_hash_key, partition_key_utf8)``. The partition key
    may be missing (``None``, and ``b""`` as UTF-8): the API model makes it optional, for AUTO
    streams; whether the stream takes a record without one is the operation's to check.
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
    if "Data" not in entry:
        raise TypeError(f'Missing required parameter in {where}: "Data"')
    partition_key = entry.get("PartitionKey")
    if "PartitionKey" in entry and not isinstance(partition_key, str):
        raise TypeError(
            f"Invalid type for parameter {parameter}PartitionKey, value: {partition_key!r}, "
            f"type: {type(partition_key)}, valid types: <class 'str'>"
        )
    data = _data_of(entry["Data"], parameter)
    explicit_hash_key = entry.get("ExplicitHashKey")
    if "ExplicitHashKey" in entry and not isinstance(explicit_hash_key, str):
        raise TypeError(
            f"Invalid type for parameter {parameter}ExplicitHashKey, "
            f"value: {explicit_hash_key!r}, type: {type(explicit_hash_key)}, "
            "valid types: <class 'str'>"
        )
    if partition_key is not None:
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
    if partition_key is None:
        return None, data, explicit_hash_key, b""
    try:
        key_bytes = partition_key.encode()
    except UnicodeEncodeError:
        raise _validation(
            partition_key.encode(errors="backslashreplace").decode(),
            f"{field}partitionKey",
            "be valid Unicode (it contains a lone surrogate)",
        ) from None
    return partition_key, data, explicit_hash_key, key_bytes


def _data_of(data: object, parameter: str) -> bytes:
    """A record's ``Data`` as bytes, as botocore takes it: bytes, bytearray, str (its UTF-8) or
    a file-like object (what it reads); anything else is a ``TypeError``."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, bytearray):
        return bytes(data)
    read = getattr(data, "read", None)
    if callable(read):
        content = read()
        return content.encode() if isinstance(content, str) else bytes(content)
    # botocore accepts bytes, bytearray, str and file-like objects; not memoryview.
    raise TypeError(
        f"Invalid type for parameter {parameter}Data, value: {data!r}, "
        f"type: {type(data)}, valid types: <class 'bytes'>, <class 'bytearray'>, "
        "file-like object"
    )


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

"""Hash keys, and the checks a user record passes before the producer accepts it.

Kinesis places a record on the shard whose hash-key range contains the record's 128-bit hash
key. That key is the explicit hash key when the caller gives one (a decimal string), otherwise
the MD5 digest of the partition key's UTF-8 bytes read as a big-endian integer. Predicting the
shard locally is what lets the producer aggregate and rate-limit per shard.

Invariants:

* ``hash_key_of`` is exactly the service's mapping (MD5, big-endian, 0 … 2**128 - 1).
* ``check_user_record`` either returns values the service accepts, or raises an error that
  names the field and the limit; it never half-accepts. Data is returned as immutable ``bytes``
  so a caller mutating its ``bytearray`` later cannot change a record already accepted.
* a stream is a name or a stream ARN; ``check_stream_name`` accepts an ARN only when every
  part is well formed (partition, ``kinesis``, region, 12-digit account, ``stream/<name>``),
  stricter than the service's own pattern (``arn:aws.*:kinesis:.*:\\d{12}:stream/\\S+``), so a
  typo fails at the put that made it, never as a remote error on every record.

Mirrors ``UserRecord`` in the KPL (``aws/kinesis/core/user_record.cc``), which computes the
hash key the same way. Differences: the KPL validates in its Java wrapper; we validate here,
synchronously, so ``put_record`` fails at the call site rather than in a result.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, NamedTuple

from .errors import InvalidRecordError, InvalidRecordTypeError

__all__ = (
    "KEYLESS",
    "MAX_HASH_KEY",
    "MAX_PARTITION_KEY_LENGTH",
    "PLACED_PARTITION_KEY",
    "StreamArn",
    "check_explicit_hash_key",
    "check_stream_name",
    "check_user_record",
    "hash_key_of",
    "parse_stream_arn",
    "partition_key_length",
    "stream_name_of",
)

MAX_HASH_KEY = 2**128 - 1
"""The largest hash key (inclusive): the key space is 0 … 2**128 - 1."""

MAX_PARTITION_KEY_LENGTH = 256
"""Kinesis limit on a partition key, in Unicode characters."""

MAX_STREAM_NAME_LENGTH = 128

KEYLESS = -1
"""The hash key :func:`check_user_record` gives a record put without a partition key nor an
explicit hash key: no key routes it. A stream that places records itself (``AUTO``) takes it
as it is; on one that places them by key the producer chooses its shard (``_pipeline.stream``)
and gives it :data:`PLACED_PARTITION_KEY` and an explicit hash key in that shard's range."""

PLACED_PARTITION_KEY = "-"
"""The partition key of a record put without one, as sent where a key is needed: to a stream
that places records by key (the explicit hash key routes it), and inside aggregates. Its one
byte counts toward the record's size from the put on, wherever the record goes."""

try:
    # CPython's built-in MD5 costs about 280 ns for a short key against 490 ns through
    # OpenSSL (``hashlib.md5``), whose per-call set-up dominates at this size; the digests
    # are the same. Hashing a partition key is on every put, and is not for security.
    from _md5 import md5 as _md5  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - a Python built without it
    _md5 = hashlib.md5
_from_bytes = int.from_bytes
# The service's own pattern: no sign, no leading zeros, at most 39 digits.
_EXPLICIT_HASH_KEY = re.compile(r"0|[1-9][0-9]{0,38}")
_STREAM_NAME = re.compile(r"[a-zA-Z0-9_.-]+")
# The parts of a stream ARN, each as the service and botocore's partition data accept it: the
# partition ``aws``, ``aws-cn``, ``aws-us-gov``, ``aws-iso``, ``aws-iso-b``, ``aws-eusc`` …
# (the service's pattern takes any ``aws…``), a region such as ``us-east-1``, ``cn-north-1``
# or ``eusc-de-east-1``, a 12-digit account id. botocore's ``partitions.json`` gives each
# partition's regions as ``<prefix>-<word>-<digits>`` (``^eusc\-(de)\-\w+\-\d+$`` …): the
# region form below accepts every one of them, and a partition added later with the same shape
# (tests/test_streams.py checks it against the botocore installed).
_ARN_PARTITION = re.compile(r"aws(-[a-z]+)*")
_ARN_REGION = re.compile(r"[a-z]{2,}(-[a-z]+)+-[0-9]{1,2}")
_ARN_ACCOUNT = re.compile(r"[0-9]{12}")
_ARN_FORM = "arn:<partition>:kinesis:<region>:<12-digit account id>:stream/<stream name>"


def hash_key_of(partition_key: bytes) -> int:
    """The 128-bit hash key Kinesis derives from a partition key.

    Args:
        partition_key: the partition key, already encoded as UTF-8.

    Returns:
        The MD5 digest of ``partition_key`` as a big-endian unsigned integer.
    """
    return _from_bytes(_md5(partition_key, usedforsecurity=False).digest(), "big")


def check_explicit_hash_key(value: object) -> int:
    """Parse an explicit hash key: a decimal string (or an ``int``) in 0 … 2**128 - 1.

    Raises:
        InvalidRecordTypeError: ``value`` is neither ``str`` nor ``int``.
        InvalidRecordError: it is not a plain decimal integer, or it is out of range.
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidRecordTypeError(
            f"explicit_hash_key must be a decimal str or an int, not {type(value).__name__}"
        )
    if isinstance(value, int):
        number = value
    else:
        if _EXPLICIT_HASH_KEY.fullmatch(value) is None:
            raise InvalidRecordError(
                f"explicit_hash_key must be a decimal integer without sign, spaces or leading "
                f"zeros, in 0 … 2**128-1; got {value[:50]!r}"
            )
        number = int(value)
    if not 0 <= number <= MAX_HASH_KEY:
        raise InvalidRecordError(
            f"explicit_hash_key must be in 0 … 2**128-1 ({MAX_HASH_KEY}); got {number}"
        )
    return number


class StreamArn(NamedTuple):
    """The parts of a Kinesis stream ARN (``arn:aws:kinesis:us-east-1:123456789012:stream/s``).

    Attributes:
        partition: ``"aws"``, ``"aws-cn"``, ``"aws-us-gov"``, ``"aws-eusc"`` …
        region: the stream's region, e.g. ``"us-east-1"``.
        account: the 12-digit id of the account that owns the stream.
        name: the stream name.
    """

    partition: str
    region: str
    account: str
    name: str


def parse_stream_arn(stream: str) -> StreamArn | None:
    """The parts of ``stream`` if it is a stream ARN; ``None`` if it is a stream name.

    Anything that starts with ``arn:`` is taken for an ARN (a stream name cannot hold a colon).

    Raises:
        InvalidRecordError: ``stream`` starts with ``arn:`` but is not a well-formed Kinesis
            stream ARN; the message says which part is wrong and shows the form.
    """
    if not stream.startswith("arn:"):
        return None
    parts = stream.split(":", 5)
    if len(parts) != 6:
        reason = "it does not have six ':'-separated parts"
    else:
        _, partition, service, region, account, resource = parts
        kind, _, name = resource.partition("/")
        if _ARN_PARTITION.fullmatch(partition) is None:
            reason = f"the partition {partition!r} is not aws, aws-cn, aws-us-gov, aws-eusc, …"
        elif service != "kinesis":
            reason = f"it names the service {service!r}, not 'kinesis'"
        elif _ARN_REGION.fullmatch(region) is None:
            reason = f"the region {region!r} is not a region such as 'us-east-1'"
        elif _ARN_ACCOUNT.fullmatch(account) is None:
            reason = f"the account id {account!r} is not 12 digits"
        elif kind != "stream":
            reason = f"the resource {resource[:50]!r} is not 'stream/<stream name>'"
        elif not 1 <= len(name) <= MAX_STREAM_NAME_LENGTH or not _STREAM_NAME.fullmatch(name):
            reason = (
                f"the stream name {name[: MAX_STREAM_NAME_LENGTH + 2]!r} is not 1 … "
                f"{MAX_STREAM_NAME_LENGTH} characters of a-z, A-Z, 0-9, '_', '.', '-'"
            )
        else:
            return StreamArn(partition, region, account, name)
    raise InvalidRecordError(
        f"stream {stream[:200]!r} is not a valid stream ARN: {reason}; a stream ARN is {_ARN_FORM}"
    )


def check_stream_name(stream: object) -> str:
    """Check a stream name (1 … 128 characters of ``a-z A-Z 0-9 _ . -``) or a stream ARN.

    Raises:
        InvalidRecordTypeError: ``stream`` is not a ``str``.
        InvalidRecordError: it is empty, too long or has other characters; or it starts with
            ``arn:`` and is not a well-formed Kinesis stream ARN (see :func:`parse_stream_arn`).
    """
    if not isinstance(stream, str):
        raise InvalidRecordTypeError(f"stream must be a str, not {type(stream).__name__}")
    if stream.startswith("arn:"):
        parse_stream_arn(stream)
        return stream
    if not 1 <= len(stream) <= MAX_STREAM_NAME_LENGTH or _STREAM_NAME.fullmatch(stream) is None:
        raise InvalidRecordError(
            f"stream must be 1 … {MAX_STREAM_NAME_LENGTH} characters of a-z, A-Z, 0-9, "
            f"'_', '.', '-', or a stream ARN ({_ARN_FORM}); "
            f"got {stream[: MAX_STREAM_NAME_LENGTH + 2]!r}"
        )
    return stream


def stream_name_of(stream: str) -> str:
    """The stream name of a checked stream name or ARN (the ARN's last part)."""
    if stream.startswith("arn:"):
        return stream.rpartition("/")[2]
    return stream


def partition_key_length(partition_key: str) -> int:
    """The length of ``partition_key`` as Kinesis counts it: UTF-16 code units.

    The service (and the Java KPL, with ``String.length()``) counts UTF-16 code units, so a
    character beyond U+FFFF, such as most emoji, counts 2: 128 emoji are a valid key, 129 are
    not.
    """
    if partition_key.isascii():
        return len(partition_key)
    return len(partition_key.encode("utf-16-le", "surrogatepass")) // 2


def _key_length_error(partition_key: str) -> InvalidRecordError:
    return InvalidRecordError(
        f"partition_key must be 1 … {MAX_PARTITION_KEY_LENGTH} UTF-16 code units long, as "
        "Kinesis counts (a character beyond U+FFFF, such as an emoji, counts 2); got "
        f"{partition_key_length(partition_key)}"
    )


def check_user_record(
    partition_key: Any,
    data: Any,
    explicit_hash_key: Any,
    max_record_size: int,
) -> tuple[str, int, bytes, int, str | None]:
    """Validate one user record, the way ``put_record`` does before accepting it.

    Args:
        partition_key: a non-empty ``str`` of at most 256 UTF-16 code units, or ``None``: a
            record without a key (see :func:`_keyless`).
        data: ``bytes``, ``bytearray`` or ``memoryview`` (anything else is a type error).
        explicit_hash_key: ``None``, or a decimal ``str``/``int`` in 0 … 2**128 - 1.
        max_record_size: the limit on ``len(data) + len(partition key in UTF-8)``.

    Returns:
        ``(partition_key, size, data_bytes, hash_key, explicit_hash_key_str)``: the key as a
        plain ``str``; ``size``, the key's UTF-8 length plus the data's; the explicit hash key
        as its canonical decimal string, or ``None`` when none was given.

    Raises:
        InvalidRecordTypeError: a field has the wrong type.
        InvalidRecordError: a field is out of its limits; the message names field and limit.
    """
    if type(partition_key) is not str:
        if partition_key is None:
            return _keyless(data, explicit_hash_key, max_record_size)
        if not isinstance(partition_key, str):
            raise InvalidRecordTypeError(
                f"partition_key must be a str, not {type(partition_key).__name__}"
            )
        partition_key = str(partition_key)
    length = len(partition_key)
    if not 0 < length <= MAX_PARTITION_KEY_LENGTH:
        raise _key_length_error(partition_key)
    try:
        key_bytes = partition_key.encode()
    except UnicodeEncodeError as exc:
        raise InvalidRecordError(
            "partition_key must be encodable as UTF-8 (it contains a lone surrogate)"
        ) from exc
    # Kinesis counts UTF-16 code units: a character beyond U+FFFF (an emoji) counts 2. Only
    # a non-ASCII key of more than half the limit can be over it; others skip the count.
    if (
        length > MAX_PARTITION_KEY_LENGTH // 2
        and len(key_bytes) != length
        and partition_key_length(partition_key) > MAX_PARTITION_KEY_LENGTH
    ):
        raise _key_length_error(partition_key)
    if type(data) is not bytes:
        data = _bytes_of(data)
    size = len(data) + len(key_bytes)
    if size > max_record_size:
        raise InvalidRecordError(
            f"data plus partition_key is {size} bytes, over max_record_size ({max_record_size})"
        )
    if explicit_hash_key is None:
        hash_key = _from_bytes(_md5(key_bytes, usedforsecurity=False).digest(), "big")
        return partition_key, size, data, hash_key, None
    hash_key = check_explicit_hash_key(explicit_hash_key)
    return partition_key, size, data, hash_key, str(hash_key)


def _bytes_of(data: Any) -> bytes:
    """``data`` as immutable ``bytes``, if it is bytes-like."""
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    hint = "; encode it first, e.g. data.encode()" if isinstance(data, str) else ""
    raise InvalidRecordTypeError(
        f"data must be bytes, bytearray or memoryview, not {type(data).__name__}{hint}"
    )


def _keyless(
    data: Any, explicit_hash_key: Any, max_record_size: int
) -> tuple[str, int, bytes, int, str | None]:
    """:func:`check_user_record` of a record put without a partition key.

    With an explicit hash key, that key routes it and it carries
    :data:`PLACED_PARTITION_KEY`; without, its key is ``""`` and its hash key
    :data:`KEYLESS` until it is placed. Its size counts the one byte of
    :data:`PLACED_PARTITION_KEY` either way, so that it does not change when it is placed.
    """
    if type(data) is not bytes:
        data = _bytes_of(data)
    size = len(data) + len(PLACED_PARTITION_KEY)
    if size > max_record_size:
        raise InvalidRecordError(
            f"data is {len(data)} bytes, over max_record_size ({max_record_size}) with the "
            f"{len(PLACED_PARTITION_KEY)}-byte partition key a record without one is given"
        )
    if explicit_hash_key is None:
        return "", size, data, KEYLESS, None
    hash_key = check_explicit_hash_key(explicit_hash_key)
    return PLACED_PARTITION_KEY, size, data, hash_key, str(hash_key)

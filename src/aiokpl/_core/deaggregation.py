"""The consumer side of the KPL aggregation format: ``deaggregate`` and ``deaggregate_records``.

Splits the Kinesis records a consumer receives (boto3's ``get_records``, a Lambda Kinesis event)
into user records, passing records that are not framed as aggregates through unchanged; the
bodies are read by ``decoder``'s ``parse_body``.

Invariants:

* Framing decides: data framed as an aggregate (magic, a matching MD5 digest, a non-empty body)
  is deaggregated, and raises ``aiokpl.AggregationFormatError`` if its body is malformed;
  anything else is one ordinary record with ``aggregated=False``.
* A Kinesis record may come without a partition key (a stream whose record distribution
  strategy is ``AUTO`` stores records put without one): an ordinary record then has
  ``partition_key=None``; the user records of an aggregate always have theirs (the format
  requires one), whatever the Kinesis record's.
* Every user record of an aggregate carries its index in it as its sub-sequence number, also
  when others were dropped by ``shard=``.

Consumer side, ``deaggregate(..., shard=...)`` drops the user records whose hash key lies
outside the shard they were read from, as the KCL's ``AggregatorUtil.deaggregate`` does (the
copies an aggregate sent with a stale shard map leaves on the wrong shard). Where we differ:
the KCL drops the *whole* aggregate as soon as one of its user records is out of range; we
drop exactly the out-of-range ones, which reads every record a KPL producer stores (its
``retrier.cc`` ``succeed_if_correct_shard`` resends only those and reports the others
delivered). aiokpl's producer resends the whole aggregate, so that a KCL consumer loses
none: read with ``shard=``, the in-range records of such an aggregate come twice.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from . import decoder
from .errors import AggregationFormatError
from .hashing import MAX_HASH_KEY, hash_key_of
from .wire import DIGEST_SIZE, MAGIC, MAGIC_SIZE, DeaggregatedRecord

__all__ = (
    "deaggregate",
    "deaggregate_records",
    "hash_key_range",
)


# Sub-sequence numbers 0, 1, 2, ... shared by every aggregate's records: the same int objects
# (no allocation per record above 256) make the records cheaper for the garbage collector to
# traverse, and they keep a long list of them smaller. Replaced, never mutated (thread-safe).
_sub_sequence_numbers: tuple[int, ...] = ()
_SHARED_SUB_SEQUENCE_NUMBERS = 1 << 16

# The fields of a DeaggregatedRecord that vary from one user record to the next (the others
# are the Kinesis record's): partition key, data, sub-sequence number; the explicit hash key
# (bit 2) and the tags (bit 7) too when some record has one.
_VARYING = 0b10011

_HASH_KEY_DIGITS = len(str(MAX_HASH_KEY))  # 39: an explicit hash key with more is out of range


def _sub_sequence_numbers_for(count: int) -> tuple[int, ...] | int:
    """At least the numbers ``0 ... count - 1``, in order (possibly more); or, past the shared
    ones, ``0``: ``decoder.records`` numbers the records from it (a tuple of them cost as much
    again as the records of a few bytes they numbered)."""
    global _sub_sequence_numbers
    numbers = _sub_sequence_numbers
    if count <= len(numbers):
        return numbers
    if count > _SHARED_SUB_SEQUENCE_NUMBERS:
        return 0
    numbers = _sub_sequence_numbers = tuple(range(max(count, 2 * len(numbers), 1024)))
    return numbers


def _require(record: Mapping[str, Any], key: str, what: str) -> Any:
    try:
        return record[key]
    except KeyError:
        raise ValueError(f"{what} has no {key!r} key") from None


ShardLike = Mapping[str, Any] | tuple[int | str, int | str]
"""What ``shard=`` accepts: a shard entry of a ``ListShards`` / ``DescribeStream`` response
(a mapping with ``HashKeyRange``), a ``HashKeyRange`` mapping itself, or a ``(starting,
ending)`` pair of hash keys (``int`` or decimal ``str``), both inclusive."""


def _hash_key(value: object, what: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.isdecimal() and value.isascii():
        number = int(value)
    else:
        raise ValueError(f"shard: the {what} hash key must be a decimal integer, got {value!r}")
    if not 0 <= number <= MAX_HASH_KEY:
        raise ValueError(f"shard: the {what} hash key must be in 0 … 2**128-1, got {number}")
    return number


def hash_key_range(shard: ShardLike) -> tuple[int, int]:
    """The inclusive ``(starting, ending)`` hash keys of ``shard``, as ``deaggregate`` reads it.

    Raises:
        ValueError: a key is missing, not a decimal hash key, or the range is empty.
        TypeError: ``shard`` is neither a mapping nor a pair.
    """
    if isinstance(shard, Mapping):
        key_range = shard.get("HashKeyRange", shard)
        try:
            starting = key_range["StartingHashKey"]
            ending = key_range["EndingHashKey"]
        except (KeyError, TypeError):
            raise ValueError(
                "shard: a shard entry (ListShards, DescribeStream) has a 'HashKeyRange' with "
                "'StartingHashKey' and 'EndingHashKey'; got a mapping with keys "
                f"{sorted(map(str, shard))}"
            ) from None
    elif isinstance(shard, tuple | list) and len(shard) == 2:
        starting, ending = shard
    else:
        raise TypeError(
            "shard must be a shard entry of ListShards or DescribeStream (a mapping with "
            f"'HashKeyRange') or a (starting, ending) pair, not {type(shard).__name__}"
        )
    start = _hash_key(starting, "starting")
    end = _hash_key(ending, "ending")
    if start > end:
        raise ValueError(f"shard: the starting hash key {start} is above the ending one {end}")
    return start, end


def deaggregate(
    record: Mapping[str, Any], *, shard: ShardLike | None = None
) -> list[DeaggregatedRecord]:
    """Split one Kinesis record, as a consumer receives it, into its user records.

    Accepts three shapes of record:

    * a record from boto3's or aiobotocore's ``get_records``: ``Data`` (bytes),
      ``PartitionKey``, ``SequenceNumber``, ``ApproximateArrivalTimestamp``;
    * a record of a Lambda Kinesis event: ``{"eventSource": "aws:kinesis", "kinesis": {...}}``;
    * the ``"kinesis"`` dict of such a record on its own: ``data`` (base64), ``partitionKey``,
      ``sequenceNumber``, ``approximateArrivalTimestamp``.

    A record stored without a partition key (on a stream whose record distribution strategy is
    ``AUTO``) comes without ``PartitionKey`` from ``get_records``, and without
    ``partitionKey`` (or with ``null``) in a Lambda event: if it is not an aggregate, its one
    user record has ``partition_key=None``.

    Like AWS's deaggregators (the KCL's and ``aws_kinesis_agg``), data that is not framed as an
    aggregate (no magic bytes, a digest that does not match, nothing between the magic and the
    digest) is an ordinary record and comes back as a single ``DeaggregatedRecord`` with
    ``aggregated=False``. Unlike ``aws_kinesis_agg``, which passes such a record through (or
    drops its records) silently, data that is framed as an aggregate but whose protobuf body is
    malformed raises: a matching MD5 digest rules out chance.

    Args:
        record: the Kinesis record, in one of the shapes above. Only the keys named above are
            read; ``PartitionKey``, ``SequenceNumber`` and ``ApproximateArrivalTimestamp`` (and
            their Lambda spellings) may be absent.
        shard: the shard the record was read from, to drop the user records of an aggregate
            whose hash key (explicit, or the MD5 of the partition key) lies outside its range,
            as the KCL does: the stale copies an aggregate sent with an outdated shard map
            leaves behind around a reshard, whose producer resent them to the right shard.
            A ``ListShards`` / ``DescribeStream`` shard entry, its ``HashKeyRange``, or a
            ``(starting, ending)`` pair (inclusive). A record that was not aggregated is
            never dropped (Kinesis routed it itself), with or without a partition key.
            ``None`` (the default) keeps every user record.

    Each user record comes with the Kinesis record's sequence number and arrival time, and its
    own sub-sequence number (its index in the aggregate, also when others were dropped).

    Returns:
        The user records, in order.

    Raises:
        ValueError: if the record is none of these shapes (the message names the missing key),
            a Lambda record's data is not valid base64, or ``shard`` has no valid hash key
            range.
        TypeError: if ``shard`` is neither a mapping nor a pair.
        AggregationFormatError: if the data is framed as an aggregate but its body is malformed
            (with ``shard``, also if an explicit hash key in it is not a decimal integer).
    """
    key_range = None if shard is None else hash_key_range(shard)
    return list(_deaggregate(record, key_range))


def _in_range(
    records: Iterable[DeaggregatedRecord], key_range: tuple[int, int]
) -> list[DeaggregatedRecord]:
    """The records whose hash key lies in ``key_range`` (inclusive)."""
    start, end = key_range
    by_partition_key: dict[str, int] = {}
    kept = []
    for user_record in records:
        ehk = user_record.explicit_hash_key
        if ehk is None:
            key = user_record.partition_key
            assert key is not None  # a user record of an aggregate: the format requires one
            hash_key = by_partition_key.get(key)
            if hash_key is None:
                hash_key = by_partition_key[key] = hash_key_of(key.encode())
        elif ehk.isdecimal() and ehk.isascii():
            digits = ehk.lstrip("0")
            if len(digits) > _HASH_KEY_DIGITS:
                continue  # above every hash key (and int() would refuse so many digits)
            hash_key = int(digits or "0")
        else:
            raise AggregationFormatError(
                f"malformed aggregate body: explicit hash key {ehk[:50]!r} is not a decimal integer"
            )
        if start <= hash_key <= end:
            kept.append(user_record)
    return kept


def _deaggregate(
    record: Mapping[str, Any], key_range: tuple[int, int] | None = None
) -> Iterable[DeaggregatedRecord]:
    """``deaggregate``, its records as an iterator (``deaggregate_records`` extends its list)."""
    if "Data" in record:
        data = record["Data"]
        partition_key = record.get("PartitionKey")  # none on a stream that places records
        sequence_number = record.get("SequenceNumber")
        timestamp = record.get("ApproximateArrivalTimestamp")
    else:
        if "kinesis" in record:
            record = record["kinesis"]
            what = "Lambda Kinesis record's 'kinesis' dict"
        elif "data" in record:
            what = "Lambda 'kinesis' dict"
        else:
            raise ValueError(
                "not a Kinesis record: no 'Data' key (boto3 get_records), 'kinesis' key (Lambda "
                "event record) or 'data' key (a Lambda record's 'kinesis' dict)"
            )
        encoded = _require(record, "data", what)
        partition_key = record.get("partitionKey")  # missing or null: stored without one
        sequence_number = record.get("sequenceNumber")
        timestamp = record.get("approximateArrivalTimestamp")
        try:
            data = base64.b64decode(encoded, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"{what}: 'data' is not valid base64 ({exc})") from None
    if type(data) is not bytes:
        data = bytes(data)
    end = len(data) - DIGEST_SIZE
    if (
        end > MAGIC_SIZE
        and data[:MAGIC_SIZE] == MAGIC
        and hashlib.md5(memoryview(data)[MAGIC_SIZE:end], usedforsecurity=False).digest()
        == data[end:]
    ):
        partition_keys, datas, explicit_hash_keys, tags = decoder.parse_body(data, MAGIC_SIZE, end)
        fields = (
            partition_keys,
            datas,
            explicit_hash_keys,
            sequence_number,
            _sub_sequence_numbers_for(len(datas)),
            True,
            timestamp,
            () if tags is None else tags,
        )
        varying = _VARYING | (explicit_hash_keys is not None) << 2 | (tags is not None) << 7
        user_records = decoder.records(DeaggregatedRecord, len(datas), fields, varying)
        return user_records if key_range is None else _in_range(user_records, key_range)
    return [DeaggregatedRecord(partition_key, data, None, sequence_number, 0, False, timestamp)]


def deaggregate_records(
    records: Iterable[Mapping[str, Any]] | Mapping[str, Any],
    *,
    shard: ShardLike | None = None,
) -> list[DeaggregatedRecord]:
    """Split many Kinesis records into their user records, as ``deaggregate`` does each.

    Args:
        records: Kinesis records in any of the shapes ``deaggregate`` accepts (the
            ``Records`` of a ``get_records`` response, say); or a whole Lambda event (a mapping
            with a ``"Records"`` key); or a single record.
        shard: the shard they were all read from, as for ``deaggregate``; ``None`` keeps
            every user record. (A Lambda event may mix shards: pass ``shard`` only for records
            of one shard.)

    Returns:
        Every user record, in order, flattened into one list.

    Raises:
        ValueError: as ``deaggregate``.
        TypeError: as ``deaggregate``.
        AggregationFormatError: as ``deaggregate``.
    """
    key_range = None if shard is None else hash_key_range(shard)
    items: Iterable[Mapping[str, Any]]
    if isinstance(records, Mapping):
        if "Records" not in records:
            return list(_deaggregate(records, key_range))
        items = records["Records"]
    else:
        items = records
    out: list[DeaggregatedRecord] = []
    for record in items:
        out += _deaggregate(record, key_range)
    return out

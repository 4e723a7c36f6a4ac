"""The fake's API operations: botocore's arguments in, botocore's response out, over the model.

What is here: :class:`_Operations`, one synchronous method per operation the fake serves
(``create_stream`` … ``merge_shards``, named as the client's methods), each taking the
operation's keyword arguments as botocore passes them. Each checks its arguments as the
service does (``_validation``), resolves the stream, works on the model (``_model``) and
returns the response dictionary botocore would, without ``ResponseMetadata``, which the facade
(``_fake.FakeKinesis._call``) adds with the request id.

Invariants:

* a service error is raised as ``_Rejected`` (the facade turns it into a ``ClientError``),
  what botocore would refuse to send as ``TypeError``;
* every record of a ``PutRecords`` request is checked before any is stored, so a request
  rejected as a whole (validation, a record over the stream's maximum, over 5 MiB) stores
  nothing and consumes no record script;
* the records of one ``PutRecords`` are decided in order, each on its own: its scripted
  outcome, else a draw of the random plan, else placement (by its hash key, or on an ``AUTO``
  stream one draw of the model's placement generator) and the shard's token bucket, else it
  is stored, so one bad or throttled record never fails the others;
* a write without a partition key is refused whole (``ValidationException``) unless its stream
  is ``AUTO``; a ``DryRun`` write or read is checked as the real one (stream, arguments,
  sizes) and then refused with ``DryRunOperationException``: it stores nothing, takes no
  throughput, consumes no record script and draws nothing;
* ``StreamId`` ("reserved for future use") is accepted wherever the API has it, and ignored;
* pages (``ListShards``, ``DescribeStream``) list shards in shard id order, and a page's token
  or an iterator names its stream's ``uid`` and the clock reading it was issued at: it
  expires after ``_TOKEN_LIFETIME`` seconds and is not found once its stream is deleted.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ._faults import _FaultState
from ._model import _Model
from ._streams import _check_record_rules, _Shard, _throttled
from ._validation import (
    _DEFAULT_MAX_RECORD_SIZE,
    _DESCRIBE_LIMIT_DEFAULT,
    _DESCRIBE_LIMIT_MAX,
    _DESCRIBE_PAGE_MAX,
    _DRY_RUN,
    _DRY_RUN_MESSAGE,
    _FILTER_TYPES,
    _GET_RECORDS_LIMIT,
    _GET_RECORDS_MAX_BYTES,
    _HASH_KEY,
    _ITERATOR_TYPES,
    _MAX_RECORDS_PER_REQUEST,
    _MAX_REQUEST_SIZE,
    _MAX_RESULTS_DEFAULT,
    _MAX_RESULTS_LIMIT,
    _MIB,
    _ON_DEMAND_SHARDS,
    _SEQUENCE_BASE,
    _STREAM_NAME,
    _TOKEN_LIFETIME,
    _check_distribution,
    _check_entry,
    _check_sequence_number,
    _created_distribution,
    _datetime,
    _decode,
    _dry_run,
    _encode,
    _max_record_size_of,
    _missing,
    _page_size,
    _Rejected,
    _require_keys,
    _seconds,
    _validation,
)


class _Operations:
    """The operations of one fake, over its model and its faults (the record scripts and
    the random plan decide the fate of ``PutRecords`` records)."""

    __slots__ = ("_fault_state", "_model")

    def __init__(self, model: _Model, fault_state: _FaultState) -> None:
        self._model = model
        self._fault_state = fault_state

    def create_stream(
        self,
        StreamName: str,
        ShardCount: int | None,
        StreamModeDetails: Mapping[str, str] | None,
        MaxRecordSizeInKiB: int | None,
        RecordDistributionStrategy: str | None,
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
        distribution = _created_distribution(RecordDistributionStrategy, mode)
        if StreamName in self._model.streams:
            raise _Rejected(
                "ResourceInUseException",
                f"Stream {StreamName} under account {self._model.account} already exists.",
            )
        self._model.create(StreamName, ShardCount, None, max_record_size, mode, distribution)
        return {}

    def update_stream_record_distribution_strategy(
        self, StreamARN: str, RecordDistributionStrategy: str, StreamId: str | None
    ) -> dict[str, Any]:
        strategy = _check_distribution(RecordDistributionStrategy)
        self._model.update_distribution(self._model.stream(None, StreamARN), strategy)
        return {}

    def delete_stream(
        self,
        StreamName: str | None,
        StreamARN: str | None,
        EnforceConsumerDeletion: bool | None,
        StreamId: str | None,
    ) -> dict[str, Any]:
        stream = self._model.stream(StreamName, StreamARN)
        del self._model.streams[stream.name]
        return {}

    def describe_stream(
        self,
        StreamName: str | None,
        Limit: int | None,
        ExclusiveStartShardId: str | None,
        StreamARN: str | None,
        StreamId: str | None,
    ) -> dict[str, Any]:
        # Up to 10,000 is valid, but a page holds 100 shards at most, as the service answers.
        limit = min(
            _page_size(Limit, "limit", _DESCRIBE_LIMIT_DEFAULT, _DESCRIBE_LIMIT_MAX),
            _DESCRIBE_PAGE_MAX,
        )
        stream = self._model.stream(StreamName, StreamARN)
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

    def describe_stream_summary(
        self, StreamName: str | None, StreamARN: str | None, StreamId: str | None
    ) -> dict[str, Any]:
        stream = self._model.stream(StreamName, StreamARN)
        open_count = sum(1 for s in stream.shards.values() if s.ending_sequence is None)
        summary: dict[str, Any] = {
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
        if stream.mode == "ON_DEMAND":
            # "Only present for streams that use the on-demand capacity mode."
            summary["RecordDistributionStrategy"] = stream.distribution
        return {"StreamDescriptionSummary": summary}

    def update_max_record_size(
        self, MaxRecordSizeInKiB: int, StreamARN: str | None, StreamId: str | None
    ) -> dict[str, Any]:
        size = _max_record_size_of(MaxRecordSizeInKiB)
        self._model.stream(None, StreamARN).max_record_size = size
        return {}

    def list_shards(
        self,
        StreamName: str | None,
        StreamARN: str | None,
        NextToken: str | None,
        ExclusiveStartShardId: str | None,
        MaxResults: int | None,
        StreamCreationTimestamp: datetime | float | None,
        ShardFilter: Mapping[str, Any] | None,
        StreamId: str | None,
    ) -> dict[str, Any]:
        now = self._model.now()
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
            stream = self._model.streams.get(name)
            if stream is None or stream.uid != uid:
                raise _Rejected(
                    "ResourceNotFoundException",
                    f"Stream {name} under account {self._model.account} not found.",
                )
        else:
            stream = self._model.stream(StreamName, StreamARN)
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

    def put_records(
        self,
        Records: Sequence[Mapping[str, Any]],
        StreamName: str | None,
        StreamARN: str | None,
        StreamId: str | None,
        DryRun: bool | None,
    ) -> dict[str, Any]:
        dry_run = _dry_run(DryRun)
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
        stream = self._model.stream(StreamName, StreamARN)
        if not stream.auto:
            _require_keys(entries)
        autoscale = stream.autoscale
        if autoscale is not None and not dry_run and self._model.now() >= autoscale.next_at:
            self._model.auto_reshard(stream, autoscale, self._model.now())
        total = 0
        for index, (_, data, explicit_hash_key, key_bytes) in enumerate(entries):
            total += _check_record_rules(stream, key_bytes, data, explicit_hash_key, index)
        request_limit = max(_MAX_REQUEST_SIZE, stream.max_record_size)
        if total > request_limit:
            raise _Rejected(
                "InvalidArgumentException",
                f"Records size exceeds {request_limit // _MIB} MB limit",
            )
        if dry_run:
            raise _Rejected(_DRY_RUN, _DRY_RUN_MESSAGE)
        script = (
            self._fault_state.record_scripts.popleft() if self._fault_state.record_scripts else None
        )
        plan = self._fault_state.plan
        record_rate = plan.record_failure_rate
        draw = self._fault_state.random.random
        placement = self._model.placement
        now = self._model.now()
        results: list[dict[str, str]] = []
        failed = 0
        for index, (partition_key, data, explicit_hash_key, key_bytes) in enumerate(entries):
            outcome = script[index] if script is not None and index < len(script) else None
            if outcome is None and record_rate > 0.0 and draw() < record_rate:
                outcome = plan.record_error
            if outcome is None:
                key = None if partition_key is None else key_bytes
                shard = stream.place(key, explicit_hash_key, placement)
                if shard.bucket is not None and not shard.bucket.try_take(
                    (1.0, float(len(key_bytes) + len(data))), now
                ):
                    outcome = _throttled(stream, shard)
                else:
                    sequence = self._model.store(
                        stream, shard, partition_key, explicit_hash_key, data, now
                    )
                    results.append({"SequenceNumber": sequence, "ShardId": shard.shard_id})
                    continue
            failed += 1
            results.append({"ErrorCode": outcome[0], "ErrorMessage": outcome[1]})
        return {"FailedRecordCount": failed, "Records": results, "EncryptionType": "NONE"}

    def put_record(
        self,
        PartitionKey: str | None,
        Data: bytes | bytearray | str,
        StreamName: str | None,
        StreamARN: str | None,
        ExplicitHashKey: str | None,
        SequenceNumberForOrdering: str | None,
        StreamId: str | None,
        DryRun: bool | None,
    ) -> dict[str, Any]:
        dry_run = _dry_run(DryRun)
        entry: dict[str, Any] = {"Data": Data}
        if PartitionKey is not None:
            entry["PartitionKey"] = PartitionKey
        if ExplicitHashKey is not None:
            entry["ExplicitHashKey"] = ExplicitHashKey
        partition_key, data, explicit_hash_key, key_bytes = _check_entry(entry, "", "")
        if SequenceNumberForOrdering is not None:
            _check_sequence_number(SequenceNumberForOrdering, "sequenceNumberForOrdering")
        stream = self._model.stream(StreamName, StreamARN)
        if partition_key is None and not stream.auto:
            raise _missing("partitionKey")
        if SequenceNumberForOrdering is not None and stream.auto:
            raise _Rejected(
                "InvalidArgumentException",
                f"SequenceNumberForOrdering is not supported for stream {stream.name} under "
                f"account {stream.account}: its record distribution strategy is AUTO.",
            )
        autoscale = stream.autoscale
        if autoscale is not None and not dry_run and self._model.now() >= autoscale.next_at:
            self._model.auto_reshard(stream, autoscale, self._model.now())
        _check_record_rules(stream, key_bytes, data, explicit_hash_key, None)
        if dry_run:
            raise _Rejected(_DRY_RUN, _DRY_RUN_MESSAGE)
        key = None if partition_key is None else key_bytes
        shard = stream.place(key, explicit_hash_key, self._model.placement)
        now = self._model.now()
        if shard.bucket is not None and not shard.bucket.try_take(
            (1.0, float(len(key_bytes) + len(data))), now
        ):
            code, message = _throttled(stream, shard)
            raise _Rejected(code, message)
        sequence = self._model.store(stream, shard, partition_key, explicit_hash_key, data, now)
        return {"ShardId": shard.shard_id, "SequenceNumber": sequence, "EncryptionType": "NONE"}

    def get_shard_iterator(
        self,
        ShardId: str,
        ShardIteratorType: str,
        StreamName: str | None,
        StreamARN: str | None,
        StartingSequenceNumber: str | None,
        Timestamp: datetime | float | None,
        StreamId: str | None,
        DryRun: bool | None,
    ) -> dict[str, Any]:
        dry_run = _dry_run(DryRun)
        if ShardIteratorType not in _ITERATOR_TYPES:
            raise _validation(
                ShardIteratorType,
                "shardIteratorType",
                f"satisfy enum value set: [{', '.join(_ITERATOR_TYPES)}]",
            )
        if StartingSequenceNumber is not None:
            _check_sequence_number(StartingSequenceNumber, "startingSequenceNumber")
        stream = self._model.stream(StreamName, StreamARN)
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
                    f"on shard {ShardId} in stream {stream.name} under account "
                    f"{self._model.account} is invalid because it did not come from this shard.",
                )
            if ShardIteratorType == "AT_SEQUENCE_NUMBER":
                position = bisect_left(shard.sequences, number)
            else:
                position = bisect_right(shard.sequences, number)
        if dry_run:
            raise _Rejected(_DRY_RUN, _DRY_RUN_MESSAGE)
        iterator = _encode(
            "ShardIterator", [stream.name, stream.uid, shard.shard_id, position, self._model.now()]
        )
        return {"ShardIterator": iterator}

    def get_records(
        self,
        ShardIterator: str,
        Limit: int | None,
        StreamARN: str | None,
        StreamId: str | None,
        DryRun: bool | None,
    ) -> dict[str, Any]:
        dry_run = _dry_run(DryRun)
        limit = _page_size(Limit, "limit", _GET_RECORDS_LIMIT, _GET_RECORDS_LIMIT)
        name, uid, shard_id, position, issued = _decode(ShardIterator, "ShardIterator", 5)
        now = self._model.now()
        if now - issued > _TOKEN_LIFETIME:
            raise _Rejected(
                "ExpiredIteratorException",
                f"Iterator expired. The iterator was created at time {_datetime(issued)} while "
                f"right now it is {_datetime(now)} which is further in the future than the "
                f"tolerated delay of {_TOKEN_LIFETIME * 1000:.0f} milliseconds.",
            )
        stream = self._model.streams.get(name)
        if stream is None or stream.uid != uid:
            raise _Rejected(
                "ResourceNotFoundException",
                f"Stream {name} under account {self._model.account} not found.",
            )
        if StreamARN is not None and StreamARN != stream.arn:
            raise _Rejected(
                "InvalidArgumentException",
                f"StreamARN {StreamARN} does not match the stream of the shard iterator.",
            )
        shard = stream.shard(shard_id)
        if dry_run:
            raise _Rejected(_DRY_RUN, _DRY_RUN_MESSAGE)
        stored = shard.records
        records: list[dict[str, Any]] = []
        size = 0
        end = min(len(stored), position + limit)
        while position < end:
            record = stored[position]
            key = record.partition_key
            size += len(record.data) + (0 if key is None else len(key.encode()))
            if records and size > _GET_RECORDS_MAX_BYTES:
                break
            answer = {
                "SequenceNumber": record.sequence_number,
                "ApproximateArrivalTimestamp": _datetime(record.arrival_time),
                "Data": record.data,
            }
            if key is not None:  # a record put without one is read back without one
                answer["PartitionKey"] = key
            records.append(answer)
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

    def split_shard(
        self,
        ShardToSplit: str,
        NewStartingHashKey: str,
        StreamName: str | None,
        StreamARN: str | None,
        StreamId: str | None,
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
        stream = self._model.stream(StreamName, StreamARN)
        self._model.split(stream, ShardToSplit, int(NewStartingHashKey))
        return {}

    def merge_shards(
        self,
        ShardToMerge: str,
        AdjacentShardToMerge: str,
        StreamName: str | None,
        StreamARN: str | None,
        StreamId: str | None,
    ) -> dict[str, Any]:
        stream = self._model.stream(StreamName, StreamARN)
        self._model.merge(stream, ShardToMerge, AdjacentShardToMerge)
        return {}


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

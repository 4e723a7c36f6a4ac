"""The fake's client surface: the coroutine methods of an aiobotocore Kinesis client.

What is here: :class:`ClientApi`, the base of :class:`~aiokpl.testing.FakeKinesis` that holds
one coroutine per operation the fake serves (``create_stream`` … ``merge_shards``), with
botocore's keyword arguments and the response and errors each can give. Each method is one
call of the facade's call path (``_fake.FakeKinesis._call``) with the operation's handler in
``_operations``: the signatures and their documentation are here, the behaviour is there.

Invariants: a method passes every argument on by name, ``None`` included (the call path drops
``None`` as botocore does), and does nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._operations import _Operations

__all__ = ("ClientApi",)


class ClientApi:
    """The coroutine methods of an aiobotocore Kinesis client, served through ``_call``."""

    _operations: _Operations

    async def _call(
        self, operation: str, handler: Callable[..., dict[str, Any]], **kwargs: Any
    ) -> dict[str, Any]:
        """Serve one call of ``operation`` with ``handler`` (the facade's call path)."""
        raise NotImplementedError

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
            self._operations.create_stream,
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
            self._operations.delete_stream,
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
            self._operations.describe_stream,
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
            self._operations.describe_stream_summary,
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
            self._operations.update_max_record_size,
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
            self._operations.list_shards,
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
            self._operations.put_records,
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
            self._operations.put_record,
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
            self._operations.get_shard_iterator,
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
            self._operations.get_records,
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
            self._operations.split_shard,
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
            self._operations.merge_shards,
            ShardToMerge=ShardToMerge,
            AdjacentShardToMerge=AdjacentShardToMerge,
            StreamName=StreamName,
            StreamARN=StreamARN,
        )

"""The fake's client surface: the coroutine methods of an aiobotocore Kinesis client.

What is here: :class:`ClientApi`, the base of :class:`~aiokpl.testing.FakeKinesis` that holds
one coroutine per operation the fake serves (``create_stream`` … ``merge_shards``), with
botocore's keyword arguments and the response and errors each can give. Each method is one
call of the facade's call path (``_fake.FakeKinesis._call``) with the operation's handler in
``_operations``: the signatures and their documentation are here, the behaviour is there.

Invariants: a method passes every argument on by name, ``None`` included (the call path drops
``None`` as botocore does), and does nothing else. ``StreamId`` ("Not Implemented. Reserved for
future use." in the API model) is taken wherever the API has it, and ignored.
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
        RecordDistributionStrategy: str | None = None,
    ) -> dict[str, Any]:
        """Create a stream, active at once, like ``CreateStream``.

        Without ``ShardCount``, an ``ON_DEMAND`` stream starts with 4 shards. Streams created
        here are not throttled; use :meth:`add_stream` for that. ``RecordDistributionStrategy``
        ``"AUTO"`` (on-demand streams only) has the stream place records itself, ignoring
        their keys (see :meth:`update_stream_record_distribution_strategy`);
        ``"USER_PARTITION_KEY"`` is the default.

        Raises:
            botocore.exceptions.ClientError: ``ResourceInUseException`` if the name is taken,
                ``ValidationException`` for a bad name, number or strategy,
                ``InvalidArgumentException`` for a provisioned stream without ``ShardCount``
                or with the ``AUTO`` strategy.
        """
        return await self._call(
            "CreateStream",
            self._operations.create_stream,
            StreamName=StreamName,
            ShardCount=ShardCount,
            StreamModeDetails=StreamModeDetails,
            MaxRecordSizeInKiB=MaxRecordSizeInKiB,
            RecordDistributionStrategy=RecordDistributionStrategy,
        )

    async def update_stream_record_distribution_strategy(
        self, *, StreamARN: str, RecordDistributionStrategy: str, StreamId: str | None = None
    ) -> dict[str, Any]:
        """Set an on-demand stream's record distribution strategy, at once, like
        ``UpdateStreamRecordDistributionStrategy``.

        On ``"AUTO"`` the stream ignores the partition key and explicit hash key of the records
        put afterwards and places each on one of its open shards, drawn at random (the fake's
        ``placement_seed`` seeds the draws); a record may then come without a partition key,
        and ``PutRecord`` refuses ``SequenceNumberForOrdering``. ``"USER_PARTITION_KEY"`` routes
        by key again. Records already stored stay where they are.

        Raises:
            botocore.exceptions.ClientError: ``InvalidArgumentException`` for a provisioned
                stream, ``ValidationException`` for an unknown strategy or a malformed ARN,
                ``ResourceNotFoundException`` for an unknown stream.
        """
        return await self._call(
            "UpdateStreamRecordDistributionStrategy",
            self._operations.update_stream_record_distribution_strategy,
            StreamARN=StreamARN,
            RecordDistributionStrategy=RecordDistributionStrategy,
            StreamId=StreamId,
        )

    async def delete_stream(
        self,
        *,
        StreamName: str | None = None,
        StreamARN: str | None = None,
        EnforceConsumerDeletion: bool | None = None,
        StreamId: str | None = None,
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
            StreamId=StreamId,
        )

    async def describe_stream(
        self,
        *,
        StreamName: str | None = None,
        Limit: int | None = None,
        ExclusiveStartShardId: str | None = None,
        StreamARN: str | None = None,
        StreamId: str | None = None,
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
            StreamId=StreamId,
        )

    async def describe_stream_summary(
        self,
        *,
        StreamName: str | None = None,
        StreamARN: str | None = None,
        StreamId: str | None = None,
    ) -> dict[str, Any]:
        """Describe a stream, like ``DescribeStreamSummary``.

        An on-demand stream's summary has its ``RecordDistributionStrategy``; a provisioned
        one's has none, as from the service.

        Raises:
            botocore.exceptions.ClientError: ``ResourceNotFoundException`` for an unknown
                stream.
        """
        return await self._call(
            "DescribeStreamSummary",
            self._operations.describe_stream_summary,
            StreamName=StreamName,
            StreamARN=StreamARN,
            StreamId=StreamId,
        )

    async def update_max_record_size(
        self, *, MaxRecordSizeInKiB: int, StreamARN: str | None = None, StreamId: str | None = None
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
            StreamId=StreamId,
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
        StreamId: str | None = None,
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
            StreamId=StreamId,
        )

    async def put_records(
        self,
        *,
        Records: Sequence[Mapping[str, Any]],
        StreamName: str | None = None,
        StreamARN: str | None = None,
        StreamId: str | None = None,
        DryRun: bool | None = None,
    ) -> dict[str, Any]:
        """Put up to 500 records, like ``PutRecords``.

        Each record is routed, throttled and stored on its own; the response's ``Records``
        are aligned with the request's: ``{"SequenceNumber", "ShardId"}`` for a stored record,
        ``{"ErrorCode", "ErrorMessage"}`` for a failed one, counted in ``FailedRecordCount``.
        On an ``AUTO`` stream each record goes to an open shard drawn at random, whatever its
        keys, and may come without ``PartitionKey``. With ``DryRun=True`` the request is
        checked as it would be served, then refused: nothing is stored.

        Raises:
            botocore.exceptions.ClientError: ``ValidationException`` for a request outside the
                API's constraints (0 or over 500 records, a partition key of 0 or over 256
                characters, or none on a stream that is not ``AUTO``, a malformed explicit hash
                key, data over 10 MiB), ``DryRunOperationException`` for a dry run that passed
                its checks,
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
            StreamId=StreamId,
            DryRun=DryRun,
        )

    async def put_record(
        self,
        *,
        Data: bytes | bytearray | str,
        PartitionKey: str | None = None,
        StreamName: str | None = None,
        StreamARN: str | None = None,
        ExplicitHashKey: str | None = None,
        SequenceNumberForOrdering: str | None = None,
        StreamId: str | None = None,
        DryRun: bool | None = None,
    ) -> dict[str, Any]:
        """Put one record, like ``PutRecord``.

        ``SequenceNumberForOrdering`` is checked for form only: sequence numbers here always
        increase anyway. An ``AUTO`` stream places the record as :meth:`put_records` does, and
        refuses ``SequenceNumberForOrdering``.

        Raises:
            botocore.exceptions.ClientError: as :meth:`put_records` for the request,
                ``InvalidArgumentException`` for ``SequenceNumberForOrdering`` on an ``AUTO``
                stream, and ``ProvisionedThroughputExceededException`` when the record is
                throttled.
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
            StreamId=StreamId,
            DryRun=DryRun,
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
        StreamId: str | None = None,
        DryRun: bool | None = None,
    ) -> dict[str, Any]:
        """Get an iterator into a shard, like ``GetShardIterator``.

        ``TRIM_HORIZON`` starts at the shard's first record, ``LATEST`` after its last one,
        ``AT_SEQUENCE_NUMBER``/``AFTER_SEQUENCE_NUMBER`` at/after ``StartingSequenceNumber``,
        ``AT_TIMESTAMP`` at the first record that arrived at or after ``Timestamp``.

        Raises:
            botocore.exceptions.ClientError: ``ResourceNotFoundException`` for an unknown
                stream or shard, ``ValidationException`` for an unknown iterator type or a
                malformed sequence number, ``InvalidArgumentException`` for a missing or
                foreign sequence number or a missing timestamp, ``DryRunOperationException``
                for ``DryRun=True`` once the rest is checked.
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
            StreamId=StreamId,
            DryRun=DryRun,
        )

    async def get_records(
        self,
        *,
        ShardIterator: str,
        Limit: int | None = None,
        StreamARN: str | None = None,
        StreamId: str | None = None,
        DryRun: bool | None = None,
    ) -> dict[str, Any]:
        """Read records from a shard iterator, like ``GetRecords``.

        Returns at most ``Limit`` records (default and maximum 10000) and at most 10 MiB of
        data (at least one record), with ``NextShardIterator`` (absent once a closed shard is
        read to its end, when ``ChildShards`` lists its children instead) and
        ``MillisBehindLatest``: how old the first record not returned is, 0 when caught up.
        Each record has ``SequenceNumber``, ``ApproximateArrivalTimestamp`` (a UTC datetime of
        the clock reading), ``Data`` and ``PartitionKey``, as from the service; a record put
        without a partition key (on an ``AUTO`` stream) has no ``PartitionKey``.

        Raises:
            botocore.exceptions.ClientError: ``ExpiredIteratorException`` for an iterator
                older than 300 seconds, ``InvalidArgumentException`` for one that is not an
                iterator, ``ResourceNotFoundException`` if its stream was deleted,
                ``ValidationException`` for a bad ``Limit``, ``DryRunOperationException`` for
                ``DryRun=True`` once the rest is checked.
        """
        return await self._call(
            "GetRecords",
            self._operations.get_records,
            ShardIterator=ShardIterator,
            Limit=Limit,
            StreamARN=StreamARN,
            StreamId=StreamId,
            DryRun=DryRun,
        )

    async def split_shard(
        self,
        *,
        ShardToSplit: str,
        NewStartingHashKey: str,
        StreamName: str | None = None,
        StreamARN: str | None = None,
        StreamId: str | None = None,
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
            StreamId=StreamId,
        )

    async def merge_shards(
        self,
        *,
        ShardToMerge: str,
        AdjacentShardToMerge: str,
        StreamName: str | None = None,
        StreamARN: str | None = None,
        StreamId: str | None = None,
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
            StreamId=StreamId,
        )

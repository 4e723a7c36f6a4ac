"""The API facade of the fake: :class:`FakeKinesis`, the client a test hands to a producer.

What is here: :class:`FakeKinesis`, with the setup helpers a test calls directly (streams,
resharding, faults, read-back; they raise ``ValueError``) and the one call path,
:meth:`FakeKinesis._call`, that every coroutine method of an aiobotocore Kinesis client
(``put_records``, ``list_shards``, ``get_records`` …) goes through: those methods, their
signatures and documentation, are its base class's, in ``_api``. And :class:`Request`, the log
of calls. The service model lives in ``_model`` (its streams and shards in ``_streams``), the
operations over it in ``_operations``, request checks and tokens in ``_validation``, and faults
in ``_faults``; the package documentation (``aiokpl.testing``) says what is modelled and what
is not.

The call path, in order: log the call in :attr:`FakeKinesis.requests`; pass exactly one
checkpoint, or sleep :attr:`FakeKinesis.latency`, so concurrent callers interleave as they do
with real I/O; fail if the operation is denied; take the earliest scripted fault that applies,
or else draw from the random plan; run the operation on the model; raise the scripted
exception instead of the response if the fault came after processing (a lost response); add
``ResponseMetadata`` with the next request id.

Invariants: every call is logged once and checkpoints once, whatever becomes of it; a call that
fails before the operation runs leaves the model untouched; service errors become
``botocore.exceptions.ClientError`` here and only here (built by ``aiokpl._kinesis``, so
``error_of`` sees a fake error exactly as a real one), and ``TypeError`` passes through as
botocore's own refusals do.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import anyio
import anyio.lowlevel

from .._kinesis import client_error
from ._api import ClientApi
from ._faults import FaultPlan, _fault_stream, _FaultState, _ScriptedFault
from ._model import _ACCOUNT_ID, _REGION, _Model
from ._operations import _Operations
from ._streams import FakeShard, StoredRecord
from ._validation import _DEFAULT_MAX_RECORD_SIZE, _check_operation, _Rejected

__all__ = ("FakeKinesis", "Request")


class Request(NamedTuple):
    """One call made to a :class:`FakeKinesis`, as logged in :attr:`FakeKinesis.requests`.

    Attributes:
        operation: The API operation name, e.g. ``"PutRecords"``.
        kwargs: The keyword arguments the caller passed, without those left at ``None``
            (botocore never sends a ``None``). Values are the caller's objects, not copies.
    """

    operation: str
    kwargs: dict[str, Any]


class FakeKinesis(ClientApi):
    """An in-memory Kinesis Data Streams service with the interface of an aiobotocore client.

    Set it up with the synchronous helpers (:meth:`add_stream`, :meth:`split`, :meth:`merge`,
    :meth:`remove_stream`, :meth:`set_record_distribution`), or through the API as a real client
    would (``create_stream``, ``split_shard`` …). Every API method is a coroutine taking
    botocore's keyword arguments and returning botocore's response dictionary (including a
    ``ResponseMetadata``); service errors are raised as ``botocore.exceptions.ClientError`` with
    the service's code, message and HTTP status. Streams live in one account and one region
    (``123456789012``, ``us-east-1`` unless told otherwise), as seen through a client of that
    region: a ``StreamARN`` of another region is not found (``ResourceNotFoundException``), one
    of another account is not authorized (``AccessDeniedException``: no resource policy grants
    it), and one that does not match the service's pattern is a ``ValidationException``. The
    :mod:`aiokpl.testing` documentation says what is and is not modelled.

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
        placement_seed: The seed of the ``random.Random`` that places the records of streams
            whose record distribution strategy is ``AUTO`` (one draw per record placed): the
            same seed places the same records on the same shards.

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
        placement_seed: int = 0,
    ) -> None:
        self._model = _Model(
            anyio.current_time if clock is None else clock, region, account_id, placement_seed
        )
        self._fault_state = _FaultState()
        self._operations = _Operations(self._model, self._fault_state)
        self._request_ids = itertools.count(1)
        self._latency = 0.0
        self.requests: list[Request] = []

    def __repr__(self) -> str:
        records = self._model.record_count()
        return (
            f"<FakeKinesis streams={len(self._model.streams)} records={records} "
            f"requests={len(self.requests)}>"
        )

    # -- settings ----------------------------------------------------------------------------

    @property
    def region(self) -> str:
        """The region of the fake's streams, as given to the constructor."""
        return self._model.region

    @property
    def account_id(self) -> str:
        """The account that owns the fake's streams, as given to the constructor."""
        return self._model.account

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
        return self._fault_state.plan

    @faults.setter
    def faults(self, plan: FaultPlan) -> None:
        self._fault_state.set_plan(plan)

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
        record_distribution: str = "USER_PARTITION_KEY",
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
            record_distribution: The stream's ``RecordDistributionStrategy``:
                ``"USER_PARTITION_KEY"`` (the default: records go by their keys) or, for an
                on-demand stream only, ``"AUTO"`` (see :meth:`set_record_distribution`).

        Raises:
            ValueError: The name is invalid or taken, a number is out of range, or the
                strategy is unknown, or ``AUTO`` for a provisioned stream.
        """
        self._model.add_stream(
            name,
            shard_count,
            throttle=throttle,
            records_per_second=records_per_second,
            bytes_per_second=bytes_per_second,
            burst_seconds=burst_seconds,
            max_record_size=max_record_size,
            on_demand=on_demand,
            record_distribution=record_distribution,
        )

    def set_record_distribution(self, stream: str, strategy: str) -> None:
        """Set an on-demand stream's record distribution strategy, as
        ``UpdateStreamRecordDistributionStrategy`` does, at once.

        ``"AUTO"``: the stream ignores the partition key and explicit hash key of every record
        put afterwards and places it on one of its open shards, each as likely, drawn from the
        fake's seeded generator (``placement_seed``); records may come without a partition key
        (stored with ``partition_key=None``, read back without ``PartitionKey``); ``PutRecord``
        refuses ``SequenceNumberForOrdering``; a shard's throttling applies to the records
        placed on it. ``"USER_PARTITION_KEY"``: records go by their keys again, and a record
        without a partition key is refused (``ValidationException``). Records already stored
        stay where they are. ``DescribeStreamSummary`` shows the strategy of on-demand streams.

        Raises:
            ValueError: The stream does not exist, the strategy is unknown, or it is ``AUTO``
                and the stream is provisioned.
        """
        self._model.set_record_distribution(stream, strategy)

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
        self._model.set_auto_reshard(
            stream, every_seconds, merge_every, min_open_shards, max_open_shards
        )

    def remove_stream(self, name: str) -> None:
        """Delete a stream at once, as if someone deleted it while you were using it.

        Later calls naming it fail with ``ResourceNotFoundException``, and so do iterators and
        pagination tokens issued for it, even if a stream of the same name is created again.

        Raises:
            ValueError: There is no such stream.
        """
        self._model.setup_stream(name)
        del self._model.streams[name]

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
            return self._model.split(
                self._model.setup_stream(stream), shard_id, new_starting_hash_key
            )
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
            return self._model.merge(self._model.setup_stream(stream), shard_id, adjacent_shard_id)
        except _Rejected as rejected:
            raise ValueError(rejected.message) from None

    def stream_arn(self, name: str) -> str:
        """The ARN of stream ``name`` in the fake's region and account (it need not exist)."""
        return self._model.stream_arn(name)

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

        self._fault_state.script(operation, _ScriptedFault(make, False, scope, count))

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
        self._fault_state.script(operation, _ScriptedFault(lambda: exc, after_processing, scope, 1))

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
        self._fault_state.denied[operation] = (code, message, http_status)

    def allow(self, operation: str) -> None:
        """Stop denying ``operation`` (see :meth:`deny`); nothing happens if it was not denied.

        Raises:
            ValueError: The operation is unknown.
        """
        _check_operation(operation)
        self._fault_state.denied.pop(operation, None)

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
        self._fault_state.record_scripts.append(script)

    # -- read-back ---------------------------------------------------------------------------

    def stored_records(self, stream: str, shard_id: str | None = None) -> list[StoredRecord]:
        """The records a stream holds, in the order they were stored.

        Args:
            stream: The stream name.
            shard_id: Only this shard's records (closed shards keep theirs).

        Raises:
            ValueError: The stream or shard does not exist.
        """
        state = self._model.setup_stream(stream)
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
        return [shard.snapshot() for shard in self._model.setup_stream(stream).shards.values()]

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
        denied = self._fault_state.denied.get(operation)
        if denied is not None:
            code, message, status = denied
            if message is None:
                message = self._denied_message(operation, kwargs)
            raise client_error(code, message, operation, http_status=status)
        lost_response: BaseException | None = None
        fault = self._fault_state.take(operation, kwargs)
        if fault is not None:
            if not fault.after_processing:
                raise fault.make()
            lost_response = fault.make()
        elif self._fault_state.request_fails(operation):
            code, message, status = self._fault_state.plan.request_error
            raise client_error(code, message, operation, http_status=status)
        self._model.operation = operation
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

    def _denied_message(self, operation: str, kwargs: Mapping[str, Any]) -> str:
        """What the service says to a caller whose IAM policy lacks ``kinesis:<operation>``."""
        arn = kwargs.get("StreamARN")
        name = kwargs.get("StreamName")
        if not isinstance(arn, str):
            arn = self.stream_arn(name if isinstance(name, str) else "*")
        return (
            f"User: arn:aws:iam::{self._model.account}:user/fake is not authorized to perform: "
            f"kinesis:{operation} on resource: {arn} because no identity-based policy allows "
            f"the kinesis:{operation} action"
        )

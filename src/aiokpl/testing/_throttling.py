"""AWS's per-shard write limits, a few faults, and ``AUTO`` streams, in front of moto's server
(``aiokpl local``, :func:`aiokpl.testing._servers.moto_server`).

moto, kinesalite and LocalStack store every record they are sent; Kinesis does not. A shard
takes 1,000 records and 1 MiB (data plus partition key) per second, and a client that sends
more sees ``ProvisionedThroughputExceededException``: per record in a ``PutRecords`` answer
(HTTP 200, ``FailedRecordCount`` above 0), as the whole answer to ``PutRecord`` (HTTP 400).
:class:`ThrottlingApp` is a WSGI application in front of moto's that does the same:

* every shard has a token bucket of records and one of bytes (:class:`ShardThrottle`, over
  :class:`aiokpl._core.token_bucket.TokenBucket`), filled at :class:`ShardLimits`' rates,
  holding ``burst_seconds`` of each, full when the shard is first written to (these settings
  and pure parts are ``_shard_limits``'; this module is the WSGI application);
* which shard a record goes to is moto's own answer (``Stream.get_shard_for_key`` on moto's
  model, under the same lock that serialises moto), so a throttled record is refused by the
  shard moto would have stored it on; on a stream whose record distribution strategy is
  ``AUTO`` (which moto knows nothing of: ``_moto_extras`` keeps it) it is an open shard drawn
  at random, one draw of the application's seeded generator per record, the keys ignored,
  and the record is refused or stored there;
* records that fit are stored by moto: a ``PutRecords`` (any write to an ``AUTO`` stream) by
  moto's model directly (``Stream.put_record``, or the drawn ``Shard``'s: moto's sequence
  numbers, without moto's request handling, which took three quarters of the server's time:
  see ``_stored_directly``), anything else by moto's application; records that do not fit are
  answered with AWS's error code and message, at their positions; tokens taken for records
  moto then refuses are given back;
* refused here, as by the service and not by moto: a record without a partition key on a
  stream that is not ``AUTO`` (``ValidationException``), ``SequenceNumberForOrdering`` on an
  ``AUTO`` stream, and ``DryRun`` (checked as if served, then ``DryRunOperationException``);
* optional faults (:class:`ServerFaults`): a fraction of Kinesis requests fail at random with
  ``InternalFailure`` (HTTP 500) or ``ServiceUnavailable`` (HTTP 503); requests naming a
  *failing* stream fail with ``InternalFailure``; requests naming a *hanging* stream are
  answered only after ``hang_seconds`` (waited outside moto's lock, so other streams go on);
* per second of the wall clock and per stream, the records stored, throttled and failed
  (:class:`ThroughputCounts`), served as JSON at :data:`THROUGHPUT_PATH`: a benchmark reads
  the server's own counts, not the producers' accounting.

Without limits every record fits: the same application serves ``aiokpl local`` with or
without ``--throttle``, so ``AUTO`` streams and ``DryRun`` behave alike. ``CreateStream``,
``UpdateStreamRecordDistributionStrategy``, ``DescribeStreamSummary`` and dry-run reads are
``_moto_extras``'. Everything else (other operations, other services such as the DynamoDB table
of ``aiokpl.coordination``) goes to moto untouched, behind the same lock as before.

What it does not model: read limits (``GetRecords``: 5 calls and 2 MiB per second per shard),
control-plane limits (``ListShards`` at 100 calls per second per stream, ...), on-demand
streams' own scaling, and the service's habit of refusing a whole ``PutRecords`` request with
``ProvisionedThroughputExceededException`` when the stream, not one shard, is far over.
"""

from __future__ import annotations

import base64
import json
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .._core.decoder import decode
from ._moto_extras import (
    DRY_RUN,
    DRY_RUN_MESSAGE,
    create_stream,
    describe_summary,
    dry_read,
    error,
    internal_failure,
    json_response,
    missing_key,
    moto_error,
    ordering_refused,
    read_body,
    set_body,
    too_large,
    update_distribution,
)
from ._moto_model import MissingKey, find_stream, is_auto, place, storable
from ._shard_limits import (
    ServerFaults,
    ShardLimits,
    ShardThrottle,
    ThroughputCounts,
    throttled_message,
)

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

__all__ = (
    "THROTTLED",
    "THROUGHPUT_PATH",
    "ServerFaults",
    "ShardLimits",
    "ShardThrottle",
    "ThrottlingApp",
    "ThroughputCounts",
    "throttled_message",
)

THROTTLED = "ProvisionedThroughputExceededException"
"""The error code of a record (or a ``PutRecord`` request) over its shard's limit."""

THROUGHPUT_PATH = "/_local/throughput"
"""``GET`` this path of the server: its limits, faults and per-second counts, as JSON."""

_TARGET_PREFIX = "Kinesis_20131202."
_WRITES = frozenset({"PutRecord", "PutRecords"})
# What a fault may hit: the calls an application makes while it runs. Creating, deleting and
# resharding streams are left alone, so a server with faults can still be set up.
_FAULTED = _WRITES | {
    "DescribeStream",
    "DescribeStreamSummary",
    "GetRecords",
    "GetShardIterator",
    "ListShards",
}
# What ServerFaults.control_latency slows down: the calls that load a shard map.
_CONTROL = frozenset({"DescribeStream", "DescribeStreamSummary", "ListShards"})
# Requests whose body the application reads: those above, and what moto lacks.
_READ = _FAULTED | {"CreateStream", "UpdateStreamRecordDistributionStrategy"}
_DRY_READS = frozenset({"GetRecords", "GetShardIterator"})
_FAILED = "Internal service failure."
_RANDOM_FAULTS = (
    (500, "InternalFailure", "Internal service failure (injected: --fault-rate)."),
    (503, "ServiceUnavailable", "Service is unavailable (injected: --fault-rate)."),
)
# The base64 of the KPL aggregate's magic (F3 89 9A C2) starts with these characters.
_AGGREGATE_PREFIX = "84ma"
_ARN_STREAM = re.compile(r"^arn:[^:]+:kinesis:[^:]*:[^:]*:stream/(?P<name>.+)$")


def _stream_named(body: Mapping[str, Any]) -> str | None:
    name = body.get("StreamName")
    if isinstance(name, str):
        return name
    arn = body.get("StreamARN")
    if isinstance(arn, str):
        found = _ARN_STREAM.match(arn)
        if found is not None:
            return found.group("name")
    return None


def _decoded_size(data: Any) -> int:
    """Bytes of base64 ``data`` once decoded (without decoding it)."""
    if not isinstance(data, str):
        return 0
    length = len(data)
    return length // 4 * 3 - data.endswith("=") - data.endswith("==")


@dataclass
class _Write:
    """A write placed on its shards (by moto, or at random on an ``AUTO`` stream), and what
    its shards decided: each record admitted or not."""

    stream_arn: str
    stream_name: str
    account: str
    shards: list[str]  # the shard id of each record
    model: Any  # moto's ``Stream``, which stores the records
    sizes: list[int]  # what each record counts against its shard, in bytes
    users: list[int]  # the user records each record holds
    now: float
    auto: bool = False  # placed at random: stored on those shards by the application
    admitted: list[int] = field(default_factory=list)  # indexes of the records admitted
    refused: dict[int, str] = field(default_factory=dict)  # index -> shard id, the others

    def throttled(self, shard: str) -> dict[str, str]:
        """A ``PutRecords`` answer's entry for a record over ``shard``'s limit."""
        message = throttled_message(shard, self.stream_name, self.account)
        return {"ErrorCode": THROTTLED, "ErrorMessage": message}

    def store(self, index: int, record: Mapping[str, Any]) -> tuple[str, str]:
        """Store record ``index`` on its shard with moto's model: ``(sequence, shard id)``."""
        if self.auto:
            shard_id = self.shards[index]
            shard = self.model.shards[shard_id]
            key, explicit = record.get("PartitionKey"), record.get("ExplicitHashKey")
            return shard.put_record(key, record["Data"], explicit), shard_id
        sequence, shard_id = self.model.put_record(
            record["PartitionKey"], record.get("ExplicitHashKey"), record["Data"]
        )
        return sequence, shard_id


class ThrottlingApp:
    """moto's WSGI application behind its lock, with per-shard limits, faults and ``AUTO``
    streams in front.

    Args:
        app: moto's WSGI application.
        lock: The lock moto's model is used under (every request goes through it).
        limits: The per-shard limits; ``None`` throttles nothing.
        faults: The faults to add; ``None`` adds none.
        placement_seed: Seed of the generator that places the records of ``AUTO`` streams
            (``None``: a new sequence every run).
        clock: Monotonic seconds, for the buckets.
        wall: Wall-clock seconds, for the per-second counts.
    """

    def __init__(
        self,
        app: WSGIApplication,
        lock: threading.Lock,
        limits: ShardLimits | None = None,
        faults: ServerFaults | None = None,
        *,
        placement_seed: int | None = None,
        # A server on real threads, outside any event loop: the system's clocks.
        clock: Callable[[], float] = time.monotonic,  # noqa: TID251 - a threaded WSGI server
        wall: Callable[[], float] = time.time,  # noqa: TID251 - seconds other processes share
    ) -> None:
        self._app = app
        self._lock = lock
        self.limits = limits
        self.faults = faults or ServerFaults()
        self._throttle = ShardThrottle(limits) if limits is not None else None
        self._random = random.Random(self.faults.seed)
        self._placement = random.Random(placement_seed)
        self._clock = clock
        self._wall = wall
        self.counts = ThroughputCounts()
        self._closing = threading.Event()

    def close(self) -> None:
        """Release every request waiting on a hanging stream (they are then served)."""
        self._closing.set()

    # -- WSGI ----------------------------------------------------------------------------------

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == THROUGHPUT_PATH:
            return self._report(start_response)
        target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
        operation = target[len(_TARGET_PREFIX) :] if target.startswith(_TARGET_PREFIX) else ""
        if operation not in _READ:
            return self._moto(environ, start_response)
        raw = read_body(environ)
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return self._moto(environ, start_response)  # moto answers what is malformed
        if operation == "CreateStream":
            return create_stream(self._app, self._lock, environ, start_response, body)
        if operation == "UpdateStreamRecordDistributionStrategy":
            return update_distribution(self._lock, environ, start_response, body)
        stream = _stream_named(body)
        records = _records_of(operation, body)
        failed = self._fault(stream, operation, start_response)
        if failed is not None:
            if stream is not None and records:
                self.counts.add(int(self._wall()), stream, failed=len(records))
            return failed
        if operation == "DescribeStreamSummary":
            return describe_summary(self._app, self._lock, environ, start_response, body)
        if operation in _DRY_READS and body.get("DryRun") is True:
            return dry_read(self._app, self._lock, environ, start_response)
        if stream is None or not records:
            return self._moto(environ, start_response)
        return self._write(environ, start_response, operation, raw, body, records)

    def _report(self, start_response: StartResponse) -> list[bytes]:
        return json_response(
            start_response,
            200,
            {
                "limits": None if self.limits is None else asdict(self.limits),
                "faults": asdict(self.faults),
                "series": self.counts.rows(),
                # The server's own CPU time so far: whether it, not the clients, was the limit.
                "cpu_seconds": time.process_time(),
            },
            content_type="application/json",
        )

    def _moto(self, environ: WSGIEnvironment, start_response: StartResponse) -> list[bytes]:
        with self._lock:
            return list(self._app(environ, start_response))

    def _fault(
        self, stream: str | None, operation: str, start_response: StartResponse
    ) -> list[bytes] | None:
        """The error answer of a request a fault hits, or ``None``; waits out a hang (and the
        control calls' latency)."""
        faults = self.faults
        if faults.control_latency and operation in _CONTROL:
            self._closing.wait(faults.control_latency)
        if stream is not None and stream in faults.hang_streams:
            self._closing.wait(faults.hang_seconds)
        if stream is not None and stream in faults.fail_streams:
            return error(
                start_response,
                500,
                "InternalFailure",
                f"Internal service failure (injected: stream {stream} fails every request).",
            )
        if faults.fault_rate and self._random.random() < faults.fault_rate:
            status, code, message = self._random.choice(_RANDOM_FAULTS)
            return error(start_response, status, code, message)
        return None

    def _write(
        self,
        environ: WSGIEnvironment,
        start_response: StartResponse,
        operation: str,
        raw: bytes,
        body: dict[str, Any],
        records: list[Mapping[str, Any]],
    ) -> list[bytes]:
        """A write: checked and placed, each record admitted or refused by its shard's
        buckets (all admitted without limits), under moto's lock; the admitted ones stored."""
        sizes = [_record_size(record) for record in records]
        large = too_large(operation, sizes)
        if large is not None:
            # The service refuses such a request whole, before any shard's limit.
            return error(start_response, 400, *large)
        users = [_user_records(record) for record in records]
        dry_run = body.get("DryRun") is True
        with self._lock:
            now = self._clock()
            try:
                model = find_stream(environ, body)
            except Exception as exc:  # no such stream: moto's error, nothing stored
                return self._unplaced(environ, start_response, exc, dry_run)
            auto = is_auto(model)
            ordering = body.get("SequenceNumberForOrdering")
            if auto and operation == "PutRecord" and ordering is not None:
                return error(start_response, 400, *ordering_refused(model))
            try:
                shards = place(model, records, auto, self._placement)
            except MissingKey as missing:
                return error(start_response, 400, *missing_key(operation, missing.index))
            except Exception as exc:  # a key moto refuses
                return self._unplaced(environ, start_response, exc, dry_run or auto)
            if shards is None:  # a key moto has no shard for: its own failure
                return self._unplaced(environ, start_response, None, dry_run)
            if dry_run:
                return error(start_response, 400, DRY_RUN, DRY_RUN_MESSAGE)
            if auto and not storable(records, keyless=True):
                message = "a record's Data, PartitionKey or ExplicitHashKey is not a string"
                return error(start_response, 400, "SerializationException", message)
            write = _Write(
                model.arn,
                model.stream_name,
                model.account_id,
                shards,
                model,
                sizes,
                users,
                now,
                auto,
            )
            self._admit(write)
            second = int(self._wall())
            if operation == "PutRecord":
                return self._put_record(environ, start_response, records, write, second)
            if not write.admitted:
                return self._all_refused(start_response, write, second)
            if auto or storable(records):
                return self._stored_directly(start_response, records, write, second)
            if not write.refused:
                paid = [(write.stream_arn, shards[i], sizes[i]) for i in write.admitted]
                return self._stored(
                    environ, start_response, write.stream_name, second, paid, sum(users), now
                )
            return self._partly_refused(environ, start_response, raw, body, records, write, second)

    def _admit(self, write: _Write) -> None:
        """Each record admitted by its shard's buckets, or refused (all admitted without
        limits)."""
        throttle = self._throttle
        if throttle is None:
            write.admitted = list(range(len(write.shards)))
            return
        for index, shard_id in enumerate(write.shards):
            if throttle.admit(write.stream_arn, shard_id, write.sizes[index], write.now):
                write.admitted.append(index)
            else:
                write.refused[index] = shard_id

    def _unplaced(
        self,
        environ: WSGIEnvironment,
        start_response: StartResponse,
        exc: BaseException | None,
        answer_here: bool,
    ) -> list[bytes]:
        """A write moto cannot place (no such stream, a key it refuses or has no shard for):
        moto's own answer (under the lock already held); for a dry run or an ``AUTO`` stream,
        moto's error answered here instead, as moto's application would store the records
        before the one it fails on (by key)."""
        if not answer_here:
            return list(self._app(environ, start_response))
        return moto_error(start_response, exc)

    def _give_back(self, write: _Write, index: int) -> None:
        """What record ``index`` took from its shard's buckets goes back (not stored)."""
        if self._throttle is not None:
            self._throttle.give_back(
                write.stream_arn, write.shards[index], write.sizes[index], write.now
            )

    def _put_record(
        self,
        environ: WSGIEnvironment,
        start_response: StartResponse,
        records: list[Mapping[str, Any]],
        write: _Write,
        second: int,
    ) -> list[bytes]:
        """``PutRecord``: refused whole (HTTP 400) over its shard's limit, else moto's (on an
        ``AUTO`` stream, stored on its shard here)."""
        if write.refused:
            self.counts.add(second, write.stream_name, throttled=1, throttled_user=write.users[0])
            message = throttled_message(write.refused[0], write.stream_name, write.account)
            return error(start_response, 400, THROTTLED, message)
        if write.auto:
            entries, failed = self._store(records, write, second)
            if failed:
                return internal_failure(start_response)
            return json_response(start_response, 200, entries[0])
        paid = [(write.stream_arn, write.shards[0], write.sizes[0])]
        return self._stored(
            environ, start_response, write.stream_name, second, paid, write.users[0], write.now
        )

    def _all_refused(
        self, start_response: StartResponse, write: _Write, second: int
    ) -> list[bytes]:
        """``PutRecords`` with every record over its shard's limit: moto is not asked."""
        self.counts.add(
            second, write.stream_name, throttled=len(write.shards), throttled_user=sum(write.users)
        )
        entries = [write.throttled(shard) for shard in write.shards]
        return json_response(
            start_response, 200, {"FailedRecordCount": len(entries), "Records": entries}
        )

    def _partly_refused(
        self,
        environ: WSGIEnvironment,
        start_response: StartResponse,
        raw: bytes,
        body: dict[str, Any],
        records: list[Mapping[str, Any]],
        write: _Write,
        second: int,
    ) -> list[bytes]:
        """``PutRecords`` with some records that fit, which moto's model cannot be given
        directly: moto's application stores those, and the answer lists every record where it
        was sent."""
        admitted, refused = write.admitted, write.refused
        partial = dict(body, Records=[records[i] for i in admitted])
        set_body(environ, json.dumps(partial).encode())
        captured: list[Any] = []

        def capture(value: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            captured.append(value)
            return lambda _: None

        answer = b"".join(self._app(environ, capture))
        if not captured or not captured[0].startswith("200"):
            # moto refused the rewritten request: nothing stored, the tokens go back, and
            # the client gets moto's error for its original request.
            for index in admitted:
                self._give_back(write, index)
            set_body(environ, raw)
            return list(self._app(environ, start_response))
        stored = iter(json.loads(answer)["Records"])
        entries = [
            write.throttled(refused[index]) if index in refused else next(stored)
            for index in range(len(records))
        ]
        self.counts.add(
            second,
            write.stream_name,
            delivered=len(admitted),
            throttled=len(refused),
            delivered_user=sum(write.users[i] for i in admitted),
            throttled_user=sum(write.users[i] for i in refused),
        )
        return json_response(
            start_response, 200, {"FailedRecordCount": len(refused), "Records": entries}
        )

    def _stored(
        self,
        environ: WSGIEnvironment,
        start_response: StartResponse,
        stream: str,
        second: int,
        paid: list[tuple[str, str, int]],
        users: int,
        now: float,
    ) -> list[bytes]:
        """moto serves the request as sent (under the lock already held): its records are
        counted if stored, else what they took from their shards is given back."""
        status: list[str] = []

        def capture(value: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            status.append(value)
            return start_response(value, headers, exc_info)

        answer = list(self._app(environ, capture))
        if status and status[0].startswith("200"):
            self.counts.add(second, stream, delivered=len(paid), delivered_user=users)
        elif self._throttle is not None:
            for stream_arn, shard_id, size in paid:
                self._throttle.give_back(stream_arn, shard_id, size, now)
        return answer

    def _stored_directly(
        self,
        start_response: StartResponse,
        records: list[Mapping[str, Any]],
        write: _Write,
        second: int,
    ) -> list[bytes]:
        """``PutRecords``: moto's model stores the admitted records (under the lock already
        held), and the answer, built here, lists every record where it was sent.

        What moto's ``PutRecords`` does, without its request handling around it (finding the
        backend, Flask, its response serializer): three quarters of its time per request,
        and the server answers one request at a time. Measured with eight producers
        without aggregation (``bench/fleet.py``), that handling kept the server busy 90% of
        every second, requests waited 1-3 s for the lock, and the cell measured moto's speed
        instead of the producers'. Sequence numbers and shards are moto's own (on an ``AUTO``
        stream, the shards drawn for the records).
        """
        entries, failed = self._store(records, write, second)
        return json_response(
            start_response,
            200,
            {"FailedRecordCount": len(write.refused) + failed, "Records": entries},
        )

    def _store(
        self, records: list[Mapping[str, Any]], write: _Write, second: int
    ) -> tuple[list[dict[str, str]], int]:
        """Store the admitted records with moto's model: the answer's entries (throttled
        ones at their positions) and how many moto failed to store; all counted."""
        refused = write.refused
        entries: list[dict[str, str]] = []
        stored = users = failed = 0
        for index, record in enumerate(records):
            shard = refused.get(index)
            if shard is not None:
                entries.append(write.throttled(shard))
                continue
            try:
                sequence, shard_id = write.store(index, record)
            except Exception:
                # moto failed to store it (its model placed it a moment ago, so this is
                # moto's bug): AWS's per-record answer for a failure of its own, and the
                # record's tokens go back, as for a record never stored.
                failed += 1
                self._give_back(write, index)
                entries.append({"ErrorCode": "InternalFailure", "ErrorMessage": _FAILED})
                continue
            entries.append({"SequenceNumber": sequence, "ShardId": shard_id})
            stored += 1
            users += write.users[index]
        self.counts.add(
            second,
            write.stream_name,
            delivered=stored,
            throttled=len(refused),
            failed=failed,
            delivered_user=users,
            throttled_user=sum(write.users[index] for index in refused),
        )
        return entries, failed


def _user_records(record: Mapping[str, Any]) -> int:
    """How many user records a Kinesis record holds: those of a KPL aggregate, else one."""
    data = record.get("Data")
    if not isinstance(data, str) or not data.startswith(_AGGREGATE_PREFIX):
        return 1
    try:
        return len(decode(base64.b64decode(data)))
    except ValueError:  # AggregationFormatError too: only looks like one, a record of its own
        return 1


def _record_size(record: Mapping[str, Any]) -> int:
    """What a record counts against its shard: data plus partition key, in bytes."""
    key = record.get("PartitionKey")
    return _decoded_size(record.get("Data")) + (len(key.encode()) if isinstance(key, str) else 0)


def _records_of(operation: str, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The records a write carries (none for other operations, or a malformed write)."""
    if operation == "PutRecord":
        return [body]
    if operation == "PutRecords":
        records = body.get("Records")
        if isinstance(records, list) and all(isinstance(r, dict) for r in records):
            return records
    return []

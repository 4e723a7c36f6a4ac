"""AWS's per-shard write limits and a few faults, in front of moto's server (``aiokpl local
--throttle``, :func:`aiokpl.testing._servers.moto_server`).

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
  shard moto would have stored it on;
* records that fit are stored by moto: a ``PutRecords`` by moto's model directly (its
  ``Stream.put_record``, moto's sequence numbers and shards, without moto's request handling,
  which took three quarters of the server's time: see ``_stored_directly``), anything else
  by moto's application; records that do not fit are answered with AWS's error code and
  message, at their positions; tokens taken for records moto then refuses are given back;
* optional faults (:class:`ServerFaults`): a fraction of Kinesis requests fail at random with
  ``InternalFailure`` (HTTP 500) or ``ServiceUnavailable`` (HTTP 503); requests naming a
  *failing* stream fail with ``InternalFailure``; requests naming a *hanging* stream are
  answered only after ``hang_seconds`` (waited outside moto's lock, so other streams go on);
* per second of the wall clock and per stream, the records stored, throttled and failed
  (:class:`ThroughputCounts`), served as JSON at :data:`THROUGHPUT_PATH`: a benchmark reads
  the server's own counts, not the producers' accounting.

Everything else (other operations, other services such as the DynamoDB table of
``aiokpl.coordination``) goes to moto untouched, behind the same lock as before.

What it does not model: read limits (``GetRecords``: 5 calls and 2 MiB per second per shard),
control-plane limits (``ListShards`` at 100 calls per second per stream, ...), on-demand
streams' own scaling, and the service's habit of refusing a whole ``PutRecords`` request with
``ProvisionedThroughputExceededException`` when the stream, not one shard, is far over.
"""

from __future__ import annotations

import base64
import io
import json
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .._core.decoder import decode
from ._moto_model import locate, storable
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
_FAILED = "Internal service failure."
_RANDOM_FAULTS = (
    (500, "InternalFailure", "Internal service failure (injected: --fault-rate)."),
    (503, "ServiceUnavailable", "Service is unavailable (injected: --fault-rate)."),
)
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
# The service's limits of one request, checked before any shard's: 500 records, 1 MiB a
# record, 5 MiB in all (data plus partition keys).
_MAX_RECORDS = 500
_MAX_RECORD = 1024 * 1024
_MAX_REQUEST = 5 * 1024 * 1024
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


def _json_response(
    start_response: StartResponse,
    status: int,
    document: Mapping[str, Any],
    error: str = "",
    content_type: str = "application/x-amz-json-1.1",
) -> list[bytes]:
    body = json.dumps(document).encode()
    headers = [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("x-amzn-RequestId", str(uuid.uuid4())),
    ]
    if error:
        headers.append(("x-amzn-ErrorType", error))
    start_response(f"{status} {_REASONS[status]}", headers)
    return [body]


def _error(start_response: StartResponse, status: int, code: str, message: str) -> list[bytes]:
    return _json_response(start_response, status, {"__type": code, "message": message}, code)


@dataclass
class _Write:
    """A write located by moto, and what its shards decided: each record admitted or not."""

    stream_arn: str
    stream_name: str
    account: str
    shards: list[str]  # the shard id of each record
    model: Any  # moto's ``Stream``, which stores the records
    sizes: list[int]  # what each record counts against its shard, in bytes
    users: list[int]  # the user records each record holds
    now: float
    admitted: list[int] = field(default_factory=list)  # indexes of the records admitted
    refused: dict[int, str] = field(default_factory=dict)  # index -> shard id, the others

    def throttled(self, shard: str) -> dict[str, str]:
        """A ``PutRecords`` answer's entry for a record over ``shard``'s limit."""
        message = throttled_message(shard, self.stream_name, self.account)
        return {"ErrorCode": THROTTLED, "ErrorMessage": message}


class ThrottlingApp:
    """moto's WSGI application behind its lock, with per-shard limits and faults in front.

    Args:
        app: moto's WSGI application.
        lock: The lock moto's model is used under (every request goes through it).
        limits: The per-shard limits; ``None`` throttles nothing.
        faults: The faults to add; ``None`` adds none.
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
        if operation not in _FAULTED:
            return self._moto(environ, start_response)
        raw = _read_body(environ)
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return self._moto(environ, start_response)  # moto answers what is malformed
        stream = _stream_named(body)
        records = _records_of(operation, body)
        failed = self._fault(stream, start_response)
        if failed is not None:
            if stream is not None and records:
                self.counts.add(int(self._wall()), stream, failed=len(records))
            return failed
        if self._throttle is None or stream is None or not records:
            users = sum(_user_records(record) for record in records)
            return self._counted(environ, start_response, stream, len(records), users)
        return self._throttled(environ, start_response, operation, raw, body, records)

    def _report(self, start_response: StartResponse) -> list[bytes]:
        return _json_response(
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

    def _fault(self, stream: str | None, start_response: StartResponse) -> list[bytes] | None:
        """The error answer of a request a fault hits, or ``None``; waits out a hang."""
        faults = self.faults
        if stream is not None and stream in faults.hang_streams:
            self._closing.wait(faults.hang_seconds)
        if stream is not None and stream in faults.fail_streams:
            return _error(
                start_response,
                500,
                "InternalFailure",
                f"Internal service failure (injected: stream {stream} fails every request).",
            )
        if faults.fault_rate and self._random.random() < faults.fault_rate:
            status, code, message = self._random.choice(_RANDOM_FAULTS)
            return _error(start_response, status, code, message)
        return None

    def _counted(
        self,
        environ: WSGIEnvironment,
        start_response: StartResponse,
        stream: str | None,
        n: int,
        users: int,
    ) -> list[bytes]:
        """moto answers; its stored records are counted (not throttled, nothing to decide)."""
        status: list[str] = []

        def capture(value: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            status.append(value)
            return start_response(value, headers, exc_info)

        answer = self._moto(environ, capture)
        if stream is not None and n and status and status[0].startswith("200"):
            self.counts.add(int(self._wall()), stream, delivered=n, delivered_user=users)
        return answer

    def _throttled(
        self,
        environ: WSGIEnvironment,
        start_response: StartResponse,
        operation: str,
        raw: bytes,
        body: dict[str, Any],
        records: list[Mapping[str, Any]],
    ) -> list[bytes]:
        """A write to a throttled stream: each record admitted or refused by its shard's
        buckets, under moto's lock; moto stores the admitted ones."""
        throttle = self._throttle
        assert throttle is not None
        sizes = [_record_size(record) for record in records]
        users = [_user_records(record) for record in records]
        if len(records) > _MAX_RECORDS or max(sizes) > _MAX_RECORD or sum(sizes) > _MAX_REQUEST:
            # The service refuses such a request whole, before any shard's limit: moto's error.
            return self._moto(environ, start_response)
        with self._lock:
            now = self._clock()
            located = locate(environ, body, records)
            if located is None:
                # moto cannot place a record (no such stream, a bad key): its own error.
                return list(self._app(environ, start_response))
            model, shards = located
            write = _Write(
                model.arn, model.stream_name, model.account_id, shards, model, sizes, users, now
            )
            for index, shard_id in enumerate(shards):
                if throttle.admit(write.stream_arn, shard_id, sizes[index], now):
                    write.admitted.append(index)
                else:
                    write.refused[index] = shard_id
            second = int(self._wall())
            if operation == "PutRecord":
                return self._put_record(environ, start_response, write, second)
            if not write.admitted:
                return self._all_refused(start_response, write, second)
            if storable(records):
                return self._stored_directly(start_response, records, write, second)
            if not write.refused:
                paid = [(write.stream_arn, shards[i], sizes[i]) for i in write.admitted]
                return self._stored(
                    environ, start_response, write.stream_name, second, paid, sum(users), now
                )
            return self._partly_refused(environ, start_response, raw, body, records, write, second)

    def _put_record(
        self, environ: WSGIEnvironment, start_response: StartResponse, write: _Write, second: int
    ) -> list[bytes]:
        """``PutRecord``: refused whole (HTTP 400) over its shard's limit, else moto's."""
        if write.refused:
            self.counts.add(second, write.stream_name, throttled=1, throttled_user=write.users[0])
            message = throttled_message(write.refused[0], write.stream_name, write.account)
            return _error(start_response, 400, THROTTLED, message)
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
        return _json_response(
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
        _set_body(environ, json.dumps(partial).encode())
        captured: list[Any] = []

        def capture(value: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            captured.append(value)
            return lambda _: None

        answer = b"".join(self._app(environ, capture))
        if not captured or not captured[0].startswith("200"):
            # moto refused the rewritten request: nothing stored, the tokens go back, and
            # the client gets moto's error for its original request.
            throttle = self._throttle
            assert throttle is not None
            for index in admitted:
                throttle.give_back(
                    write.stream_arn, write.shards[index], write.sizes[index], write.now
                )
            _set_body(environ, raw)
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
        return _json_response(
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
        else:
            throttle = self._throttle
            assert throttle is not None
            for stream_arn, shard_id, size in paid:
                throttle.give_back(stream_arn, shard_id, size, now)
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
        instead of the producers'. Sequence numbers and shards are moto's own.
        """
        refused = write.refused
        entries: list[dict[str, str]] = []
        stored = users = failed = 0
        for index, record in enumerate(records):
            shard = refused.get(index)
            if shard is not None:
                entries.append(write.throttled(shard))
                continue
            try:
                sequence, shard_id = write.model.put_record(
                    record["PartitionKey"], record.get("ExplicitHashKey"), record["Data"]
                )
            except Exception:
                # moto failed to store it (its model placed it a moment ago, so this is
                # moto's bug): AWS's per-record answer for a failure of its own, and the
                # record's tokens go back, as for a record never stored.
                failed += 1
                throttle = self._throttle
                assert throttle is not None
                throttle.give_back(
                    write.stream_arn, write.shards[index], write.sizes[index], write.now
                )
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
        return _json_response(
            start_response,
            200,
            {"FailedRecordCount": len(refused) + failed, "Records": entries},
        )


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


def _read_body(environ: WSGIEnvironment) -> bytes:
    """The request body, read once; ``environ`` is left able to give it again."""
    length = int(environ.get("CONTENT_LENGTH") or 0)  # werkzeug has checked it is a number
    raw = environ["wsgi.input"].read(length) if length > 0 else b""
    _set_body(environ, raw)
    return raw


def _set_body(environ: WSGIEnvironment, raw: bytes) -> None:
    environ["wsgi.input"] = io.BytesIO(raw)
    environ["CONTENT_LENGTH"] = str(len(raw))

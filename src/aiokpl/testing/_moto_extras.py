"""What the local server answers in front of moto that moto 5.2 does not: the record
distribution strategy of on-demand streams, and ``DryRun``.

The requests served here, each under the lock moto's model is used under (WSGI plumbing for
:class:`aiokpl.testing._throttling.ThrottlingApp`, which hands them over):

* ``CreateStream``: ``RecordDistributionStrategy`` is checked (an unknown value is a
  ``ValidationException``; ``AUTO`` for a provisioned stream an ``InvalidArgumentException``),
  moto creates the stream, and the strategy is kept on it. An on-demand stream created with a
  ``ShardCount`` gets that many shards (moto alone makes 4 whatever is asked, where the
  project's fake honours it);
* ``UpdateStreamRecordDistributionStrategy`` (which moto does not implement): by ``StreamARN``,
  on-demand streams only (``InvalidArgumentException`` otherwise), at once;
* ``DescribeStreamSummary``: moto's answer, with ``RecordDistributionStrategy`` added for an
  on-demand stream ("only present for streams that use the on-demand capacity mode");
* ``GetShardIterator`` and ``GetRecords`` with ``DryRun=True``: moto serves them (reading
  changes nothing), and a success becomes ``DryRunOperationException``. Writes are checked by
  the application itself (it never lets moto store a dry run).

In front of everything, :func:`known_regions_only` answers a request signed for a region moto
does not know with the service's error, instead of moto's HTML 500.

Also here: the JSON answers the server writes itself (:func:`json_response`, :func:`error`,
:func:`moto_error` for one of moto's exceptions), reading a request's body (:func:`read_body`),
and the service's refusals of a write that
only the server can decide (a record without a partition key, ``SequenceNumberForOrdering`` on
an ``AUTO`` stream, a request too large, a dry run).
"""

from __future__ import annotations

import io
import json
import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ._moto_model import (
    AUTO,
    DISTRIBUTIONS,
    distribution_of,
    find_stream,
    on_demand,
    set_distribution,
    unknown_region,
)

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

__all__ = (
    "DRY_RUN",
    "DRY_RUN_MESSAGE",
    "create_stream",
    "describe_summary",
    "dry_read",
    "error",
    "internal_failure",
    "json_response",
    "known_regions_only",
    "missing_key",
    "moto_error",
    "ordering_refused",
    "read_body",
    "set_body",
    "too_large",
    "update_distribution",
)

DRY_RUN = "DryRunOperationException"
DRY_RUN_MESSAGE = "The request was rejected because the DryRun parameter was specified."

_REASONS = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
# The service's limits of one write, checked before any shard's: 500 records, 1 MiB a record,
# 5 MiB in all (data plus partition keys).
MAX_RECORDS = 500
MAX_RECORD = 1024 * 1024
MAX_REQUEST = 5 * 1024 * 1024


def json_response(
    start_response: StartResponse,
    status: int,
    document: Mapping[str, Any],
    error: str = "",
    content_type: str = "application/x-amz-json-1.1",
) -> list[bytes]:
    """Answer ``document`` as JSON with ``status`` (and ``x-amzn-ErrorType`` for an error)."""
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


def error(start_response: StartResponse, status: int, code: str, message: str) -> list[bytes]:
    """Answer the service error ``code`` with ``message``, as the JSON protocol does."""
    return json_response(start_response, status, {"__type": code, "message": message}, code)


def known_regions_only(app: WSGIApplication) -> WSGIApplication:
    """``app``, with a request signed for a region moto does not know answered as the service
    answers a credential scoped to no region (400, ``InvalidSignatureException``), not passed
    on (moto fails deep in its backend: an HTML 500, and a traceback logged per request)."""

    def serve(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        region = unknown_region(environ)
        if region is None:
            return app(environ, start_response)
        return error(
            start_response,
            400,
            "InvalidSignatureException",
            f"Credential should be scoped to a valid region, not '{region}'. (aiokpl local: "
            "moto's Kinesis serves the regions AWS has, e.g. us-east-1)",
        )

    return serve


def internal_failure(start_response: StartResponse) -> list[bytes]:
    """Answer the service's failure of its own (HTTP 500)."""
    return error(start_response, 500, "InternalFailure", "Internal service failure.")


def moto_error(start_response: StartResponse, exc: BaseException | None) -> list[bytes]:
    """Answer one of moto's exceptions as moto would; anything else (or nothing: moto found
    no shard) as ``InternalFailure``."""
    code = getattr(exc, "error_type", None)
    message = getattr(exc, "message", None)
    status = getattr(exc, "code", None)
    if isinstance(code, str) and isinstance(message, str) and status in _REASONS:
        return error(start_response, status, code, message)
    return internal_failure(start_response)


def read_body(environ: WSGIEnvironment) -> bytes:
    """The request body, read once; ``environ`` is left able to give it again."""
    length = int(environ.get("CONTENT_LENGTH") or 0)  # werkzeug has checked it is a number
    raw = environ["wsgi.input"].read(length) if length > 0 else b""
    set_body(environ, raw)
    return raw


def set_body(environ: WSGIEnvironment, raw: bytes) -> None:
    """Make ``raw`` the body ``environ`` gives (to moto's application)."""
    environ["wsgi.input"] = io.BytesIO(raw)
    environ["CONTENT_LENGTH"] = str(len(raw))


def missing_key(operation: str, index: int) -> tuple[str, str]:
    """The service's refusal of a record without a partition key (on a stream that is not
    ``AUTO``): ``(code, message)``."""
    field = (
        "partitionKey" if operation == "PutRecord" else f"records.{index + 1}.member.partitionKey"
    )
    return (
        "ValidationException",
        f"1 validation error detected: Value null at '{field}' failed to satisfy constraint: "
        "Member must not be null",
    )


def ordering_refused(stream: Any) -> tuple[str, str]:
    """The refusal of ``SequenceNumberForOrdering`` on an ``AUTO`` stream: ``(code, message)``."""
    return (
        "InvalidArgumentException",
        f"SequenceNumberForOrdering is not supported for stream {stream.stream_name} under "
        f"account {stream.account_id}: its record distribution strategy is AUTO.",
    )


def too_large(operation: str, sizes: list[int]) -> tuple[str, str] | None:
    """The service's refusal of a write over its request limits, ``(code, message)``, or
    ``None``; ``sizes`` are its records' (data plus partition key, in bytes)."""
    if len(sizes) > MAX_RECORDS:
        return (
            "ValidationException",
            "1 validation error detected: Value at 'records' failed to satisfy constraint: "
            f"Member must have length less than or equal to {MAX_RECORDS}",
        )
    for index, size in enumerate(sizes):
        if size > MAX_RECORD:
            field = "data" if operation == "PutRecord" else f"records.{index + 1}.member.data"
            return (
                "ValidationException",
                f"1 validation error detected: Value at '{field}' failed to satisfy "
                f"constraint: Member must have length less than or equal to {MAX_RECORD}",
            )
    if sum(sizes) > MAX_REQUEST:
        return ("InvalidArgumentException", "Records size exceeds 5 MB limit")
    return None


class _Captured:
    """A ``start_response`` that keeps moto's status and headers instead of sending them."""

    def __init__(self) -> None:
        self.status = ""
        self.headers: list[tuple[str, str]] = []

    def __call__(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        self.status, self.headers = status, list(headers)
        return lambda _: None

    @property
    def ok(self) -> bool:
        return self.status.startswith("200")

    def send(self, start_response: StartResponse, body: bytes) -> list[bytes]:
        """Send moto's answer on, with ``body`` (its length set anew)."""
        headers = [(k, v) for k, v in self.headers if k.lower() != "content-length"]
        start_response(self.status, [*headers, ("Content-Length", str(len(body)))])
        return [body]


def _served(
    app: WSGIApplication, environ: WSGIEnvironment, captured: _Captured
) -> bytes:  # under the lock
    return b"".join(app(environ, captured))


def _distribution(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """The refusal of a ``RecordDistributionStrategy`` outside the model's enum, or ``None``."""
    value = body.get("RecordDistributionStrategy")
    if value is None or value in DISTRIBUTIONS:
        return None
    return (
        "ValidationException",
        f"1 validation error detected: Value '{value}' at 'recordDistributionStrategy' failed "
        f"to satisfy constraint: Member must satisfy enum value set: [{', '.join(DISTRIBUTIONS)}]",
    )


def create_stream(
    app: WSGIApplication,
    lock: threading.Lock,
    environ: WSGIEnvironment,
    start_response: StartResponse,
    body: Mapping[str, Any],
) -> Iterable[bytes]:
    """``CreateStream``, with its ``RecordDistributionStrategy`` and an on-demand
    ``ShardCount`` honoured (see the module documentation)."""
    refused = _distribution(body)
    if refused is not None:
        return error(start_response, 400, *refused)
    details = body.get("StreamModeDetails")
    mode = details.get("StreamMode") if isinstance(details, Mapping) else None
    strategy = body.get("RecordDistributionStrategy")
    if strategy == AUTO and mode != "ON_DEMAND":
        return error(
            start_response,
            400,
            "InvalidArgumentException",
            "RecordDistributionStrategy AUTO is supported only for streams in ON_DEMAND mode.",
        )
    count = body.get("ShardCount")
    with lock:
        captured = _Captured()
        answer = _served(app, environ, captured)
        reshape = mode == "ON_DEMAND" and isinstance(count, int) and count >= 1
        if captured.ok and (strategy is not None or reshape):
            stream = find_stream(environ, body)
            if reshape:
                stream.shards.clear()
                stream.init_shards(count)
            if strategy is not None:
                set_distribution(stream, strategy)
    return captured.send(start_response, answer)


def update_distribution(
    lock: threading.Lock,
    environ: WSGIEnvironment,
    start_response: StartResponse,
    body: Mapping[str, Any],
) -> Iterable[bytes]:
    """``UpdateStreamRecordDistributionStrategy``: on-demand streams only, by ``StreamARN``."""
    arn = body.get("StreamARN")
    strategy = body.get("RecordDistributionStrategy")
    for field, value in (("streamARN", arn), ("recordDistributionStrategy", strategy)):
        if value is None:
            return error(
                start_response,
                400,
                "ValidationException",
                f"1 validation error detected: Value null at '{field}' failed to satisfy "
                "constraint: Member must not be null",
            )
    refused = _distribution(body)
    if refused is not None:
        return error(start_response, 400, *refused)
    with lock:
        try:
            stream = find_stream(environ, {"StreamARN": arn})
        except Exception as exc:  # moto's own error: no such stream
            return moto_error(start_response, exc)
        if not on_demand(stream):
            return error(
                start_response,
                400,
                "InvalidArgumentException",
                f"Stream {stream.stream_name} under account {stream.account_id} is in "
                "PROVISIONED mode: the record distribution strategy applies only to streams "
                "in ON_DEMAND mode.",
            )
        set_distribution(stream, str(strategy))
    return json_response(start_response, 200, {})


def describe_summary(
    app: WSGIApplication,
    lock: threading.Lock,
    environ: WSGIEnvironment,
    start_response: StartResponse,
    body: Mapping[str, Any],
) -> Iterable[bytes]:
    """``DescribeStreamSummary``: moto's, with the strategy of an on-demand stream."""
    with lock:
        captured = _Captured()
        answer = _served(app, environ, captured)
        if captured.ok:
            document = json.loads(answer)
            summary = document["StreamDescriptionSummary"]
            if summary.get("StreamModeDetails", {}).get("StreamMode") == "ON_DEMAND":
                summary["RecordDistributionStrategy"] = distribution_of(find_stream(environ, body))
                answer = json.dumps(document).encode()
    return captured.send(start_response, answer)


def dry_read(
    app: WSGIApplication,
    lock: threading.Lock,
    environ: WSGIEnvironment,
    start_response: StartResponse,
) -> Iterable[bytes]:
    """``GetShardIterator`` or ``GetRecords`` with ``DryRun``: moto's error if it has one, else
    ``DryRunOperationException`` (moto's reads change nothing)."""
    with lock:
        captured = _Captured()
        answer = _served(app, environ, captured)
    if captured.ok:
        return error(start_response, 400, DRY_RUN, DRY_RUN_MESSAGE)
    return captured.send(start_response, answer)

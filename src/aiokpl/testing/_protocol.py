"""The Kinesis JSON protocol for the loopback server: requests to the fake's calls, and back.

The protocol, as botocore 1.43 speaks it for Kinesis (checked against its service model, whose
``protocols`` list holds only ``"json"``, and against captured requests from the aiohttp and
httpx backends):

* ``POST /`` (httpx sends the absolute form ``POST http://127.0.0.1:PORT/``) with
  ``X-Amz-Target: Kinesis_20131202.<Operation>``, ``Content-Type: application/x-amz-json-1.1``
  and a ``Content-Length`` body: a JSON object of the operation's parameters, where blobs
  (``Data``) are base64 strings and timestamps are seconds since the epoch;
* a success is ``200`` with the response JSON, blobs base64-encoded and datetimes as epoch
  seconds, and an ``x-amzn-RequestId`` header;
* an error is the status the fake's ``ClientError`` carries (400 for client errors) with the
  body ``{"__type": code, "message": message}``, which botocore's JSON parser turns back into
  exactly that code and message; the ``x-amzn-ErrorType`` header is sent too, as the service
  does, though the JSON protocol reads only the body.

What is here: the operations served and the fake's method for each (:data:`_METHODS`), the
parameters each method declares (:func:`_parameters`), the decoding of a request body into
those keyword arguments (:func:`_decode_params`: unknown members are ignored, as by the
service; a missing required one is a ``ValidationException``, a wrongly typed blob a
``SerializationException``), the encoding of a response or an error, and the spoiled bodies
of the ``malformed_body`` fault (:func:`_spoil`).

Invariants: pure functions of their arguments (no I/O, no state); only ``_kinesis`` imports
botocore, so a ``ClientError`` is recognised by its ``response`` (:func:`_status_of`).

What it does not do: SigV4 verification (any ``Authorization`` is accepted), CBOR (botocore
does not use it for Kinesis), ``SubscribeToShard`` event streams.
"""

from __future__ import annotations

import base64
import binascii
import inspect
import json
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ._http import _Head, _Response

_TARGET_PREFIX = "Kinesis_20131202."
_CONTENT_TYPE = "application/x-amz-json-1.1"

# Operation name -> FakeKinesis method name.
_METHODS: dict[str, str] = {
    "CreateStream": "create_stream",
    "DeleteStream": "delete_stream",
    "DescribeStream": "describe_stream",
    "DescribeStreamSummary": "describe_stream_summary",
    "GetRecords": "get_records",
    "GetShardIterator": "get_shard_iterator",
    "ListShards": "list_shards",
    "MergeShards": "merge_shards",
    "PutRecord": "put_record",
    "PutRecords": "put_records",
    "SplitShard": "split_shard",
    "UpdateMaxRecordSize": "update_max_record_size",
    "UpdateStreamRecordDistributionStrategy": "update_stream_record_distribution_strategy",
}


def _parameters(method: Callable[..., Any]) -> tuple[frozenset[str], tuple[str, ...]]:
    """The keyword parameters a fake's method accepts, and those it requires."""
    parameters = inspect.signature(method).parameters.values()
    keyword = [p for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
    return (
        frozenset(p.name for p in keyword),
        tuple(p.name for p in keyword if p.default is inspect.Parameter.empty),
    )


def _operation_of(head: _Head) -> str | None:
    """The operation ``X-Amz-Target`` names, or ``None`` if it names no Kinesis operation."""
    target = head.headers.get("x-amz-target", "")
    if not target.startswith(_TARGET_PREFIX):
        return None
    return target[len(_TARGET_PREFIX) :]


def _json_response(payload: Mapping[str, Any], request_id: str | None = None) -> _Response:
    return _Response(
        200,
        json.dumps(payload, separators=(",", ":")).encode(),
        (
            ("Content-Type", _CONTENT_TYPE),
            ("x-amzn-RequestId", request_id or str(uuid.uuid4())),
        ),
    )


def _error_response(status: int, code: str, message: str) -> _Response:
    body = json.dumps({"__type": code, "message": message}, separators=(",", ":")).encode()
    return _Response(
        status,
        body,
        (
            ("Content-Type", _CONTENT_TYPE),
            ("x-amzn-RequestId", str(uuid.uuid4())),
            ("x-amzn-ErrorType", code),
        ),
    )


class _ServiceError(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status a botocore ``ClientError`` carries, or ``None`` for other exceptions.

    Duck-typed on ``exc.response`` so that only ``_kinesis`` imports botocore.
    """
    response = getattr(exc, "response", None)
    if not isinstance(response, Mapping) or not isinstance(response.get("Error"), Mapping):
        return None
    metadata = response.get("ResponseMetadata")
    status = metadata.get("HTTPStatusCode") if isinstance(metadata, Mapping) else None
    return status if isinstance(status, int) and 300 <= status <= 599 else 400


def _check_operation(operation: str) -> None:
    if operation not in _METHODS:
        raise ValueError(
            f"unknown operation {operation!r}; the loopback server serves "
            f"{', '.join(sorted(_METHODS))}"
        )


def _camel(name: str) -> str:
    return name[:1].lower() + name[1:]


def _blob(value: object, field: str) -> bytes:
    if not isinstance(value, str):
        raise _ServiceError(
            "SerializationException", f"{field}: expected a base64 string, got {value!r:.100}"
        )
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _ServiceError(
            "SerializationException", f"{field}: {value[:100]!r} is not valid base64"
        ) from None


def _decode_params(
    operation: str, body: bytes, signature: tuple[frozenset[str], tuple[str, ...]]
) -> dict[str, Any]:
    """The JSON request body as keyword arguments for the fake's method."""
    try:
        params = json.loads(body) if body else {}
    except (UnicodeDecodeError, ValueError) as exc:
        raise _ServiceError("SerializationException", f"the body is not JSON: {exc}") from None
    if not isinstance(params, dict):
        raise _ServiceError("SerializationException", "the body is not a JSON object")
    accepted, required = signature
    params = {key: value for key, value in params.items() if key in accepted}
    for name in required:
        if params.get(name) is None:
            raise _ServiceError(
                "ValidationException",
                f"1 validation error detected: Value null at '{_camel(name)}' failed to "
                "satisfy constraint: Member must not be null",
            )
    if operation == "PutRecords" and isinstance(params["Records"], list):
        for index, entry in enumerate(params["Records"]):
            if isinstance(entry, dict) and "Data" in entry:
                entry["Data"] = _blob(entry["Data"], f"Records[{index}].Data")
    elif operation == "PutRecord":
        params["Data"] = _blob(params["Data"], "Data")
    return params


def _to_json(value: object) -> object:
    if isinstance(value, Mapping):
        return {key: _to_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_to_json(item) for item in value]
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime):
        return value.timestamp()
    return value


def _spoil(kind: str, operation: str, response: _Response | None) -> bytes:
    """The body of a malformed answer (``truncated`` is cut by the caller from a ``plausible`` one).

    Without a response of the model's to spoil, ``PutRecords`` gets an empty result list and
    other operations an empty object.
    """
    if kind == "not-json":
        return b"<html><body>this is not JSON</body></html>"
    payload: dict[str, Any] = {}
    if response is not None and response.status == 200:
        payload = json.loads(response.body)
    elif operation == "PutRecords":
        payload = {"FailedRecordCount": 0, "Records": [], "EncryptionType": "NONE"}
    if kind == "missing-records":
        payload.pop("Records", None)
    elif kind == "wrong-count" and isinstance(payload.get("Records"), list) and payload["Records"]:
        payload["Records"].pop()
    return json.dumps(payload, separators=(",", ":")).encode()

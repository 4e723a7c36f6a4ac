"""A loopback Kinesis server: :class:`~aiokpl.testing.FakeKinesis` served over HTTP on 127.0.0.1.

:class:`LoopbackKinesis` listens on a free port of 127.0.0.1 and speaks the Kinesis wire protocol
as botocore sends it, so a real aiobotocore client (the producer's own, on asyncio and on trio)
can be pointed at it with ``endpoint_url``. Every request is handed to a ``FakeKinesis``, so the
model (routing, sequence numbers, pagination, validation, per-shard throttling, resharding,
scripted and random service errors) is exactly the in-process fake's; the server adds only the
HTTP layer and the faults that live there: 5xx responses, connection resets, slow responses and
malformed bodies.

The HTTP/1.1 framing is ``_http``'s, the Kinesis JSON protocol (what botocore sends and
expects, and how a request becomes a call of the fake) is ``_protocol``'s, the HTTP faults in
force (scripted, and :class:`HttpFaultPlan`) are ``_http_faults``', and the thread the server
may run in is ``_thread``'s; this module holds the server: its connections, how each request
meets its fault, and its :class:`LoopbackStatistics`.

Request handling, per connection (HTTP/1.1, keep-alive unless ``Connection: close`` or HTTP/1.0;
``Expect: 100-continue`` answered; ``Transfer-Encoding: chunked`` accepted):

1. read the whole request; count it under its operation;
2. take the next HTTP fault scripted for that operation (FIFO across kinds), or else draw from
   the random :class:`HttpFaultPlan` if the operation is one it covers;
3. serve it: decode the JSON, base64-decode ``Data``, call the fake's method with the parameters
   it declares (unknown members are ignored, as by the service; a missing required one is a
   ``ValidationException``, a wrongly typed one a ``SerializationException``), and encode the
   answer or the fake's ``ClientError``. Other exceptions raised by the fake: an ``OSError``
   (what ``fake.raise_next`` is given for transport failures, e.g. ``ConnectionResetError()``)
   resets the connection; anything else is a ``500 InternalFailure`` naming the exception, so
   a bug is visible, not hidden.

Invariants: every request read gets exactly one response or its connection is closed without
one; the model sees a request at most once (a fault decides whether before or instead of the
response, never twice); scripted faults are consumed in the order they were scripted, one per
request, and a request claimed by one draws no random number.

What it does not do: TLS, SigV4 verification (any ``Authorization`` is accepted), CBOR (botocore
does not use it for Kinesis), HTTP/2 and ``SubscribeToShard`` event streams, compression.

Two ways to run it: as an async context manager in the test's own event loop (the server then
shares the loop with the code under test), or in a thread with its own event loop through
:meth:`LoopbackKinesis.running_in_thread`; the fake is then only touched from that thread, so
test code reaches it through :meth:`LoopbackKinesis.call`.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from .._kinesis import error_of
from ._fake import FakeKinesis
from ._http import (
    _MAX_HEAD_BYTES,
    _abort,
    _BadRequest,
    _encode_response,
    _parse_head,
    _path_of,
    _read_body,
    _reason,
    _Response,
)
from ._http_faults import (
    DEFAULT_CODES,
    DEFAULT_MESSAGES,
    MALFORMED_KINDS,
    Fault,
    FaultQueue,
    HttpFaultPlan,
    MalformedKind,
)
from ._protocol import (
    _CONTENT_TYPE,
    _METHODS,
    _check_operation,
    _decode_params,
    _error_response,
    _json_response,
    _operation_of,
    _parameters,
    _ServiceError,
    _spoil,
    _status_of,
    _to_json,
)
from ._thread import ThreadRunner

__all__ = ("LoopbackKinesis", "LoopbackStatistics")

_T = TypeVar("_T")

_UNKNOWN_OPERATION = "UnknownOperation"


@dataclass(frozen=True)
class LoopbackStatistics:
    """A snapshot of what a :class:`LoopbackKinesis` has served.

    Attributes:
        connections: TCP connections accepted.
        requests: Requests read, per operation name (requests naming an operation the server
            does not serve count under ``"UnknownOperation"``).
        statuses: Responses sent, per HTTP status (resets and truncated bodies send none).
        faults: HTTP faults injected, per kind: ``"fail_http"``, ``"reset_connection"``,
            ``"delay_response"``, ``"malformed_body"``; resets caused by an ``OSError`` raised
            by the fake count as ``"reset_connection"`` too.
    """

    connections: int
    requests: Mapping[str, int]
    statuses: Mapping[int, int]
    faults: Mapping[str, int]

    @property
    def total_requests(self) -> int:
        """Requests read, all operations together."""
        return sum(self.requests.values())


# -- the server ------------------------------------------------------------------------------


class LoopbackKinesis:
    """A :class:`~aiokpl.testing.FakeKinesis` served over HTTP on 127.0.0.1, on a free port.

    Run it in the test's event loop:

    ```python
    from aiokpl import Config, Producer
    from aiokpl.testing import FakeKinesis, LoopbackKinesis

    fake = FakeKinesis()
    fake.add_stream("events", shard_count=2)
    async with LoopbackKinesis(fake) as server:
        config = Config(region="us-east-1", endpoint_url=server.endpoint_url,
                        aws_access_key_id="testing", aws_secret_access_key="testing")
        async with Producer(config) as producer:
            await producer.put_record(stream="events", partition_key="k", data=b"hi")
    ```

    or in a thread with its own event loop, from synchronous or asynchronous code:

    ```python
    from aiokpl.testing import FakeKinesis, LoopbackKinesis

    fake = FakeKinesis()
    fake.add_stream("events")
    with LoopbackKinesis(fake).running_in_thread() as server:
        print(server.endpoint_url)  # point boto3, or another process, at it
        records = server.call(fake.stored_records, "events")
    ```

    HTTP faults are scripted per operation (``PutRecords`` unless told otherwise) with
    :meth:`fail_http`, :meth:`reset_connection`, :meth:`delay_response` and
    :meth:`malformed_body`, consumed in the order they were scripted, before any random fault of
    :attr:`http_faults`. Service-level behaviour (throttling, record failures, request errors
    with a service code) is the fake's: set it up on the fake.

    A server runs once: enter it, exit it, and make a new one for another run.

    Args:
        fake: The model to serve; a new, empty ``FakeKinesis()`` by default (its clock is
            ``anyio.current_time`` of the loop the server runs in).
    """

    def __init__(self, fake: FakeKinesis | None = None) -> None:
        if fake is None:
            fake = FakeKinesis()
        self.fake: FakeKinesis = fake
        self._signatures: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {}
        self._port: int | None = None
        self._started = False
        self._stack: contextlib.AsyncExitStack | None = None
        self._runner: ThreadRunner | None = None
        self._loop_thread: int | None = None
        self._http_faults = FaultQueue()
        self._connections = 0
        self._requests: Counter[str] = Counter()
        self._statuses: Counter[int] = Counter()
        self._faults: Counter[str] = Counter()

    def __repr__(self) -> str:
        where = "stopped" if self._port is None else self.endpoint_url
        return (
            f"<LoopbackKinesis {where} connections={self._connections} "
            f"requests={sum(self._requests.values())} faults={sum(self._faults.values())}>"
        )

    # -- address -------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The TCP port the server listens on.

        Raises:
            RuntimeError: The server is not running.
        """
        if self._port is None:
            raise RuntimeError("the loopback server is not running; enter it first")
        return self._port

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:PORT``, for ``Config(endpoint_url=...)``.

        Raises:
            RuntimeError: The server is not running.
        """
        return f"http://127.0.0.1:{self.port}"

    # -- running -------------------------------------------------------------------------------

    async def __aenter__(self) -> LoopbackKinesis:
        """Start listening and serving in the current event loop.

        Raises:
            RuntimeError: The server was started before.
            OSError: No port could be bound on 127.0.0.1.
        """
        if self._started:
            raise RuntimeError("a LoopbackKinesis runs once; make a new one")
        self._started = True
        async with contextlib.AsyncExitStack() as stack:
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
            stack.push_async_callback(listener.aclose)
            task_group = await stack.enter_async_context(anyio.create_task_group())
            # Exiting cancels every connection first, then waits for them to close.
            stack.callback(task_group.cancel_scope.cancel)
            self._port = int(listener.extra(SocketAttribute.local_port))
            self._loop_thread = threading.get_ident()
            task_group.start_soon(listener.serve, self._connection, task_group)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        """Close every connection and stop listening."""
        stack, self._stack = self._stack, None
        self._port = None
        if stack is not None:
            await stack.aclose()

    @contextlib.contextmanager
    def running_in_thread(
        self, backend: str = "asyncio", backend_options: dict[str, Any] | None = None
    ) -> Iterator[LoopbackKinesis]:
        """Run the server in a new thread with its own event loop, until the block ends.

        The port is bound when the block starts. From then on the fake lives in the server's
        thread: read or change it with :meth:`call`; the fault-scripting methods and
        :meth:`statistics` may be called from any thread.

        Args:
            backend: The server loop's anyio backend, ``"asyncio"`` or ``"trio"``.
            backend_options: Options for that backend, as for ``anyio.run``.

        Raises:
            RuntimeError: The server was started before.
        """
        if self._started:
            raise RuntimeError("a LoopbackKinesis runs once; make a new one")
        runner = ThreadRunner(self, backend, backend_options)
        runner.start()
        self._runner = runner
        try:
            yield self
        finally:
            self._runner = None
            runner.stop()

    def call(self, function: Callable[..., _T], *args: Any) -> _T:
        """Call a synchronous ``function(*args)`` in the server's thread and return its result.

        Use it to touch the fake while the server runs in a thread, e.g.
        ``server.call(fake.stored_records, "events")``; in the test's own loop (or from the
        server's thread) it simply calls ``function``.

        Raises:
            RuntimeError: The server's thread stopped before it could run ``function``.
        """
        runner = self._runner
        if runner is None or threading.get_ident() == self._loop_thread:
            return function(*args)
        return runner.call(function, *args)

    # -- faults ----------------------------------------------------------------------------------

    @property
    def http_faults(self) -> HttpFaultPlan:
        """The random HTTP faults in force; assigning an :class:`HttpFaultPlan` restarts it."""
        return self._http_faults.plan

    @http_faults.setter
    def http_faults(self, plan: HttpFaultPlan) -> None:
        self.call(self._http_faults.set_plan, plan)

    def fail_http(
        self,
        count: int = 1,
        *,
        status: int = 500,
        operation: str = "PutRecords",
        code: str | None = None,
        message: str | None = None,
    ) -> None:
        """Answer the next ``count`` requests of ``operation`` with a 5xx error.

        The model is not touched. The body is the JSON error botocore expects, so its
        ``ClientError`` has ``code``: by default ``InternalFailure`` for 500 and
        ``ServiceUnavailable`` for 503 (other statuses default to ``InternalFailure``).

        Raises:
            ValueError: ``count`` is negative, ``status`` is not 500 … 599, or the operation is
                not served.
        """
        if not 500 <= status <= 599:
            raise ValueError(f"status must be a 5xx status, got {status!r}")
        chosen = code if code is not None else DEFAULT_CODES.get(status, "InternalFailure")
        self._script(
            count, operation, Fault("fail_http", status=status, code=chosen, message=message)
        )

    def reset_connection(
        self, count: int = 1, *, operation: str = "PutRecords", after_processing: bool = False
    ) -> None:
        """Drop the connection of the next ``count`` requests of ``operation``, without answer.

        The request is read in full, then the socket is closed with ``SO_LINGER`` 0 so the
        client sees a reset, not an orderly close.

        Args:
            count: How many requests.
            operation: The operation name, e.g. ``"PutRecords"``.
            after_processing: If true, the request is applied to the model first: the records
                are stored, the client does not know it, and its retry stores them again.

        Raises:
            ValueError: ``count`` is negative or the operation is not served.
        """
        self._script(count, operation, Fault("reset_connection", after_processing=after_processing))

    def delay_response(
        self,
        seconds: float,
        count: int = 1,
        *,
        operation: str = "PutRecords",
        after_processing: bool = True,
    ) -> None:
        """Hold back the response to the next ``count`` requests of ``operation``.

        Longer than the client's read timeout, this is a timeout; the request is applied to
        the model all the same (before the delay if ``after_processing``, after it otherwise),
        since the server did receive it: a client that retries after its timeout stores the
        records twice.

        Raises:
            ValueError: ``count`` or ``seconds`` is negative, or the operation is not served.
        """
        if not 0.0 <= seconds < math.inf:
            raise ValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
        self._script(
            count,
            operation,
            Fault("delay_response", seconds=float(seconds), after_processing=after_processing),
        )

    def malformed_body(
        self,
        count: int = 1,
        *,
        operation: str = "PutRecords",
        kind: MalformedKind = "not-json",
        after_processing: bool = False,
    ) -> None:
        """Answer the next ``count`` requests of ``operation`` with a broken ``200`` response.

        Kinds:

        * ``"not-json"``: an HTML body;
        * ``"truncated"``: the real response's head and half its body, then the connection
          closes (the client reads fewer bytes than ``Content-Length``);
        * ``"missing-records"``: valid JSON without ``Records``;
        * ``"wrong-count"``: valid JSON whose ``Records`` has one entry too few (none at all
          when the request was not applied).

        Args:
            count: How many requests.
            operation: The operation name.
            kind: How the body is broken.
            after_processing: If true, the request is applied to the model (and the spoiled
                body is made from the real response); otherwise nothing is stored.

        Raises:
            ValueError: ``count`` is negative, the kind is unknown, or the operation is not
                served.
        """
        if kind not in MALFORMED_KINDS:
            raise ValueError(f"kind must be one of {', '.join(MALFORMED_KINDS)}, got {kind!r}")
        self._script(
            count,
            operation,
            Fault("malformed_body", malformed=kind, after_processing=after_processing),
        )

    def clear_http_faults(self) -> None:
        """Forget every scripted HTTP fault and turn the random ones off."""
        self.call(self._http_faults.clear)

    def _script(self, count: int, operation: str, fault: Fault) -> None:
        _check_operation(operation)
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count!r}")
        self.call(self._http_faults.enqueue, operation, [fault] * count)

    # -- statistics ------------------------------------------------------------------------------

    def statistics(self) -> LoopbackStatistics:
        """A snapshot of connections, requests, responses and faults so far (any thread)."""
        return self.call(self._snapshot)

    def _snapshot(self) -> LoopbackStatistics:
        return LoopbackStatistics(
            connections=self._connections,
            requests=dict(self._requests),
            statuses=dict(self._statuses),
            faults=dict(self._faults),
        )

    # -- connections -----------------------------------------------------------------------------

    async def _connection(self, stream: SocketStream) -> None:
        self._connections += 1
        reader = BufferedByteReceiveStream(stream)
        async with stream:
            with contextlib.suppress(
                anyio.BrokenResourceError,
                anyio.ClosedResourceError,
                anyio.EndOfStream,
                anyio.IncompleteRead,
                OSError,
            ):
                while await self._exchange(stream, reader):
                    pass

    async def _exchange(self, stream: SocketStream, reader: BufferedByteReceiveStream) -> bool:
        """Serve one request; return whether the connection stays open."""
        try:
            head = _parse_head(await reader.receive_until(b"\r\n\r\n", _MAX_HEAD_BYTES))
            body = await _read_body(stream, reader, head)
        except (_BadRequest, anyio.DelimiterNotFound) as exc:
            await self._send(stream, _error_response(400, "BadRequest", str(exc)), False)
            return False
        keep_alive = head.keep_alive
        operation = _operation_of(head)
        if (
            head.method != "POST"
            or _path_of(head.target) != "/"
            or operation is None
            or operation not in _METHODS
        ):
            self._requests[_UNKNOWN_OPERATION] += 1
            response = _error_response(
                400,
                "UnknownOperationException",
                f"{head.method} {head.target} with X-Amz-Target "
                f"{head.headers.get('x-amz-target', '')!r} is not an operation served here",
            )
            await self._send(stream, response, keep_alive)
            return keep_alive
        self._requests[operation] += 1
        fault = self._http_faults.next_fault(operation)
        if fault is None:
            return await self._answer(stream, await self._serve(operation, body), keep_alive)
        self._faults[fault.kind] += 1
        if fault.kind == "fail_http":
            message = fault.message
            if message is None:
                message = DEFAULT_MESSAGES.get(fault.code, _reason(fault.status))
            response = _error_response(fault.status, fault.code, message)
            return await self._answer(stream, response, keep_alive)
        if fault.kind == "reset_connection":
            if fault.after_processing:
                await self._serve(operation, body)
            _abort(stream)
            return False
        if fault.kind == "delay_response":
            if fault.after_processing:
                response = await self._serve(operation, body)
                await anyio.sleep(fault.seconds)
            else:
                await anyio.sleep(fault.seconds)
                response = await self._serve(operation, body)
            return await self._answer(stream, response, keep_alive)
        # malformed_body
        served = await self._serve(operation, body) if fault.after_processing else None
        if fault.malformed == "truncated":
            full = served
            if full is None or full.reset:
                full = _json_response(json.loads(_spoil("plausible", operation, None)))
            self._statuses[full.status] += 1
            await stream.send(_encode_response(full, False, full.body[: len(full.body) // 2]))
            return False
        spoiled = _Response(
            200,
            _spoil(fault.malformed, operation, served),
            (("Content-Type", _CONTENT_TYPE), ("x-amzn-RequestId", str(uuid.uuid4()))),
        )
        return await self._answer(stream, spoiled, keep_alive)

    async def _answer(self, stream: SocketStream, response: _Response, keep_alive: bool) -> bool:
        if response.reset:
            self._faults["reset_connection"] += 1
            _abort(stream)
            return False
        await self._send(stream, response, keep_alive)
        return keep_alive

    async def _send(self, stream: SocketStream, response: _Response, keep_alive: bool) -> None:
        self._statuses[response.status] += 1
        await stream.send(_encode_response(response, keep_alive))

    async def _serve(self, operation: str, body: bytes) -> _Response:
        """Apply one request to the fake; never raises for anything the fake raises."""
        try:
            method = getattr(self.fake, _METHODS[operation])
            signature = self._signatures.get(operation)
            if signature is None:
                signature = self._signatures[operation] = _parameters(method)
            params = _decode_params(operation, body, signature)
            result = await method(**params)
        except _ServiceError as exc:
            return _error_response(exc.status, exc.code, exc.message)
        except TypeError as exc:
            # What botocore would refuse to send: a wrongly typed member.
            return _error_response(400, "SerializationException", str(exc))
        except OSError:
            # A transport failure scripted on the fake (raise_next): the connection drops.
            return _Response(0, b"", reset=True)
        except Exception as exc:
            status = _status_of(exc)
            code, message = error_of(exc)
            if status is None:
                return _error_response(500, "InternalFailure", message)
            return _error_response(status, code, message)
        metadata = result.get("ResponseMetadata")
        request_id = metadata.get("RequestId") if isinstance(metadata, Mapping) else None
        payload = {key: value for key, value in result.items() if key != "ResponseMetadata"}
        encoded = _to_json(payload)
        assert isinstance(encoded, dict)
        return _json_response(encoded, request_id if isinstance(request_id, str) else None)

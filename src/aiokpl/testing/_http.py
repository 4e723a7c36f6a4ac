"""HTTP/1.1 for the loopback server: reading requests, writing responses, resetting.

What is here: the request head (:func:`_parse_head`, :class:`_Head`), the body
(:func:`_read_body`: ``Content-Length`` or ``Transfer-Encoding: chunked``, with ``Expect:
100-continue`` answered), the response (:class:`_Response`, :func:`_encode_response`, always
with ``Content-Length`` and ``Connection``), and a reset instead of an orderly close
(:func:`_abort`). No Kinesis here: ``_protocol`` maps operations onto it.

Invariants: a request that cannot be parsed as HTTP/1.1 raises :class:`_BadRequest` (the
server answers 400 and closes); a head is at most 64 KiB and a body at most 32 MiB (a 10 MiB
record base64-encoded, plus JSON), so a broken client cannot make the server buffer without
bound. Keep-alive follows HTTP/1.1: on unless ``Connection: close``; under HTTP/1.0 only with
``Connection: keep-alive``. The target may be the origin form (``/``) or the absolute form
httpx sends (``http://127.0.0.1:PORT/``).

What it does not do: TLS, HTTP/2, compression.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from dataclasses import dataclass
from http import HTTPStatus

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

_MAX_HEAD_BYTES = 64 * 1024
# A 10 MiB record (the largest a stream allows) base64-encoded, plus JSON around it.
_MAX_BODY_BYTES = 32 * 1024 * 1024


class _BadRequest(Exception):
    """The request cannot be parsed as HTTP/1.1: answer 400 and close."""


@dataclass(frozen=True)
class _Head:
    method: str
    target: str
    version: str
    headers: dict[str, str]

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in connection
        return "close" not in connection


def _parse_head(raw: bytes) -> _Head:
    """Parse a request line and headers (without the blank line that ends them)."""
    lines = raw.decode("latin-1").replace("\r\n", "\n").split("\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequest(f"bad request line {lines[0][:100]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise _BadRequest(f"bad header line {line[:100]!r}")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return _Head(method, target, version, headers)


def _path_of(target: str) -> str:
    # httpx sends the absolute form, "http://127.0.0.1:PORT/".
    if "://" in target:
        rest = target.split("://", 1)[1]
        slash = rest.find("/")
        return "/" if slash < 0 else rest[slash:]
    return target


@dataclass(frozen=True)
class _Response:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    reset: bool = False


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Server Error" if status >= 500 else "Unknown"


def _encode_response(response: _Response, keep_alive: bool, body: bytes | None = None) -> bytes:
    lines = [f"HTTP/1.1 {response.status} {_reason(response.status)}"]
    lines.extend(f"{name}: {value}" for name, value in response.headers)
    lines.append(f"Content-Length: {len(response.body)}")
    lines.append("Connection: " + ("keep-alive" if keep_alive else "close"))
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + (response.body if body is None else body)


async def _read_body(stream: SocketStream, reader: BufferedByteReceiveStream, head: _Head) -> bytes:
    """Read the body of the request ``head`` starts (answering ``Expect: 100-continue``)."""
    if head.headers.get("expect", "").lower() == "100-continue":
        await stream.send(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in head.headers.get("transfer-encoding", "").lower():
        return await _read_chunked(reader)
    length_text = head.headers.get("content-length", "0")
    try:
        length = int(length_text)
    except ValueError:
        raise _BadRequest(f"bad Content-Length {length_text!r}") from None
    if not 0 <= length <= _MAX_BODY_BYTES:
        raise _BadRequest(f"Content-Length {length} is outside 0 … {_MAX_BODY_BYTES}")
    return await reader.receive_exactly(length) if length else b""


async def _read_chunked(reader: BufferedByteReceiveStream) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        line = await reader.receive_until(b"\r\n", 1024)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise _BadRequest(f"bad chunk size line {line[:100]!r}") from None
        if size == 0:
            while await reader.receive_until(b"\r\n", _MAX_HEAD_BYTES):
                pass  # trailers
            return b"".join(chunks)
        total += size
        if total > _MAX_BODY_BYTES:
            raise _BadRequest(f"the body is over {_MAX_BODY_BYTES} bytes")
        chunks.append(await reader.receive_exactly(size))
        if await reader.receive_exactly(2) != b"\r\n":
            raise _BadRequest("a chunk does not end with CRLF")


def _abort(stream: SocketStream) -> None:
    """Make the coming close a reset (RST) instead of an orderly shutdown (FIN)."""
    with contextlib.suppress(OSError, anyio.TypedAttributeLookupError):
        sock = stream.extra(SocketAttribute.raw_socket)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

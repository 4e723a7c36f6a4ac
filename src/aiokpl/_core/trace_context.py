"""Trace context in a user record's tags: the W3C ``traceparent`` (and ``tracestate``) of the
request that put the record, carried through aggregation. The producer writes them
(``aiokpl._tracing``, with ``Config.tracing``) with :func:`span_tags`; consumers read them back
with :func:`trace_context_of` (``aiokpl.tracing``).

A ``PutRecords`` call carries no headers, and an aggregate packs records of many requests, so
the context travels with each user record, in tags the KCL ignores (its records stay readable
by every consumer). Two reserved keys (``aiokpl.`` is aiokpl's prefix, see ``identity.py``):

* ``aiokpl.trace``: the ``traceparent``, compact: its trace id (16 bytes), parent id (8) and
  trace flags (1) as 34 characters of unpadded base64url. Its version is ``00``, the only one
  W3C Trace Context defines: a ``traceparent`` of a later version is carried as its first four
  fields, as that specification tells a version-00 reader to do;
* ``aiokpl.tracestate``: the ``tracestate``, as given, only when there is one.

Why compact, not the 55-character header text: the tag is paid for on every record, in the
aggregate's size and in the bytes the stream bills. As fields of the format's ``Record.tags``,
``aiokpl.trace`` costs 52 bytes (:data:`TRACE_TAG_SIZE`: 2 for the ``Tag`` message's field and
length, 2 + 12 for its key, 2 + 34 for its value); the header text would cost 73.

Invariants:

* :func:`trace_tags` writes only a ``traceparent`` that W3C Trace Context accepts (lowercase
  hex, ids not all zeros, version not ``ff``); :func:`trace_context_of` returns exactly the
  version-00 header it was given (a later version's: its first four fields, as version 00);
* :func:`trace_context_of` never raises on what a record carries: a tag that is not a valid
  context (written by another program, or damaged) reads as no context.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from typing import NamedTuple

from .decoder import decode_tags
from .encoder import encode_tags
from .wire import Tag

__all__ = (
    "MESSAGING_SYSTEM",
    "SCHEMA_URL",
    "STATE_KEY",
    "TRACE_KEY",
    "TRACE_TAG_SIZE",
    "TraceContext",
    "check_traceparent",
    "span_tags",
    "split_trace_tags",
    "trace_context_of",
    "trace_tags",
)

SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"
"""The OpenTelemetry semantic conventions aiokpl's spans follow (producer and consumer)."""

MESSAGING_SYSTEM = "aws.kinesis"
"""The spans' ``messaging.system``: the conventions register no value for Kinesis."""

TRACE_KEY = "aiokpl.trace"
"""The tag key of a record's compact ``traceparent``."""

STATE_KEY = "aiokpl.tracestate"
"""The tag key of a record's ``tracestate``, when it has one."""

_COMPACT_SIZE = 34  # unpadded base64url of 25 bytes

TRACE_TAG_SIZE = 2 + (2 + len(TRACE_KEY)) + (2 + _COMPACT_SIZE)
"""Bytes the ``aiokpl.trace`` tag adds to a record's encoded tags (52)."""

# version-traceparent: 2 hex (not ff), trace id 32, parent id 16, flags 2; lowercase only. A
# later version may add fields after a "-"; version 00 has none.
_TRACEPARENT = re.compile(
    r"(?P<version>[0-9a-f]{2})-(?P<trace>[0-9a-f]{32})-(?P<parent>[0-9a-f]{16})"
    r"-(?P<flags>[0-9a-f]{2})(?P<rest>-.*)?",
    re.DOTALL,
)
_ZERO_TRACE = "0" * 32
_ZERO_PARENT = "0" * 16


class TraceContext(NamedTuple):
    """A user record's trace context, as W3C Trace Context headers.

    Attributes:
        traceparent: the ``traceparent`` header (version ``00``).
        tracestate: the ``tracestate`` header, or ``None`` if the record has none.
    """

    traceparent: str
    tracestate: str | None = None


def check_traceparent(traceparent: str) -> str:
    """The version-00 ``traceparent`` that ``traceparent`` stands for.

    Raises:
        ValueError: it is not a ``traceparent`` W3C Trace Context accepts (the message says
            why); a ``TypeError`` if it is not a ``str``.
    """
    if not isinstance(traceparent, str):
        raise TypeError(f"traceparent must be a str, not {type(traceparent).__name__}")
    match = _TRACEPARENT.fullmatch(traceparent)
    if match is None:
        raise ValueError(
            f"traceparent must be VERSION-TRACE_ID-PARENT_ID-FLAGS in lowercase hex "
            f"(2, 32, 16 and 2 digits); got {traceparent!r}"
        )
    version, trace, parent, flags, rest = match.group("version", "trace", "parent", "flags", "rest")
    if version == "ff":
        raise ValueError("traceparent version ff is invalid")
    if version == "00" and rest is not None:
        raise ValueError("a version-00 traceparent has exactly four fields")
    if trace == _ZERO_TRACE:
        raise ValueError("traceparent's trace id must not be all zeros")
    if parent == _ZERO_PARENT:
        raise ValueError("traceparent's parent id must not be all zeros")
    return f"00-{trace}-{parent}-{flags}"


def trace_tags(traceparent: str, tracestate: str | None = None) -> bytes:
    """A record's trace context as encoded ``Record.tags`` fields: ``aiokpl.trace`` (and
    ``aiokpl.tracestate`` when ``tracestate`` is not empty).

    Raises:
        ValueError: ``traceparent`` is not valid (see :func:`check_traceparent`).
    """
    header = check_traceparent(traceparent)
    raw = bytes.fromhex(header[3:35] + header[36:52] + header[53:55])
    compact = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    tags = [(TRACE_KEY, compact)]
    if tracestate:
        tags.append((STATE_KEY, tracestate))
    return encode_tags(tags)


# The aiokpl.trace tag's fields before its value: Record.tags' field (3, length 50), the
# Tag's key (field 1) and the value's field (2, length 34). See trace_tags.
_TRACE_PREFIX = b'"2\n\x0caiokpl.trace\x12"'


def span_tags(trace_id: int, span_id: int, flags: int, tracestate: str | None = None) -> bytes:
    """A span's context as encoded ``Record.tags`` fields, as :func:`trace_tags` writes them
    for its ``traceparent``, from the span's integers (what OpenTelemetry's ``SpanContext``
    holds), without the header text: the producer's per-record path with tracing on.

    The ids must be valid (not zero, in range): the caller asks ``SpanContext.is_valid``.
    """
    raw = ((trace_id << 72) | (span_id << 8) | (flags & 0xFF)).to_bytes(25, "big")
    tags = _TRACE_PREFIX + base64.urlsafe_b64encode(raw)[:_COMPACT_SIZE]
    if tracestate:
        tags += encode_tags([(STATE_KEY, tracestate)])
    return tags


def split_trace_tags(encoded: bytes) -> tuple[bytes, bytes]:
    """A record's encoded tags split in two: the others, and its trace context's (the
    ``aiokpl.trace`` and ``aiokpl.tracestate`` tags, as :func:`span_tags` wrote them), each
    in its order. What the spool keeps of a record is its tags with its context after them;
    a record replayed from it gets them back apart (``Marks.replayed``).

    Raises:
        AggregationFormatError: ``encoded`` is not a sequence of encoded tags.
    """
    if TRACE_KEY.encode() not in encoded:
        return encoded, b""
    others: list[Tag] = []
    trace: list[Tag] = []
    for tag in decode_tags(encoded):
        (trace if tag.key in (TRACE_KEY, STATE_KEY) else others).append(tag)
    return encode_tags(others), encode_tags(trace)


def trace_context_of(tags: Iterable[Tag | tuple[str, str | None]]) -> TraceContext | None:
    """The trace context a user record's ``tags`` carry (as ``deaggregate`` returns them), or
    ``None`` if they carry none, or none that is valid (never an error: see the module)."""
    compact: str | None = None
    state: str | None = None
    for key, value in tags:
        if key == TRACE_KEY and compact is None:
            compact = value
        elif key == STATE_KEY and state is None:
            state = value
    if compact is None or len(compact) != _COMPACT_SIZE:
        return None
    try:
        raw = base64.urlsafe_b64decode(compact + "==")
    except (binascii.Error, ValueError):
        return None
    if len(raw) != 25 or base64.urlsafe_b64encode(raw).rstrip(b"=").decode() != compact:
        return None  # not the one spelling trace_tags writes
    header = f"00-{raw[:16].hex()}-{raw[16:24].hex()}-{raw[24:].hex()}"
    try:
        check_traceparent(header)
    except ValueError:
        return None
    return TraceContext(header, state or None)

"""What a ``PutRecords`` call came to, typed: what the sender hands back, for the retrier.

The SDK's answer is a dict (or an exception); it is read once, at the boundary
(``aiokpl._kinesis.answer_of`` and ``failure_of``), into one of three kinds:

* :class:`Answered`: Kinesis answered each record: a :data:`Delivered` or a :class:`Refused`
  entry per Kinesis record sent, in request order. An entry that is neither (no sequence
  number, no shard id, no error code) is refused as ``"Internal"``, its outcome unknown;
* :class:`RequestFailed`: the call failed as a whole (a service error, a connection error, a
  timeout), with the code and message every record's attempt then carries;
* :class:`Malformed`: an answer came back, but not one to read records from (no ``Records``
  list, or not as many results as records sent): its records' fate is unknown.

Whoever reads an answer matches on its kind; no one below the boundary sees a dict or a
``KeyError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, TypeAlias

__all__ = (
    "COUNT_MISMATCH",
    "INTERNAL",
    "UNKNOWN_OUTCOME",
    "UNREACHABLE",
    "Answer",
    "Answered",
    "Delivered",
    "Entry",
    "Malformed",
    "Refused",
    "RequestFailed",
)

INTERNAL = "Internal"
COUNT_MISMATCH = "RecordCountMismatch"

UNKNOWN_OUTCOME = frozenset({INTERNAL, COUNT_MISMATCH})
"""The producer's codes for a request sent and never properly answered (a timeout, a lost
connection, a malformed answer): Kinesis may have stored its records all the same.

A request that certainly never left (a refused connection, a name that did not resolve, a
connect timeout: ``_kinesis.never_sent``) fails with the name of the exception instead
(``"EndpointConnectionError"``, ``"ConnectTimeoutError"`` …), is retried like ``"Internal"``,
and leaves the outcome known: the record is not in the stream."""

UNREACHABLE = frozenset(
    {
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "SSLError",
        "ProxyConnectionError",
        "ConnectionRefusedError",
        "gaierror",
    }
)
"""Those codes of a request that never left which say the endpoint cannot be reached (refused,
a name that does not resolve, no connection in time, a TLS handshake or a proxy that failed),
rather than that credentials could not be had (``"CredentialRetrievalError"`` …)."""


Delivered: TypeAlias = tuple[str, str]
"""A Kinesis record stored: ``(shard_id, sequence_number)``. A plain tuple: one is made per
Kinesis record answered, on the hot path (a named tuple would take twice as long to read an
answer)."""


class Refused(NamedTuple):
    """A Kinesis record not stored, and why (``ErrorCode``, ``ErrorMessage``)."""

    code: str
    message: str


Entry: TypeAlias = Delivered | Refused
"""One Kinesis record's result: tell them apart with ``isinstance(entry, Refused)``."""


@dataclass(frozen=True, slots=True)
class Answered:
    """Kinesis answered each Kinesis record of the request: ``entries`` in request order."""

    entries: list[Entry]


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """The call failed as a whole: no record was answered.

    Attributes:
        code: the service's error code, an exception's name for a request that never left
            (``"EndpointConnectionError"`` …), or ``"Internal"``.
        message: what went wrong, for the records' attempts.
        outcome_unknown: the request may have been applied all the same.
    """

    code: str
    message: str
    outcome_unknown: bool

    @classmethod
    def of(cls, code: str, message: str) -> RequestFailed:
        """A failure with ``code``, whose outcome is unknown for the producer's own codes."""
        return cls(code, message, code in UNKNOWN_OUTCOME)


@dataclass(frozen=True, slots=True)
class Malformed:
    """An answer not to read records from: ``code`` is ``"Internal"`` (no ``Records``
    list, or not a response at all) or ``"RecordCountMismatch"``; the outcome is unknown."""

    code: str
    message: str


Answer = Answered | RequestFailed | Malformed
"""What one ``PutRecords`` call came to."""

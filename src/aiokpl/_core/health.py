"""The producer's health, pure: a verdict with reasons, from what the producer already keeps.

:meth:`aiokpl.Producer.health` gathers a few values the producer keeps anyway (when a record
was last delivered, the oldest record outstanding, each stream's last answered and last failed
request, whether the spool's disk is full, the outcome of the last requests) and asks the
functions here for a :class:`Health`: a status and the reasons for it. Nothing is computed per
record to keep them, and nothing here reads a clock: ``now`` is given.

The reasons, each a short code, the status it brings, and when it holds:

==========================  ========  ======================================================
code                        status    when
==========================  ========  ======================================================
``not_running``             failing   the producer is not started yet, or is closed
``endpoint_unreachable``    failing   the last request that could tell failed to connect
                                      (refused, a name that does not resolve, a connect
                                      timeout, TLS, a proxy: :data:`~.answers.UNREACHABLE`),
                                      and no answer came since
``credentials_failing``     failing   the last request that could tell was refused for its
                                      credentials, or none could be found
                                      (:data:`CREDENTIAL_CODES`), and none was accepted since
``no_progress``             failing   records are outstanding, the oldest for at least the
                                      progress window, and none was delivered within it
``spool_full``              failing   the spool's disk is full: puts wait for room
``stream_failing``          degraded  the last :data:`STREAM_FAILURES` or more requests of a
                                      stream failed as a whole (none answered since), the
                                      last within the window
==========================  ========  ======================================================

The status is the worst of its reasons' (``"healthy"`` without any). A stream failing for a
reason the producer already gives (an unreachable endpoint, credentials) is not repeated per
stream; at most :data:`MAX_STREAM_REASONS` streams are named, the rest counted in one more.

The progress window is the window, or half of ``record_ttl_ms`` if that is shorter: a record
never waits longer than its TTL, so with a short TTL a longer window could never see one wait
that long.

Not the KPL's, which reports whether its child process is alive (its daemon health check, and
the ``UnhealthyDaemon`` metric): here there is no child process, and the verdict says why a
producer that runs cannot deliver.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal, NamedTuple

from .answers import UNKNOWN_OUTCOME, UNREACHABLE

__all__ = (
    "CLOSED",
    "CREDENTIAL_CODES",
    "DEFAULT_WINDOW",
    "DEGRADED",
    "FAILING",
    "HEALTHY",
    "MAX_STREAM_REASONS",
    "MAX_WINDOW",
    "NEVER_SIGNED",
    "STREAM_FAILURES",
    "Health",
    "HealthReason",
    "Reachability",
    "Transition",
    "check_window",
    "closed_reason",
    "credentials_reason",
    "endpoint_reason",
    "not_started_reason",
    "progress_reason",
    "spool_reason",
    "stream_reasons",
    "verdict",
)

HEALTHY: Final = "healthy"
DEGRADED: Final = "degraded"
FAILING: Final = "failing"
_SEVERITY = {HEALTHY: 0, DEGRADED: 1, FAILING: 2}

DEFAULT_WINDOW = 10.0
"""Seconds :meth:`aiokpl.Producer.health` looks back by default."""

MAX_WINDOW = 600.0
"""The longest window :meth:`aiokpl.Producer.health` takes (what is kept reaches that far)."""

MAX_STREAM_REASONS = 10
"""Failing streams named one by one; more are counted in one reason."""

STREAM_FAILURES = 2
"""Requests of a stream in a row that must fail (none answered between) for it to be named."""

NEVER_SIGNED = frozenset(
    {"NoCredentialsError", "CredentialRetrievalError", "PartialCredentialsError"}
)
"""Codes of a request that never left because no credentials could be had."""

CREDENTIAL_CODES = NEVER_SIGNED | frozenset(
    {
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "IncompleteSignature",
        "MissingAuthenticationTokenException",
        "ExpiredTokenException",
    }
)
"""Codes that say the request's credentials were missing, unknown, wrong or expired."""

_MESSAGE_MAX = 200


def _short(message: str) -> str:
    """``message`` on one line, at most ``_MESSAGE_MAX`` characters."""
    text = " ".join(message.split())
    return text if len(text) <= _MESSAGE_MAX else f"{text[:_MESSAGE_MAX]}…"


@dataclass(frozen=True, slots=True)
class HealthReason:
    """One reason for a :class:`Health` verdict.

    Attributes:
        code: what holds, a short code: ``"not_running"``, ``"endpoint_unreachable"``,
            ``"credentials_failing"``, ``"no_progress"``, ``"spool_full"`` or
            ``"stream_failing"`` (see ``docs/health.md``).
        status: what it makes the producer: ``"degraded"`` or ``"failing"``.
        message: the same for a person: what was seen, for how long, and the last error.
        stream: the stream it is about (``"stream_failing"``), else ``None``.
    """

    code: str
    status: Literal["degraded", "failing"]
    message: str
    stream: str | None = None


@dataclass(frozen=True, slots=True)
class Health:
    """What :meth:`aiokpl.Producer.health` says: a status, and the reasons for it.

    Attributes:
        status: ``"healthy"`` (no reason), ``"degraded"`` (records are delivered, but a stream
            fails) or ``"failing"`` (records are not delivered, or cannot be put).
        reasons: why, the failing ones first; empty when healthy.
    """

    status: Literal["healthy", "degraded", "failing"]
    reasons: tuple[HealthReason, ...] = ()

    @property
    def severity(self) -> int:
        """The status as a number: 0 healthy, 1 degraded, 2 failing (the ``ProducerHealth``
        metric's value)."""
        return _SEVERITY[self.status]

    @property
    def codes(self) -> tuple[str, ...]:
        """The reasons' codes, in order."""
        return tuple(reason.code for reason in self.reasons)


def check_window(window_s: float) -> float:
    """``window_s``, checked: a number of seconds from 1 to :data:`MAX_WINDOW`.

    Raises:
        ValueError: it is not.
    """
    if (
        isinstance(window_s, bool)
        or not isinstance(window_s, int | float)
        or not 1 <= window_s <= MAX_WINDOW
    ):
        raise ValueError(
            f"window_s must be a number of seconds, 1 … {MAX_WINDOW:g}; got {window_s!r}"
        )
    return float(window_s)


def verdict(reasons: Iterable[HealthReason]) -> Health:
    """The :class:`Health` that ``reasons`` make: the worst status, failing reasons first."""
    ordered = sorted(reasons, key=lambda reason: -_SEVERITY[reason.status])
    if not ordered:
        return Health(HEALTHY)
    return Health(ordered[0].status, tuple(ordered))


class Transition(NamedTuple):
    """The endpoint became unreachable (``reachable`` false) or answers again (true).

    ``since`` is when it became unreachable; ``code`` and ``message`` are its last failure
    to connect."""

    reachable: bool
    since: float
    code: str
    message: str


class Reachability:
    """Whether the endpoint answers, and accepts the credentials, from each request's outcome.

    *Mutable*: :meth:`observe` updates it and returns the :class:`Transition` to log, if any.
    A request that failed to connect makes the endpoint unreachable; any answer of the
    service (a delivery, or an error it sent: throttling, a missing stream …) makes it
    reachable again. A request sent and not answered (``"Internal"``: a timeout, a lost
    connection) says neither. Credentials fail with a :data:`CREDENTIAL_CODES` code, and are
    fine again once the service answers with anything else.

    Attributes:
        since: when the endpoint became unreachable; ``None`` while it answers.
        failure: ``(code, message)`` of the last failure to connect.
        credentials_since: when requests started failing for their credentials, or ``None``.
        credentials_failure: ``(code, message)`` of the last of those.
    """

    __slots__ = ("credentials_failure", "credentials_since", "failure", "since")

    def __init__(self) -> None:
        self.since: float | None = None
        self.failure: tuple[str, str] | None = None
        self.credentials_since: float | None = None
        self.credentials_failure: tuple[str, str] | None = None

    def observe(self, code: str | None, message: str, now: float) -> Transition | None:
        """A request ended at ``now``: answered (``code`` ``None``), or failed as a whole with
        ``code`` and ``message``. Returns the transition to log, if this is one."""
        if code is not None:
            if code in UNREACHABLE:
                self.failure = (code, message)
                if self.since is None:
                    self.since = now
                    return Transition(False, now, code, message)
                return None
            if code in UNKNOWN_OUTCOME:
                return None
            if code in CREDENTIAL_CODES:
                self.credentials_failure = (code, message)
                if self.credentials_since is None:
                    self.credentials_since = now
                if code in NEVER_SIGNED:
                    return None  # nothing was sent: nothing said about the endpoint
        if code is None or code not in CREDENTIAL_CODES:
            self.credentials_since = None
        since = self.since
        if since is None:
            return None
        self.since = None
        assert self.failure is not None
        return Transition(True, since, *self.failure)


def not_started_reason() -> HealthReason:
    """The producer was not entered yet."""
    return HealthReason(
        "not_running", FAILING, "the producer is not started: enter it (async with)"
    )


def closed_reason() -> HealthReason:
    """The producer is closed, or closing."""
    return HealthReason("not_running", FAILING, "the producer is closed")


CLOSED = Health(FAILING, (closed_reason(),))
"""The verdict on a closed producer."""


def endpoint_reason(reach: Reachability, endpoint: str | None, now: float) -> HealthReason | None:
    """``endpoint_unreachable``, if it holds."""
    if reach.since is None or reach.failure is None:
        return None
    code, message = reach.failure
    return HealthReason(
        "endpoint_unreachable",
        FAILING,
        f"cannot connect to {endpoint or 'the Kinesis endpoint'} for {now - reach.since:.1f} s "
        f"({code}: {_short(message)}); records are kept and retried until record_ttl_ms",
    )


def credentials_reason(reach: Reachability, now: float) -> HealthReason | None:
    """``credentials_failing``, if it holds."""
    if reach.credentials_since is None or reach.credentials_failure is None:
        return None
    code, message = reach.credentials_failure
    return HealthReason(
        "credentials_failing",
        FAILING,
        f"requests fail for their credentials for {now - reach.credentials_since:.1f} s "
        f"({code}: {_short(message)})",
    )


def progress_reason(
    outstanding: int, oldest_put_at: float, delivered_at: float, now: float, window: float
) -> HealthReason | None:
    """``no_progress``: ``outstanding`` records, the oldest put at ``oldest_put_at``, and the
    last delivery at ``delivered_at`` (``-inf``: none yet), both at least ``window`` ago."""
    if not outstanding or now - oldest_put_at < window or now - delivered_at < window:
        return None
    delivered = (
        f"none delivered for {now - delivered_at:.1f} s"
        if delivered_at > -math.inf
        else "none delivered yet"
    )
    return HealthReason(
        "no_progress",
        FAILING,
        f"{outstanding} record{'s' if outstanding != 1 else ''} outstanding, the oldest for "
        f"{now - oldest_put_at:.1f} s, and {delivered}",
    )


def spool_reason(full: bool, directory: str) -> HealthReason | None:
    """``spool_full``, if the spool's disk is full."""
    if not full:
        return None
    return HealthReason(
        "spool_full",
        FAILING,
        f"the spool's disk is full ({directory}): puts wait until a write succeeds",
    )


def stream_reasons(
    failing: Iterable[tuple[str, float, float, int, tuple[str, str]]],
    now: float,
    window: float,
    covered: frozenset[str] = frozenset(),
) -> list[HealthReason]:
    """``stream_failing`` for each stream whose requests keep failing within ``window``.

    Args:
        failing: per stream whose last request failed as a whole, ``(stream, since,
            failed_at, failures, (code, message))``: the first and the last of its requests
            that failed since one was last answered, how many, and how the last one failed.
        now: the time of the verdict.
        window: seconds looked back: the last failure must be this recent.
        covered: codes a producer-wide reason already gives: streams failing with one of
            these are not named again.

    A stream is named once :data:`STREAM_FAILURES` requests in a row have failed (one failed
    request that its retry delivers is no news), the last within ``window``.
    """
    named = sorted(
        (stream, since, failed_at, failures, failure)
        for stream, since, failed_at, failures, failure in failing
        if failures >= STREAM_FAILURES and now - failed_at <= window and failure[0] not in covered
    )
    reasons = [
        HealthReason(
            "stream_failing",
            DEGRADED,
            f"the last {failures} requests to stream {stream!r} failed, for "
            f"{now - since:.1f} s; the last {now - failed_at:.1f} s ago, with {failure[0]}: "
            f"{_short(failure[1])}",
            stream,
        )
        for stream, since, failed_at, failures, failure in named[:MAX_STREAM_REASONS]
    ]
    more = len(named) - MAX_STREAM_REASONS
    if more > 0:
        reasons.append(
            HealthReason(
                "stream_failing",
                DEGRADED,
                f"and {more} more stream{'s' if more != 1 else ''} whose requests keep failing",
            )
        )
    return reasons

"""The producer's health at run time: the endpoint's reachability, logged; the verdict, gathered.

:class:`Connectivity` is told the outcome of every ``PutRecords`` call (the sender calls
:meth:`Connectivity.observe` once per request, not per record): it keeps
``_core.health.Reachability`` up to date, and each stream whose requests fail. It logs one
warning when the endpoint stops answering (naming it and the error), none for the retries that
follow, and one when it answers again: a producer pointed at the wrong place says so within one
request, not once per retry, and not only thirty seconds later in every record's ``"Expired"``.

:func:`health` gathers what the verdict needs from the parts that keep it (the result ledger,
the spool, the connectivity) and hands it to the pure functions of ``_core.health``. It reads a
few values per failing stream and the oldest record outstanding: cheap enough to call every
second.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any, Protocol

from .._core.answers import UNREACHABLE, Answer, Answered
from .._core.health import (
    CREDENTIAL_CODES,
    MAX_WINDOW,
    Health,
    HealthReason,
    Reachability,
    Transition,
    closed_reason,
    credentials_reason,
    endpoint_reason,
    progress_reason,
    spool_reason,
    stream_reasons,
    verdict,
)

__all__ = ("FORGET_AFTER", "Connectivity", "Disk", "Ledger", "Running", "Timed", "health")

logger = logging.getLogger("aiokpl")

_LOG_MESSAGE_MAX = 300

FORGET_AFTER = MAX_WINDOW
"""Seconds after its last failed request that a stream is forgotten (the longest window)."""


class Timed(Protocol):
    """A record outstanding, as the verdict reads it (``aiokpl._record.UserRecord``)."""

    @property
    def expires_at(self) -> float: ...


class Running(Protocol):
    """What the verdict reads of a running producer's way in (``aiokpl._intake.Intake``)."""

    @property
    def closed(self) -> bool: ...

    @property
    def clock(self) -> Callable[[], float]: ...


class Ledger(Protocol):
    """What the verdict reads of the result ledger (``aiokpl._pipeline.ledger``): the records
    outstanding, oldest first, and when one was last delivered."""

    @property
    def outstanding(self) -> Collection[Timed]: ...

    @property
    def delivered_at(self) -> float: ...


class Disk(Protocol):
    """What the verdict reads of the spool (``aiokpl._spooling.Spool``)."""

    @property
    def full(self) -> bool: ...

    @property
    def directory(self) -> str: ...


class Connectivity:
    """The endpoint's reachability and each stream's failing requests, from each answer.

    Args:
        endpoint: the endpoint's URL, as the log names it (``None``: unknown, a fake).
        ttl_ms: ``Config.record_ttl_ms``, which the warning quotes.

    Attributes:
        reach: the endpoint's reachability and the credentials' state.
        failing: per stream whose last request failed as a whole, ``[since, failed_at,
            failures, (code, message)]`` (see ``_core.health.stream_reasons``); a stream
            leaves it at its next answered request, or :data:`FORGET_AFTER` seconds after its
            last failure.
    """

    __slots__ = ("_ttl_ms", "endpoint", "failing", "reach")

    def __init__(self, endpoint: str | None, ttl_ms: int) -> None:
        self.endpoint = endpoint
        self.reach = Reachability()
        self.failing: dict[str, list[Any]] = {}
        self._ttl_ms = ttl_ms

    def observe(self, stream: str, answer: Answer, now: float) -> None:
        """A ``PutRecords`` call to ``stream`` ended at ``now`` with ``answer`` (the sender's
        call, once per request)."""
        failing = self.failing
        reach = self.reach
        if isinstance(answer, Answered):
            if failing and stream in failing:
                del failing[stream]
            if reach.since is None and reach.credentials_since is None:
                return  # the common case, in three tests
            transition = reach.observe(None, "", now)
        else:
            failure = (answer.code, answer.message)
            entry = failing.get(stream)
            if entry is None:
                self._forget(now)
                failing[stream] = [now, now, 1, failure]
            else:
                entry[1] = now
                entry[2] += 1
                entry[3] = failure
            transition = reach.observe(answer.code, answer.message, now)
        if transition is not None:
            self._log(transition, now)

    def _forget(self, now: float) -> None:
        """Drop the streams that have not failed for :data:`FORGET_AFTER` seconds (released
        pipelines, streams no longer put to): the table stays as small as what fails."""
        old = [name for name, entry in self.failing.items() if now - entry[1] > FORGET_AFTER]
        for name in old:
            del self.failing[name]

    def _log(self, transition: Transition, now: float) -> None:
        where = self.endpoint or "the Kinesis endpoint"
        if transition.reachable:
            logger.warning(
                "%s answers again, after %.1f s unreachable", where, now - transition.since
            )
            return
        message = " ".join(transition.message.split())[:_LOG_MESSAGE_MAX]
        logger.warning(
            "cannot connect to %s (%s: %s): records are kept and retried until record_ttl_ms "
            "(%d ms) passes. Said once; a line follows when it answers again",
            where,
            transition.code,
            message,
            self._ttl_ms,
        )


def health(
    intake: Running,
    ledger: Ledger,
    connectivity: Connectivity | None,
    spool: Disk | None,
    *,
    window: float,
    ttl: float,
) -> Health:
    """A running producer's verdict now (its clock's), looking back ``window`` seconds (see
    ``_core.health``; ``ttl`` is ``record_ttl_ms`` in seconds). One that does not run is
    not started, or closed: the producer says so itself."""
    now = intake.clock()
    reasons: list[HealthReason | None] = []
    covered: frozenset[str] = frozenset()
    if intake.closed:
        reasons.append(closed_reason())
    if connectivity is not None:
        reach = connectivity.reach
        reasons.append(endpoint_reason(reach, connectivity.endpoint, now))
        reasons.append(credentials_reason(reach, now))
        covered = (UNREACHABLE if reach.since is not None else frozenset()) | (
            CREDENTIAL_CODES if reach.credentials_since is not None else frozenset()
        )
    outstanding = ledger.outstanding
    if outstanding:
        # The oldest record outstanding is the first in the ledger's dict (insertion order):
        # when it was put is its expiry less the TTL.
        oldest = next(iter(outstanding)).expires_at - ttl
        progress = min(window, ttl / 2)
        reasons.append(
            progress_reason(len(outstanding), oldest, ledger.delivered_at, now, progress)
        )
    if spool is not None:
        reasons.append(spool_reason(spool.full, spool.directory))
    found = [reason for reason in reasons if reason is not None]
    if connectivity is not None:
        failing = [(name, *entry) for name, entry in connectivity.failing.items()]
        found += stream_reasons(failing, now, window, covered)
    return verdict(found)

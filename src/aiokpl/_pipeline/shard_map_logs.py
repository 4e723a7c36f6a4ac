"""The shard map's log lines: one warning for many missing streams, and messages made fit
for one line (a proxy's or a broken server's page can arrive whole as an error's message)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from .scheduler import Scheduler

__all__ = (
    "LOG_MESSAGE_MAX",
    "MISSING_LOG_GATHER",
    "MISSING_LOG_INTERVAL",
    "MISSING_LOG_NAMES",
    "MissingStreamsLog",
    "brief",
    "described",
)

logger = logging.getLogger("aiokpl.shard_map")

# Log lines quote at most this many characters of an error's message.
LOG_MESSAGE_MAX = 160
# Streams found missing: the first warning waits this long for others, the next ones this
# long after the previous one, and each names this many.
MISSING_LOG_GATHER = 1.0
MISSING_LOG_INTERVAL = 60.0
MISSING_LOG_NAMES = 5


def brief(message: str) -> str:
    """A message fit for one log line: control characters and runs of blanks as one space,
    and at most ``LOG_MESSAGE_MAX`` characters, saying how long it was. A proxy's or a broken
    server's page can arrive whole as an error's message (up to 1000 characters, as
    ``statistics()`` keeps it)."""
    text = " ".join("".join(c if c.isprintable() else " " for c in message).split())
    if len(text) <= LOG_MESSAGE_MAX:
        return text
    return f"{text[:LOG_MESSAGE_MAX]}… [{len(message)} characters]"


def described(error: tuple[str, str, str]) -> str:
    """``operation: code: message`` of a ``last_error``, its message made :func:`brief`."""
    operation, code, message = error
    return f"{operation}: {code}: {brief(message)}"


class MissingStreamsLog:
    """The warning that streams were not found: one line per interval for all of them.

    A producer given many names of streams that do not exist (a typo in a template, streams a
    clean-up deleted) would otherwise warn once per stream per attempt. The first stream
    reported is logged after ``MISSING_LOG_GATHER`` seconds, with every other one reported
    meanwhile; later ones wait until ``MISSING_LOG_INTERVAL`` seconds after the last line, and
    the producer logs what is still gathering as it exits. A line says how many streams, names
    the first ``MISSING_LOG_NAMES`` in sorted order and gives the first one's error. Without a
    scheduler (a shard map made on its own) each report is logged at once.

    Args:
        scheduler: the producer's scheduler, or ``None``.
    """

    __slots__ = ("_logged_at", "_pending", "_scheduled", "_scheduler")

    def __init__(self, scheduler: Scheduler | None) -> None:
        self._scheduler = scheduler
        self._pending: dict[str, str] = {}
        self._scheduled = False
        self._logged_at = -float("inf")

    def report(self, stream: str, error: str) -> None:
        """``stream`` was not found (``error`` says how)."""
        self._pending.setdefault(stream, error)
        if self._scheduler is None:
            self.on_due(anyio.current_time())
        elif not self._scheduled:
            self._scheduled = True
            now = anyio.current_time()
            when = max(now + MISSING_LOG_GATHER, self._logged_at + MISSING_LOG_INTERVAL)
            self._scheduler.call_at(when, self)

    def on_due(self, now: float) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, {}
        if not pending:
            return
        names = sorted(pending)  # in order, whatever order their tasks ran in
        shown = ", ".join(repr(name) for name in names[:MISSING_LOG_NAMES])
        if len(names) > MISSING_LOG_NAMES:
            shown += f" and {len(names) - MISSING_LOG_NAMES} more"
        logger.warning(
            "%d %s not found%s: %s (%s). Records put to %s fail with "
            "ResourceNotFoundException; %s loaded again with the next record put to %s",
            len(names),
            "stream was" if len(names) == 1 else "streams were",
            "" if self._logged_at == -float("inf") else " since the last warning",
            shown,
            pending[names[0]],
            "it" if len(names) == 1 else "them",
            "its shard map is" if len(names) == 1 else "each one's shard map is",
            "it" if len(names) == 1 else "that stream",
        )
        self._logged_at = now

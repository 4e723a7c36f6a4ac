"""A stream's warnings, each at a pace a reader can follow: one line a minute at most about
overload, one line per kind of record refused. No clock of its own (``now`` is given), no stage.
"""

from __future__ import annotations

import logging
import math

__all__ = ("OVERLOAD_LOG_INTERVAL", "StreamWarnings")

logger = logging.getLogger("aiokpl")

OVERLOAD_LOG_INTERVAL = 60.0
"""Seconds between two warnings that a stream is offered more than it takes."""


class StreamWarnings:
    """The warnings of one stream.

    Args:
        stream: the stream, as it is put to.
        ttl_ms: ``Config.record_ttl_ms`` (the overload warning quotes it).
    """

    __slots__ = ("_logged_at", "_refused", "_since_log", "_stream", "_ttl_ms")

    def __init__(self, stream: str, ttl_ms: int) -> None:
        self._stream = stream
        self._ttl_ms = ttl_ms
        self._logged_at = -math.inf
        self._since_log = 0
        self._refused: set[str] = set()

    def overloaded(self, records: int, now: float) -> None:
        """``records`` user records expired from starved shards (the stream is offered more
        than its shards take): said once a minute at most, with the count since the last."""
        self._since_log += records
        if now - self._logged_at < OVERLOAD_LOG_INTERVAL:
            return
        logger.warning(
            "stream %r is offered more than its shards take: %d records expired waiting in "
            "the rate limiter (record_ttl_ms=%d) since %s; send less, add shards, or lower "
            "max_outstanding_records so that put_record waits instead",
            self._stream,
            self._since_log,
            self._ttl_ms,
            "the last warning" if self._logged_at > -math.inf else "it started",
        )
        self._logged_at = now
        self._since_log = 0

    def refused(self, code: str, message: str) -> None:
        """A record was refused with ``code`` (``placement.py``): said the first time only."""
        if code not in self._refused:
            self._refused.add(code)
            logger.warning("%s; its records fail with %r", message, code)

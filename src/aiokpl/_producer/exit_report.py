"""The one line that sums up a producer's exit cut short: what was delivered, what was not.

Written by the async :class:`~aiokpl.Producer` when its exit is cancelled (Ctrl-C on asyncio, a
signal handled through anyio, a cancel scope or timeout around it), and by the
:class:`~aiokpl.SyncProducer` when its close is interrupted (a second Ctrl-C), runs out
(``close(timeout=…)``), or is left to the interpreter's exit with records failed. Each caller
says what happened; the counts are formatted here, once, from the producer's last snapshot and
what its exit failed: "of 3,000 records put, 290 were delivered, 2,710 were cancelled (500 of
them sent and not answered: they may be in the stream); 2,710 are left in the spool, sent
again at its next start".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .._core.statistics import ProducerStatistics

__all__ = ("ExitReport", "log_cancelled_exit")

logger = logging.getLogger("aiokpl")


@dataclass(frozen=True, slots=True)
class ExitReport:
    """What a producer's exit failed, with the producer's snapshot once the exit ended.

    Attributes:
        statistics: the producer's snapshot after its exit (the spool, if any, closed).
        cancelled: records the exit failed with code ``"Cancelled"``: those outstanding when
            it was cancelled (a record held for its async ``on_record_failure`` keeps the
            result it had, and is not among them).
        unknown: of ``cancelled``, records whose request was sent and not answered
            (``outcome_unknown``): they may be in the stream.
    """

    statistics: ProducerStatistics
    cancelled: int = 0
    unknown: int = 0

    @property
    def left_in_spool(self) -> int:
        """Records the spool still holds without a result (sent again at its next start)."""
        spool = self.statistics.spool
        return spool.records_unresolved if spool is not None else 0

    @property
    def lost_anything(self) -> bool:
        """Whether the exit cancelled a record or left one in the spool."""
        return bool(self.cancelled or self.left_in_spool)

    def summary(self) -> str:
        """The counts, as one clause: ``"of N records put, D were delivered, …"``."""
        statistics = self.statistics
        spool = statistics.spool
        put = f"{statistics.records_put:,} records put"
        if spool is not None and spool.records_replayed:
            put += f" and {spool.records_replayed:,} replayed from the spool"
        counts = [f"{statistics.records_succeeded:,} were delivered"]
        if self.cancelled:
            counts.append(
                f"{self.cancelled:,} were cancelled ({self.unknown:,} of them sent and not "
                "answered: they may be in the stream)"
            )
        failed = statistics.records_failed - self.cancelled
        if failed:
            expired = statistics.records_expired_unsent
            counts.append(
                f"{failed:,} failed{' otherwise' if self.cancelled else ''}"
                + (f" ({expired:,} of them expired before they could be sent)" if expired else "")
            )
        text = f"of {put}, " + (
            counts[0] if len(counts) == 1 else ", ".join(counts[:-1]) + " and " + counts[-1]
        )
        if self.left_in_spool:
            text += f"; {self.left_in_spool:,} are left in the spool, sent again at its next start"
        return text

    def warn(self, what: str, holder: str, advice: str = "") -> None:
        """Log the line, a warning: ``what`` happened, the :meth:`summary`, where each result
        is (in each ``holder``: ``"outcome"``, ``"future"``), then ``advice`` if any."""
        logger.warning(
            '%s: %s; each %s holds its record\'s result and error code ("Cancelled" for those '
            "the exit stopped)%s",
            what,
            self.summary(),
            holder,
            advice,
        )


def log_cancelled_exit(report: ExitReport) -> None:
    """What an async ``Producer`` whose exit was cancelled says: a warning when the exit
    cancelled a record or left one in the spool; otherwise (nothing was lost) an info line."""
    what = "the producer's exit was cancelled"
    if report.lost_anything:
        report.warn(what, "outcome")
    else:
        logger.info("%s: %s", what, report.summary())

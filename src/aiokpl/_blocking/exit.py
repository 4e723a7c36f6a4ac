"""How a ``SyncProducer`` ends when nobody closes it, or when its close is interrupted.

* The producers still open are remembered (weakly), and closed by an ``atexit`` function, so
  that their records are delivered: :func:`close_forgotten`.
* An interrupted close (a second Ctrl-C) abandons what is left: its steps run to their end
  even if interrupted again (:func:`uninterrupted`), and a warning sums up
  (:meth:`ExitReports.report_abandon`).
* A close that runs out of time (``close(timeout=…)``) cancels what is left, and a warning
  sums up too. What the cancelled exit cost is handed from the loop's thread to the close that
  says it (:class:`ExitReports`), in the words of :mod:`aiokpl._producer.exit_report`, the async
  producer's.
* The waits for the loop that a Ctrl-C must cut short are waited in slices (:func:`in_slices`).

Invariants:

* a producer is remembered from its start to its close, weakly: the registry never keeps one
  alive, and a producer closed is forgotten;
* the steps of an abandon run to their end, each as often as interruptions cut it short; the
  first interruption is the one the caller raises;
* a cancelled exit's report is said once, by the close that waited for it.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Protocol, TypeVar

from .._core.statistics import ProducerStatistics
from .._producer.exit_report import ExitReport

__all__ = (
    "ExitReports",
    "close_forgotten",
    "forget",
    "in_slices",
    "remember",
    "uninterrupted",
)

logger = logging.getLogger("aiokpl")

_T = TypeVar("_T")

# How long a wait for the loop lasts before the waiting thread looks for a pending signal again.
# Python runs a signal's handler (Ctrl-C's KeyboardInterrupt) in the main thread, between
# bytecodes: a main thread blocked in a lock without timeout runs it only if the signal cuts that
# very wait short, not if the kernel delivered it to another thread, nor if it came just before
# the wait began (its C handler ran then, and the wait blocked after it). Slices bound the delay.
SIGNAL_CHECK = 0.1


class _Open(Protocol):
    """What closing a forgotten producer needs of it (a ``SyncProducer``)."""

    def statistics(self) -> ProducerStatistics: ...


# How a producer closes: close(timeout, what), what naming the close; true if it ran out of
# time, cancelled what was left, and said so.
_Close = Callable[[float | None, str], bool]

# The producers not closed yet, each with its way to close (a weak reference to its bound
# method, so that neither keeps it alive).
_open: weakref.WeakKeyDictionary[_Open, weakref.WeakMethod[_Close]]
_open = weakref.WeakKeyDictionary()


def remember(producer: _Open, close: _Close) -> None:
    """Close ``producer`` with ``close`` at interpreter exit unless it is closed before."""
    _open[producer] = weakref.WeakMethod(close)


def forget(producer: _Open) -> None:
    """``producer`` is closed: nothing to do for it at exit."""
    _open.pop(producer, None)


@atexit.register
def close_forgotten() -> None:
    """Close producers still open at interpreter exit, so their records are delivered.

    A plain ``atexit`` function, on purpose: it runs after the non-daemon threads are joined
    and after the ``atexit`` functions registered later than aiokpl's import (atexit runs them
    last first), so a worker thread or an exit function of the program may still put records,
    or close the producer itself; the producer's daemon thread still runs. What its loop needs
    from the interpreter then is in :mod:`aiokpl._blocking.executor` (which also says why not
    ``threading``'s earlier hook).

    A Ctrl-C during this close abandons what is left, of this producer and of the others
    (``close(timeout=0)``), as a second Ctrl-C does in ``close()``: every future is resolved
    and a warning sums up. Nothing is raised: there is nobody left to raise it to.
    """
    interrupted = False
    for producer, close_method in list(_open.items()):
        close = close_method()
        if close is None:  # pragma: no cover - the producer is alive: it is the key
            continue
        try:
            if close(0.0 if interrupted else None, "closing a SyncProducer at interpreter exit"):
                continue  # it said what it cancelled
            # Nobody may be left to look at the futures: say what failed.
            report = ExitReport(producer.statistics())
            if report.statistics.records_failed:
                report.warn(
                    "a SyncProducer still open at interpreter exit was closed",
                    "future",
                    ". Close the producer yourself (or use Config.on_record_failure) to handle "
                    "failures",
                )
        except BaseException:  # interrupted: the close abandoned the rest, and said so
            interrupted = True


def in_slices(wait: Callable[[float], bool]) -> None:
    """Call ``wait(SIGNAL_CHECK)`` until it returns true: a wait that a Ctrl-C cuts short."""
    while not wait(SIGNAL_CHECK):
        pass


def uninterrupted(step: Callable[[], _T]) -> _T:
    """Run ``step`` to its end, again after each interruption that cut it short.

    For the steps of an abandon, which are idempotent and short: a Ctrl-C (or a signal
    handler's ``SystemExit``) during them is held back; the caller raises the first one.
    """
    while True:
        try:
            return step()
        except (KeyboardInterrupt, SystemExit):
            continue


class ExitReports:
    """What a producer's cancelled exit cost: given in the loop's thread as the exit ends
    (before the loop does), taken once by the close that says it; ``statistics`` gives the
    producer's counts (the final ones, once its loop has ended)."""

    def __init__(self, statistics: Callable[[], ProducerStatistics]) -> None:
        self._lock = threading.Lock()
        self._report: ExitReport | None = None
        self._statistics = statistics

    def give(self, report: ExitReport) -> None:
        with self._lock:
            self._report = report

    def take(self) -> ExitReport | None:
        """The report, once (``None`` if the exit was not cancelled, or it was taken)."""
        with self._lock:
            report, self._report = self._report, None
            return report

    def final(self) -> ExitReport:
        """:meth:`take`'s report; if there is none (the loop ended before its exit could be
        cancelled), the producer's counts alone."""
        return self.take() or ExitReport(self._statistics())

    def report_ran_out(self, what: str) -> bool:
        """After a close (``what``) that did not raise: if it ran out of time and cancelled
        what was left, say so; whether it did."""
        report = self.take()
        if report is None or not report.lost_anything:
            return False
        report.warn(f"{what} ran out of time and cancelled the rest", "future")
        return True

    def report_abandon(self, what: str, bound: float, unresolved: int | None) -> None:
        """Say what an interrupted close (``what``) did: ``unresolved`` futures still have no
        result after ``bound`` seconds (``None`` if the producer's thread stopped: every future
        is resolved, and what the cancellation cost is known)."""
        if unresolved is not None:
            logger.error(
                "%s was interrupted and the producer's thread did not stop within %.1f s: %d "
                "futures still have no result",
                what,
                bound,
                unresolved,
            )
            return
        self.final().warn(f"{what} was interrupted", "future")

"""How a ``SyncProducer`` ends when nobody closes it, or when its close is interrupted.

* The producers still open are remembered (weakly), and closed by an ``atexit`` function, so
  that their records are delivered: :func:`close_forgotten`.
* An interrupted close (a second Ctrl-C) abandons what is left: its steps run to their end
  even if interrupted again (:func:`uninterrupted`), and a warning sums up
  (:func:`report_abandon`).
* The waits for the loop that a Ctrl-C must cut short are waited in slices (:func:`in_slices`).
"""

from __future__ import annotations

import atexit
import logging
import weakref
from collections.abc import Callable
from typing import Protocol, TypeVar

from ._core.statistics import ProducerStatistics

__all__ = ("close_forgotten", "forget", "in_slices", "remember", "report_abandon", "uninterrupted")

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


# The producers not closed yet, each with its way to close (a weak reference to its bound
# method, so that neither keeps it alive): close(timeout, what), what naming the close.
_open: weakref.WeakKeyDictionary[_Open, weakref.WeakMethod[Callable[[float | None, str], None]]]
_open = weakref.WeakKeyDictionary()


def remember(producer: _Open, close: Callable[[float | None, str], None]) -> None:
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
    from the interpreter then is in :mod:`aiokpl._exit_executor` (which also says why not
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
            close(0.0 if interrupted else None, "closing a SyncProducer at interpreter exit")
            # Nobody may be left to look at the futures: say what failed.
            statistics = producer.statistics()
            if statistics.records_failed:
                logger.warning(
                    "a SyncProducer still open at interpreter exit was closed: of %d records "
                    "put, %d were delivered and %d failed (%d of them expired before they "
                    "could be sent); each future holds its record's result and error code. "
                    "Close the producer yourself (or use Config.on_record_failure) to handle "
                    "failures",
                    statistics.records_put,
                    statistics.records_succeeded,
                    statistics.records_failed,
                    statistics.records_expired_unsent,
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


def report_abandon(
    what: str,
    pending: int,
    bound: float,
    unresolved: int | None,
    statistics: Callable[[], ProducerStatistics],
) -> None:
    """Say what an interrupted close did: ``pending`` records had no result when it was
    interrupted; ``unresolved`` futures still have none after ``bound`` seconds (``None``
    if the producer's thread stopped: every future is resolved)."""
    if unresolved is not None:
        logger.error(
            "%s was interrupted and the producer's thread did not stop within %.1f s: %d "
            "futures still have no result",
            what,
            bound,
            unresolved,
        )
        return
    snapshot = statistics()
    logger.warning(
        "%s was interrupted: the records still without a result were cancelled (%d had "
        "none then). Of %d records put, %d were delivered and %d failed; each future holds "
        'its record\'s result and error code ("Cancelled" for those the interruption '
        "stopped)",
        what,
        pending,
        snapshot.records_put,
        snapshot.records_succeeded,
        snapshot.records_failed,
    )

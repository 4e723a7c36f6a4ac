"""What a ``SyncProducer``'s caller asks its producer and waits for, answered on the loop.

The producer's state changes in its loop's thread, so a caller's thread never reads it there:
its questions run on the loop, through the loop's blocking portal (one round trip per call,
which these rare calls can afford; records never go this way, see :mod:`.handover`).

* ``statistics()`` and ``health()`` are questions (:func:`ask`): answered on the loop, or
  directly when asked from its own thread (in a done-callback). Once the loop has stopped
  there is no one to ask, and the caller answers for itself (the final snapshot, the closed
  verdict).
* ``wait_durable()`` (:func:`wait_durable_from_thread`) waits, on the loop, until the pump has
  handed over every record put before the call (a record accepted is in the hand-over queue
  until then, and framed into the spool only once in the producer), then for
  :meth:`aiokpl.Producer.wait_durable`. The caller's thread waits in slices, so that a Ctrl-C
  is acted on at once.

Invariants: nothing here changes the producer's state or the hand-over's; a question asked
while the loop stops gets ``None`` (the portal stopped meanwhile), never an exception.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import anyio

from .._core.errors import ProducerClosedError
from .exit import in_slices
from .handover import CLOSED_MESSAGE

if TYPE_CHECKING:
    from .._producer.producer import Producer
    from .loop import Loop

__all__ = ("ask", "wait_durable_from_thread")

T = TypeVar("T")

_HAND_OVER_POLL = 0.001  # seconds between looks at the hand-over queue (rare: one call)


def ask(loop: Loop, question: Callable[[Producer], T]) -> T | None:
    """``question(producer)`` run on the producer's loop; ``None`` if it no longer runs."""
    producer = loop.producer
    if producer is None:
        return None
    if threading.get_ident() == loop.handover.loop_thread:
        return question(producer)
    portal = loop.portal
    if portal is not None:
        try:
            return portal.call(question, producer)
        except RuntimeError:
            pass  # the portal stopped meanwhile
    return None


def wait_durable_from_thread(loop: Loop, target: int, timeout: float | None) -> None:
    """Block until the records queued up to sequence number ``target`` are handed over and
    durable; see ``SyncProducer.wait_durable``."""
    if loop.config.spool_directory is None:
        raise RuntimeError(
            "wait_durable() needs a spool: set Config.spool_directory (the producer has none)"
        )
    portal, producer = loop.portal, loop.producer
    if portal is None or producer is None:
        raise ProducerClosedError(CLOSED_MESSAGE)

    async def durable() -> None:
        # The pump takes the whole queue at each turn (the caller woke it) and puts it into the
        # producer, on this loop: looking at what it has not put yet races with nothing here.
        while not loop.handed_over(target):  # noqa: ASYNC110 - the pump sets no event
            await anyio.sleep(_HAND_OVER_POLL)
        await producer.wait_durable()

    try:
        future = portal.start_task_soon(durable)
    except RuntimeError:  # the portal stopped meanwhile
        raise ProducerClosedError(CLOSED_MESSAGE) from None
    try:
        if timeout is None:  # in slices, so that a Ctrl-C is acted on at once
            in_slices(lambda check: bool(concurrent.futures.wait((future,), check).done))
        future.result(timeout)
    except KeyboardInterrupt:
        future.cancel()
        raise
    except concurrent.futures.TimeoutError:  # the builtin TimeoutError from Python 3.11 on
        future.cancel()
        raise TimeoutError(
            f"wait_durable() timed out after {timeout} s: records put before it are not all "
            "durable yet (they go on; nothing is lost)"
        ) from None

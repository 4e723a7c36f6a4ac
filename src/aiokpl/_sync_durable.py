"""``SyncProducer.wait_durable``'s wait, run from a caller's thread on the producer's loop.

A record a :class:`~aiokpl.SyncProducer` accepted is in its hand-over queue until the loop's
pump puts it into the producer, and only then framed into the spool. So "everything put so far
is durable" waits, on the loop, for the queue to be handed over up to the caller's last
record, then for :meth:`aiokpl.Producer.wait_durable`.
"""

from __future__ import annotations

import concurrent.futures
from collections import deque
from typing import TYPE_CHECKING, Any

import anyio

from ._core.config import Config
from ._core.errors import ProducerClosedError
from ._sync_exit import in_slices

if TYPE_CHECKING:
    from anyio.from_thread import BlockingPortal

    from ._producer import Producer

__all__ = ("wait_durable_from_thread",)

_HAND_OVER_POLL = 0.001  # seconds between looks at the hand-over queue (rare: one call)


def wait_durable_from_thread(
    config: Config,
    portal: BlockingPortal | None,
    producer: Producer | None,
    queue: deque[tuple[Any, ...]],
    target: int,
    timeout: float | None,
) -> None:
    """Block until the records queued up to sequence ``target`` (the queue's items end with
    their sequence) are handed over and durable; see ``SyncProducer.wait_durable``."""
    if config.spool_directory is None:
        raise RuntimeError(
            "wait_durable() needs a spool: set Config.spool_directory (the producer has none)"
        )
    if portal is None or producer is None:
        raise ProducerClosedError("the SyncProducer is closed; create a new one")

    async def durable() -> None:
        # The pump moves the whole queue at each wake-up (the caller woke it); only it pops,
        # on this loop, so looking at the head here races with nothing.
        while queue and queue[0][-1] <= target:  # noqa: ASYNC110 - the pump sets no event
            await anyio.sleep(_HAND_OVER_POLL)
        await producer.wait_durable()

    try:
        future = portal.start_task_soon(durable)
    except RuntimeError:  # the portal stopped meanwhile
        raise ProducerClosedError("the SyncProducer is closed; create a new one") from None
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

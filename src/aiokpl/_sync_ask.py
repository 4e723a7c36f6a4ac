"""A question a :class:`~aiokpl.SyncProducer`'s caller asks its producer, answered on its loop.

``statistics()`` and ``health()`` read the producer's state, which its loop's thread changes:
they are answered there, through the blocking portal (directly when asked from that thread, in
a done-callback), never read from another thread half-way through a change. Once the loop has
stopped there is no one to ask: the caller then answers for itself (the final snapshot, the
closed verdict).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from anyio.from_thread import BlockingPortal

    from ._producer import Producer

__all__ = ("ask",)

T = TypeVar("T")


def ask(
    portal: BlockingPortal | None,
    producer: Producer | None,
    loop_thread: int | None,
    question: Callable[[Producer], T],
) -> T | None:
    """``question(producer)`` run on the producer's loop; ``None`` if it no longer runs."""
    if producer is None:
        return None
    if threading.get_ident() == loop_thread:
        return question(producer)
    if portal is not None:
        try:
            return portal.call(question, producer)
        except RuntimeError:
            pass  # the portal stopped meanwhile
    return None

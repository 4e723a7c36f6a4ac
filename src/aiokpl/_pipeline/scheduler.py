"""One task for every deadline in the producer.

Stages that hold records until a deadline (the aggregator's per-shard batches, the collector's
requests, the limiter's drain) register ``(when, target)`` here instead of starting a timer
each. A single task sleeps until the earliest registered time, then calls ``target.on_due(now)``
for everything due. An earlier registration wakes the task early; later ones cost a heap push.

Invariants:

* a target is called at or after the time it registered, never before; under a virtual clock,
  exactly at it;
* stale entries are cheap: a target decides in ``on_due`` whether it still has work (a batch
  that was flushed by size has nothing to do when its old deadline comes);
* no task or timer per record or per batch: per-record task churn is what made an earlier
  Python port slow;
* each call runs as a pipeline step (``step``, the ledger's): the records a deadline resolves
  (a lane's expired requests, a batch failed in the limiter) are resolved once the call has
  returned, never inside the target's update.

The KPL runs its stages' timers on a shared executor (``aws/utils/executor.h``); this is the
anyio equivalent.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

import anyio

__all__ = ("Deadlines", "DueTarget", "RoutedDeadlines", "Scheduler")

# Deadlines closer than this count as due: sleeping for a rounding error (deadline - now
# can be 1e-17 s) would only spin.
_TOLERANCE = 1e-9


class DueTarget(Protocol):
    def on_due(self, now: float) -> None: ...


class _Routed:
    """A stage's deadline as the scheduler's target: it hands the stage's item to the event of
    the stream's router that serves that stage."""

    __slots__ = ("event", "item")

    def __init__(self, event: Callable[[Any, float], None], item: object) -> None:
        self.event = event
        self.item = item

    def on_due(self, now: float) -> None:
        self.event(self.item, now)


class Deadlines(Protocol):
    """A stage's view of the scheduler: ``call_at(when, item)`` asks to be told, through the
    stream's router, once ``now >= when``: the router then asks the stage what of ``item``
    is due (the stage's ``due(item, now)``) and routes it on. Stage tests pass a recorder."""

    def call_at(self, when: float, item: Any) -> None: ...


class RoutedDeadlines:
    """The :class:`Deadlines` of a stage: ``call_at(when, item)`` calls ``event(item, now)``
    once ``now >= when``, where ``event`` is the router's method for that stage's deadlines.

    So a stage holds no reference to the router nor to the next stage.
    """

    __slots__ = ("_event", "_scheduler")

    def __init__(self, scheduler: Scheduler, event: Callable[[Any, float], None]) -> None:
        self._scheduler = scheduler
        self._event = event

    def call_at(self, when: float, item: object) -> None:
        self._scheduler.call_at(when, _Routed(self._event, item))


class Scheduler:
    """A heap of deadlines served by one task (:meth:`run`).

    Args:
        step: opens a pipeline step around each call (the producer's ledger's ``step``);
            none by default, for a scheduler that serves no pipeline (stage tests).
    """

    __slots__ = ("_counter", "_heap", "_sleeping_until", "_step", "_wake")

    def __init__(self, step: Callable[[], AbstractContextManager[None]] = nullcontext) -> None:
        self._step = step
        self._heap: list[tuple[float, int, DueTarget]] = []
        self._counter = itertools.count()
        self._sleeping_until = math.inf
        self._wake: anyio.Event | None = None

    def call_at(self, when: float, target: DueTarget) -> None:
        """Call ``target.on_due(now)`` once ``now >= when``."""
        heapq.heappush(self._heap, (when, next(self._counter), target))
        if when < self._sleeping_until and self._wake is not None:
            self._sleeping_until = when
            self._wake.set()

    def __len__(self) -> int:
        return len(self._heap)

    def clear(self) -> None:
        """Forget every deadline (the producer is closed: nothing is left to serve)."""
        self._heap.clear()

    async def run(self) -> None:
        """Serve deadlines until cancelled."""
        heap = self._heap
        step = self._step
        while True:
            now = anyio.current_time()
            while heap and heap[0][0] <= now + _TOLERANCE:
                when, _, target = heapq.heappop(heap)
                # Within the tolerance counts as due; the target sees at least its own time.
                with step():
                    target.on_due(when if when > now else now)
            wake = self._wake = anyio.Event()
            self._sleeping_until = heap[0][0] if heap else math.inf
            with anyio.move_on_after(self._sleeping_until - now):
                await wake.wait()

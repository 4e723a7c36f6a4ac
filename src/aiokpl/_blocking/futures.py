"""``RecordFuture``: the ``concurrent.futures.Future`` a ``SyncProducer.put_record`` returns,
one light object until something needs it as a whole ``Future``.

A plain ``Future`` builds a ``threading.Condition`` in its constructor: with its lock's bound
methods, its deque of waiters and the future's two lists, eleven objects the garbage collector
tracks, and about 5 µs to make and resolve. A caller keeps its futures (as an async caller
keeps its outcomes), so with 100k of them held the collector walks a million objects more on
each full collection, and each record's ``RecordResult``, built in the loop's thread at
resolution, adds three. That is what took the blocking API from about 2.5 times the async
producer's time to 6 times (``bench/sync.py``). So a record's future has two shapes:

* **light**, from its construction: one object holding nothing until the loop's thread resolves
  it with its record's outcome (the object an async caller holds), whose ``RecordResult`` is
  built on first use, as an async caller's is. ``done()``, ``running()``, ``cancel()``,
  ``cancelled()`` and ``result()`` of a resolved future answer from that;
* **whole**, once anything else of ``Future``'s is used: a wait for a pending result,
  ``add_done_callback``, ``exception()``, ``concurrent.futures.wait`` or ``as_completed``,
  ``asyncio.wrap_future``. Their first look at ``Future``'s state finds it missing, which makes
  Python call :meth:`RecordFuture.__getattr__`: that runs ``Future.__init__`` on the future
  (and, if it was resolved already, ``Future.set_result``), and ``Future``'s own code goes on
  from there. A future resolved after it became whole is resolved by ``Future.set_result`` in
  the loop's thread, which wakes its waiters and runs its callbacks there.

Nothing here names ``Future``'s private state: the class overrides public methods only, and
calls ``Future``'s constructor late rather than early (``tests/test_layout.py`` finds any
private name reached). What it relies on is that a ``Future``'s state is made by its
constructor, as for any Python class.

Invariants:

* a future is resolved once, by the loop's thread (:meth:`RecordFuture.resolve`): a caller
  cannot cancel it (``cancel()`` returns ``False``; its whole shape stays pending, never
  cancelled, until resolved), and ``done()`` never goes back from true to false;
* the shape and the light state are read and changed only under one lock (``_SHAPE``), never
  held while a ``Future`` method runs: those take the future's own condition, and a thread that
  holds it may meet a missing attribute and wait here, so the order is always condition, then
  ``_SHAPE``. Nothing depends on the GIL. The loop's resolution holds it for three attribute
  reads and one write;
* a light future resolved before anyone looked keeps its record's outcome until its result is
  first asked for, then only the result (the outcome keeps what an async caller's does: no
  data, which a resolved record lets go).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING, Any

from .._core.results import RecordResult

if TYPE_CHECKING:
    from .._outcome import Outcome

__all__ = ("RecordFuture",)

# Guards every future's shape and light state: one lock for all, held for a few attribute reads
# or writes (and Future.__init__ when one becomes whole), never across a call that could run
# long or give up the GIL often (a result is built outside it).
_SHAPE = threading.Lock()

# The future's own attributes: never looked up through __getattr__ (see there).
_OWN = frozenset({"_kept", "_answer", "_whole"})


class RecordFuture(Future[RecordResult]):
    """A record's future: a ``concurrent.futures.Future`` of its :class:`~aiokpl.RecordResult`,
    running from the start and never cancelled, resolved by the producer's loop."""

    def __init__(self) -> None:  # Future.__init__ runs on first need: see the module's doc
        self._kept: Outcome[RecordResult] | None = None  # light and resolved: the outcome
        self._answer: RecordResult | None = None  # light and resolved: the result, once built
        self._whole = False

    if not TYPE_CHECKING:  # hidden from type checkers, which would then accept any attribute

        def __getattr__(self, name: str) -> Any:
            # Called only for an attribute the future lacks: while light, Future's own state.
            if name in _OWN or name.startswith("__"):  # ours, or a protocol's probe (copy)
                raise AttributeError(name)
            self._become_whole()
            return object.__getattribute__(self, name)

    def _become_whole(self) -> None:
        with _SHAPE:
            if self._whole:
                return
            Future.__init__(self)
            self._whole = True
            answer, kept = self._answer, self._kept
        if answer is None and kept is not None:
            answer = self._keep(kept.result())
        if answer is not None:  # outside _SHAPE: Future's methods take its condition
            Future.set_result(self, answer)

    def _keep(self, built: RecordResult) -> RecordResult:
        """Keep ``built``, the result of a future resolved light, unless another thread kept
        one first; the one kept (each thread builds its own outside the lock, one is kept)."""
        with _SHAPE:
            if self._answer is None:
                self._answer = built
                self._kept = None
            return self._answer

    def resolve(self, outcome: Outcome[RecordResult]) -> None:
        """Resolve with ``outcome``'s result (the loop's thread, once the outcome is done)."""
        with _SHAPE:
            whole = self._whole
            again = self._kept is not None or self._answer is not None
            if not (whole or again):
                self._kept = outcome
                return
        if again:  # raised outside _SHAPE: the message's repr takes it
            raise InvalidStateError(f"{self!r} is resolved already")
        Future.set_result(self, outcome.result())  # wakes its waiters, runs its callbacks

    def done(self) -> bool:
        with _SHAPE:
            if self._kept is not None or self._answer is not None:
                return True
            whole = self._whole
        return whole and Future.done(self)

    def running(self) -> bool:
        return not self.done()

    def cancel(self) -> bool:
        return False  # a record in the pipeline cannot be taken back

    def cancelled(self) -> bool:
        return False

    def result(self, timeout: float | None = None) -> RecordResult:
        with _SHAPE:
            answer, kept = self._answer, self._kept
        if answer is None and kept is not None:
            answer = self._keep(kept.result())  # built outside the lock
        if answer is not None:
            return answer
        self._become_whole()
        return Future.result(self, timeout)

    def __repr__(self) -> str:
        if self.done():
            self._become_whole()
            return Future.__repr__(self)
        return f"<{type(self).__name__} at {id(self):#x} state=running>"


# Callers see a concurrent.futures.Future: errors and reprs name that type, never this class.
RecordFuture.__name__ = RecordFuture.__qualname__ = "Future"

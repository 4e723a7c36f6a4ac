"""``Outcome``: the handle ``put_record`` returns, resolved exactly once with a ``RecordResult``.

An outcome is a small future that works on asyncio and trio alike. It allocates an event only
if someone awaits it before it is resolved. The producer hands out its own record objects
(``aiokpl._record.UserRecord``, a subclass): one object per record serves as the pipeline's
bookkeeping and as the caller's handle, and builds its result only when asked.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Generic, TypeVar

import anyio

__all__ = ("Outcome", "settle")

T = TypeVar("T")


class Outcome(Generic[T]):
    """The eventual result of one ``put_record``: await it, poll it, or add a callback.

    ``await outcome`` and ``await outcome.wait()`` return the result (a
    :class:`~aiokpl.RecordResult`); they never raise for a failed record. An outcome is
    resolved exactly once, always: every outcome the producer hands out is resolved by the time
    the producer's ``async with`` block exits.
    """

    __slots__ = ("_callbacks", "_done", "_event", "_result")

    def __init__(self) -> None:
        self._done = False
        self._result: T | None = None
        self._event: anyio.Event | None = None
        self._callbacks: list[Callable[[Outcome[T]], object]] | None = None

    def done(self) -> bool:
        """Whether the result is known."""
        return self._done

    def result(self) -> T:
        """The result.

        Raises:
            RuntimeError: the outcome is not resolved yet (await it instead).
        """
        if not self._done:
            raise RuntimeError("the record has no result yet; await the outcome instead")
        return self._built()

    async def wait(self) -> T:
        """Wait for the result and return it. Cancelling the wait does not affect the record."""
        if not self._done:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
        else:
            await anyio.lowlevel.checkpoint()
        return self._built()

    def __await__(self) -> Generator[Any, None, T]:
        return self.wait().__await__()

    @property
    def durable(self) -> bool:
        """Whether the record is in the producer's durable spool, on disk as
        ``Config.spool_fsync`` promises: a crash from now on does not lose it, the next start
        sends it again if it has no result by then. Always ``False`` without a spool."""
        return False

    async def wait_durable(self) -> None:
        """Wait until the record is durable (see :attr:`durable`); returns at once if it is.

        Sending does not wait for this: a record may be delivered before it is durable.
        Cancelling the wait does not affect the record.

        Raises:
            RuntimeError: the producer has no spool (``Config.spool_directory`` is ``None``).
            SpoolError: the producer closed and the record could not be made durable (the
                disk failed, or was still full).
        """
        raise RuntimeError(
            "wait_durable() needs a spool: set Config.spool_directory (the producer has none)"
        )

    def add_done_callback(self, callback: Callable[[Outcome[T]], object]) -> None:
        """Call ``callback(outcome)`` once the outcome is resolved (at once if it already is).

        Callbacks run synchronously in the producer's task that resolves the record, once the
        pipeline step that resolved it is over (so a callback may put records); keep them
        short and do not let them raise (an exception is logged and ignored).
        """
        if self._done:
            _run_callback(callback, self)
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)

    def _built(self) -> T:
        """The result; a subclass may build it on first use from what it keeps."""
        return self._result  # type: ignore[return-value]

    def _resolve(self, result: T) -> bool:
        """Set the result; returns ``False`` (and changes nothing) if it was already set."""
        if self._done:
            return False
        self._result = result
        self._settle()
        return True

    def _settle(self) -> None:
        """Mark the outcome done and wake whoever waits for it (once: callers check ``_done``)."""
        self._done = True
        if self._event is not None:
            self._event.set()
        if self._callbacks is not None:
            callbacks, self._callbacks = self._callbacks, None
            for callback in callbacks:
                _run_callback(callback, self)

    def __repr__(self) -> str:
        return f"<Outcome {'done: ' + repr(self._built()) if self._done else 'pending'}>"


def settle(outcome: Outcome[Any]) -> None:
    """Mark ``outcome`` done and wake whoever waits for it: how the subclass that resolves
    records (``aiokpl._record.UserRecord``, which sets its result itself) settles one that
    is awaited or has callbacks (a record nobody waits for is only marked done)."""
    outcome._settle()


def _run_callback(callback: Callable[[Outcome[Any]], object], outcome: Outcome[Any]) -> None:
    try:
        callback(outcome)
    except Exception:
        import logging

        logging.getLogger("aiokpl").exception("an Outcome done-callback raised")

"""Failed records: their results, and ``Config.on_record_failure`` (dead letters).

The producer hands every record that fails (whatever the cause) to :class:`FailureHandler`,
which resolves its outcome, with the record attached when ``Config.return_record_on_failure``
is set (the KPL's ``ReturnUserRecordOnFailure``), then calls ``Config.on_record_failure``.

Rules:

* the callback runs exactly once per failed record, never for a delivered one;
* it never breaks the pipeline: what it raises is counted, and logged once per exception type
  (a callback failing for every record of a flood must not flood the log too);
* a plain function runs at once, in the task that fails the record. An async function (any
  callable returning an awaitable) runs in the producer's task group, at most
  ``MAX_CONCURRENT_CALLBACKS`` at a time, by that many worker tasks draining one queue (no task
  per record). Until its callback returns, the record stays outstanding: back-pressure bounds
  the records waiting for a slow callback as it bounds every other record, and ``flush()`` and
  exit wait for them;
* at exit, callbacks of records failed by the exit itself (``"Expired"``, ``"Cancelled"``)
  still run, shielded, for at most ``request_timeout_ms``; any callback that could not run or
  finish by then is counted and logged, never dropped silently.

Nothing here runs for delivered records: with both settings off, the cost is one method call
per failed record.
"""

from __future__ import annotations

import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from ._core.decoder import decode_tags
from ._core.results import FailedRecord

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ._core.config import Config
    from ._record import UserRecord

__all__ = ("MAX_CONCURRENT_CALLBACKS", "FailureHandler")

logger = logging.getLogger("aiokpl")

MAX_CONCURRENT_CALLBACKS = 16
"""Most async ``on_record_failure`` calls running at once (a dead-letter store is usually one
more remote service; this keeps a failure storm from opening hundreds of connections to it)."""


class FailureHandler:
    """Resolves failed records and runs ``on_record_failure`` for each.

    Args:
        config: the producer's settings (``return_record_on_failure``, ``on_record_failure``).
        release: called with a record once its async callback has returned (or will never
            run); the producer stops counting it as outstanding then.
        task_group: the producer's task group, where async callbacks run while it is open;
            ``None`` to queue them for :meth:`drain`.
    """

    def __init__(
        self,
        config: Config,
        release: Callable[[UserRecord], None],
        task_group: TaskGroup | None = None,
    ) -> None:
        self._attach = config.return_record_on_failure
        self._callback = config.on_record_failure
        self._release = release
        self.task_group = task_group
        self._queue: deque[tuple[UserRecord, Awaitable[Any]]] = deque()
        self._workers = 0
        self._running = 0
        self._error_kinds: set[type[BaseException]] = set()
        self.callback_errors = 0
        self.callbacks_lost = 0

    @property
    def pending(self) -> int:
        """Async callbacks queued or running."""
        return len(self._queue) + self._running

    def resolve(self, record: UserRecord) -> bool:
        """Resolve a failed record's outcome and call ``on_record_failure``.

        Returns:
            ``True`` if an async callback is now queued for the record: the caller keeps it
            outstanding until ``release`` is called for it.
        """
        failed = None
        if self._attach:
            # Built now, while the record still holds its data (resolving lets go of it).
            failed = FailedRecord(
                record.stream,
                record.partition_key or None,  # "": put without a key, never placed
                record.data,
                record.explicit_hash_key,
                decode_tags(record.encoded_tags) if record.encoded_tags else (),
            )
        record.resolve_failed(failed)
        callback = self._callback
        if callback is None:
            return False
        try:
            returned = callback(record.result())
        except Exception as exc:
            self._count_error(exc)
            return False
        if not inspect.isawaitable(returned):
            return False
        self._queue.append((record, returned))
        task_group = self.task_group
        if task_group is not None and self._workers < MAX_CONCURRENT_CALLBACKS:
            self._workers += 1
            task_group.start_soon(self._work, name="aiokpl on_record_failure")
        return True

    async def _work(self) -> None:
        queue = self._queue
        try:
            while queue:
                record, awaitable = queue.popleft()
                self._running += 1
                try:
                    await awaitable
                except anyio.get_cancelled_exc_class():
                    self.callbacks_lost += 1
                    raise
                except Exception as exc:
                    self._count_error(exc)
                finally:
                    self._running -= 1
                    self._release(record)
        finally:
            self._workers -= 1

    def close(self) -> None:
        """The producer's task group has closed: callbacks from now on queue for
        :meth:`drain`."""
        self.task_group = None

    async def drain(self, limit: float) -> None:
        """Run the callbacks still queued (at exit, after the task group closed).

        Shielded from cancellation of the caller, bounded by ``limit`` seconds; callbacks
        that did not run or finish by then are counted in ``callbacks_lost`` and logged.
        """
        if self._queue:
            with anyio.CancelScope(shield=True) as scope:
                scope.deadline = anyio.current_time() + limit
                async with anyio.create_task_group() as task_group:
                    self.task_group = task_group
                    while self._workers < min(MAX_CONCURRENT_CALLBACKS, len(self._queue)):
                        self._workers += 1
                        task_group.start_soon(self._work, name="aiokpl on_record_failure")
            self.task_group = None
        while self._queue:
            record, awaitable = self._queue.popleft()
            if inspect.iscoroutine(awaitable):
                awaitable.close()  # never awaited: say so here, not as a RuntimeWarning
            self.callbacks_lost += 1
            self._release(record)
        if self.callbacks_lost:
            logger.error(
                "on_record_failure did not complete for %d failed record(s): the producer "
                "closed before they finished (see Config.on_record_failure for the bounds)",
                self.callbacks_lost,
            )
        if self.callback_errors > len(self._error_kinds):
            logger.warning(
                "on_record_failure raised %d time(s) in all; the first of each exception type "
                "was logged",
                self.callback_errors,
            )

    def _count_error(self, exc: Exception) -> None:
        self.callback_errors += 1
        kind = type(exc)
        if kind not in self._error_kinds:
            self._error_kinds.add(kind)
            logger.error(
                "on_record_failure raised %s; the record's result is unaffected. Further "
                "%s errors are counted (ProducerStatistics.failure_callback_errors), not logged",
                kind.__name__,
                kind.__name__,
                exc_info=exc,
            )

"""Running a loopback server in a thread of its own, with calls into it from any thread.

What is here: ``ThreadRunner``, which runs an async context manager (the server) under
``anyio.run`` in a daemon thread until told to stop, and runs synchronous calls in that thread
for other threads, returning their results or raising their exceptions.

Invariants: ``start`` returns once the server is serving, or raises what stopped it from
starting; a call scheduled when the loop ends is cancelled (``RuntimeError`` for its caller),
never left waiting; ``stop`` raises what the server's loop raised, if anything.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import anyio

from .._backend import threadsafe_scheduler

__all__ = ("ThreadRunner",)

_T = TypeVar("_T")


class ThreadRunner:
    """Runs a server in a thread of its own, with ``anyio.run``; calls into it thread-safely.

    Not anyio's blocking portal: trio refuses a call into a trio portal from any thread that
    is itself running trio (a guard against deadlock within one loop), which is exactly the
    case of a trio test with a trio server thread. Plain callbacks scheduled with the loop's
    own thread-safe hook (``call_soon_threadsafe``, ``TrioToken.run_sync_soon``) have no such
    guard, and a ``concurrent.futures.Future`` carries the answer back.
    """

    def __init__(
        self,
        server: AbstractAsyncContextManager[Any],
        backend: str,
        backend_options: dict[str, Any] | None,
    ) -> None:
        self._server = server
        self._backend = backend
        self._backend_options = backend_options
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._pending: set[concurrent.futures.Future[Any]] = set()
        self._schedule: Callable[[Callable[[], object]], object] | None = None
        self._stop: Callable[[], object] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="aiokpl-loopback", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def stop(self) -> None:
        with self._lock:
            schedule, stop = self._schedule, self._stop
        if schedule is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                schedule(stop)
        self._thread.join()
        if self._error is not None:
            raise self._error

    def call(self, function: Callable[..., _T], *args: Any) -> _T:
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(function(*args))
                except BaseException as exc:
                    future.set_exception(exc)

        with self._lock:
            schedule = self._schedule
            if schedule is None:
                raise RuntimeError("the loopback server's thread is not running")
            self._pending.add(future)
        try:
            schedule(run)
            return future.result()
        except concurrent.futures.CancelledError:
            raise RuntimeError("the loopback server's thread stopped before the call ran") from None
        finally:
            with self._lock:
                self._pending.discard(future)

    def _main(self) -> None:
        try:
            anyio.run(self._serve, backend=self._backend, backend_options=self._backend_options)
        except BaseException as exc:
            self._error = exc
        finally:
            with self._lock:
                self._schedule = None
                pending, self._pending = self._pending, set()
            for future in pending:
                future.cancel()
            self._ready.set()

    async def _serve(self) -> None:
        stopped = anyio.Event()
        schedule = threadsafe_scheduler()
        async with self._server:
            with self._lock:
                self._schedule = schedule
                self._stop = stopped.set
            self._ready.set()
            await stopped.wait()

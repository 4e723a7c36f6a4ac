"""The default executor of a ``SyncProducer``'s asyncio loop: one that still works at exit.

aiohttp and aiobotocore run their blocking steps with ``loop.run_in_executor(None, …)``:
building the SSL contexts of a new connector (even for ``http://``), resolving a host name.
A ``SyncProducer`` left open is closed by an ``atexit`` function, and by then the standard
``ThreadPoolExecutor`` refuses work: ``concurrent.futures`` shuts every pool down from its own
exit hook, which ``threading`` runs before it joins the non-daemon threads, so before any
``atexit`` function ("cannot schedule new futures after interpreter shutdown"; and if
``concurrent.futures.thread`` was not imported yet, importing it then fails: "can't register
atexit after shutdown"). A producer that had not connected yet could then never connect, and
every record it buffered expired.

Why not close the producers from that same hook instead (``threading._register_atexit``, the
private function ``concurrent.futures`` uses)? It runs before the non-daemon threads are
joined and before the program's own ``atexit`` functions: a worker thread still putting
records, or an ``atexit`` function that puts a last record or closes the producer itself,
would find it closed. Closing from ``atexit`` keeps the order the docs promise, and this
executor is all it takes for the loop's blocking steps to run there.

Before exit this is a plain ``ThreadPoolExecutor``. Once the interpreter refuses new work, each
call gets a daemon thread of its own: rare (a connector, a DNS lookup), and only during exit.

Python 3.12.0 to 3.12.2 refuse to start any thread once the interpreter begins to exit (CPython
gh-113964, fixed in 3.12.3), so nothing can help there, and the loop keeps the standard
executor (:data:`THREADS_AT_EXIT`): installing this one would only make the loop's end fail
(asyncio shuts a default executor down from a new thread).

Invariants: every call submitted before exit runs in the pool, every call submitted during exit
runs in a thread of its own, and a call submitted once the executor itself was shut down is
refused, as by any pool.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ("THREADS_AT_EXIT", "ExitSafeExecutor")

# Whether this interpreter can start a thread during exit (see above).
THREADS_AT_EXIT = not ((3, 12, 0) <= sys.version_info[:3] < (3, 12, 3))

_P = ParamSpec("_P")
_T = TypeVar("_T")


class ExitSafeExecutor(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` that runs work in threads of its own once the interpreter
    refuses new work to thread pools (during exit)."""

    def __init__(self) -> None:
        super().__init__(thread_name_prefix="aiokpl executor")
        self._shut = False

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        try:
            return super().submit(fn, *args, **kwargs)
        except RuntimeError:
            if self._shut:  # this executor was shut down (its loop ended): refused, as before
                raise
        # "cannot schedule new futures after interpreter shutdown": the interpreter is exiting.
        future: Future[_T] = Future()
        thread = threading.Thread(
            target=_run, args=(future, fn, args, kwargs), name="aiokpl exit worker", daemon=True
        )
        thread.start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._shut = True
        super().shutdown(wait, cancel_futures=cancel_futures)


def _run(
    future: Future[_T], fn: Callable[..., _T], args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        future.set_exception(exc)
    else:
        future.set_result(result)

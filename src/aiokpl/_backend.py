"""The one module that knows which event loop runs: asyncio or trio.

Everything else asks here instead of probing on its own (httpcore's
``current_async_library()`` in ``_synchronization.py`` is the model). What it answers:

* :func:`current_backend`: ``"asyncio"``, ``"trio"``, or ``None`` outside both;
* :func:`current_clock`: the clock ``anyio.current_time()`` reads, looked up once, for a hot
  path that reads the time per record;
* :func:`threadsafe_scheduler`: the running loop's cheapest way to run a function soon from
  another thread, for the code that hands work across threads (``SyncProducer``, the loopback
  server).

trio is asked first: in trio's guest mode an asyncio loop runs too (trio's host), and the code
calling here is trio's. trio is looked for in ``sys.modules`` only: a program that never
imported trio is not running it, and asyncio programs do not pay its import. Nothing here is
on the per-record path; each answer is taken once, when a producer, client or thread starts.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import Literal, cast

import anyio

__all__ = ("BACKENDS", "Backend", "current_backend", "current_clock", "threadsafe_scheduler")

Backend = Literal["asyncio", "trio"]
"""The event loops aiokpl runs on."""

BACKENDS: tuple[Backend, ...] = ("asyncio", "trio")


def current_backend() -> Backend | None:
    """The event loop running in this thread: ``"asyncio"``, ``"trio"``, or ``None``."""
    trio = sys.modules.get("trio")
    if trio is not None and trio.lowlevel.in_trio_run():
        return "trio"
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return None
    return "asyncio"


def current_clock() -> Callable[[], float]:
    """The clock ``anyio.current_time()`` reads, looked up once.

    anyio finds the running backend on every call, which costs about a microsecond: too much
    for every record. The function returned gives the very times it would (the asyncio loop's
    ``time``, or the trio run's clock), so fake clocks still control the producer. Where that
    is plain ``time.monotonic`` (asyncio's stock loops), it is returned itself: 35 ns less per
    call than through the loop's method; trio's clock object, 85 ns less than
    ``trio.current_time``. Outside any loop it is ``anyio.current_time`` (which then raises
    when called).
    """
    backend = current_backend()
    if backend == "trio":
        trio = sys.modules["trio"]
        return cast("Callable[[], float]", trio.lowlevel.current_clock().current_time)
    if backend is None:
        return anyio.current_time
    loop = asyncio.get_running_loop()
    if getattr(loop.time, "__func__", None) is asyncio.BaseEventLoop.time:
        return time.monotonic  # noqa: TID251 - what BaseEventLoop.time returns, uncalled
    return loop.time


def threadsafe_scheduler() -> Callable[[Callable[[], object]], object]:
    """The running loop's cheapest way to run a function soon, callable from another thread.

    ``call_soon_threadsafe`` on asyncio, the trio token's ``run_sync_soon`` on trio.

    Raises:
        RuntimeError: no asyncio or trio loop runs in this thread.
    """
    backend = current_backend()
    if backend == "trio":
        return cast(
            "Callable[[Callable[[], object]], object]",
            sys.modules["trio"].lowlevel.current_trio_token().run_sync_soon,
        )
    if backend is None:
        raise RuntimeError("no asyncio or trio event loop runs in this thread")
    return asyncio.get_running_loop().call_soon_threadsafe

"""``aiokpl._backend``: the one place that knows the running event loop."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from aiokpl._backend import BACKENDS, current_backend, current_clock, threadsafe_scheduler


@pytest.mark.anyio
async def test_current_backend_names_the_running_loop(anyio_backend_name: str) -> None:
    assert current_backend() == anyio_backend_name
    assert current_backend() in BACKENDS


def test_no_backend_outside_a_loop() -> None:
    assert current_backend() is None
    assert current_clock() is anyio.current_time
    with pytest.raises(RuntimeError, match="no asyncio or trio event loop"):
        threadsafe_scheduler()


@pytest.mark.anyio
async def test_the_clock_is_the_loops_own() -> None:
    clock = current_clock()
    before = clock()
    await anyio.sleep(3)
    assert clock() - before == pytest.approx(3)
    assert clock() == anyio.current_time()


@pytest.mark.anyio
async def test_the_scheduler_runs_a_function_on_the_loop_soon() -> None:
    ran: list[str | None] = []
    threadsafe_scheduler()(lambda: ran.append(current_backend()))
    assert ran == []
    await anyio.lowlevel.checkpoint()
    await anyio.lowlevel.checkpoint()
    assert ran == [current_backend()]

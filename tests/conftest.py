"""Shared fixtures.

* ``anyio_backend``: every async test runs twice, on asyncio and on trio, each under a virtual
  clock (trio's ``MockClock`` with ``autojump_threshold=0``; ``async_solipsism``'s event loop on
  asyncio). Time only moves when every task is blocked, so timing is exact and tests never
  sleep for real. The asyncio fake has no real I/O: tests that open sockets use
  ``real_anyio_backend`` (see ``tests/integration``).
* ``_no_aws_environment`` (autouse): removes every ``AWS_*`` variable and points the AWS config
  and credential files at nothing, so no test can ever pick up real credentials or reach the
  instance metadata service.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Callable
from typing import Any

import async_solipsism
import pytest
import trio.testing


class _ExactClock:
    """A float virtual clock for async_solipsism that always moves when asked to.

    async_solipsism's own clock counts whole microseconds, so a deadline like ``t + 0.12`` can
    sit one float ulp beyond any time it can show; anyio then re-arms its timer forever at
    the same instant. This clock adds the requested delay exactly, and at least one ulp.
    """

    resolution = 1e-12

    def __init__(self) -> None:
        self._now = 0.0

    def time(self) -> float:
        return self._now

    def advance(self, delta: float) -> None:
        if delta > 0:
            target = self._now + delta
            self._now = target if target > self._now else math.nextafter(self._now, math.inf)


def virtual_asyncio_loop() -> asyncio.AbstractEventLoop:
    """An async_solipsism event loop (no real I/O; time jumps when idle) on an exact clock."""
    loop = async_solipsism.EventLoop()
    clock = _ExactClock()
    loop._selector.clock = clock
    loop._EventLoop__clock = clock
    loop._clock_resolution = clock.resolution
    event_loop: asyncio.AbstractEventLoop = loop  # async_solipsism has no type information
    return event_loop


def virtual_backend(name: str) -> tuple[str, dict[str, Any]]:
    """``(backend, backend_options)`` for ``anyio.run``: ``name`` under a new virtual clock at 0.

    What the ``anyio_backend`` fixture gives a test; a test that runs a scenario several times
    (each from time 0, as ``tests/test_chaos.py`` replays a seed) calls it for each run.
    """
    if name == "trio":
        return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})
    return ("asyncio", {"loop_factory": virtual_asyncio_loop})


@pytest.fixture(
    params=[
        pytest.param("asyncio", id="asyncio"),
        pytest.param("trio", id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_backend(request.param)


@pytest.fixture
def seed_trio_scheduler(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """A function that seeds trio's scheduler, so the next trio run orders tasks as every
    other run given the same seed.

    Two runs of one program under ``MockClock`` differ only in the order trio runs the tasks
    that become runnable together: on purpose, to shake out ordering assumptions, it reverses
    half its batches (drawing from a generator of its own), and tasks whose deadlines tie wake
    in the order of their memory addresses. This does what Hypothesis does for trio tests
    (and does as soon as it is imported): sort each batch by task creation, then shuffle it
    with that generator, here seeded. Private to trio; asyncio's virtual loop needs none of it.
    """
    monkeypatch.setattr(trio._core._run, "_ALLOW_DETERMINISTIC_SCHEDULING", True)
    return trio._core._run._r.seed


@pytest.fixture(autouse=True)
def _no_aws_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    empty = tmp_path_factory.getbasetemp() / "no-aws-config"
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


# A test marked `scenario` (a fleet simulation, a benchmark's smoke run) runs for minutes by
# design: its hang guard is this, not pyproject's 120 s for everything else.
SCENARIO_TIMEOUT = 600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("scenario") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SCENARIO_TIMEOUT))

"""The command line's ``run``: a Ctrl-C that orphans a coroutine says nothing more."""

from __future__ import annotations

import gc
import warnings

import pytest

from aiokpl._cli.options import run


async def _put_record() -> int:
    return 1


async def _interrupted_between_call_and_await() -> None:
    # As trio's KeyboardInterrupt can: after the coroutine exists, before the await starts it.
    pending = _put_record()
    del pending  # dropped unstarted, as the interrupted frame's stack drops it
    raise KeyboardInterrupt


async def _returns() -> int:
    return await _put_record() + 41


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_interrupt_that_orphans_a_coroutine_gives_no_warning(backend: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(KeyboardInterrupt):
            run(_interrupted_between_call_and_await, backend=backend)
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_warning_is_silenced_only_during_the_run(backend: str) -> None:
    assert run(_returns, backend=backend) == 42
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # An unawaited coroutine outside a run still warns.
        _put_record()  # type: ignore[unused-coroutine]
        gc.collect()
    assert any("was never awaited" in str(w.message) for w in caught)

"""The blocking producer's futures (``aiokpl._blocking.futures``), on their own.

A ``RecordFuture`` is one light object until something needs it as a whole
``concurrent.futures.Future``; these tests drive it directly, from plain threads, with outcomes
resolved by hand: each shape answers as a ``Future`` does, the change of shape races with the
resolution safely, and nothing of ``Future``'s private state is named. Waits are bounded, and
nothing asserts on elapsed time. ``tests/test_sync.py`` shows the same through a producer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from concurrent.futures import Future, InvalidStateError
from typing import Any

import pytest

from aiokpl import Config, Outcome, RecordResult, SyncProducer
from aiokpl._blocking.futures import RecordFuture
from aiokpl._core.results import Attempt
from aiokpl.testing import FakeKinesis

WAIT = 30.0  # bound on every wait (seconds); never reached

DELIVERED = RecordResult(True, "shardId-000000000000", "1", (Attempt(1.0, 2.0, 0.5, True),))


class Resolved(Outcome[RecordResult]):
    """A done outcome that counts how often its result is built (as a record's is, lazily)."""

    def __init__(self, result: RecordResult = DELIVERED) -> None:
        super().__init__()
        self.value = result
        self.builds = 0
        self._done = True

    def _built(self) -> RecordResult:
        self.builds += 1
        return self.value


def is_light(future: RecordFuture) -> bool:
    """Whether the future holds only its own three attributes (none of Future's state)."""
    return len(vars(future)) == 3


def test_a_future_overrides_only_public_members_of_future() -> None:
    # What the class defines beyond a subclass with only a constructor (each Python adds its own
    # bookkeeping to a class, e.g. 3.13's __static_attributes__): of Future's members, public
    # ones only; its own state shares no name with Future's. So nothing depends on the standard
    # library's private attributes (tests/test_layout.py finds any reached by name).
    class OnlyAConstructor(Future):  # type: ignore[type-arg]
        def __init__(self) -> None:
            super().__init__()

    own = set(vars(RecordFuture)) - set(vars(OnlyAConstructor))
    futures = set(vars(Future)) | set(vars(Future()))  # its members and an instance's state
    assert own & futures == {"cancel", "cancelled", "done", "result", "running", "__repr__"}
    assert not set(vars(RecordFuture())) & futures
    assert isinstance(RecordFuture(), Future)


def test_a_future_resolved_before_anyone_looks_answers_light() -> None:
    future = RecordFuture()
    assert (future.done(), future.running(), future.cancel(), future.cancelled()) == (
        False,
        True,
        False,
        False,
    )
    assert repr(future).startswith("<Future at 0x")
    assert "state=running" in repr(future)
    outcome = Resolved()
    future.resolve(outcome)
    assert (future.done(), future.running(), future.cancel()) == (True, False, False)
    assert outcome.builds == 0  # built on first use, as an async caller's result is
    assert future.result() is DELIVERED
    assert future.result(timeout=0) is DELIVERED
    assert outcome.builds == 1
    assert is_light(future)  # none of that needed Future's own state
    with pytest.raises(InvalidStateError):
        future.resolve(outcome)  # resolved once


def test_a_resolved_future_becomes_whole_when_futures_own_code_needs_it() -> None:
    future = RecordFuture()
    future.resolve(Resolved())
    called: list[Future[RecordResult]] = []
    future.add_done_callback(called.append)  # Future's own: resolved already, called at once
    assert called == [future]
    assert not is_light(future)
    assert future.exception() is None
    assert future.result() is DELIVERED
    assert concurrent.futures.wait([future], timeout=0).done == {future}
    assert list(concurrent.futures.as_completed([future], timeout=0)) == [future]
    assert "state=finished returned RecordResult" in repr(future)
    with pytest.raises(InvalidStateError):
        future.set_result(DELIVERED)
    with pytest.raises(AttributeError, match="wait"):
        future.wait()  # type: ignore[attr-defined]  # a member no Future has


def test_a_repr_or_a_probe_of_a_protocol_leaves_a_pending_future_light() -> None:
    future = RecordFuture()
    assert "state=running" in repr(future)
    assert getattr(future, "__deepcopy__", None) is None
    assert is_light(future)


@pytest.mark.parametrize("how", ["result", "callback", "wait", "wrap_future"])
def test_a_future_waited_for_is_woken_by_its_resolution(how: str) -> None:
    future = RecordFuture()
    seen: list[tuple[object, str]] = []
    ready = threading.Event()

    def look() -> None:
        if how == "result":
            ready.set()
            seen.append((future.result(WAIT), threading.current_thread().name))
        elif how == "wait":
            ready.set()
            done, _ = concurrent.futures.wait([future], timeout=WAIT)
            seen.append((done, threading.current_thread().name))
        elif how == "wrap_future":

            async def main() -> object:
                wrapped = asyncio.wrap_future(future)
                ready.set()
                return await asyncio.wait_for(wrapped, WAIT)

            seen.append((asyncio.run(main()), threading.current_thread().name))

    if how == "callback":
        future.add_done_callback(
            lambda done: seen.append((done.result(), threading.current_thread().name))
        )
        ready.set()
    looker = threading.Thread(target=look, name="looker")
    looker.start()
    assert ready.wait(WAIT)
    resolver = threading.Thread(target=future.resolve, args=(Resolved(),), name="resolver")
    resolver.start()
    resolver.join(WAIT)
    looker.join(WAIT)
    expected: dict[str, tuple[object, str]] = {
        "result": (DELIVERED, "looker"),
        "callback": (DELIVERED, "resolver"),  # run by the resolution, in its thread
        "wait": ({future}, "looker"),
        "wrap_future": (DELIVERED, "looker"),
    }
    assert seen == [expected[how]]
    assert future.done()
    assert future.result() is DELIVERED


def race_once() -> None:
    """8 threads wait on a new future through Future's own code (half through ``result``, half
    through ``concurrent.futures.wait``) while a ninth resolves it."""
    future = RecordFuture()
    gate = threading.Barrier(10)
    results: list[Any] = []

    def wait_for_it(which: int) -> None:
        gate.wait(WAIT)
        if which % 2:
            results.append(future.result(WAIT))
        else:
            done, _ = concurrent.futures.wait([future], timeout=WAIT)
            results.append(next(iter(done)).result())

    def resolve() -> None:
        gate.wait(WAIT)
        future.resolve(Resolved())

    threads = [threading.Thread(target=wait_for_it, args=(n,)) for n in range(9)]
    threads.append(threading.Thread(target=resolve))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in threads)
    assert results == [DELIVERED] * 9
    assert future.done()


def test_threads_that_make_it_whole_race_the_resolution_safely() -> None:
    # Every waiting thread gets the one result, and nothing deadlocks, however they interleave.
    for _ in range(200):
        race_once()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_producers_futures_stay_light_until_used_as_futures(backend: Any) -> None:
    # Resolved before anyone looked, a producer's futures hold none of Future's state (before:
    # a plain Future each, its condition and lists made at the put), and build their results
    # on first use; one used as a Future becomes one.
    fake = FakeKinesis()
    fake.add_stream("s")
    with SyncProducer(Config(region="us-east-1"), client=fake, backend=backend) as producer:
        futures = [
            producer.put_record(stream="s", partition_key=f"k{i}", data=b"x") for i in range(100)
        ]
        producer.flush(timeout=WAIT)
    assert all(future.done() for future in futures)
    assert all(len(vars(future)) == 3 for future in futures)
    assert all(future.result().success for future in futures)
    called: list[Future[RecordResult]] = []
    futures[0].add_done_callback(called.append)
    assert called == [futures[0]]
    assert len(vars(futures[0])) > 3


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_producers_future_is_a_record_future(backend: Any) -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    with SyncProducer(Config(region="us-east-1"), client=fake, backend=backend) as producer:
        future = producer.put_record(stream="s", partition_key="k", data=b"x")
        assert isinstance(future, RecordFuture)
        assert future.result(WAIT).success
    assert not future.cancel()

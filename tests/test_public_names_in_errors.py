"""Errors and reprs a user can meet name public types (``Outcome``, ``Future``), never the
private classes behind them (``UserRecord``, ``TaggedRecord``, ``RecordFuture``), and name
them by the module they are imported from (``aiokpl.ConfigError``, not
``aiokpl._core.errors.ConfigError``)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Literal

import pytest

import aiokpl
import aiokpl.aggregation
import aiokpl.coordination
import aiokpl.testing
import aiokpl.tracing
from aiokpl import Config, Outcome, RecordResult, SyncProducer
from aiokpl._producer.producer import Producer
from aiokpl.testing import FakeKinesis

CONFIG = Config(region="us-east-1")
PRIVATE = re.compile(r"UserRecord|TaggedRecord|RecordFuture|KinesisRecord|_Resolved")


def message_of(action: Callable[[], object]) -> str:
    with pytest.raises(Exception) as caught:  # noqa: PT011 - any error; its text is checked
        action()
    return str(caught.value)


def pending_outcome_messages(outcome: Any) -> list[str]:
    return [
        repr(outcome),
        message_of(lambda: outcome.is_set()),  # aiokpl 0.2.0's spelling
        message_of(lambda: outcome.set_value(None)),
        message_of(outcome.result),  # not done yet
        message_of(lambda: len(outcome)),
        type(outcome).__name__,
    ]


@pytest.mark.anyio
async def test_an_outcome_names_itself_outcome() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG, client=fake) as producer:
        outcomes: list[Outcome[RecordResult]] = [
            await producer.put_record(stream="s", partition_key="k", data=b"x"),
            await producer.put_record(stream="s", partition_key="k", data=b"y", tags={"a": "b"}),
        ]
        for outcome in outcomes:
            messages = pending_outcome_messages(outcome)
            assert "'Outcome' object has no attribute 'is_set'" in messages[1]
            assert messages[-1] == "Outcome"
            assert all(not PRIVATE.search(text) for text in messages), messages
        for outcome in outcomes:
            await outcome
            assert repr(outcome).startswith("<Outcome done: RecordResult(")
            assert not PRIVATE.search(repr(outcome))


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_sync_future_names_itself_future(backend: Literal["asyncio", "trio"]) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    with SyncProducer(CONFIG, client=fake, backend=backend) as producer:
        future: Any = producer.put_record(stream="s", partition_key="k", data=b"x")
        assert type(future).__mro__[1] is Future
        messages = [
            repr(future),
            message_of(lambda: future.wait()),  # aiokpl 0.2.0's SyncOutcome.wait
            type(future).__name__,
        ]
        future.result(30)
        messages.append(repr(future))
    assert "'Future' object has no attribute 'wait'" in messages[1]
    assert messages[0].startswith("<Future at 0x")
    assert messages[2] == "Future"
    assert all(not PRIVATE.search(text) for text in messages), messages


@pytest.mark.parametrize(
    "module",
    [aiokpl, aiokpl.aggregation, aiokpl.coordination, aiokpl.testing, aiokpl.tracing],
    ids=str,
)
def test_public_classes_name_their_public_module(module: object) -> None:
    name = getattr(module, "__name__", "")
    classes = [
        getattr(module, attr)
        for attr in getattr(module, "__all__", ())
        if isinstance(getattr(module, attr), type)
    ]
    assert classes
    for cls in classes:
        # A class exported by aiokpl and a submodule (AggregationFormatError) is aiokpl's.
        expected = "aiokpl" if cls.__name__ in aiokpl.__all__ else name
        assert cls.__module__ == expected, cls


def test_a_traceback_names_the_public_exception() -> None:
    finished = subprocess.run(
        [
            sys.executable,
            "-c",
            "import aiokpl; aiokpl.Config(region='us-east-1', max_connections=0)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == 1
    last = finished.stderr.splitlines()[-1]
    assert last.startswith("aiokpl.ConfigError: "), finished.stderr

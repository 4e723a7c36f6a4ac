"""Errors and reprs a user can meet name public types (``Outcome``, ``Future``), never the
private classes behind them (``UserRecord``, ``TaggedRecord``, ``_RecordFuture``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Literal

import pytest

from aiokpl import Config, Outcome, RecordResult, SyncProducer
from aiokpl._producer import Producer
from aiokpl.testing import FakeKinesis

CONFIG = Config(region="us-east-1")
PRIVATE = re.compile(r"UserRecord|TaggedRecord|_RecordFuture|KinesisRecord|_Resolved")


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

"""The producer process of ``test_spool_kill.py``: puts numbered records through a spool to
moto's server, says which are durable, and may kill itself at a chosen file operation.

Run as ``python spool_kill_child.py JSON`` (one argument: the plan, below). It writes lines to
its standard output, each flushed at once, so the parent knows what happened up to the kill:

* ``started {json}``: the producer has started (the spool recovered, its replay begun); the
  producer's spool statistics, and ``producer_id``: the id this run's records carry in their
  identity tags (its spool's, as its segments hold it);
* ``durable FIRST END``: records ``FIRST`` to ``END - 1`` are durable (``wait_durable``
  returned after they were put);
* ``done {json}``: the producer closed cleanly; its spool statistics.

The plan (a JSON object):

* ``endpoint``, ``stream``, ``directory``, ``backend``, ``fsync``: where and how;
* ``first``, ``count``, ``batch``, ``pause_ms``: put records ``first`` … ``first + count - 1``
  in groups of ``batch``, ``wait_durable`` after each, then sleep ``pause_ms``;
* ``hold``: keep the records buffered (an hour of ``record_max_buffered_time_ms``) and kill
  itself once they are durable: nothing is sent, everything stays in the spool;
* ``kill``: ``null``, or ``{"op": OP, "n": N, "when": "before"|"after"|"torn"}``: SIGKILL
  itself at the Nth call of ``OsFiles.OP`` (``append``, ``fsync``, ``unlink``, ``rename``,
  ``create``, ``truncate_path``, ``write_file``), before or after the call does its work, or
  (``append`` only) ``torn``: after writing the first ``cut`` (a fraction) of the buffer; or
  (OP ``request``) at the Nth ``PutRecords`` call, before it is sent or once its answer is
  back;
* ``segment_size_bytes``: the spool's segment size (small, so segments rotate and are
  deleted often).

A record's data is :func:`payload` of its number; its partition key spreads records over the
stream's shards.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
from typing import Any

import anyio

from aiokpl import Config, Producer
from aiokpl._producer.marks import encoder_of
from aiokpl._spool import files as spool_files
from aiokpl._spool import writer as spool_writer
from aiokpl.testing._servers import DUMMY_CREDENTIALS

PAYLOAD_SIZE = 64
HOLD_MS = 3_600_000


def payload(number: int) -> bytes:
    """The data of record ``number``: unique, and readable back to its number."""
    return f"spool-kill {number:09d} ".encode().ljust(PAYLOAD_SIZE, b".")


def number_of(data: bytes) -> int | None:
    """The number :func:`payload` wrote in ``data``; ``None`` if it is not such a payload."""
    if len(data) != PAYLOAD_SIZE or not data.startswith(b"spool-kill "):
        return None
    if payload(number := int(data[11:20])) != data:
        return None
    return number


def say(*words: object) -> None:
    sys.stdout.write(" ".join(map(str, words)) + "\n")
    sys.stdout.flush()


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def install_kill(op: str, n: int, when: str, cut: float) -> None:
    """Wrap ``OsFiles.op`` so that its ``n``th call (from 1) kills the process (a torn write
    writes the first ``cut`` of its buffer: a half could end on a frame's boundary)."""
    original = getattr(spool_files.OsFiles, op)
    calls = 0

    def wrapper(self: Any, *args: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls != n:
            return original(self, *args)
        if when == "torn":
            handle, data = args
            original(self, handle, data[: max(1, min(len(data) - 1, int(len(data) * cut)))])
            die()
        if when == "before":
            die()
        result = original(self, *args)
        die()
        return result

    setattr(spool_files.OsFiles, op, wrapper)


OPS = ("append", "fsync", "create", "unlink", "rename", "truncate_path", "write_file")
calls: dict[str, int] = dict.fromkeys((*OPS, "request"), 0)


def install_counters() -> None:
    """Count the calls of each file operation (reported in the ``done`` line)."""
    for op in OPS:
        original = getattr(spool_files.OsFiles, op)

        def counted(self: Any, *args: Any, _op: str = op, _original: Any = original) -> Any:
            calls[_op] += 1
            return _original(self, *args)

        setattr(spool_files.OsFiles, op, counted)


def install_request_kill(n: int, when: str) -> None:
    """Kill the process at the ``n``th ``PutRecords`` call: ``before`` it is sent, or
    ``after`` its answer came back (the server stored the records; the producer never learns
    it, so they are sent again after the restart: copies)."""
    from aiobotocore.client import AioBaseClient

    original = AioBaseClient._make_api_call

    async def call(self: Any, operation: str, params: Any) -> Any:
        if operation != "PutRecords":
            return await original(self, operation, params)
        calls["request"] += 1
        if calls["request"] == n and when == "before":
            die()
        answer = await original(self, operation, params)
        if calls["request"] == n:
            die()
        return answer

    AioBaseClient._make_api_call = call


def install_segment_size(size: int) -> None:
    """Every ``SpoolWriter`` of this process rotates its segments at ``size`` bytes."""
    original = spool_writer.SpoolWriter.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["segment_size_bytes"] = size
        original(self, *args, **kwargs)

    spool_writer.SpoolWriter.__init__ = init  # type: ignore[method-assign]


def spool_statistics(producer: Producer) -> dict[str, Any]:
    spool = producer.statistics().spool
    return dataclasses.asdict(spool) if dataclasses.is_dataclass(spool) else dict(vars(spool))


async def main(plan: dict[str, Any]) -> None:
    config = Config(
        endpoint_url=plan["endpoint"],
        region=DUMMY_CREDENTIALS["region"],
        aws_access_key_id=DUMMY_CREDENTIALS["aws_access_key_id"],
        aws_secret_access_key=DUMMY_CREDENTIALS["aws_secret_access_key"],
        spool_directory=plan["directory"],
        spool_fsync=plan["fsync"],
        spool_fsync_interval_ms=20,
        record_identities=True,
        aggregation_enabled=True,
        # Held: nothing is sent before the process dies (Config's defaults otherwise).
        record_max_buffered_time_ms=HOLD_MS if plan["hold"] else 100,
        record_ttl_ms=2 * HOLD_MS if plan["hold"] else 30_000,
    )
    stream = plan["stream"]
    first, count, batch = plan["first"], plan["count"], plan["batch"]
    async with Producer(config) as producer:
        spool = producer._spool
        assert spool is not None
        producer_id = encoder_of(spool.producer_id).producer_id
        run = {**spool_statistics(producer), "producer_id": producer_id}
        say("started", json.dumps(run, default=str))
        for start in range(first, first + count, batch):
            end = min(first + count, start + batch)
            for number in range(start, end):
                await producer.put_record(
                    stream=stream, partition_key=f"key-{number % 64}", data=payload(number)
                )
            await producer.wait_durable()
            say("durable", start, end)
            await anyio.sleep(plan["pause_ms"] / 1000)
        if plan["hold"]:
            die()
        # Waits for the replay of what the start recovered too (close() alone leaves what
        # it had not replayed yet in the spool, for the next start).
        await producer.flush()
    say("done", json.dumps({**spool_statistics(producer), "calls": calls}, default=str))


if __name__ == "__main__":
    plan = json.loads(sys.argv[1])
    if plan.get("segment_size_bytes"):
        install_segment_size(plan["segment_size_bytes"])
    install_counters()
    kill = plan.get("kill")
    if kill and kill["op"] == "request":
        install_request_kill(kill["n"], kill["when"])
    else:
        install_request_kill(0, "after")  # counts them only
        if kill:
            install_kill(kill["op"], kill["n"], kill["when"], kill.get("cut", 0.5))
    anyio.run(main, plan, backend=plan["backend"])

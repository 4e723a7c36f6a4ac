"""Helpers shared by the integration tests: configs, clients, streams, reading records back.

The tests of real sockets beside the unit tests (``tests/test_loopback.py``,
``tests/test_tls.py``) take their local server's ``Config`` from here too (:func:`config`).
"""

from __future__ import annotations

import base64
import itertools
import os
import select
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import anyio
import pytest

from aiokpl import Config
from aiokpl._kinesis import create_client
from aiokpl.aggregation import deaggregate
from aiokpl.testing import read_stream
from aiokpl.testing._servers import DUMMY_CREDENTIALS

WAIT = 60.0
"""Bound on every wait for a child process (:class:`Child`); never reached."""

# Servers live for the whole session and serve both backends: every stream name is new.
_names = itertools.count()


AIOKPL_SCRIPT = Path(sys.executable).with_name("aiokpl")
"""The ``aiokpl`` console script installed next to this interpreter, which a user runs."""


def aiokpl_script() -> str:
    """:data:`AIOKPL_SCRIPT`, checked to exist."""
    assert AIOKPL_SCRIPT.exists(), f"{AIOKPL_SCRIPT} is missing: pip install -e ."
    return str(AIOKPL_SCRIPT)


def stream_name(prefix: str = "integration") -> str:
    """A stream name no other test of this session uses."""
    return f"{prefix}-{next(_names)}"


def config(endpoint: str, **changes: Any) -> Config:
    """A producer configuration for a local server at ``endpoint``."""
    return Config(
        endpoint_url=endpoint,
        region=DUMMY_CREDENTIALS["region"],
        aws_access_key_id=DUMMY_CREDENTIALS["aws_access_key_id"],
        aws_secret_access_key=DUMMY_CREDENTIALS["aws_secret_access_key"],
        **changes,
    )


def admin_client(endpoint: str) -> Any:
    """A plain client for setting up and reading back, on whichever loop runs the test."""
    return create_client(config(endpoint))


async def wait_until_active(admin: Any, stream: str) -> None:
    """Poll ``DescribeStreamSummary`` until the stream is ``ACTIVE``.

    kinesalite reports ``CREATING`` / ``UPDATING`` until its (zero-delay) timer has fired, and
    refuses ``SplitShard`` and ``MergeShards`` meanwhile; moto is ``ACTIVE`` at once.
    """
    with anyio.fail_after(10):
        while True:
            response = await admin.describe_stream_summary(StreamName=stream)
            if response["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE":
                return
            await anyio.sleep(0.01)


async def create_stream(admin: Any, stream: str, shards: int) -> None:
    """Create ``stream`` with ``shards`` shards and wait until it is ``ACTIVE``."""
    await admin.create_stream(StreamName=stream, ShardCount=shards)
    await wait_until_active(admin, stream)


def new_stream(endpoint: str, prefix: str, shards: int = 1, backend: str = "asyncio") -> str:
    """A new stream (:func:`stream_name`) of ``shards`` shards, active, created from a test
    that is not async, on ``backend``'s loop."""
    stream = stream_name(prefix)

    async def create() -> None:
        async with admin_client(endpoint) as admin:
            await create_stream(admin, stream, shards)

    anyio.run(create, backend=backend)
    return stream


async def shard_ranges(admin: Any, stream: str) -> dict[str, tuple[int, int]]:
    """The inclusive hash-key range of every shard of ``stream``, open or closed."""
    return {
        shard["ShardId"]: (
            int(shard["HashKeyRange"]["StartingHashKey"]),
            int(shard["HashKeyRange"]["EndingHashKey"]),
        )
        for shard in (await admin.list_shards(StreamName=stream))["Shards"]
    }


def aws_deaggregate(record: dict[str, Any]) -> list[tuple[str, bytes]]:
    """(partition key, data) of each user record, as AWS's deaggregator sees them.

    It answers in the Lambda shape: aggregated user records carry base64 data and
    ``"aggregated": True``; a record that is not an aggregate comes back with its raw bytes.
    (It also rewrites sys.path on import; put it back.)
    """
    saved = list(sys.path)
    try:
        from aws_kinesis_agg.deaggregator import iter_deaggregate_records
    finally:
        sys.path[:] = saved
    found = []
    for user_record in iter_deaggregate_records([record], data_format="Boto3"):
        kinesis = user_record["kinesis"]
        data = kinesis["data"]
        found.append(
            (kinesis["partitionKey"], base64.b64decode(data) if kinesis.get("aggregated") else data)
        )
    return found


def interruptible() -> None:
    """A child's ``preexec_fn``: SIGINT handled as Python's default, whatever this process
    inherited.

    A job that a shell starts in the background without job control (``nohup make test &``)
    has SIGINT ignored, and its children inherit that: Python then installs no
    ``KeyboardInterrupt`` handler, and every test that interrupts a child waited for it in
    vain (10 failures after 30-60 s each, on 3.10 and 3.13 alike)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Delivered(NamedTuple):
    """A user record read back from a stream."""

    shard_id: str
    partition_key: str | None
    data: bytes
    sequence_number: str
    aggregated: bool


def user_records(stored: Iterable[tuple[str, dict[str, Any]]]) -> list[Delivered]:
    """Deaggregate what ``read_stream`` returned, checking aiokpl against AWS's deaggregator.

    Both must read the same user records, in the same order, out of every Kinesis record;
    except one stored without a partition key (a stream that places records itself), which
    AWS's deaggregator (aws-kinesis-agg 1.2.3) cannot read: it raises ``KeyError:
    'PartitionKey'``, so a Lambda function that uses it on such a stream fails there.
    """
    found = []
    for shard_id, kinesis_record in stored:
        ours = deaggregate(kinesis_record)
        if "PartitionKey" not in kinesis_record:
            with pytest.raises(KeyError, match="PartitionKey"):
                aws_deaggregate(kinesis_record)
        else:
            assert [(r.partition_key, r.data) for r in ours] == aws_deaggregate(kinesis_record)
        for record in ours:
            assert record.sequence_number == kinesis_record["SequenceNumber"]
            found.append(
                Delivered(
                    shard_id,
                    record.partition_key,
                    record.data,
                    kinesis_record["SequenceNumber"],
                    record.aggregated,
                )
            )
    return found


def stored_data(endpoint: str, stream: str) -> Counter[bytes]:
    """The data of every user record the stream holds, counted (read as :func:`user_records`
    reads them)."""

    async def read() -> Counter[bytes]:
        async with admin_client(endpoint) as admin:
            return Counter(r.data for r in user_records(await read_stream(admin, stream)))

    return anyio.run(read)


class Child:
    """A child interpreter running ``script``, whose standard output is read line by line.

    Its output is read unbuffered, a byte at a time up to each line's end: a buffered reader
    takes whatever the pipe holds, so with two lines written at once the next wait for output
    saw an empty pipe and waited for the program's last line (the signal then came at its very
    end, not at the point the line announced).
    """

    def __init__(self, script: str, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=interruptible,
        )

    def expect(self, line: str) -> None:
        """Wait (bounded) for the next line of output, which must be ``line``."""
        stdout = self.process.stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], WAIT)
        assert ready, f"no {line!r} from the child in {WAIT} s"
        assert stdout.readline().decode() == line + "\n"

    def interrupt(self, signum: int = signal.SIGINT) -> None:
        """Send ``signum`` (Ctrl-C's SIGINT unless said)."""
        self.process.send_signal(signum)

    def finish(self) -> tuple[int, str, str]:
        """Wait for the exit: (status, the rest of stdout, all of stderr)."""
        out, err = self.process.communicate(timeout=WAIT)
        return self.process.returncode, out.decode(), err.decode()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()

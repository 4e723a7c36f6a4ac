"""What the shard-saturation and latency scenarios share: a throttling server, a paced load.

The server is an in-process :class:`~aiokpl.testing.FakeKinesis` with ``throttle=True``: every
shard has exact token buckets of 1000 records/s and 1 MiB/s (partition key plus data), holding
one second of each, on the event loop's real clock. With ``--http`` the same fake is served
over HTTP by ``aiokpl.testing.LoopbackKinesis`` in a thread of its own, and the producer uses
its real aiobotocore client against it.

The load is offered at a fixed rate of user records, paced on the real clock: every couple of
milliseconds the records due so far are put. Each record's data starts with its 8-byte index,
so delivered records can be matched with what was put.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from aiokpl import Config, Outcome, Producer, RecordResult
from aiokpl.aggregation import deaggregate_records
from aiokpl.testing import FakeKinesis

SHARDS = 4
RECORDS_PER_SECOND_PER_SHARD = 1000.0
BYTES_PER_SECOND_PER_SHARD = 1024.0 * 1024.0
CAPACITY_BYTES_PER_SECOND = SHARDS * BYTES_PER_SECOND_PER_SHARD
KEYS = 4096
DATA_SIZE = 1000
# Partition key plus data, on average over the keys "key-0" … "key-4095".
MEAN_RECORD_BYTES = sum(len(f"key-{i}") for i in range(KEYS)) / KEYS + DATA_SIZE
STREAM = "bench"
WARM_UP_KEY = "warm-up"  # the record put before the load, to load the shard map
BURST_SECONDS = 1.0  # each shard's buckets hold this much, and start full
THROTTLED = "ProvisionedThroughputExceededException"


def loopback_available() -> bool:
    """Whether ``aiokpl.testing._loopback`` exists and imports (it serves ``--http``)."""
    if importlib.util.find_spec("aiokpl.testing._loopback") is None:
        return False
    try:
        import aiokpl.testing._loopback  # noqa: F401
    except Exception:
        return False
    return True


class CountingKinesis(FakeKinesis):
    """A ``FakeKinesis`` that counts the Kinesis records it throttled (``PutRecords``)."""

    def __init__(self) -> None:
        super().__init__()
        self.put_requests = 0
        self.failed_requests = 0
        self.entries = 0
        self.throttled = 0
        self.other_failures = 0

    async def put_records(
        self,
        *,
        Records: Sequence[Mapping[str, Any]],
        StreamName: str | None = None,
        StreamARN: str | None = None,
        StreamId: str | None = None,
        DryRun: bool | None = None,
    ) -> dict[str, Any]:
        self.put_requests += 1
        try:
            answer = await super().put_records(
                Records=Records,
                StreamName=StreamName,
                StreamARN=StreamARN,
                StreamId=StreamId,
                DryRun=DryRun,
            )
        except Exception:
            self.failed_requests += 1
            raise
        self.entries += len(Records)
        if answer["FailedRecordCount"]:
            for entry in answer["Records"]:
                code = entry.get("ErrorCode")
                if code == THROTTLED:
                    self.throttled += 1
                elif code is not None:
                    self.other_failures += 1
        return answer


def throttling_server() -> CountingKinesis:
    fake = CountingKinesis()
    fake.add_stream(
        STREAM,
        shard_count=SHARDS,
        throttle=True,
        records_per_second=RECORDS_PER_SECOND_PER_SHARD,
        bytes_per_second=BYTES_PER_SECOND_PER_SHARD,
        burst_seconds=BURST_SECONDS,
    )
    return fake


async def warm_up(producer: Producer) -> None:
    """Put one record and wait for it: the shard map is loaded when the load begins."""
    await (await producer.put_record(stream=STREAM, partition_key=WARM_UP_KEY, data=b"w"))


@contextlib.asynccontextmanager
async def producer_on(fake: FakeKinesis, config: Config, http: bool) -> AsyncIterator[Producer]:
    """A started producer sending to ``fake``, in process or over loopback HTTP."""
    if not http:
        async with Producer(config, client=fake) as producer:
            yield producer
        return
    from aiokpl.testing import LoopbackKinesis

    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    with LoopbackKinesis(fake).running_in_thread() as server:
        config = config.replace(
            region="us-east-1",
            endpoint_url=server.endpoint_url,
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
        )
        async with Producer(config) as producer:
            yield producer


@dataclass
class Load:
    """What was offered, and what came of it."""

    started_at: float = 0.0  # anyio.current_time() when the load began (the fake's clock)
    offered_seconds: float = 0.0
    put: int = 0
    put_bytes: int = 0
    put_seconds: float = 0.0  # time spent inside put_record (waiting for room, mostly)
    put_times: list[float] = field(default_factory=list)  # time.perf_counter() at each put
    done_times: list[float] = field(default_factory=list)  # ... when its outcome resolved
    outcomes: list[Outcome[RecordResult]] = field(default_factory=list)
    # With offer(mirror_to=...): the outcomes of the same records put to the second stream.
    mirrored: list[Outcome[RecordResult]] = field(default_factory=list)


def record_data(index: int, filler: bytes) -> bytes:
    return index.to_bytes(8, "big") + filler


async def offer(
    producer: Producer,
    records_per_second: float,
    seconds: float,
    data_size: int = DATA_SIZE,
    *,
    clock: Callable[[], float] = time.perf_counter,
    mirror_to: str | None = None,
) -> Load:
    """Offer records at ``records_per_second`` for ``seconds``; time each one's outcome.

    Records are put as they fall due; a ``put_record`` waiting for room (the producer at
    ``max_outstanding_records``) holds the load back, as it would hold back a real source, and
    the records that fell due meanwhile are put as soon as there is room again, until the time
    is up. ``clock`` paces the load and stamps the times (``anyio.current_time`` under a
    virtual clock); with ``mirror_to``, every record is put to that stream too, right after
    (its outcomes in ``Load.mirrored``, untimed).
    """
    keys = [f"key-{i}" for i in range(KEYS)]
    filler = bytes(range(256)) * (data_size // 256 + 1)
    filler = filler[: data_size - 8]
    load = Load()
    put_times = load.put_times
    done_times = load.done_times
    outcomes = load.outcomes
    mirrored = load.mirrored

    def marker(index: int) -> Callable[[Outcome[RecordResult]], None]:
        def mark(_: Outcome[RecordResult]) -> None:
            done_times[index] = clock()

        return mark

    put = producer.put_record
    load.started_at = anyio.current_time()
    start = clock()
    index = 0
    while True:
        now = clock()
        elapsed = now - start
        if elapsed >= seconds:
            break
        if index >= int(elapsed * records_per_second):
            await anyio.sleep(0.002)
            continue
        data = record_data(index, filler)
        key = keys[index % KEYS]
        put_times.append(now)
        done_times.append(0.0)
        outcome = await put(stream=STREAM, partition_key=key, data=data)
        # put_record returns at once unless the producer is full (back-pressure).
        load.put_seconds += clock() - now
        outcome.add_done_callback(marker(index))
        outcomes.append(outcome)
        load.put_bytes += len(key) + len(data)
        if mirror_to is not None:
            mirrored.append(await put(stream=mirror_to, partition_key=key, data=data))
        index += 1
    load.offered_seconds = clock() - start
    load.put = index
    return load


async def drain(producer: Producer, limit: float) -> float:
    """Wait until nothing is outstanding, without flushing (the limiter keeps its pace)."""
    start = time.perf_counter()
    with anyio.move_on_after(limit):
        # Polling: the producer has no "all resolved" event short of flush(), which would
        # release the limiter's backlog at once.
        while producer.outstanding_records:  # noqa: ASYNC110
            await anyio.sleep(0.05)
    return time.perf_counter() - start


@dataclass
class Delivery:
    """What the server holds, matched with what was put."""

    stored_kinesis_records: int
    stored_user_records: int
    succeeded: int
    failed_by_code: dict[str, int]
    lost: int  # reported delivered, not in the stream
    missing: int  # put, not in the stream (delivered or not)
    duplicates: int
    unresolved: int


def match(fake: FakeKinesis, load: Load) -> Delivery:
    stored = fake.stored_records(STREAM)
    user_records = deaggregate_records(
        [{"Data": r.data, "PartitionKey": r.partition_key} for r in stored]
    )
    ids = [
        int.from_bytes(r.data[:8], "big") for r in user_records if r.partition_key != WARM_UP_KEY
    ]
    seen = set(ids)
    failed: dict[str, int] = {}
    succeeded = lost = unresolved = 0
    for index, outcome in enumerate(load.outcomes):
        if not outcome.done():
            unresolved += 1
            continue
        result = outcome.result()
        if result.success:
            succeeded += 1
            if index not in seen:
                lost += 1
        else:
            code = result.error_code or "?"
            failed[code] = failed.get(code, 0) + 1
    return Delivery(
        stored_kinesis_records=len(stored),
        stored_user_records=len(user_records),
        succeeded=succeeded,
        failed_by_code=failed,
        lost=lost,
        missing=sum(1 for index in range(load.put) if index not in seen),
        duplicates=len(ids) - len(seen),
        unresolved=unresolved,
    )


def kinesis_bytes_between(fake: FakeKinesis, start: float, end: float) -> int:
    """Bytes (partition key plus data) the stream took in during ``[start, end)``."""
    return sum(
        len((r.partition_key or "").encode()) + len(r.data)
        for r in fake.stored_records(STREAM)
        if start <= r.arrival_time < end
    )


def percentiles(sorted_values: list[float]) -> dict[str, float]:
    """p50, p90, p99, p99.9 and the maximum of an already sorted list, by name."""
    return {
        name: percentile(sorted_values, fraction)
        for name, fraction in (
            ("p50", 0.50),
            ("p90", 0.90),
            ("p99", 0.99),
            ("p99.9", 0.999),
            ("max", 1.0),
        )
    }


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return float("nan")
    rank = max(0, min(len(sorted_values) - 1, round(fraction * len(sorted_values)) - 1))
    return sorted_values[rank]

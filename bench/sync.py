"""SyncProducer: what the blocking API costs over the async producer.

The same records (100 bytes, 4096 keys) go into the same kind of in-process ``FakeKinesis``
(16 shards) three ways, timed from the first put to the return of ``flush()``, when every
result is known:

* **async**: ``await producer.put_record(...)`` in one task, on asyncio;
* **sync, 1 thread**: ``SyncProducer.put_record`` from the main thread, pipeline on a background
  asyncio loop;
* **sync, 8 threads**: the same records split over 8 threads putting at once;
* **portal.call per record** (the design ``SyncProducer`` does not use, for reference):
  ``BlockingPortal.call(producer.put_record, …)`` for each record, on a fifth of the records
  (it is that slow); compared by records per second.

Each put's future (or outcome) is kept, as a caller collecting results would. Rounds interleave
the three so that noise from other processes hits them alike; the best time of each is kept.
The ratios are information (SPEC §6 sets no target for the blocking API): the extra cost is the
cross-thread hand-over, the ``Future`` objects, and both threads sharing the GIL.
"""

from __future__ import annotations

import gc
import threading
import time
from functools import partial
from typing import Any

import anyio
from anyio.from_thread import start_blocking_portal

from aiokpl import Config, Producer, SyncProducer
from aiokpl.testing import FakeKinesis

from .report import Row, ScenarioResult

RECORDS = 100_000
QUICK_RECORDS = 20_000
ROUNDS = 3
QUICK_ROUNDS = 1
KEYS = 4096
SHARDS = 16
THREADS = 8
DATA = b"x" * 100
CONFIG = Config(region="us-east-1")


def _fake() -> FakeKinesis:
    fake = FakeKinesis()
    fake.add_stream("bench", shard_count=SHARDS)
    return fake


def _keys() -> list[str]:
    return [f"key-{i}" for i in range(KEYS)]


def run_async(n: int) -> float:
    keys = _keys()

    async def main() -> float:
        async with Producer(CONFIG, client=_fake()) as producer:
            await (await producer.put_record(stream="bench", partition_key="w", data=b"w"))
            start = time.perf_counter()
            put = producer.put_record
            outcomes = [
                await put(stream="bench", partition_key=keys[i % KEYS], data=DATA) for i in range(n)
            ]
            await producer.flush()
            elapsed = time.perf_counter() - start
        if not all(outcome.result().success for outcome in outcomes):
            raise RuntimeError("async: some records failed")
        return elapsed

    return anyio.run(main)


def run_sync(n: int, threads: int) -> float:
    keys = _keys()
    with SyncProducer(CONFIG, client=_fake()) as producer:
        producer.put_record(stream="bench", partition_key="w", data=b"w").result()
        futures: list[list[Any]] = [[] for _ in range(threads)]
        share = n // threads
        gate = threading.Barrier(threads + 1)

        def work(t: int) -> None:
            put = producer.put_record
            mine = futures[t]
            gate.wait()
            for i in range(t * share, (t + 1) * share):
                mine.append(put(stream="bench", partition_key=keys[i % KEYS], data=DATA))

        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        gate.wait()
        start = time.perf_counter()
        for worker in workers:
            worker.join()
        producer.flush()
        elapsed = time.perf_counter() - start
    if not all(future.result().success for mine in futures for future in mine):
        raise RuntimeError("sync: some records failed")
    return elapsed


def run_portal_per_record(n: int) -> float:
    keys = _keys()
    with start_blocking_portal() as portal:
        producer = Producer(CONFIG, client=_fake())
        with portal.wrap_async_context_manager(producer):
            call = portal.call
            call(partial(producer.put_record_nowait, stream="bench", partition_key="w", data=b"w"))
            start = time.perf_counter()
            outcomes = [
                call(
                    partial(
                        producer.put_record, stream="bench", partition_key=keys[i % KEYS], data=DATA
                    )
                )
                for i in range(n)
            ]
            call(producer.flush)
            elapsed = time.perf_counter() - start
    if not all(outcome.result().success for outcome in outcomes):
        raise RuntimeError("portal: some records failed")
    return elapsed


def run(quick: bool, http: bool) -> ScenarioResult:
    """The scenario (``http`` does not apply: everything is in-process)."""
    n = QUICK_RECORDS if quick else RECORDS
    rounds = QUICK_ROUNDS if quick else ROUNDS
    names = ("async", "sync1", f"sync{THREADS}", "portal")
    best = dict.fromkeys(names, float("inf"))
    for _ in range(rounds):
        for name in names:
            gc.collect()
            if name == "async":
                seconds = run_async(n)
            elif name == "portal":
                seconds = run_portal_per_record(n // 5) * 5  # scaled to n records
            else:
                seconds = run_sync(n, int(name.removeprefix("sync")))
            best[name] = min(best[name], seconds)
    result = ScenarioResult("sync", details={"records": n, "rounds": rounds, "seconds": best})
    base = best["async"]
    result.rows.append(Row("sync/async", f"{n / base:,.0f} records/s", "reference", None, "", None))
    for name, label in (
        ("sync1", "1 thread"),
        (f"sync{THREADS}", f"{THREADS} threads"),
        ("portal", "portal.call per record"),
    ):
        seconds = best[name]
        result.rows.append(
            Row(
                f"sync/{label}",
                f"{n / seconds:,.0f} records/s",
                "information (vs the async producer)",
                seconds / base,
                "× async time",
                None,
            )
        )
    return result

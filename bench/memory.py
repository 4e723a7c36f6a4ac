"""Memory: resident bytes per outstanding record, data included.

In a fresh subprocess (so that the resident set holds nothing but this), a producer is started
on a 64-shard ``FakeKinesis`` whose ``put_records`` answers the warm-up record and then never
returns, so nothing put afterwards can be delivered: 1M records of 100 bytes (each its own
``bytes`` object, made as it is put; 4096 partition keys) stay outstanding, with
``max_outstanding_records`` above 1M and TTL and request timeout far away. They end up spread
over the pipeline as a real backlog would be: in open aggregates, encoded aggregates queued in
the limiter or the collector, and requests waiting for a connection or stuck in flight.

The figure is the growth of the peak resident set (``VmHWM`` of ``/proc/self/status`` after the
puts, minus ``VmRSS`` just before them) divided by the number of records. The record's own
100 bytes of data are part of the budget, and so is the encoded aggregate holding a copy of
them.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .report import Row, ScenarioResult

RECORDS = 1_000_000
QUICK_RECORDS = 200_000
KEYS = 4096
DATA_SIZE = 100
SHARDS = 64
TARGET_BYTES_PER_RECORD = 400


def _status() -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` of this process, in bytes."""
    values: dict[str, int] = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                values[name] = int(rest.split()[0]) * 1024
    return values


def _child(n: int) -> dict[str, Any]:
    import anyio

    from aiokpl import Config, Producer
    from aiokpl.testing import FakeKinesis

    class HoldingKinesis(FakeKinesis):
        """Answers ``put_records`` until ``hold`` is set, then never again."""

        hold = False

        async def put_records(
            self,
            *,
            Records: Sequence[Mapping[str, Any]],
            StreamName: str | None = None,
            StreamARN: str | None = None,
            StreamId: str | None = None,
            DryRun: bool | None = None,
        ) -> dict[str, Any]:
            if self.hold:
                await anyio.sleep_forever()
            return await super().put_records(
                Records=Records,
                StreamName=StreamName,
                StreamARN=StreamARN,
                StreamId=StreamId,
                DryRun=DryRun,
            )

    async def main() -> dict[str, Any]:
        fake = HoldingKinesis()
        fake.add_stream("bench", shard_count=SHARDS)
        config = Config(
            region="us-east-1",
            max_outstanding_records=n + 1000,
            max_outstanding_bytes=16 * 1024**3,
            record_ttl_ms=86_400_000,
            request_timeout_ms=600_000,
        )
        keys = [f"key-{i}" for i in range(KEYS)]
        filler = bytes(range(DATA_SIZE - 4))
        async with Producer(config, client=fake) as producer:
            await (await producer.put_record(stream="bench", partition_key="warm-up", data=b"w"))
            fake.hold = True
            gc.collect()
            before = _status()
            start = time.perf_counter()
            put = producer.put_record
            for i in range(n):
                # A new 100-byte object per record, as data arriving from elsewhere would be.
                await put(
                    stream="bench",
                    partition_key=keys[i % KEYS],
                    data=filler + i.to_bytes(4, "big"),
                )
            # Let deadlines pass: open aggregates close and move down the pipeline.
            await anyio.sleep(0.3)
            put_seconds = time.perf_counter() - start
            after = _status()
            gc.collect()
            after_gc = _status()
            statistics = producer.statistics()
            stream = statistics.streams[0]
            report = {
                "records": n,
                "rss_before": before["VmRSS"],
                "hwm_before": before["VmHWM"],
                "rss_after": after["VmRSS"],
                "hwm_after": after["VmHWM"],
                "rss_after_gc": after_gc["VmRSS"],
                "put_seconds": put_seconds,
                "outstanding_records": statistics.outstanding_records,
                "outstanding_bytes": statistics.outstanding_bytes,
                "requests_in_flight": statistics.requests_in_flight,
                "requests_queued": statistics.requests_queued,
                "aggregating": stream.aggregating,
                "rate_limited": stream.rate_limited,
                "collecting": stream.collecting,
            }
            # Printing first: the records are never delivered, and resolving a million
            # outcomes as "Cancelled" on the way out only costs time.
            print(json.dumps(report), flush=True)
            sys.stdout.flush()
            import os

            os._exit(0)
        raise AssertionError("unreachable")

    return anyio.run(main)


def run(quick: bool = False, http: bool = False) -> ScenarioResult:
    n = QUICK_RECORDS if quick else RECORDS
    result = ScenarioResult("memory")
    root = Path(__file__).resolve().parent.parent
    completed = subprocess.run(
        [sys.executable, "-m", "bench.memory", "--child", str(n)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if completed.returncode != 0 or not completed.stdout.strip():
        raise RuntimeError(
            f"memory child failed ({completed.returncode}): {completed.stderr.strip()[-2000:]}"
        )
    details = json.loads(completed.stdout.strip().splitlines()[-1])
    growth = details["hwm_after"] - details["rss_before"]
    per_record = growth / n
    details["peak_growth_bytes"] = growth
    details["bytes_per_record"] = per_record
    details["rss_growth_after_gc_per_record"] = (
        details["rss_after_gc"] - details["rss_before"]
    ) / n
    result.details = details
    outstanding_ok = details["outstanding_records"] == n
    result.rows.append(
        Row(
            "memory",
            f"{per_record:.0f} B/record peak RSS growth for {n:,} outstanding "
            f"{DATA_SIZE}-byte records ({growth / 1024**2:.0f} MiB; "
            f"{details['outstanding_records']:,} outstanding)",
            f"≤ {TARGET_BYTES_PER_RECORD} B/record incl. data",
            per_record / TARGET_BYTES_PER_RECORD,
            "of budget",
            per_record <= TARGET_BYTES_PER_RECORD and outstanding_ok,
        )
    )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", type=int, required=True)
    arguments = parser.parse_args()
    _child(arguments.child)

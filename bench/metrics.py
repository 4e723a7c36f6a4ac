"""Metrics overhead: the pipeline scenario with ``metrics_level`` none, summary and detailed.

The same 200k records (100 bytes, 4096 keys, 64 shards, aggregation on) go through the
pipeline of :mod:`bench.pipeline` three times per round, once per level, in one event loop,
after a warm-up run, the order rotating from round to round so that drift and noise hit every
level alike; the best time of each level is kept, in CPU time of the process (the target)
and in wall time (information). With ``"none"`` the producer has no recorder at all, so that
run is the pipeline's own cost; the target is on the ratio (SPEC: detailed costs at most 5%
of throughput). The garbage collector stays on, as in production.
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

import anyio

from aiokpl import Config
from aiokpl.testing import FakeKinesis

from .pipeline import DATA_SIZE, KEYS, SHARDS, pipeline
from .report import Row, ScenarioResult

RECORDS = 200_000
QUICK_RECORDS = 40_000
ROUNDS = 5
QUICK_ROUNDS = 1
LEVELS = ("none", "summary", "detailed")
TARGET_DETAILED_COST = 0.05  # at most 5% of throughput


async def _round(n: int, first: int) -> dict[str, tuple[float, float]]:
    keys = [f"key-{i}" for i in range(KEYS)]
    data = bytes(range(DATA_SIZE))
    fake = FakeKinesis()
    fake.add_stream("warm-up", shard_count=SHARDS)
    await pipeline(fake, "warm-up", keys, data, n // 4)  # imports, caches: not measured
    fake.remove_stream("warm-up")
    times: dict[str, tuple[float, float]] = {}
    order = LEVELS[first:] + LEVELS[:first]
    for level in order:
        fake.add_stream(level, shard_count=SHARDS)
        config = Config(region="us-east-1", metrics_level=level)
        gc.collect()
        cpu = time.process_time()
        wall = await pipeline(fake, level, keys, data, n, config)
        times[level] = (wall, time.process_time() - cpu)
        fake.remove_stream(level)  # frees the stored records before the next level
    return times


def run(quick: bool = False, http: bool = False) -> ScenarioResult:
    """Run the scenario on asyncio; ``http`` is ignored (measured in process)."""
    n = QUICK_RECORDS if quick else RECORDS
    rounds = QUICK_ROUNDS if quick else ROUNDS
    wall: dict[str, list[float]] = {level: [] for level in LEVELS}
    cpu: dict[str, list[float]] = {level: [] for level in LEVELS}
    for i in range(rounds):
        times = anyio.run(_round, n, i % len(LEVELS))
        for level, (wall_seconds, cpu_seconds) in times.items():
            wall[level].append(wall_seconds)
            cpu[level].append(cpu_seconds)
    best_wall = {level: min(runs) for level, runs in wall.items()}
    best_cpu = {level: min(runs) for level, runs in cpu.items()}
    result = ScenarioResult("metrics")
    result.details = {
        "records": n,
        "rounds": rounds,
        "best_seconds": best_wall,
        "best_cpu_seconds": best_cpu,
        "median_seconds": {level: statistics.median(runs) for level, runs in wall.items()},
        "samples_seconds": wall,
        "samples_cpu_seconds": cpu,
    }
    for level in ("summary", "detailed"):
        # The target is on the process's CPU time: the pipeline runs in this one thread
        # against an in-process fake, so CPU time is its work, and other processes on a
        # shared machine disturb it far less than they disturb wall time.
        cost = 1 - best_cpu["none"] / best_cpu[level]  # the share of throughput lost
        target: dict[str, Any] = (
            {
                "target": f"≤ {TARGET_DETAILED_COST:.0%} of throughput (CPU time)",
                "ok": cost <= TARGET_DETAILED_COST,
            }
            if level == "detailed"
            else {"target": "info", "ok": None}
        )
        result.rows.append(
            Row(
                f"metrics/{level}",
                f"{n / best_cpu[level] / 1000:,.1f}k rec/CPU-s vs "
                f"{n / best_cpu['none'] / 1000:,.1f}k with metrics off: {cost:.1%} lost; "
                f"wall {n / best_wall[level] / 1000:,.1f}k vs "
                f"{n / best_wall['none'] / 1000:,.1f}k rec/s",
                target["target"],
                best_cpu[level] / best_cpu["none"],
                f"CPU time {level}/none",
                target["ok"],
            )
        )
    return result

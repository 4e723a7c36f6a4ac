"""Metrics overhead: the pipeline scenario with ``metrics_level`` none, summary and detailed.

The same 200k records (100 bytes, 4096 keys, 64 shards, aggregation on) go through the
pipeline of :mod:`bench.pipeline` three times per round, once per level, in one event loop,
after a warm-up run, the order rotating from round to round so that drift and noise hit every
level alike; the best time of each level is kept. With ``"none"`` the producer has no
recorder at all, so that run is the pipeline's own cost; the targets are on the ratios
(SPEC: detailed costs at most 5% of throughput). The garbage collector stays on, as in
production.
"""

from __future__ import annotations

import gc
import statistics
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


async def _round(n: int, first: int) -> dict[str, float]:
    keys = [f"key-{i}" for i in range(KEYS)]
    data = bytes(range(DATA_SIZE))
    fake = FakeKinesis()
    fake.add_stream("warm-up", shard_count=SHARDS)
    await pipeline(fake, "warm-up", keys, data, n // 4)  # imports, caches: not measured
    fake.remove_stream("warm-up")
    times: dict[str, float] = {}
    order = LEVELS[first:] + LEVELS[:first]
    for level in order:
        fake.add_stream(level, shard_count=SHARDS)
        config = Config(region="us-east-1", metrics_level=level)
        gc.collect()
        times[level] = await pipeline(fake, level, keys, data, n, config)
        fake.remove_stream(level)  # frees the stored records before the next level
    return times


def run(quick: bool = False, http: bool = False) -> ScenarioResult:
    """Run the scenario on asyncio; ``http`` is ignored (measured in process)."""
    n = QUICK_RECORDS if quick else RECORDS
    rounds = QUICK_ROUNDS if quick else ROUNDS
    samples: dict[str, list[float]] = {level: [] for level in LEVELS}
    for i in range(rounds):
        times = anyio.run(_round, n, i % len(LEVELS))
        for level, seconds in times.items():
            samples[level].append(seconds)
    best = {level: min(runs) for level, runs in samples.items()}
    result = ScenarioResult("metrics")
    result.details = {
        "records": n,
        "rounds": rounds,
        "best_seconds": best,
        "median_seconds": {level: statistics.median(runs) for level, runs in samples.items()},
        "samples_seconds": samples,
    }
    base = best["none"]
    for level in ("summary", "detailed"):
        cost = 1 - base / best[level]  # the share of throughput lost
        target: dict[str, Any] = (
            {
                "target": f"≤ {TARGET_DETAILED_COST:.0%} of throughput",
                "ok": cost <= TARGET_DETAILED_COST,
            }
            if level == "detailed"
            else {"target": "info", "ok": None}
        )
        result.rows.append(
            Row(
                f"metrics/{level}",
                f"{n / best[level] / 1000:,.1f}k rec/s vs {n / base / 1000:,.1f}k rec/s with "
                f"metrics off; throughput lost {cost:.1%}",
                target["target"],
                best[level] / base,
                f"time {level}/none",
                target["ok"],
            )
        )
    return result

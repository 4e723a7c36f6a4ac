"""Metrics overhead: the pipeline scenario with ``metrics_level`` none, summary and detailed.

The same records as :mod:`bench.pipeline` (100 bytes, 4096 keys, 64 shards, aggregation on) go
through producers at each level, one after another in one event loop, after a warm-up run, the
order rotating from round to round so that drift and noise hit every level alike. Two figures:

* **the recorder's share** (the target): one more run at ``"detailed"`` with the recorder's
  entry points (:class:`aiokpl._metrics.recorder.MetricsRecorder`) timed from inside; their
  total time over that run's pipeline time is what metrics cost, measured within one run, so
  the noise of a shared machine stretches both sides alike. The timer itself (two clock reads per
  request) is included, so the figure errs high. Best of the rounds.
* **side by side** (information): the process's CPU time at each level over the same span as
  the pipeline's wall time, the median over rounds of each level's ratio to ``"none"`` of the
  same round. On a 2-core machine shared with other work this moves by ±20% from one round to
  the next, far more than the few per cent being measured: read it as a sanity check.

With ``"none"`` the producer has no recorder at all, so that run is the pipeline's own cost.
The garbage collector stays on, as in production.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import anyio

from aiokpl import Config
from aiokpl._metrics.recorder import MetricsRecorder
from aiokpl.testing import FakeKinesis

from .pipeline import DATA_SIZE, KEYS, SHARDS, pipeline
from .report import Row, ScenarioResult

RECORDS = 200_000
QUICK_RECORDS = 40_000
ROUNDS = 5
QUICK_ROUNDS = 1
LEVELS: tuple[Literal["none", "summary", "detailed"], ...] = ("none", "summary", "detailed")
TARGET_DETAILED_COST = 0.05  # at most 5% of throughput
_ENTRY_POINTS = ("request_done", "delivered_elsewhere", "failed", "sample")


@contextlib.contextmanager
def _timed_recorder() -> Iterator[list[float]]:
    """Time every call into the recorder (all instances) while the block runs."""
    spent = [0.0]
    originals = {name: getattr(MetricsRecorder, name) for name in _ENTRY_POINTS}

    def timed(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start

        return wrapper

    for name, method in originals.items():
        setattr(MetricsRecorder, name, timed(method))
    try:
        yield spent
    finally:
        for name, method in originals.items():
            setattr(MetricsRecorder, name, method)


async def _round(n: int, first: int) -> dict[str, Any]:
    keys = [f"key-{i}" for i in range(KEYS)]
    data = bytes(range(DATA_SIZE))
    fake = FakeKinesis()
    fake.add_stream("warm-up", shard_count=SHARDS)
    await pipeline(fake, "warm-up", keys, data, n // 4)  # imports, caches: not measured
    fake.remove_stream("warm-up")
    cpu: dict[str, float] = {}
    order = LEVELS[first:] + LEVELS[:first]
    for level in order:
        fake.add_stream(level, shard_count=SHARDS)
        config = Config(region="us-east-1", metrics_level=level)
        gc.collect()
        spans: list[float] = []
        await pipeline(fake, level, keys, data, n, config, spans)
        cpu[level] = spans[0]
        fake.remove_stream(level)  # frees the stored records before the next level
    fake.add_stream("timed", shard_count=SHARDS)
    gc.collect()
    with _timed_recorder() as spent:
        wall = await pipeline(
            fake, "timed", keys, data, n, Config(region="us-east-1", metrics_level="detailed")
        )
    return {"cpu": cpu, "recorder_share": spent[0] / wall}


def run(quick: bool = False, http: bool = False) -> ScenarioResult:
    """Run the scenario on asyncio; ``http`` is ignored (measured in process)."""
    n = QUICK_RECORDS if quick else RECORDS
    rounds = QUICK_ROUNDS if quick else ROUNDS
    cpu: dict[str, list[float]] = {level: [] for level in LEVELS}
    shares: list[float] = []
    for i in range(rounds):
        measured = anyio.run(_round, n, i % len(LEVELS))
        for level, seconds in measured["cpu"].items():
            cpu[level].append(seconds)
        shares.append(measured["recorder_share"])
    ratios = {
        level: statistics.median(
            mine / base for mine, base in zip(cpu[level], cpu["none"], strict=True)
        )
        for level in ("summary", "detailed")
    }
    share = min(shares)
    result = ScenarioResult("metrics")
    result.details = {
        "records": n,
        "rounds": rounds,
        "recorder_share_of_pipeline_time": shares,
        "samples_cpu_seconds": cpu,
        "median_cpu_ratio_to_none": ratios,
    }
    result.rows.append(
        Row(
            "metrics/detailed",
            f"recorder {share:.1%} of pipeline time (rounds: "
            f"{', '.join(f'{s:.1%}' for s in shares)})",
            f"≤ {TARGET_DETAILED_COST:.0%} of throughput",
            share,
            "recorder/pipeline",
            share <= TARGET_DETAILED_COST,
        )
    )
    for level in ("summary", "detailed"):
        result.rows.append(
            Row(
                f"metrics/{level}",
                f"CPU time vs metrics off, median of {rounds} rounds side by side "
                f"(noisy: ±20% per round here)",
                "info",
                ratios[level],
                f"CPU time {level}/none",
            )
        )
    return result

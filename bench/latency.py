"""Latency: put → outcome resolved, at half the server's capacity, against the buffered time.

The 4-shard throttling server of the saturation scenario is offered half its byte capacity
(2 MiB/s of user records of about 1008 bytes) for 15 real seconds by a producer with default
settings, ``record_max_buffered_time_ms`` = 100. Each record's latency runs from just before
its ``put_record`` to its outcome's done-callback (``time.perf_counter``). At this load an
aggregate for a shard fills (51,200 bytes) in about 100 ms, so records wait about as long for
their aggregate to fill as for its deadline: the buffered time is the ceiling of that wait, and
the targets allow 10 ms (p50) and 50 ms (p99) beyond it.
"""

from __future__ import annotations

from typing import Any

import anyio

from aiokpl import Config

from . import _load
from .report import Row, ScenarioResult

SECONDS = 15.0
QUICK_SECONDS = 3.0
OFFERED_FRACTION = 0.5
BUFFERED_MS = 100
TARGET_P50_EXCESS = 0.010
TARGET_P99_EXCESS = 0.050


async def _run(seconds: float, http: bool) -> dict[str, Any]:
    fake = _load.throttling_server()
    config = Config(region="us-east-1", record_max_buffered_time_ms=BUFFERED_MS)
    record_bytes = _load.MEAN_RECORD_BYTES
    rate = OFFERED_FRACTION * _load.CAPACITY_BYTES_PER_SECOND / record_bytes
    async with _load.producer_on(fake, config, http) as producer:
        await _load.warm_up(producer)
        load = await _load.offer(producer, rate, seconds)
        drain_seconds = await _load.drain(producer, config.record_ttl_ms / 1000 + 30)
    delivery = _load.match(fake, load)
    latencies = sorted(
        done - put
        for put, done, outcome in zip(load.put_times, load.done_times, load.outcomes, strict=True)
        if done and outcome.result().success
    )
    return {
        "buffered_ms": BUFFERED_MS,
        "offered_fraction_of_capacity": load.put_bytes
        / load.offered_seconds
        / _load.CAPACITY_BYTES_PER_SECOND,
        "records_put": load.put,
        "records_timed": len(latencies),
        "drain_seconds": drain_seconds,
        "percentiles_seconds": _load.percentiles(latencies),
        "min_seconds": latencies[0] if latencies else None,
        "kinesis_records_throttled": fake.throttled,
        "kinesis_records_sent": fake.entries,
        "delivery": delivery.__dict__,
    }


def run(quick: bool = False, http: bool = False) -> ScenarioResult:
    seconds = QUICK_SECONDS if quick else SECONDS
    result = ScenarioResult("latency")
    details = anyio.run(_run, seconds, http)
    result.details = {"http": http, "seconds": seconds, **details}
    name = "latency/http" if http else "latency"
    percentiles = details["percentiles_seconds"]
    delivery = details["delivery"]
    assert isinstance(percentiles, dict)
    assert isinstance(delivery, dict)
    buffered = BUFFERED_MS / 1000
    p50, p99 = percentiles["p50"], percentiles["p99"]
    offered = float(details["offered_fraction_of_capacity"])
    failed = sum(delivery["failed_by_code"].values())
    for label, value, excess in (("p50", p50, TARGET_P50_EXCESS), ("p99", p99, TARGET_P99_EXCESS)):
        limit = buffered + excess
        figure = f"{label} {value * 1000:.1f} ms (buffered time {BUFFERED_MS} ms"
        if label == "p50":
            figure += f"; offered {offered:.2f}× capacity, {details['records_timed']:,} records)"
        else:
            figure += (
                f"; p99.9 {percentiles['p99.9'] * 1000:.1f} ms, "
                f"max {percentiles['max'] * 1000:.1f} ms)"
            )
        result.rows.append(
            Row(
                name,
                figure,
                f"≤ buffered + {excess * 1000:g} ms = {limit * 1000:g} ms",
                value / limit,
                "of limit",
                value <= limit and failed == 0 and delivery["lost"] == 0,
            )
        )
    return result

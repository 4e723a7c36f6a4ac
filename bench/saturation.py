"""Shard saturation: offered twice the capacity, how close does the producer run to it?

A 4-shard throttling server (exact token buckets of 1000 records/s and 1 MiB/s per shard, one
second of burst) is offered twice its byte capacity, 8 MiB/s of user records (keys "key-0" …
"key-4095", 1000-byte data), for 30 real seconds by a producer with default settings: its own
limiter at exactly the shard limits, a 30 s TTL, and at most 100,000 records outstanding. Half
the offer cannot be sent, so the backlog grows until ``put_record`` waits for room (after about
24 s): that back-pressure is what keeps the oldest record's wait (about 24 s) under its TTL, so
the producer accepts less than is offered. The backlog then drains at the limiter's pace; the
run ends when every outcome is resolved.

Figures, as ratios:

* **delivered**: Kinesis bytes (partition key plus data) the stream took in during the 30 s,
  over the most it could have taken in: 30 s of capacity plus the one second of burst its
  buckets start with. Also reported, as information: the same from 5 s on (the steady state,
  after the start-up burst and its consequences);
* **throttled**: Kinesis records the server refused for throughput, over all it was sent;
* **lost**: records reported delivered that are not in the stream; **expired**: records that
  failed with ``"Expired"`` (their 30 s TTL).
"""

from __future__ import annotations

from typing import Any

import anyio

from aiokpl import Config

from . import _load
from .report import Row, ScenarioResult

SECONDS = 30.0
QUICK_SECONDS = 5.0
WARMUP = 5.0
QUICK_WARMUP = 1.0
OFFERED_FRACTION = 2.0
TARGET_DELIVERED = 0.97
TARGET_THROTTLED = 0.005


async def _run(seconds: float, warmup: float, http: bool) -> dict[str, Any]:
    fake = _load.throttling_server()
    config = Config(region="us-east-1")
    record_bytes = _load.MEAN_RECORD_BYTES
    rate = OFFERED_FRACTION * _load.CAPACITY_BYTES_PER_SECOND / record_bytes
    async with _load.producer_on(fake, config, http) as producer:
        await _load.warm_up(producer)
        load = await _load.offer(producer, rate, seconds)
        ended_at = anyio.current_time()
        drain_seconds = await _load.drain(producer, config.record_ttl_ms / 1000 + 30)
        statistics = producer.statistics()
    capacity = _load.CAPACITY_BYTES_PER_SECOND
    end = load.started_at + seconds
    delivered = _load.kinesis_bytes_between(fake, load.started_at, end)
    most = capacity * (seconds + _load.BURST_SECONDS)
    steady = _load.kinesis_bytes_between(fake, load.started_at + warmup, end)
    steady_capacity = capacity * (seconds - warmup)
    everything = _load.kinesis_bytes_between(fake, load.started_at, float("inf"))
    delivery = _load.match(fake, load)
    return {
        "offered_records_per_second": rate,
        "offered_fraction_of_capacity": rate * record_bytes / _load.CAPACITY_BYTES_PER_SECOND,
        "accepted_records_per_second": load.put / load.offered_seconds,
        "accepted_fraction_of_capacity": load.put_bytes
        / load.offered_seconds
        / _load.CAPACITY_BYTES_PER_SECOND,
        "seconds_in_put_record": load.put_seconds,
        "records_put": load.put,
        "offered_seconds": load.offered_seconds,
        "offer_ended_late_by": ended_at - end,
        "drain_seconds": drain_seconds,
        "delivered_bytes": delivered,
        "most_bytes_acceptable": most,
        "delivered_fraction": delivered / most,
        "steady_window": [warmup, seconds],
        "steady_delivered_bytes": steady,
        "steady_fraction": steady / steady_capacity,
        "all_kinesis_bytes_including_drain": everything,
        "drain_fraction": (everything - delivered) / capacity / drain_seconds
        if drain_seconds > 0
        else None,
        "put_requests": fake.put_requests,
        "failed_requests": fake.failed_requests,
        "kinesis_records_sent": fake.entries,
        "kinesis_records_throttled": fake.throttled,
        "kinesis_records_failed_otherwise": fake.other_failures,
        "throttled_fraction": fake.throttled / fake.entries if fake.entries else 0.0,
        "delivery": delivery.__dict__,
        "producer_retries": sum(s.retries for s in statistics.streams),
    }


def run(quick: bool = False, http: bool = False) -> ScenarioResult:
    seconds = QUICK_SECONDS if quick else SECONDS
    warmup = QUICK_WARMUP if quick else WARMUP
    result = ScenarioResult("saturation")
    details = anyio.run(_run, seconds, warmup, http)
    result.details = {"http": http, "seconds": seconds, **details}
    delivery = details["delivery"]
    assert isinstance(delivery, dict)
    name = "saturation/http" if http else "saturation"
    delivered = float(details["delivered_fraction"])
    steady = float(details["steady_fraction"])
    throttled = float(details["throttled_fraction"])
    expired = delivery["failed_by_code"].get("Expired", 0)
    other_failed = sum(delivery["failed_by_code"].values()) - expired
    offered = float(details["offered_fraction_of_capacity"])
    accepted = float(details["accepted_fraction_of_capacity"])
    mib = 1024 * 1024
    result.rows += [
        Row(
            name,
            f"{details['delivered_bytes'] / mib:.1f} MiB delivered in {seconds:g} s, of "
            f"{details['most_bytes_acceptable'] / mib:g} MiB acceptable "
            f"({seconds:g} s × {_load.CAPACITY_BYTES_PER_SECOND / mib:g} MiB/s + 1 s burst); "
            f"offered {offered:.2f}×, accepted {accepted:.2f}× capacity",
            f"≥ {TARGET_DELIVERED:.0%} of byte capacity",
            delivered,
            "of capacity",
            delivered >= TARGET_DELIVERED,
        ),
        Row(
            name,
            f"steady state (s {warmup:g}–{seconds:g}): "
            f"{details['steady_delivered_bytes'] / mib / (seconds - warmup):.3f} MiB/s",
            "info",
            steady,
            "of capacity",
        ),
        Row(
            name,
            f"{details['kinesis_records_throttled']} of {details['kinesis_records_sent']} "
            f"Kinesis records throttled ({details['put_requests']} requests)",
            f"≤ {TARGET_THROTTLED:.1%} throttled",
            throttled,
            "throttled",
            throttled <= TARGET_THROTTLED,
        ),
        Row(
            name,
            f"{details['records_put']:,} records put: {delivery['lost']} lost, {expired} expired, "
            f"{other_failed} failed otherwise, {delivery['missing']} missing, "
            f"{delivery['duplicates']} duplicated; drained in {details['drain_seconds']:.1f} s",
            "0 lost, 0 expired",
            None,
            "",
            delivery["lost"] == 0
            and expired == 0
            and other_failed == 0
            and delivery["missing"] == 0
            and delivery["unresolved"] == 0,
        ),
    ]
    return result

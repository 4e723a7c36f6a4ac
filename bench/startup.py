"""Start-up burst: 20,000 records put at once into a new producer (SPEC §6).

A 4-shard throttling server at the real per-shard limits (exact token buckets of 1000 records/s
and 1 MiB/s per shard, one second of burst, starting full), every call of which takes 50 ms (a
``ListShards`` or ``PutRecords`` round trip within a region), receives 20,000 records of about
108 bytes (keys "key-0" … "key-4095", 100-byte data) right after the producer starts, before
the stream's first shard map has loaded, and every outcome is awaited. Twice: all at once, in
one ``put_records`` call (the target scenario), and in a loop of ``put_record`` as fast as it
takes them (which yields to the event loop every 256 puts, so the map load races the loop).
Each is done again by a producer whose map is warm (one record put and delivered first), for
comparison. Default settings otherwise.

Real time, on the event loop's clock (the fake throttles on it too): how many records are put
before the map arrives depends on how fast ``put_record`` runs, which is the race this
scenario is about. With ``--http`` the fake is served over loopback HTTP in a thread and the
producer uses its real aiobotocore client.

Figures:

* **throttled**: user records with at least one attempt refused with
  ``ProvisionedThroughputExceededException``, over all records; target ≤ 1%;
* **aggregation**: user records per Kinesis record stored, over the same with a warm map;
  target: as with a warm map (at least 95% of it);
* delivered: every record delivered, none failed.

``quick`` changes nothing: the scenario takes seconds.

What holds it back: a held record waits for the map only until its deadline (100 ms by
default). In process the map comes 50 ms after the first put; over ``--http`` the producer's
own aiobotocore client spends about 60 ms more on its first call (connection, botocore's lazy
set-up), and a tight put loop slows it further, so records put early reach their deadlines
first and go alone, unaggregated, into the stream-level limit of a stream without a map.
"""

from __future__ import annotations

import time
from typing import Any

import anyio

from aiokpl import Config, Outcome, Producer, RecordResult
from aiokpl.aggregation import deaggregate_records

from . import _load
from .report import Row, ScenarioResult

RECORDS = 20_000
DATA_SIZE = 100
LATENCY = 0.05
TARGET_THROTTLED = 0.01
TARGET_AGGREGATION = 0.95


async def _burst(http: bool, warm: bool, at_once: bool) -> dict[str, Any]:
    fake = _load.throttling_server()
    fake.latency = LATENCY
    config = Config(region="us-east-1")
    keys = [f"key-{i}" for i in range(_load.KEYS)]
    filler = b"x" * (DATA_SIZE - 8)
    records = [
        (keys[index % _load.KEYS], _load.record_data(index, filler)) for index in range(RECORDS)
    ]
    outcomes: list[Outcome[RecordResult]] = []
    async with _load.producer_on(fake, config, http) as producer:
        if warm:
            await _load.warm_up(producer)
        stored_before = len(fake.stored_records(_load.STREAM))
        requests_before = fake.put_requests
        entries_before = fake.entries
        throttled_before = fake.throttled
        started = time.perf_counter()
        if at_once:
            outcomes = await producer.put_records(stream=_load.STREAM, records=records)
        else:
            put = producer.put_record
            for key, data in records:
                outcomes.append(await put(stream=_load.STREAM, partition_key=key, data=data))
        put_seconds = time.perf_counter() - started
        waiting = _waiting_for_map(producer)
        results = [await outcome for outcome in outcomes]
        resolved_seconds = time.perf_counter() - started
    stored = fake.stored_records(_load.STREAM)[stored_before:]
    user_records = len(
        deaggregate_records([{"Data": r.data, "PartitionKey": r.partition_key} for r in stored])
    )
    throttled = sum(
        any(attempt.error_code == _load.THROTTLED for attempt in result.attempts)
        for result in results
    )
    return {
        "warm_map": warm,
        "put_records_at_once": at_once,
        "records": RECORDS,
        "put_seconds": put_seconds,
        "resolved_seconds": resolved_seconds,
        "waiting_for_shard_map_after_puts": waiting,
        "records_throttled": throttled,
        "throttled_fraction": throttled / RECORDS,
        "succeeded": sum(result.success for result in results),
        "failed": sum(not result.success for result in results),
        "kinesis_records_stored": len(stored),
        "user_records_stored": user_records,
        "user_records_per_kinesis_record": user_records / len(stored) if stored else 0.0,
        "put_requests": fake.put_requests - requests_before,
        "kinesis_records_sent": fake.entries - entries_before,
        "kinesis_records_throttled": fake.throttled - throttled_before,
    }


def _waiting_for_map(producer: Producer) -> int | None:
    # StreamStatistics.waiting_for_shard_map: absent before the start-up hold existed.
    streams = producer.statistics().streams
    values = [getattr(stream, "waiting_for_shard_map", None) for stream in streams]
    return None if None in values else sum(v for v in values if v is not None)


async def _run(http: bool) -> dict[str, Any]:
    return {
        "at_once": {
            "cold": await _burst(http, warm=False, at_once=True),
            "warm": await _burst(http, warm=True, at_once=True),
        },
        "loop": {
            "cold": await _burst(http, warm=False, at_once=False),
            "warm": await _burst(http, warm=True, at_once=False),
        },
    }


def _rows(name: str, how: str, cold: dict[str, Any], warm: dict[str, Any]) -> list[Row]:
    throttled = float(cold["throttled_fraction"])
    cold_ratio = float(cold["user_records_per_kinesis_record"])
    warm_ratio = float(warm["user_records_per_kinesis_record"])
    aggregation = cold_ratio / warm_ratio if warm_ratio else 0.0
    return [
        Row(
            name,
            f"{how}: {cold['records_throttled']:,} of {RECORDS:,} records saw a throttle "
            f"({cold['kinesis_records_throttled']:,} of {cold['kinesis_records_sent']:,} "
            f"Kinesis records throttled, {cold['put_requests']:,} requests; warm map: "
            f"{warm['records_throttled']:,} records, {warm['put_requests']:,} requests)",
            f"≤ {TARGET_THROTTLED:.0%} of records",
            throttled,
            "of records",
            throttled <= TARGET_THROTTLED,
        ),
        Row(
            name,
            f"{how}: {cold_ratio:.1f} user records per Kinesis record (warm map: {warm_ratio:.1f})",
            f"as with a warm map (≥ {TARGET_AGGREGATION:.0%})",
            aggregation,
            "of warm",
            aggregation >= TARGET_AGGREGATION,
        ),
        Row(
            name,
            f"{how}: {cold['succeeded']:,} delivered, {cold['failed']:,} failed; all resolved "
            f"{cold['resolved_seconds']:.2f} s after the first put (warm map: "
            f"{warm['resolved_seconds']:.2f} s)",
            "all delivered",
            None,
            "",
            cold["failed"] == 0 and warm["failed"] == 0,
        ),
    ]


def run(quick: bool = False, http: bool = False) -> ScenarioResult:
    result = ScenarioResult("startup")
    details = anyio.run(_run, http)
    result.details = {"http": http, "latency_seconds": LATENCY, **details}
    name = "startup/http" if http else "startup"
    at_once, loop = details["at_once"], details["loop"]
    result.rows += _rows(name, "put_records at once", at_once["cold"], at_once["warm"])
    result.rows += _rows(name, "put_record loop", loop["cold"], loop["warm"])
    return result

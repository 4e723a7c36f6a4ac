"""Isolation: a healthy stream's latency beside a stream whose every request fails, or hangs.

Two streams on one producer with default settings (``max_connections`` = 24,
``record_max_buffered_time_ms`` = 100) except ``record_ttl_ms`` = 10 000: the healthy one is the
4-shard throttling stream of the latency scenario, offered half its byte capacity (user records
of about 1008 bytes); the failing one gets the same load, and every ``PutRecords`` to it fails
with HTTP 500 ``InternalFailure`` for the whole run (as ``FakeKinesis.fail_requests(10**9,
stream=...)`` would; done by a subclass here, so that this file measures older versions too),
and its records expire at their TTL after backing off. Each healthy record's latency runs from
just before its ``put_record`` to its outcome's done-callback; SPEC §6 holds its p99 to the
buffered time + 50 ms.

The whole real pipeline runs, on a virtual clock (trio's ``MockClock`` with
``autojump_threshold=0``): time moves only when every task waits, so the figures are exact and
repeatable, and 20 virtual seconds take a few real ones. With ``--http`` the fake is served over
loopback HTTP instead and the producer uses its aiobotocore client, on asyncio's real clock
(shorter, and noisy as real time is).

The *hung* variant is the same, except that every ``PutRecords`` to the second stream is
answered 10 s late (longer than ``request_timeout_ms``, 6 s: every one of them times out on the
producer's side). In process it runs on the virtual clock; with ``--http`` it runs over loopback
HTTP on both backends (asyncio with aiohttp, trio with httpx), as a deployment meets a stream
that hangs: ``Config`` at its defaults but for ``record_ttl_ms``, so ``max_connections`` is 24.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import trio.testing

from aiokpl import Config, Outcome, RecordResult
from aiokpl._backend import current_backend
from aiokpl._kinesis import client_error

from . import _load
from .report import Row, ScenarioResult

SECONDS = 20.0
QUICK_SECONDS = 8.0
HTTP_SECONDS = 8.0
HTTP_QUICK_SECONDS = 4.0
OFFERED_FRACTION = 0.5
BUFFERED_MS = 100
TTL_MS = 10_000
TARGET_P99_EXCESS = 0.050
FAILING = "failing"
HUNG = "hung"
HANG_SECONDS = 10.0
HUNG_SECONDS = 20.0
HUNG_QUICK_SECONDS = 8.0


class _FailingKinesis(_load.CountingKinesis):
    """The throttling server, plus a stream ``FAILING`` whose every ``PutRecords`` fails."""

    def __init__(self) -> None:
        super().__init__()
        self.failing_calls = 0

    async def put_records(
        self,
        *,
        Records: Sequence[Mapping[str, Any]],
        StreamName: str | None = None,
        StreamARN: str | None = None,
        StreamId: str | None = None,
        DryRun: bool | None = None,
    ) -> dict[str, Any]:
        if StreamName == FAILING:
            self.failing_calls += 1
            await anyio.lowlevel.checkpoint()  # as every call of the fake, before it answers
            raise client_error(
                "InternalFailure", "Internal service failure.", "PutRecords", http_status=500
            )
        return await super().put_records(
            Records=Records,
            StreamName=StreamName,
            StreamARN=StreamARN,
            StreamId=StreamId,
            DryRun=DryRun,
        )


class _HungKinesis(_load.CountingKinesis):
    """The throttling server, plus a stream ``HUNG`` whose every ``PutRecords`` is answered
    ``HANG_SECONDS`` late (stored then, if the caller still waits; otherwise never)."""

    def __init__(self) -> None:
        super().__init__()
        self.hung_calls = 0

    async def put_records(
        self,
        *,
        Records: Sequence[Mapping[str, Any]],
        StreamName: str | None = None,
        StreamARN: str | None = None,
        StreamId: str | None = None,
        DryRun: bool | None = None,
    ) -> dict[str, Any]:
        if StreamName == HUNG:
            self.hung_calls += 1
            await anyio.sleep(HANG_SECONDS)
        return await super().put_records(
            Records=Records,
            StreamName=StreamName,
            StreamARN=StreamARN,
            StreamId=StreamId,
            DryRun=DryRun,
        )


async def _resolved(outcomes: list[Outcome[RecordResult]], limit: float) -> None:
    """Wait (at most ``limit`` seconds) until every one of ``outcomes`` is resolved."""
    with anyio.move_on_after(limit):
        for outcome in outcomes:
            await outcome.wait()


async def _run(seconds: float, http: bool, hung: bool = False) -> dict[str, Any]:
    fake: _FailingKinesis | _HungKinesis = _HungKinesis() if hung else _FailingKinesis()
    other = HUNG if hung else FAILING
    fake.add_stream(
        _load.STREAM,
        shard_count=_load.SHARDS,
        throttle=True,
        records_per_second=_load.RECORDS_PER_SECOND_PER_SHARD,
        bytes_per_second=_load.BYTES_PER_SECOND_PER_SHARD,
        burst_seconds=_load.BURST_SECONDS,
    )
    fake.add_stream(other, shard_count=_load.SHARDS)
    config = Config(
        region="us-east-1", record_max_buffered_time_ms=BUFFERED_MS, record_ttl_ms=TTL_MS
    )
    rate = OFFERED_FRACTION * _load.CAPACITY_BYTES_PER_SECOND / _load.MEAN_RECORD_BYTES
    started = time.perf_counter()
    async with _load.producer_on(fake, config, http) as producer:
        await _load.warm_up(producer)
        load = await _load.offer(producer, rate, seconds, clock=anyio.current_time, mirror_to=other)
        failing = load.mirrored
        # The healthy records first; the failing ones resolve at their TTL, on exit.
        await _resolved(load.outcomes, TTL_MS / 1000 + 30)
        statistics = producer.statistics()
        # Requests given up for another stream (a counter of the sender's, where it has one).
        preempted = getattr(getattr(producer._runtime, "sender", None), "requests_preempted", None)
    real_seconds = time.perf_counter() - started
    delivery = _load.match(fake, load)
    latencies = sorted(
        done - put
        for put, done, outcome in zip(load.put_times, load.done_times, load.outcomes, strict=True)
        if done and outcome.result().success
    )
    # The worst healthy latency in each second of the load: where the slow records were.
    worst_by_second: dict[int, float] = {}
    if load.put_times:
        origin = load.put_times[0]
        for put, done in zip(load.put_times, load.done_times, strict=True):
            if done:
                second = int(put - origin)
                worst_by_second[second] = max(worst_by_second.get(second, 0.0), done - put)
    failing_codes: dict[str, int] = {}
    for outcome in failing:
        code = outcome.result().error_code if outcome.done() else "unresolved"
        failing_codes[str(code)] = failing_codes.get(str(code), 0) + 1
    return {
        "buffered_ms": BUFFERED_MS,
        "record_ttl_ms": TTL_MS,
        "max_connections": config.max_connections,
        "clock": f"real clock, {current_backend()}" if http else "virtual clock, trio MockClock",
        "real_seconds": real_seconds,
        "offered_fraction_of_capacity": load.put_bytes
        / load.offered_seconds
        / _load.CAPACITY_BYTES_PER_SECOND,
        "records_put_per_stream": load.put,
        "records_timed": len(latencies),
        "percentiles_seconds": _load.percentiles(latencies),
        "worst_by_second": [round(worst_by_second[k], 4) for k in sorted(worst_by_second)],
        "failing_stream_results": failing_codes,
        "requests_sent": statistics.requests_sent,
        "requests_failed": statistics.requests_failed,
        "requests_preempted": preempted,
        "other_stream_requests": fake.hung_calls
        if isinstance(fake, _HungKinesis)
        else fake.failing_calls,
        "delivery": delivery.__dict__,
    }


def _row(name: str, details: dict[str, Any], beside: str) -> Row:
    percentiles = details["percentiles_seconds"]
    delivery = details["delivery"]
    assert isinstance(percentiles, dict)
    assert isinstance(delivery, dict)
    limit = BUFFERED_MS / 1000 + TARGET_P99_EXCESS
    p50, p99 = percentiles["p50"], percentiles["p99"]
    failed = sum(delivery["failed_by_code"].values())
    return Row(
        name,
        f"healthy p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
        f"max {percentiles['max'] * 1000:.1f} ms (buffered time {BUFFERED_MS} ms; "
        f"beside {beside}; {details['records_timed']:,} records, {details['clock']})",
        f"p99 ≤ buffered + {TARGET_P99_EXCESS * 1000:g} ms = {limit * 1000:g} ms",
        p99 / limit,
        "of limit",
        p99 <= limit and failed == 0 and delivery["lost"] == 0,
    )


def _virtual(seconds: float, hung: bool) -> dict[str, Any]:
    clock = trio.testing.MockClock(autojump_threshold=0)
    details: dict[str, Any] = anyio.run(
        _run, seconds, False, hung, backend="trio", backend_options={"clock": clock}
    )
    return details


def run(quick: bool = False, http: bool = False) -> ScenarioResult:
    result = ScenarioResult("isolation")
    failing_beside = "a stream failing every request"
    hung_beside = f"a stream answering every request {HANG_SECONDS:g} s late"
    hung_seconds = HUNG_QUICK_SECONDS if quick else HUNG_SECONDS
    if http:
        seconds = HTTP_QUICK_SECONDS if quick else HTTP_SECONDS
        details = anyio.run(_run, seconds, http)
        result.details = {"http": http, "seconds": seconds, **details}
        result.rows.append(_row("isolation/http", details, failing_beside))
        # The same on trio (httpx): what that stack achieves with no stream hanging.
        failing = anyio.run(_run, seconds, http, backend="trio")
        result.details["failing_trio"] = {"seconds": seconds, **failing}
        result.rows.append(_row("isolation/http/trio", failing, failing_beside))
        # A hung stream over HTTP, on both backends (aiohttp under asyncio, httpx under trio).
        for backend in ("asyncio", "trio"):
            hung = anyio.run(_run, hung_seconds, http, True, backend=backend)
            result.details[f"hung_{backend}"] = {"seconds": hung_seconds, **hung}
            result.rows.append(_row(f"isolation/hung/http/{backend}", hung, hung_beside))
        return result
    seconds = QUICK_SECONDS if quick else SECONDS
    details = _virtual(seconds, False)
    result.details = {"http": http, "seconds": seconds, **details}
    result.rows.append(_row("isolation", details, failing_beside))
    hung = _virtual(hung_seconds, True)
    result.details["hung"] = {"seconds": hung_seconds, **hung}
    result.rows.append(_row("isolation/hung", hung, hung_beside))
    return result

"""Chaos: the producer's invariants under mixes of faults, against the in-process fake.

Every mix runs on asyncio and trio under virtual time, and asserts the same invariants:

* every outcome resolves exactly once;
* every success is in the stream: read back, deaggregated, matched by partition key and data,
  on the shard its result names (and inside that shard's hash-key range);
* every failure has an expected code, and its attempt history ends with that code;
* outstanding records and bytes never exceed their bounds;
* the producer exits within the TTL (plus one request);
* duplicates occur only for records one of whose requests outlived its timeout (the service
  stored them, the answer came too late, the producer retried: at-least-once delivery).

Every random choice of a run is drawn from its test's seed: the fake's faults, the network's,
the partition keys, and the producer's own backoff jitter (``Producer(jitter_source=...)``). Under
the virtual clock a seed replays exactly, so a failing seed can be rerun and debugged;
``test_a_seed_replays_exactly`` checks that it does.

With ``Config(ordering="shard")`` the same mixes also assert order (``order_violations``):
every partition key's records, and without resharding every shard's, are in the stream in
put order, as the results' sequence numbers say and as a consumer reading like the KCL sees
them. The same check finds reordering in the default mode under the same faults, so it can
fail.
"""

from __future__ import annotations

import functools
import random
import re
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Generic, TypeVar

import anyio
import pytest

from aiokpl import Config, Outcome, Producer, RecordResult
from aiokpl._core.decoder import decode, is_aggregated
from aiokpl._core.hashing import hash_key_of
from aiokpl._kinesis import KinesisClient
from aiokpl.testing import FakeKinesis, FaultPlan
from conftest import virtual_backend

pytestmark = pytest.mark.anyio

TIMEOUT_S = 1.0
# "request timed out after 1 s" (the sender's own limit) or botocore's "Read timeout on ...".
TIMED_OUT = re.compile(r"timed out|read timeout", re.IGNORECASE)
TTL_S = 30.0


ClientT = TypeVar("ClientT", bound=KinesisClient)


class ChaosClient:
    """FakeKinesis behind an unreliable network: resets, and answers that come too late."""

    def __init__(
        self, fake: FakeKinesis, *, reset_rate: float = 0.0, slow_rate: float = 0.0, seed: int = 1
    ) -> None:
        self.fake = fake
        self.reset_rate = reset_rate
        self.slow_rate = slow_rate
        self.rng = random.Random(seed)
        self.resets = 0
        self.slow = 0

    async def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        return await self.fake.list_shards(**kwargs)

    async def describe_stream(self, **kwargs: Any) -> dict[str, Any]:
        return await self.fake.describe_stream(**kwargs)

    async def describe_stream_summary(self, **kwargs: Any) -> dict[str, Any]:
        return await self.fake.describe_stream_summary(**kwargs)

    async def put_records(self, **kwargs: Any) -> dict[str, Any]:
        if self.rng.random() < self.reset_rate:
            self.resets += 1
            await anyio.sleep(0.01)
            raise ConnectionResetError("connection reset by peer (chaos)")
        response = await self.fake.put_records(**kwargs)
        if self.rng.random() < self.slow_rate:
            # Stored, but the answer arrives after the producer gave up on the request.
            self.slow += 1
            await anyio.sleep(TIMEOUT_S * 2)
        return response


class InFlightCheck(Generic[ClientT]):
    """A client wrapper that watches, per shard the entries will land on (the open shard
    owning their hash key when the request is sent), how many requests are in flight at once
    and how many entries one request carries."""

    def __init__(self, client: ClientT, fake: FakeKinesis) -> None:
        self.client = client
        self.fake = fake
        self.in_flight: Counter[str] = Counter()
        self.most_in_flight = 0  # requests for one shard at once
        self.most_entries = 0  # entries for one shard in one request

    async def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        return await self.client.list_shards(**kwargs)

    async def describe_stream(self, **kwargs: Any) -> dict[str, Any]:
        return await self.client.describe_stream(**kwargs)

    async def describe_stream_summary(self, **kwargs: Any) -> dict[str, Any]:
        return await self.client.describe_stream_summary(**kwargs)

    async def put_records(self, **kwargs: Any) -> dict[str, Any]:
        open_shards = [shard for shard in self.fake.shards("s") if shard.is_open]
        targets: Counter[str] = Counter()
        for entry in kwargs["Records"]:
            ehk = entry.get("ExplicitHashKey")
            hash_key = int(ehk) if ehk is not None else hash_key_of(entry["PartitionKey"].encode())
            targets.update(shard.shard_id for shard in open_shards if hash_key in shard)
        self.most_entries = max(self.most_entries, *targets.values())
        self.in_flight.update(targets.keys())
        self.most_in_flight = max(self.most_in_flight, *self.in_flight.values())
        try:
            return await self.client.put_records(**kwargs)
        finally:
            self.in_flight.subtract(targets.keys())


@dataclass
class Run:
    outcomes: list[tuple[str, bytes, Outcome[RecordResult]]] = field(default_factory=list)
    resolutions: Counter[int] = field(default_factory=Counter)
    peak_records: int = 0
    peak_bytes: int = 0
    exit_after_last_put: float = 0.0


async def produce(
    client: KinesisClient | None,
    config: Config,
    *,
    count: int,
    size: int,
    per_tick: int,
    tick: float = 0.01,
    during: Callable[[int], Awaitable[None]] | None = None,
    seed: int = 5,
    jitter: random.Random | None = None,
) -> Run:
    """Put ``count`` records, ``per_tick`` every ``tick`` seconds, calling ``during(i)`` too.

    ``seed`` draws the partition keys and seeds the producer's jitter (unless ``jitter`` is
    given).
    """
    run = Run()
    rng = random.Random(seed)
    jitter_source = random.Random(seed) if jitter is None else jitter

    def resolved(i: int, _: Outcome[RecordResult]) -> None:
        run.resolutions.update([i])

    async with Producer(config, client=client, jitter_source=jitter_source) as producer:

        async def watch() -> None:
            while True:
                run.peak_records = max(run.peak_records, producer.outstanding_records)
                run.peak_bytes = max(run.peak_bytes, producer.outstanding_bytes)
                await anyio.sleep(0.005)

        async with anyio.create_task_group() as watchers:
            watchers.start_soon(watch)
            for i in range(count):
                key = f"key-{rng.randrange(500)}"
                data = b"%08d" % i + b"x" * (size - 8)
                outcome = await producer.put_record(stream="s", partition_key=key, data=data)
                outcome.add_done_callback(functools.partial(resolved, i))
                run.outcomes.append((key, data, outcome))
                run.peak_records = max(run.peak_records, producer.outstanding_records)
                run.peak_bytes = max(run.peak_bytes, producer.outstanding_bytes)
                if during is not None:
                    await during(i)
                if i % per_tick == per_tick - 1:
                    await anyio.sleep(tick)
            last_put = anyio.current_time()
            watchers.cancel_scope.cancel()
    run.exit_after_last_put = anyio.current_time() - last_put
    return run


def delivered_on_range(fake: FakeKinesis, stream: str) -> Counter[tuple[str, bytes, str]]:
    """(key, data, shard) of each stored user record a KCL consumer reads.

    The KCL drops a whole aggregate as soon as one of its user records is outside the range
    of its shard (one that landed on a split child): none of its copies is delivered.
    """
    shards = {shard.shard_id: shard for shard in fake.shards(stream)}
    found: Counter[tuple[str, bytes, str]] = Counter()
    for stored in fake.stored_records(stream):
        assert stored.partition_key is not None  # every record here is put with a key
        records = (
            [(r.partition_key, r.data) for r in decode(stored.data)]
            if is_aggregated(stored.data)
            else [(stored.partition_key, stored.data)]
        )
        shard = shards[stored.shard_id]
        if all(hash_key_of(key.encode()) in shard for key, _ in records):
            for key, data in records:
                found[(key, data, stored.shard_id)] += 1
    return found


def check_invariants(
    run: Run,
    fake: FakeKinesis,
    config: Config,
    *,
    allowed_failures: set[str],
    stream_exists: bool = True,
) -> Counter[str]:
    # Every outcome resolved exactly once.
    assert len(run.resolutions) == len(run.outcomes)
    assert set(run.resolutions.values()) == {1}
    # Bounds held.
    assert run.peak_records <= config.max_outstanding_records
    assert run.peak_bytes <= config.max_outstanding_bytes
    # Exit within the TTL plus one request.
    assert run.exit_after_last_put <= TTL_S + TIMEOUT_S + 1
    failures: Counter[str] = Counter()
    delivered = delivered_on_range(fake, "s") if stream_exists else Counter()
    for key, data, outcome in run.outcomes:
        result = outcome.result()
        assert result.attempts
        for before, after in zip(result.attempts, result.attempts[1:], strict=False):
            assert after.started_at >= before.ended_at  # a history, in order
        if result.success and stream_exists:
            assert result.shard_id is not None
            copies = delivered[(key, data, result.shard_id)]
            assert copies >= 1, f"{key} reported delivered to {result.shard_id} but not there"
            if copies > 1:
                # Only a request that outlived its timeout may have stored a record twice.
                assert any(
                    a.error_code == "Internal" and TIMED_OUT.search(a.error_message or "")
                    for a in result.attempts
                ), result
            assert result.attempts[-1].success
        elif result.success:
            assert result.attempts[-1].success  # delivered before the stream was deleted
        else:
            assert result.error_code in allowed_failures, result
            assert result.attempts[-1].error_code == result.error_code
            failures[result.error_code or ""] += 1
            uncertain = result.outcome_unknown
            # Unknown exactly when an attempt was sent and never properly answered.
            assert uncertain == any(
                a.error_code in ("Internal", "RecordCountMismatch") for a in result.attempts
            ), result
            if stream_exists and not uncertain:
                # A failure is a failure: not in the stream, unless an answer was lost.
                assert not any(k == key and d == data for k, d, _ in delivered), result
    return failures


def order_violations(run: Run, fake: FakeKinesis, *, per_shard: bool) -> list[str]:
    """Where the stream's order differs from put order; empty when it does not.

    Checked per partition key, and with ``per_shard`` per shard too (not across resharding:
    records of two merged parents, or of siblings, have no order between them). Two views:

    * the results: a key's (a shard's) delivered records, in put order, have non-decreasing
      sequence numbers (equal ones share an aggregate, whose records are in put order);
    * a consumer's, reading like the KCL: each shard in sequence order, a parent before its
      children (the fake numbers every shard from one counter, so this is sequence order),
      skipping copies outside their shard's hash-key range and keeping the first copy of each
      record (a duplicate after a timeout is the same record again): a key's (a shard's)
      records come in put order.
    """
    violations: list[str] = []
    by_key: defaultdict[str, list[tuple[int, int]]] = defaultdict(list)
    by_shard: defaultdict[str, list[tuple[int, int]]] = defaultdict(list)
    for index, (key, _, outcome) in enumerate(run.outcomes):
        result = outcome.result()
        if result.success:
            assert result.sequence_number is not None
            assert result.shard_id is not None
            by_key[key].append((index, int(result.sequence_number)))
            by_shard[result.shard_id].append((index, int(result.sequence_number)))
    groups = [*by_key.items(), *(by_shard.items() if per_shard else ())]
    for name, delivered in groups:
        for (before, first), (after, second) in pairwise(delivered):
            if second < first:
                violations.append(f"{name}: result of #{after} numbered before #{before}'s")
    shards = {shard.shard_id: shard for shard in fake.shards("s")}
    seen: set[int] = set()
    read_by_key: defaultdict[str, list[int]] = defaultdict(list)
    read_by_shard: defaultdict[str, list[int]] = defaultdict(list)
    for stored in fake.stored_records("s"):
        users = (
            [(r.partition_key, r.data) for r in decode(stored.data)]
            if is_aggregated(stored.data)
            else [(stored.partition_key, stored.data)]
        )
        for stored_key, data in users:
            assert stored_key is not None  # every record here is put with a key
            index = int(data[:8])
            if hash_key_of(stored_key.encode()) not in shards[stored.shard_id] or index in seen:
                continue
            seen.add(index)
            read_by_key[stored_key].append(index)
            read_by_shard[stored.shard_id].append(index)
    reads = [*read_by_key.items(), *(read_by_shard.items() if per_shard else ())]
    for name, indexes in reads:
        for before, after in pairwise(indexes):
            if after < before:
                violations.append(f"{name}: a consumer reads #{after} after #{before}")
    return violations


CONFIG = Config(
    region="us-east-1",
    request_timeout_ms=int(TIMEOUT_S * 1000),
    record_ttl_ms=int(TTL_S * 1000),
    max_outstanding_records=2_000,
    max_outstanding_bytes=4 * 1024 * 1024,
)
# Small aggregates and requests: many more requests, so request-level faults bite often.
MANY_REQUESTS = CONFIG.replace(aggregation_max_size=400, collection_max_count=4)


async def test_offered_twice_the_capacity_of_throttling_shards() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2, throttle=True)
    # 5 KB records at 800/s: 4 MB/s offered to 2 shards of 1 MiB/s each.
    run = await produce(fake, CONFIG, count=2_400, size=5_000, per_tick=8)
    failures = check_invariants(run, fake, CONFIG, allowed_failures=set())
    assert not failures
    assert run.peak_bytes > 1024 * 1024  # the back-pressure bound was actually reached


async def test_per_record_internal_failures_and_request_500s() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=4)
    fake.faults = FaultPlan(record_failure_rate=0.05, request_failure_rate=0.05, seed=7)
    run = await produce(fake, MANY_REQUESTS, count=3_000, size=100, per_tick=10, seed=7)
    assert not check_invariants(run, fake, MANY_REQUESTS, allowed_failures=set())
    retried = [o.result() for _, _, o in run.outcomes if len(o.result().attempts) > 1]
    codes = {a.error_code for r in retried for a in r.attempts if not a.success}
    assert codes == {"InternalFailure"}
    assert len(retried) > 50


async def test_connection_resets_and_answers_slower_than_the_timeout() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=4)
    client = ChaosClient(fake, reset_rate=0.02, slow_rate=0.02, seed=3)
    run = await produce(client, MANY_REQUESTS, count=3_000, size=100, per_tick=10, seed=3)
    assert not check_invariants(run, fake, MANY_REQUESTS, allowed_failures=set())
    assert fake.calls("PutRecords") > 200
    assert client.resets > 0
    assert client.slow > 0
    timed_out = [
        o.result()
        for _, _, o in run.outcomes
        if any("timed out" in (a.error_message or "") for a in o.result().attempts)
    ]
    assert timed_out  # the slow answers were given up on, and those records retried


async def test_split_and_merge_while_producing() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    half = 2**127

    async def reshard(i: int) -> None:
        if i == 1_000:
            fake.split("s", "shardId-000000000000", half // 2)
        if i == 2_000:
            fake.merge("s", "shardId-000000000002", "shardId-000000000003")

    run = await produce(fake, CONFIG, count=3_000, size=100, per_tick=10, during=reshard)
    assert not check_invariants(run, fake, CONFIG, allowed_failures=set())
    shards_used = {o.result().shard_id for _, _, o in run.outcomes}
    assert {"shardId-000000000002", "shardId-000000000003", "shardId-000000000004"} <= shards_used


async def test_stream_deleted_mid_run() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)

    async def delete(i: int) -> None:
        if i == 1_000:
            fake.remove_stream("s")

    run = await produce(fake, CONFIG, count=2_000, size=100, per_tick=10, during=delete)
    failures = check_invariants(
        run, fake, CONFIG, allowed_failures={"ResourceNotFoundException"}, stream_exists=False
    )
    assert failures["ResourceNotFoundException"] >= 900
    # Records put after the deletion fail fast: one attempt each.
    for _, _, outcome in run.outcomes[1_100:]:
        assert len(outcome.result().attempts) == 1


async def everything_at_once(
    seed: int, jitter: random.Random | None = None
) -> tuple[Run, FakeKinesis, ChaosClient]:
    """Throttling shards, per-record and request failures, resets, slow answers and a split,
    every random choice drawn from ``seed`` (the producer's jitter from ``jitter`` if given)."""
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=3, throttle=True)
    fake.faults = FaultPlan(record_failure_rate=0.05, request_failure_rate=0.05, seed=seed)
    client = ChaosClient(fake, reset_rate=0.02, slow_rate=0.02, seed=seed + 1)

    async def reshard(i: int) -> None:
        if i == 1_500:
            fake.split("s", "shardId-000000000001", 2**127)

    run = await produce(
        client,
        MANY_REQUESTS,
        count=3_000,
        size=1_000,
        per_tick=10,
        during=reshard,
        seed=seed,
        jitter=jitter,
    )
    return run, fake, client


async def test_everything_at_once() -> None:
    run, fake, client = await everything_at_once(seed=11)
    assert not check_invariants(run, fake, MANY_REQUESTS, allowed_failures=set())
    assert client.resets > 0
    assert client.slow > 0


class ListingLog:
    """FakeKinesis, noting when each shard-map refresh (a first ListShards page) was asked."""

    def __init__(self, fake: FakeKinesis) -> None:
        self.fake = fake
        self.refreshed_at: list[float] = []

    async def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        if "NextToken" not in kwargs:
            self.refreshed_at.append(anyio.current_time())
        return await self.fake.list_shards(**kwargs)

    async def describe_stream(self, **kwargs: Any) -> dict[str, Any]:
        return await self.fake.describe_stream(**kwargs)

    async def describe_stream_summary(self, **kwargs: Any) -> dict[str, Any]:
        return await self.fake.describe_stream_summary(**kwargs)

    async def put_records(self, **kwargs: Any) -> dict[str, Any]:
        return await self.fake.put_records(**kwargs)


async def test_an_on_demand_stream_resharding_every_few_seconds_under_load() -> None:
    # 1.5 MB/s for 60 s into an on-demand stream of two throttling shards (each 1 MiB/s, so
    # more than one shard takes), which splits its hottest shard every 3 s of load and merges
    # its coldest pair every third time.
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2, throttle=True, on_demand=True)
    fake.auto_reshard("s", every_seconds=3.0, merge_every=3, min_open_shards=2)
    client = ListingLog(fake)
    count = 36_000
    run = await produce(client, CONFIG, count=count, size=2_500, per_tick=6)
    # Nothing lost, nothing twice: every record succeeded and is in the stream exactly once,
    # inside the range of the shard its result names.
    assert not check_invariants(run, fake, CONFIG, allowed_failures=set())
    delivered = delivered_on_range(fake, "s")
    assert sum(delivered.values()) == count
    assert set(delivered.values()) == {1}
    # The stream resharded all along: a split closes one shard, a merge two, at one instant.
    reshards = sorted({s.closed_at for s in fake.shards("s") if s.closed_at is not None})
    assert len(reshards) >= 15
    merges = [s for s in fake.shards("s") if s.adjacent_parent_shard_id is not None]
    assert len(merges) >= 5
    # Each reshard cost one map refresh, no more: the first load, then one per reshard, each
    # before the next reshard (the map caught up with every layout the stream had).
    refreshes = client.refreshed_at
    assert len(refreshes) <= 1 + len(reshards)
    lags = []
    for reshard, following in zip(reshards, [*reshards[1:], float("inf")], strict=True):
        caught_up = [t for t in refreshes if reshard <= t < following]
        assert len(caught_up) == 1, (reshard, caught_up)
        lags.append(caught_up[0] - reshard)
    # ... within one buffered time (plus the limiter's drain) of the reshard.
    assert max(lags) <= CONFIG.record_max_buffered_time_ms / 1000 + 0.05
    # Wrong-shard retries are bounded: only the user records of aggregates predicted for a
    # split parent that fell on the other child, between the split and the refresh.
    wrong_shard = sum(
        1
        for _, _, outcome in run.outcomes
        for attempt in outcome.result().attempts
        if attempt.error_code == "Wrong Shard"
    )
    offered_per_second = 600  # 6 records every 10 ms
    buffered = CONFIG.record_max_buffered_time_ms / 1000
    assert wrong_shard <= len(reshards) * offered_per_second * buffered / 2


# (key, data, ((started_at, ended_at, error_code, shard_id) of each attempt, ...)) per record.
Timeline = list[tuple[str, bytes, tuple[tuple[float, float, str | None, str | None], ...]]]


def timeline(run: Run) -> Timeline:
    """Every record's attempts, in the order the records were put."""
    return [
        (
            key,
            data,
            tuple(
                (a.started_at, a.ended_at, a.error_code, a.shard_id)
                for a in outcome.result().attempts
            ),
        )
        for key, data, outcome in run.outcomes
    ]


def test_a_seed_replays_exactly(
    anyio_backend: tuple[str, dict[str, Any]], seed_trio_scheduler: Callable[[int], None]
) -> None:
    """The same seed, from time 0 on a new virtual clock, gives the same attempts at the same
    times with the same codes, record for record; another seed, or the same faults with other
    jitter, does not."""
    backend = anyio_backend[0]

    def replay(seed: int, jitter: random.Random | None = None) -> Timeline:
        async def scenario() -> Timeline:
            run, _, client = await everything_at_once(seed, jitter)
            assert client.resets  # every kind of fault took part
            assert client.slow
            return timeline(run)

        name, options = virtual_backend(backend)
        if name == "trio":
            seed_trio_scheduler(seed)
        return anyio.run(scenario, backend=name, backend_options=options)

    first = replay(11)
    retried = sum(len(attempts) > 1 for _, _, attempts in first)
    assert retried > 100  # backoffs whose jitter counts
    assert replay(11) == first
    # Only the producer's jitter differs: the retry times do too.
    assert replay(11, jitter=random.Random(12)) != first
    assert replay(12) != first


# --- ordering="shard": the same mixes, and the order checked -----------------------------------

ORDERED = CONFIG.replace(ordering="shard")
ORDERED_MANY_REQUESTS = MANY_REQUESTS.replace(ordering="shard")


def assert_one_at_a_time(check: InFlightCheck[Any]) -> None:
    """At most one request in flight per shard, carrying one Kinesis record for it."""
    assert check.most_in_flight == 1
    assert check.most_entries == 1


async def test_the_order_checks_find_reordering_in_the_default_mode() -> None:
    # The default mode under record failures and throttling: retried records land after later
    # ones, and requests overlap. The checks must see it, or the tests below could not fail.
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2, throttle=True)
    fake.faults = FaultPlan(record_failure_rate=0.05, request_failure_rate=0.05, seed=7)
    check = InFlightCheck(fake, fake)
    run = await produce(check, MANY_REQUESTS, count=3_000, size=1_000, per_tick=10)
    assert not check_invariants(run, fake, MANY_REQUESTS, allowed_failures=set())
    violations = order_violations(run, fake, per_shard=True)
    assert any("numbered before" in v for v in violations), violations[:5]
    assert any("a consumer reads" in v for v in violations), violations[:5]
    assert check.most_in_flight > 1
    assert check.most_entries > 1


async def test_ordered_throttling_and_record_failures() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2, throttle=True)
    fake.faults = FaultPlan(record_failure_rate=0.05, seed=7)
    # 3 MB/s offered to 2 shards of 1 MiB/s, and a producer limit above the shards' own, so
    # that the shards throttle (another writer would do the same).
    config = ORDERED_MANY_REQUESTS.replace(rate_limit_bytes_per_sec_per_shard=3 * 1024 * 1024)
    check = InFlightCheck(fake, fake)
    run = await produce(check, config, count=3_000, size=3_000, per_tick=10)
    assert not check_invariants(run, fake, config, allowed_failures=set())
    assert not order_violations(run, fake, per_shard=True)
    assert_one_at_a_time(check)
    retried = [o.result() for _, _, o in run.outcomes if len(o.result().attempts) > 1]
    codes = Counter(a.error_code for r in retried for a in r.attempts if not a.success)
    assert set(codes) == {"InternalFailure", "ProvisionedThroughputExceededException"}, codes


async def test_ordered_record_failures_and_request_500s() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=4)
    fake.faults = FaultPlan(record_failure_rate=0.05, request_failure_rate=0.05, seed=7)
    check = InFlightCheck(fake, fake)
    run = await produce(check, ORDERED_MANY_REQUESTS, count=3_000, size=100, per_tick=10)
    assert not check_invariants(run, fake, ORDERED_MANY_REQUESTS, allowed_failures=set())
    assert not order_violations(run, fake, per_shard=True)
    assert_one_at_a_time(check)
    assert len([o for _, _, o in run.outcomes if len(o.result().attempts) > 1]) > 50


async def test_ordered_raw_records_offered_twice_the_capacity() -> None:
    # Without aggregation: one user record per shard per request.
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2, throttle=True)
    fake.faults = FaultPlan(record_failure_rate=0.05, seed=8)
    # 4 MB/s offered, limited above the shards' 1 MiB/s so that they throttle.
    config = ORDERED.replace(
        aggregation_enabled=False, rate_limit_bytes_per_sec_per_shard=3 * 1024 * 1024
    )
    check = InFlightCheck(fake, fake)
    run = await produce(check, config, count=2_000, size=4_000, per_tick=10)
    assert not check_invariants(run, fake, config, allowed_failures=set())
    assert not order_violations(run, fake, per_shard=True)
    assert_one_at_a_time(check)
    attempts = [a for _, _, o in run.outcomes for a in o.result().attempts]
    assert any(a.error_code == "ProvisionedThroughputExceededException" for a in attempts)


async def test_ordered_connection_resets_and_answers_slower_than_the_timeout() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=4)
    check = InFlightCheck(ChaosClient(fake, reset_rate=0.02, slow_rate=0.02, seed=3), fake)
    run = await produce(check, ORDERED_MANY_REQUESTS, count=3_000, size=100, per_tick=10)
    assert not check_invariants(run, fake, ORDERED_MANY_REQUESTS, allowed_failures=set())
    assert not order_violations(run, fake, per_shard=True)
    assert_one_at_a_time(check)
    assert check.client.resets > 0
    assert check.client.slow > 0
    # Timed-out requests had been stored: their records, resent, are stored twice, in order.
    duplicated = [
        o.result()
        for _, _, o in run.outcomes
        if any("timed out" in (a.error_message or "") for a in o.result().attempts)
    ]
    assert duplicated
    assert len(fake.stored_records("s")) > len(
        {o.result().sequence_number for *_, o in run.outcomes}
    )


async def test_ordered_splits_and_merges_while_producing() -> None:
    # Splits and merges while lanes have backlogs (throttled shards, failing records, small
    # aggregates): a parent's records must all come before its children's, per key.
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2, throttle=True)
    fake.faults = FaultPlan(record_failure_rate=0.1, seed=9)
    half = 2**127

    async def reshard(i: int) -> None:
        if i == 600:
            fake.split("s", "shardId-000000000000", half // 2)  # children 2 and 3
        if i == 1_200:
            fake.split("s", "shardId-000000000001", half + half // 2)  # 4 and 5
        if i == 1_800:
            fake.merge("s", "shardId-000000000002", "shardId-000000000003")  # 6
        if i == 2_400:
            fake.split("s", "shardId-000000000006", half // 4)  # 7 and 8

    config = ORDERED.replace(
        rate_limit_bytes_per_sec_per_shard=3 * 1024 * 1024, aggregation_max_size=4_000
    )
    run = await produce(fake, config, count=3_000, size=1_000, per_tick=10, during=reshard)
    assert not check_invariants(run, fake, config, allowed_failures=set())
    # Not per shard, nor one request per shard: until the producer hears of a merge, the
    # lanes of both parents send, and the service puts their records in the one child. Their
    # keys differ, and each key's order holds.
    assert not order_violations(run, fake, per_shard=False)
    shards_used = {o.result().shard_id for _, _, o in run.outcomes}
    assert {f"shardId-00000000000{i}" for i in (4, 5, 7, 8)} <= shards_used


async def test_ordered_everything_at_once() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=3, throttle=True)
    fake.faults = FaultPlan(record_failure_rate=0.05, request_failure_rate=0.05, seed=11)
    check = InFlightCheck(ChaosClient(fake, reset_rate=0.02, slow_rate=0.02, seed=12), fake)

    async def reshard(i: int) -> None:
        if i == 1_500:
            fake.split("s", "shardId-000000000001", 2**127)

    config = ORDERED_MANY_REQUESTS
    run = await produce(check, config, count=3_000, size=1_000, per_tick=10, during=reshard)
    assert not check_invariants(run, fake, config, allowed_failures=set())
    assert not order_violations(run, fake, per_shard=False)
    assert_one_at_a_time(check)
    assert check.client.resets > 0
    assert check.client.slow > 0

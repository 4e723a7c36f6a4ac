"""Per-stream isolation in the sender: one stream's failures never hold back another's records.

SPEC §4.10: one stream's failures, throttling or backoff never delay another stream's records
beyond buffered time + 50 ms at p99, and backoff never holds a connection slot. Everything runs
through a real ``Producer`` and the in-process ``FakeKinesis`` under a virtual clock (see
conftest), with ``max_connections`` = 2 so that two sleeping requests would be enough to stall
every stream.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from aiokpl import Config, Producer, RecordResult
from aiokpl._core.decoder import decode, is_aggregated
from aiokpl._outcome import Outcome
from aiokpl.testing import FakeKinesis, FaultPlan
from running import running

pytestmark = pytest.mark.anyio

EPS = 1e-6
BUFFERED = 0.1
TTL = 2.0
LIMIT = BUFFERED + 0.05  # SPEC §4.10 / §6: healthy p99 ≤ buffered time + 50 ms
CONFIG = Config(
    region="us-east-1",
    record_max_buffered_time_ms=int(BUFFERED * 1000),
    record_ttl_ms=int(TTL * 1000),
    max_connections=2,
)


class Timed:
    """Records put, with their put time and (once resolved) their resolve time, by stream."""

    def __init__(self) -> None:
        self.put_at: dict[str, list[float]] = {}
        self.done_at: dict[str, list[float]] = {}
        self.outcomes: dict[str, list[Outcome[RecordResult]]] = {}

    async def put(self, producer: Producer, stream: str, index: int) -> None:
        put_at = self.put_at.setdefault(stream, [])
        done_at = self.done_at.setdefault(stream, [])
        slot = len(put_at)
        put_at.append(anyio.current_time())
        done_at.append(math.nan)
        outcome = await producer.put_record(
            stream=stream, partition_key=f"key-{index % 64}", data=b"%d" % index
        )
        outcome.add_done_callback(self._marker(done_at, slot))
        self.outcomes.setdefault(stream, []).append(outcome)

    @staticmethod
    def _marker(done_at: list[float], slot: int) -> Callable[[Outcome[RecordResult]], None]:
        def mark(_: Outcome[RecordResult]) -> None:
            done_at[slot] = anyio.current_time()

        return mark

    def latencies(self, stream: str) -> list[float]:
        return sorted(
            done - put for put, done in zip(self.put_at[stream], self.done_at[stream], strict=True)
        )

    def results(self, stream: str) -> list[RecordResult]:
        return [outcome.result() for outcome in self.outcomes[stream]]


def p99(values: list[float]) -> float:
    return values[math.ceil(0.99 * len(values)) - 1]


async def offer(producer: Producer, streams: list[str], seconds: float) -> Timed:
    """One record to each stream every 5 ms for ``seconds``, then wait for every result."""
    timed = Timed()
    index = 0
    start = anyio.current_time()
    while anyio.current_time() - start < seconds:
        for stream in streams:
            await timed.put(producer, stream, index)
        index += 1
        await anyio.sleep(0.005)
    await producer.flush()
    return timed


def assert_healthy(timed: Timed, stream: str) -> None:
    results = timed.results(stream)
    assert all(result.success for result in results)
    assert all(len(result.attempts) == 1 for result in results)
    latencies = timed.latencies(stream)
    assert p99(latencies) <= LIMIT + EPS, (p99(latencies), latencies[-1])
    assert latencies[-1] <= LIMIT + EPS, latencies[-1]


async def test_a_failing_stream_does_not_delay_a_healthy_one() -> None:
    fake = FakeKinesis()
    fake.add_stream("bad", shard_count=2)
    fake.add_stream("good", shard_count=2)
    # Every PutRecords to "bad" fails with HTTP 500, for far longer than the records' TTL.
    fake.fail_requests(10**9, stream="bad")
    async with Producer(CONFIG, client=fake) as producer:
        timed = await offer(producer, ["bad", "good"], seconds=3 * TTL)
    assert_healthy(timed, "good")
    bad = timed.results("bad")
    assert all(not result.success for result in bad)
    assert {result.error_code for result in bad} == {"Expired"}
    assert all(
        attempt.error_code == "InternalFailure"
        for result in bad
        for attempt in result.attempts[:-1]
    )
    # None failed after its TTL, as they would when a backoff ended (up to 5 s late at the
    # backoff's cap); those in the rate limiter fail at its next drain (every 25 ms). Some
    # fail before it: a retried aggregate expires with its oldest record.
    waited = zip(timed.put_at["bad"], timed.done_at["bad"], bad, strict=True)
    for put_at, done_at, result in waited:
        message = result.attempts[-1].error_message or ""
        slack = EPS if message.endswith("sender queue") else CONFIG.drain_interval_ms / 1000 + EPS
        assert done_at - put_at <= TTL + slack, message


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(("ProvisionedThroughputExceededException", 400), id="request-throttled"),
        pytest.param(("KMSThrottlingException", 400), id="kms-throttled"),
        pytest.param(("ServiceUnavailable", 503), id="unavailable"),
    ],
)
async def test_a_throttled_stream_does_not_delay_a_healthy_one(error: tuple[str, int]) -> None:
    code, status = error
    fake = FakeKinesis()
    fake.add_stream("hot", shard_count=1)
    fake.add_stream("good", shard_count=1)
    # "hot" is refused as a whole, every time: it backs off, probes, backs off longer.
    fake.fail_requests(10**9, code=code, http_status=status, stream="hot")
    async with Producer(CONFIG, client=fake) as producer:
        timed = await offer(producer, ["hot", "good"], seconds=2 * TTL)
    assert_healthy(timed, "good")
    hot = timed.results("hot")
    assert {result.error_code for result in hot} == {"Expired"}
    assert all(attempt.error_code == code for result in hot for attempt in result.attempts[:-1])


async def test_a_shard_throttling_its_records_does_not_delay_a_healthy_stream() -> None:
    fake = FakeKinesis()
    # "hot" takes 100 records/s on its one shard and is offered 200/s: half its records are
    # throttled at first and retried, and the limiter's feedback slows the shard down.
    fake.add_stream("hot", shard_count=1, throttle=True, records_per_second=100.0)
    fake.add_stream("good", shard_count=1)
    config = CONFIG.replace(record_ttl_ms=30_000, aggregation_enabled=False)
    async with Producer(config, client=fake) as producer:
        timed = await offer(producer, ["hot", "good"], seconds=3.0)
    assert_healthy(timed, "good")
    assert all(result.success for result in timed.results("hot"))


async def test_backoff_holds_no_connection_and_sends_one_probe_per_period() -> None:
    fake = FakeKinesis()
    fake.add_stream("bad", shard_count=1)
    fake.fail_requests(10**9, stream="bad")
    # One record per request, sent as soon as it is put.
    config = CONFIG.replace(aggregation_enabled=False, collection_max_count=1, record_ttl_ms=3000)
    async with Producer(config, client=fake) as producer:
        await anyio.sleep(1)  # a fresh millisecond: every record shares its stamps
        t0 = anyio.current_time()
        outcomes = [
            await producer.put_record(stream="bad", partition_key=f"k{i}", data=b"x")
            for i in range(10)
        ]
        assert fake.calls("PutRecords") == 0
        # The first two requests take both connections and fail; their backoff starts at once
        # and lasts 50 … 100 ms. Within it nothing holds a connection: the other requests
        # (and the two retried) wait in the stream's own queue.
        await anyio.sleep(0.04)
        statistics = producer.statistics()
        assert fake.calls("PutRecords") == 2
        assert statistics.requests_in_flight == 0
        assert statistics.requests_queued == 0
        assert statistics.requests_backing_off == 10
        assert "backing_off=10" in repr(running(producer).sender)
        # From then on one probe per backoff period; each failure doubles the next period
        # (jittered down to half at most): probes begin at most at 0.05, 0.15, 0.35, 0.75,
        # 1.55 s after the first failure: at most 5 in the next 1.5 s.
        await anyio.sleep(1.5)
        calls = fake.calls("PutRecords")
        assert 2 < calls <= 2 + 5
        assert producer.statistics().requests_in_flight == 0
        results = [await outcome for outcome in outcomes]
    assert all(result.error_code == "Expired" for result in results)
    # Expired at the TTL while parked, not when a backoff ended.
    assert all(
        result.attempts[-1].started_at == pytest.approx(t0 + 3.0, abs=EPS) for result in results
    )


async def test_a_probe_goes_alone_and_its_success_releases_the_backlog() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    fake.latency = 0.01
    fake.fail_requests(2, stream="s")
    config = CONFIG.replace(aggregation_enabled=False, collection_max_count=1)
    async with Producer(config, client=fake) as producer:
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"x")
            for i in range(10)
        ]
        results = [await outcome for outcome in outcomes]
        # Two failed requests, one probe, then the other nine records' requests.
        assert fake.calls("PutRecords") == 2 + 1 + 9
        statistics = producer.statistics()
        assert statistics.requests_backing_off == statistics.requests_queued == 0
    assert all(result.success for result in results)
    assert sorted(len(result.attempts) for result in results) == [1] * 8 + [2, 2]
    # After the backoff, one request goes alone; the others, two at a time, once it succeeded.
    failed_at = max(a.ended_at for result in results for a in result.attempts if not a.success)
    starts = sorted(
        result.attempts[-1].started_at
        for result in results
        if result.attempts[-1].started_at > failed_at
    )
    assert len(starts) == 10
    probe = starts[0]
    assert starts[1:] == pytest.approx([probe + 0.01 * (1 + i // 2) for i in range(9)], abs=EPS)


class SlowFor(FakeKinesis):
    """A fake that takes ``seconds`` to answer each ``PutRecords`` to one stream (longer than
    ``request_timeout_ms``: it hangs), and counts the calls under way to it at once."""

    def __init__(self, stream: str, seconds: float) -> None:
        super().__init__()
        self.slow_stream = stream
        self.seconds = seconds
        self.under_way = 0
        self.most_under_way = 0
        self.changes: list[tuple[float, int]] = []  # (time, calls under way from then on)

    def _count(self, change: int) -> None:
        self.under_way += change
        self.most_under_way = max(self.most_under_way, self.under_way)
        self.changes.append((anyio.current_time(), self.under_way))

    def most_between(self, start: float, end: float) -> int:
        """The most calls under way at once at any time in ``[start, end]``."""
        before = [count for when, count in self.changes if when < start]
        during = [count for when, count in self.changes if start <= when <= end]
        return max(before[-1:] + during, default=0)

    async def put_records(self, **kwargs: Any) -> dict[str, Any]:
        if kwargs.get("StreamName") == self.slow_stream:
            self._count(1)
            try:
                await anyio.sleep(self.seconds)
            finally:
                self._count(-1)
        return await super().put_records(**kwargs)


async def test_a_slow_streams_backlog_takes_turns_with_another_stream() -> None:
    fake = SlowFor("slow", 0.5)
    fake.add_stream("slow", shard_count=1)
    fake.add_stream("fast", shard_count=1)
    config = CONFIG.replace(aggregation_enabled=False, collection_max_count=1, record_ttl_ms=60_000)
    async with Producer(config, client=fake) as producer:
        t0 = anyio.current_time()
        slow = [
            await producer.put_record(stream="slow", partition_key=f"k{i}", data=b"x")
            for i in range(20)
        ]
        # 2 requests take both connections for 0.5 s; 18 wait. The fast stream's one request
        # is sent when the first connection frees, not after the slow stream's backlog.
        await anyio.sleep(0.01)
        fast = await (await producer.put_record(stream="fast", partition_key="k", data=b"x"))
        assert anyio.current_time() == pytest.approx(t0 + 0.5, abs=EPS)
        assert fast.success
        assert fast.attempts[0].started_at == pytest.approx(t0 + 0.5, abs=EPS)
        results = [await outcome for outcome in slow]
    assert all(result.success for result in results)
    # From then on the fast stream has work (its answer at 0.5 s, plus the active window of
    # 1 s + buffered time): the slow stream keeps to its share, one connection of two, until
    # 1.6 s; then it takes both again.
    starts = sorted(result.attempts[-1].started_at - t0 for result in results)
    expected = [0.0, 0.0, 0.5, 1.0, 1.5, *[2.0 + 0.5 * (i // 2) for i in range(15)]]
    assert starts == pytest.approx(expected, abs=EPS)


HUNG_CONFIG = CONFIG.replace(record_ttl_ms=10_000)


@pytest.mark.parametrize("max_connections", [2, 24])
@pytest.mark.parametrize(
    "answer_after",
    [
        pytest.param(3.0, id="answered-3s-late"),
        pytest.param(10.0, id="past-the-request-timeout"),
    ],
)
async def test_a_hung_stream_does_not_delay_a_healthy_one(
    answer_after: float, max_connections: int
) -> None:
    fake = SlowFor("hung", answer_after)
    fake.add_stream("hung", shard_count=2)
    fake.add_stream("good", shard_count=2)
    config = HUNG_CONFIG.replace(max_connections=max_connections)
    async with Producer(config, client=fake) as producer:
        timed = await offer(producer, ["hung", "good"], seconds=8.0)
    assert_healthy(timed, "good")
    # While the healthy stream had work, the hung stream held its share at most:
    # ceil(max_connections / 2).
    assert fake.most_between(timed.put_at["good"][0], timed.put_at["good"][-1]) == -(
        -max_connections // 2
    )
    hung = timed.results("hung")
    ttl = config.record_ttl_ms / 1000
    timeout = config.request_timeout_ms / 1000
    if answer_after < timeout:
        # Slow, not dead: a record is delivered when its answer comes, else (one connection
        # of two answering every 3 s does not carry 200 records/s) it fails at its TTL.
        assert {result.error_code for result in hung} <= {None, "Expired"}
        delivered = {
            record.data
            for stored in fake.stored_records("hung")
            for record in (decode(stored.data) if is_aggregated(stored.data) else [stored])
        }
        assert sum(result.success for result in hung) == len(delivered) > 0
        if max_connections == 24:
            assert all(result.success for result in hung)
        for put_at, done_at in zip(timed.put_at["hung"], timed.done_at["hung"], strict=True):
            assert done_at - put_at <= ttl + answer_after + EPS
    else:
        # Every request times out: the records fail at their TTL, or at the end of the request
        # they were in flight in then; each sent one says its outcome is unknown.
        assert {result.error_code for result in hung} == {"Expired"}
        assert any(result.outcome_unknown for result in hung)
        assert all(attempt.outcome_unknown for result in hung for attempt in result.attempts[:-1])
        for put_at, done_at in zip(timed.put_at["hung"], timed.done_at["hung"], strict=True):
            assert done_at - put_at <= ttl + timeout + EPS


async def test_a_lone_stream_uses_every_connection() -> None:
    fake = SlowFor("slow", 0.5)
    fake.add_stream("slow", shard_count=1)
    fake.add_stream("other", shard_count=1)
    config = CONFIG.replace(
        aggregation_enabled=False, collection_max_count=1, record_ttl_ms=60_000, max_connections=4
    )
    async with Producer(config, client=fake) as producer:
        # Another stream had work once, long enough ago: it no longer counts.
        await (await producer.put_record(stream="other", partition_key="k", data=b"x"))
        await anyio.sleep(1.2)
        t0 = anyio.current_time()
        slow = [
            await producer.put_record(stream="slow", partition_key=f"k{i}", data=b"x")
            for i in range(20)
        ]
        await anyio.sleep(0.01)
        assert producer.statistics().requests_in_flight == 4
        results = [await outcome for outcome in slow]
    assert all(result.success for result in results)
    assert fake.most_under_way == 4
    # 20 requests, 4 at a time.
    assert max(r.attempts[-1].ended_at for r in results) == pytest.approx(t0 + 2.5, abs=EPS)


@pytest.mark.parametrize(
    "joins_after",
    [
        pytest.param(2.0, id="overdue-already"),
        pytest.param(0.4, id="overdue-later"),
    ],
)
async def test_an_overdue_request_beyond_its_share_is_given_up_for_a_waiting_stream(
    joins_after: float,
) -> None:
    fake = SlowFor("hung", 3.0)
    fake.add_stream("hung", shard_count=1)
    fake.add_stream("good", shard_count=1)
    config = CONFIG.replace(aggregation_enabled=False, collection_max_count=1, record_ttl_ms=30_000)
    async with Producer(config, client=fake) as producer:
        await anyio.sleep(1)
        t0 = anyio.current_time()
        # Alone, the stream takes both connections; its requests then hang for 3 s.
        hung = [
            await producer.put_record(stream="hung", partition_key=f"k{i}", data=b"x")
            for i in range(4)
        ]
        await anyio.sleep(joins_after)
        assert fake.under_way == 2
        good = await (await producer.put_record(stream="good", partition_key="k", data=b"x"))
        # Its share is one connection now: its oldest request is given up once it is past
        # what the stream's round trips predict (1 s before any answer), not at the 6 s
        # request timeout, and the healthy stream's request takes the connection.
        assert good.success
        assert good.attempts[0].started_at == pytest.approx(t0 + max(joins_after, 1.0), abs=EPS)
        results = [await outcome for outcome in hung]
    assert running(producer).sender.requests_preempted == 1
    # The records of the request given up are retried (its outcome unknown) and delivered.
    assert all(result.success for result in results)
    given_up = [result for result in results if len(result.attempts) > 1]
    assert len(given_up) == 1
    first = given_up[0].attempts[0]
    assert first.outcome_unknown
    assert first.error_code == "Internal"
    assert "free its connection for another stream" in (first.error_message or "")
    assert first.ended_at == pytest.approx(t0 + max(joins_after, 1.0), abs=EPS)


def test_the_overdue_deadline_follows_the_round_trips() -> None:
    from aiokpl._pipeline.lane_states import Lane

    lane = Lane(object())  # type: ignore[arg-type]
    assert lane.overdue_after(1.0, 6.0) == 1.0  # before the first answer: the floor
    assert lane.overdue_after(1.0, 0.5) == 0.5  # never past the request timeout
    lane.sample(2.0)  # srtt 2, rttvar 1
    assert lane.overdue_after(1.0, 10.0) == pytest.approx(6.0)
    assert lane.overdue_after(1.0, 5.0) == 5.0
    lane.sample(2.0)  # rttvar 0.75
    assert lane.overdue_after(1.0, 10.0) == pytest.approx(2.0 + 4 * 0.75)
    for _ in range(100):
        lane.sample(0.05)  # fast answers: the floor again
    assert lane.overdue_after(1.0, 10.0) == 1.0


async def test_requests_held_behind_a_slow_probe_still_expire_at_their_ttl() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    fake.fail_requests(1, stream="s")
    config = CONFIG.replace(aggregation_enabled=False, collection_max_count=1, max_connections=1)
    async with Producer(config, client=fake) as producer:
        await anyio.sleep(1)  # a fresh millisecond: every record shares its stamps
        t0 = anyio.current_time()
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"x")
            for i in range(5)
        ]
        await anyio.sleep(0.01)  # the first request failed; the stream backs off
        assert producer.statistics().requests_backing_off == 5
        fake.latency = 5.0  # the probe hangs past the others' TTL (2 s)
        results = [await outcome for outcome in outcomes]
    probe = [result for result in results if result.success]
    expired = [result for result in results if not result.success]
    assert len(probe) == 1
    assert probe[0].attempts[-1].ended_at > t0 + 5.0
    assert len(expired) == 4
    assert all(result.error_code == "Expired" for result in expired)
    assert all(r.attempts[-1].started_at == pytest.approx(t0 + TTL, abs=EPS) for r in expired)


@pytest.mark.parametrize("missing", ["list-shards-fails", "no-such-stream"])
async def test_a_stream_without_a_map_does_not_delay_a_healthy_one(missing: str) -> None:
    fake = FakeKinesis()
    fake.add_stream("good", shard_count=2)
    if missing == "list-shards-fails":
        fake.add_stream("blind", shard_count=2)
        fake.fail_requests(10**9, operation="ListShards", stream="blind")
    async with Producer(CONFIG, client=fake) as producer:
        timed = await offer(producer, ["blind", "good"], seconds=2 * TTL)
    assert_healthy(timed, "good")
    codes = {result.error_code for result in timed.results("blind")}
    # Without a map the records go unpredicted; without a stream they fail at once.
    assert codes == ({None} if missing == "list-shards-fails" else {"ResourceNotFoundException"})


async def test_many_streams_with_faults_of_their_own_leave_nothing_behind() -> None:
    # Scripted faults count requests, and a stream sends one probe per backoff period: a few
    # failures in a row put a stream's backoff beyond the TTL, so how many records expire is
    # the script's doing. What must hold whatever the mix: every outcome resolves, every
    # success is stored, and the sender is left with nothing queued, parked or in flight.
    rng = random.Random(7)
    fake = FakeKinesis()
    fake.latency = 0.003
    fake.faults = FaultPlan(request_failure_rate=0.1, record_failure_rate=0.05, seed=3)
    streams = [f"s{i}" for i in range(5)]
    for stream in streams:
        fake.add_stream(stream, shard_count=2)
    config = CONFIG.replace(max_connections=3, record_ttl_ms=5000)
    outcomes: list[tuple[str, bytes, Outcome[RecordResult]]] = []
    async with Producer(config, client=fake) as producer:
        for step in range(600):
            if step % 50 == 0:  # now and then, one stream fails for a while
                stream = rng.choice(streams)
                fake.fail_requests(rng.randrange(1, 5), stream=stream)
                fake.raise_next(ConnectionResetError(), stream=rng.choice(streams))
            stream = rng.choice(streams)
            data = b"%d" % step
            outcome = await producer.put_record(stream=stream, partition_key=f"k{step}", data=data)
            outcomes.append((stream, data, outcome))
            await anyio.sleep(rng.choice((0.0, 0.001, 0.005, 0.02)))
        await producer.flush()
        statistics = producer.statistics()
        assert statistics.requests_in_flight == statistics.requests_queued == 0
        assert statistics.requests_backing_off == 0
    stored = {
        stream: {
            record.data
            for stored_record in fake.stored_records(stream)
            for record in (
                decode(stored_record.data) if is_aggregated(stored_record.data) else [stored_record]
            )
        }
        for stream in streams
    }
    codes = Counter(outcome.result().error_code for _, _, outcome in outcomes)
    assert set(codes) <= {None, "Expired", "InternalFailure"}, codes
    assert codes[None] > 0
    for stream, data, outcome in outcomes:
        if outcome.result().success:
            assert data in stored[stream]

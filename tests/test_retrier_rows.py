"""The retrier's table, row by row, end to end through the public API.

``tests/test_retry_policy.py`` checks the pure decisions; here every row is driven through
``Producer`` against ``FakeKinesis`` on asyncio and trio, under virtual clocks, and the attempt
history each caller sees is asserted exactly. Rows: seed 004 and SPEC §4.7.

Timing with the default config (``record_max_buffered_time_ms=100``): a record put at ``t`` on
a loaded shard map is sent at ``t + 0.1 + 0.02`` (its deadline, then the collector's grace of
min(50 ms, 20% of the buffered time)); a retried record goes back to the aggregator with the
deadline ``now + 0.05`` and then gets the grace again, so it is re-sent 70 ms after its answer.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import pytest

from aiokpl import Config, Producer, RecordResult
from aiokpl._core.decoder import decode, is_aggregated
from aiokpl._core.retry_policy import FAIL_FAST, NARROWED
from aiokpl.testing import FakeKinesis

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1")
EPS = 1e-6
THROTTLED = "ProvisionedThroughputExceededException"
HALF = 2**127  # the split point of a one-shard stream
SHARD_0 = "shardId-000000000000"
SEND = 0.1 + 0.02  # deadline + collector grace, default config
RESEND = 0.05 + 0.02  # retry deadline (buffered / 2) + collector grace


class SlowPuts(FakeKinesis):
    """A FakeKinesis whose next ``PutRecords`` calls wait first, one delay per call.

    The wait happens before the fake routes and stores anything, so a resharding done while a
    call is in flight decides where its records land.
    """

    def __init__(self) -> None:
        super().__init__()
        self.put_delays: list[float] = []

    async def put_records(self, **kwargs: Any) -> dict[str, Any]:
        if self.put_delays:
            await anyio.sleep(self.put_delays.pop(0))
        return await super().put_records(**kwargs)


async def warm_up(producer: Producer, stream: str) -> None:
    """Load the stream's shard map, so later records are predicted and aggregated."""
    outcome = await producer.put_record(stream=stream, partition_key="warm-up", data=b"")
    assert (await outcome).success  # sent at its deadline, 100 ms on: the map loaded meanwhile
    assert producer.statistics().streams[0].shard_map_state == "READY"


async def put(
    producer: Producer, data: bytes, *, key: str = "k", ehk: int | None = None
) -> RecordResult:
    outcome = await producer.put_record(
        stream="s", partition_key=key, data=data, explicit_hash_key=ehk
    )
    return await outcome


def user_records(fake: FakeKinesis, shard_id: str | None = None) -> list[tuple[str, str, bytes]]:
    """(sequence number, shard, data) of every user record stored in stream "s", deaggregated."""
    found: list[tuple[str, str, bytes]] = []
    for stored in fake.stored_records("s", shard_id):
        if is_aggregated(stored.data):
            found.extend(
                (stored.sequence_number, stored.shard_id, r.data) for r in decode(stored.data)
            )
        else:
            found.append((stored.sequence_number, stored.shard_id, stored.data))
    return found


def codes(result: RecordResult) -> list[str | None]:
    return [attempt.error_code for attempt in result.attempts]


# --- row 1: request error, throttled, fail_if_throttled -----------------------------------------


async def test_request_throttled_with_fail_if_throttled_fails_every_record_at_once() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    config = CONFIG.replace(fail_if_throttled=True)
    async with Producer(config, client=fake) as producer:
        await warm_up(producer, "s")
        calls = fake.calls("PutRecords")
        fake.fail_requests(1, code=THROTTLED, message="Rate exceeded for stream s", http_status=400)
        t0 = anyio.current_time()
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"%d" % i)
            for i in range(6)
        ]
        results = [await outcome for outcome in outcomes]
    assert fake.calls("PutRecords") == calls + 1
    for result in results:
        assert not result.success
        assert (result.error_code, result.error_message) == (
            THROTTLED,
            "Rate exceeded for stream s",
        )
        (attempt,) = result.attempts
        assert attempt.started_at == pytest.approx(t0 + SEND, abs=EPS)
        assert (attempt.shard_id, attempt.sequence_number) == (None, None)
    assert [data for _, _, data in user_records(fake)] == [b""]  # the warm-up record only


# --- row 2: request error, anything else ---------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "http_status", "fail_if_throttled"),
    [
        ("InternalFailure", 500, False),
        ("ServiceUnavailable", 503, False),
        ("InternalFailure", 500, True),  # fail_if_throttled is about throttling only
        (THROTTLED, 400, False),
    ],
)
async def test_request_error_retries_every_record(
    code: str, http_status: int, fail_if_throttled: bool
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    config = CONFIG.replace(fail_if_throttled=fail_if_throttled)
    async with Producer(config, client=fake) as producer:
        await warm_up(producer, "s")
        calls = fake.calls("PutRecords")
        fake.fail_requests(1, code=code, message="try later", http_status=http_status)
        t0 = anyio.current_time()
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"%d" % i)
            for i in range(6)
        ]
        results = [await outcome for outcome in outcomes]
    assert fake.calls("PutRecords") == calls + 2
    for result in results:
        assert result.success
        first, second = result.attempts
        assert (first.success, first.error_code, first.error_message) == (False, code, "try later")
        assert first.started_at == pytest.approx(t0 + SEND, abs=EPS)
        assert (second.success, second.shard_id, second.sequence_number) == (
            True,
            result.shard_id,
            result.sequence_number,
        )
        # Re-sent at its new deadline plus grace (70 ms), unless the stream's backoff after a
        # request-level failure (100 ms, jittered down to 50 ms at most) ends later.
        assert RESEND - EPS <= second.started_at - first.ended_at <= 0.1 + EPS
        assert second.delay == pytest.approx(second.started_at - first.ended_at, abs=EPS)
    stored = user_records(fake)
    assert sorted(data for _, _, data in stored) == sorted([b""] + [b"%d" % i for i in range(6)])


async def test_transport_error_is_internal_and_retried() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        fake.raise_next(ConnectionResetError("reset"))
        result = await put(producer, b"d")
    assert result.success
    assert codes(result) == ["Internal", None]
    first = result.attempts[0]
    assert first.error_message is not None
    assert "ConnectionResetError" in first.error_message
    assert "reset" in first.error_message
    assert [data for _, _, data in user_records(fake)] == [b"", b"d"]


# --- row 3: success on the predicted shard -----------------------------------------------------


async def test_success_on_the_predicted_shard_takes_one_attempt() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=4)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        t0 = anyio.current_time()
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"user-{i}", data=b"%d" % i)
            for i in range(40)
        ]
        results = [await outcome for outcome in outcomes]
        assert producer.statistics().streams[0].retries == 0
    where = {data: (seq, shard) for seq, shard, data in user_records(fake)}
    shards = {shard.shard_id: shard for shard in fake.shards("s")}
    for i, result in enumerate(results):
        assert result.success
        (attempt,) = result.attempts
        assert attempt.success
        assert attempt.started_at == pytest.approx(t0 + SEND, abs=EPS)
        assert (result.sequence_number, result.shard_id) == where[b"%d" % i]
        assert (attempt.sequence_number, attempt.shard_id) == where[b"%d" % i]
    assert all(shard.is_open for shard in shards.values())  # no resharding: predictions hold


# --- row 4: success on a split child, the key inside the child's range -------------------------


async def test_single_record_on_a_split_child_succeeds_and_refreshes_the_map_once() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        lower, upper = fake.split("s", SHARD_0, HALF // 2)
        list_shards = fake.calls("ListShards")
        # Still predicted for shard 0, which Kinesis closed: it lands on the lower child.
        result = await put(producer, b"a", ehk=HALF // 4)
        assert result.success
        (attempt,) = result.attempts
        assert (result.shard_id, attempt.shard_id) == (lower, lower)
        await anyio.sleep(1)  # the refresh runs in the background
        assert fake.calls("ListShards") == list_shards + 1
        stats = producer.statistics().streams[0]
        assert (stats.shard_map_state, stats.open_shards, stats.shard_map_refreshes) == (
            "READY",
            3,
            2,
        )
        assert lower not in stats.rates_by_shard
        # Now predicted for the children: aggregated per child, one attempt, no more refreshes.
        later = [
            await producer.put_record(
                stream="s", partition_key="k", data=b"%d" % i, explicit_hash_key=HALF // 4 + i
            )
            for i in range(3)
        ] + [
            await producer.put_record(
                stream="s", partition_key="k", data=b"u%d" % i, explicit_hash_key=HALF // 2 + i
            )
            for i in range(3)
        ]
        later_results = [await outcome for outcome in later]
        stats = producer.statistics().streams[0]
        assert {lower, upper} <= set(stats.rates_by_shard)  # the limiter saw the children
    assert fake.calls("ListShards") == list_shards + 1
    assert [r.shard_id for r in later_results] == [lower] * 3 + [upper] * 3
    assert all(len(r.attempts) == 1 for r in later_results)
    assert len({r.sequence_number for r in later_results}) == 2  # one aggregate per child


async def test_aggregate_on_a_split_child_succeeds_when_the_child_is_known() -> None:
    fake = SlowPuts()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        lower, upper = fake.split("s", SHARD_0, HALF)
        list_shards = fake.calls("ListShards")
        fake.put_delays.append(1.0)  # the aggregate's call: answered after the refresh
        t0 = anyio.current_time()
        aggregate = [
            await producer.put_record(
                stream="s", partition_key="k", data=b"%d" % i, explicit_hash_key=HALF // 2 + i
            )
            for i in range(3)
        ]
        await anyio.sleep(0.2)
        # A lone record in flight meanwhile lands on the upper child, answers first, and
        # starts the one refresh, which completes before the aggregate's answer.
        trigger = await put(producer, b"trigger", ehk=HALF + 5)
        assert trigger.success
        assert trigger.shard_id == upper
        assert trigger.attempts[0].started_at == pytest.approx(t0 + 0.2 + SEND, abs=EPS)
        results = [await outcome for outcome in aggregate]
        await anyio.sleep(1)
    for result in results:
        assert result.success
        (attempt,) = result.attempts
        assert attempt.shard_id == lower
        assert attempt.started_at == pytest.approx(t0 + SEND, abs=EPS)
        assert attempt.ended_at == pytest.approx(t0 + SEND + 1.0, abs=EPS)
    assert len({r.sequence_number for r in results}) == 1
    assert fake.calls("ListShards") == list_shards + 1
    assert sorted(data for _, _, data in user_records(fake, lower)) == [b"0", b"1", b"2"]


# --- row 5: success outside the actual shard's range: "Wrong Shard" ----------------------------


async def test_aggregate_record_outside_the_actual_shard_is_retried_as_wrong_shard() -> None:
    fake = SlowPuts()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        lower, upper = fake.split("s", SHARD_0, HALF)
        list_shards = fake.calls("ListShards")
        fake.put_delays.append(1.0)
        t0 = anyio.current_time()
        # One aggregate predicted for shard 0; its explicit hash key (the first record's)
        # routes it to the lower child, where the second record does not belong.
        first = await producer.put_record(
            stream="s", partition_key="k", data=b"first", explicit_hash_key=HALF // 2
        )
        second = await producer.put_record(
            stream="s", partition_key="k", data=b"second", explicit_hash_key=HALF + HALF // 2
        )
        await anyio.sleep(0.2)
        trigger = await put(producer, b"trigger", ehk=HALF + 1)  # refreshes the map meanwhile
        assert trigger.shard_id == upper
        first_result, second_result = await first, await second
        await anyio.sleep(1)
    # A KCL consumer drops the aggregate whole (the second record is outside the lower
    # child), so both records are sent again: the first to the lower child, alone.
    assert first_result.success
    first_wrong, first_right = first_result.attempts
    assert (first_wrong.error_code, first_right.shard_id) == ("Wrong Shard", lower)
    assert second_result.success
    wrong, right = second_result.attempts
    assert (wrong.success, wrong.error_code) == (False, "Wrong Shard")
    assert wrong.error_message is not None
    assert lower in wrong.error_message
    assert "a KCL consumer then drops whole" in wrong.error_message
    assert (wrong.started_at, wrong.ended_at) == (first_wrong.started_at, first_wrong.ended_at)
    assert wrong.started_at == pytest.approx(t0 + SEND, abs=EPS)
    assert (right.success, right.shard_id, second_result.shard_id) == (True, upper, upper)
    assert right.started_at == pytest.approx(wrong.ended_at + RESEND, abs=EPS)
    assert fake.calls("ListShards") == list_shards + 1
    # The aggregate stays in the lower child (a KCL consumer skips it); each record is also
    # where its result says.
    assert [(shard, data) for _, shard, data in user_records(fake, lower)] == [
        (lower, b"first"),
        (lower, b"second"),
        (lower, b"first"),
    ]
    assert user_records(fake, upper) == [
        (trigger.sequence_number, upper, b"trigger"),
        (second_result.sequence_number, upper, b"second"),
    ]


async def test_wrong_shard_when_the_actual_shard_is_not_known_yet() -> None:
    # Without a refresh before the answer, the child's range is unknown: the verdict waits for
    # the refresh this news starts. The lower child does not hold "second", so a KCL consumer
    # drops the whole aggregate there: both records are retried, predicted with the new map.
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        lower, upper = fake.split("s", SHARD_0, HALF)
        list_shards = fake.calls("ListShards")
        first = await producer.put_record(
            stream="s", partition_key="k", data=b"first", explicit_hash_key=HALF // 2
        )
        second = await producer.put_record(
            stream="s", partition_key="k", data=b"second", explicit_hash_key=HALF + HALF // 2
        )
        first_result, second_result = await first, await second
        await anyio.sleep(1)
    assert fake.calls("ListShards") == list_shards + 1
    assert codes(first_result) == ["Wrong Shard", None]
    assert first_result.shard_id == lower
    assert codes(second_result) == ["Wrong Shard", None]
    assert second_result.shard_id == upper
    wrong, delivered = second_result.attempts
    assert delivered.started_at == pytest.approx(wrong.ended_at + RESEND, abs=EPS)
    assert [data for _, _, data in user_records(fake, upper)] == [b"second"]
    # The aggregate itself stays in the lower child; the copy a KCL consumer reads of each
    # record is the one its result names.
    assert [data for _, _, data in user_records(fake, lower)] == [b"first", b"second", b"first"]


# --- row 6: record throttled ------------------------------------------------------------------


async def test_record_throttled_with_fail_if_throttled_fails_and_slows_the_shard() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG.replace(fail_if_throttled=True), client=fake) as producer:
        await warm_up(producer, "s")
        # Heard from for a second: a throttle is judged by what the shard accepted (within
        # the first second of its answers, a cut ignores so little: see AdaptiveRate).
        await anyio.sleep(1.0)
        fake.script_records([(THROTTLED, "Rate exceeded for shard shardId-000000000000")])
        t0 = anyio.current_time()
        result = await put(producer, b"d")
        assert not result.success
        (attempt,) = result.attempts
        assert (attempt.error_code, attempt.error_message) == (
            THROTTLED,
            "Rate exceeded for shard shardId-000000000000",
        )
        assert attempt.started_at == pytest.approx(t0 + SEND, abs=EPS)
        # The limiter's feedback: the shard's rates are cut to 90% of what the shard accepted
        # lately, but never more than halved (here it accepted one record: halved, x0.9) ...
        rates = producer.statistics().streams[0].rates_by_shard
        assert rates[SHARD_0] == pytest.approx((450.0, 0.45 * 1_048_576.0))
        # ... and recover: back at half in about 3 s, at the configured rate within 25 s.
        await anyio.sleep(25)
        assert (await put(producer, b"e")).success
        rates = producer.statistics().streams[0].rates_by_shard
        assert rates[SHARD_0] == (1000.0, 1_048_576.0)
    assert [data for _, _, data in user_records(fake)] == [b"", b"e"]


async def test_record_throttled_without_fail_if_throttled_is_retried() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        # Heard from for a second: a throttle is judged by what the shard accepted (within
        # the first second of its answers, a cut ignores so little: see AdaptiveRate).
        await anyio.sleep(1.0)
        fake.script_records([(THROTTLED, "Rate exceeded")])
        t0 = anyio.current_time()
        result = await put(producer, b"d")
        rates = producer.statistics().streams[0].rates_by_shard
    assert result.success
    assert codes(result) == [THROTTLED, None]
    first, second = result.attempts
    assert first.started_at == pytest.approx(t0 + SEND, abs=EPS)
    # A per-record error does not back the stream off: re-sent at deadline + grace.
    assert second.started_at == pytest.approx(first.ended_at + RESEND, abs=EPS)
    # Cut to 450/s at the answer (0.9 × the peak: 500, as it had little accepted, at most
    # halved); when the retry reached the limiter 50 ms later (its retry deadline) the rate
    # had climbed along the cubic back to the peak (in 4 × cbrt(1/2) s from the cut).
    back = 4.0 * 0.5 ** (1 / 3)
    climbed = 500.0 - 0.1 * 1000.0 / 4.0**3 * (back - 0.05) ** 3
    assert rates[SHARD_0][0] == pytest.approx(climbed)
    assert 450.0 < climbed < 500.0
    assert [data for _, _, data in user_records(fake)] == [b"", b"d"]


# --- row 7: record failed, any other code ------------------------------------------------------


@pytest.mark.parametrize("fail_if_throttled", [False, True])
async def test_record_failure_is_retried_at_half_the_buffered_time(
    fail_if_throttled: bool,
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(fail_if_throttled=fail_if_throttled)
    async with Producer(config, client=fake) as producer:
        await warm_up(producer, "s")
        fake.script_records([("InternalFailure", "Internal service failure.")])
        t0 = anyio.current_time()
        result = await put(producer, b"d")
        rates = producer.statistics().streams[0].rates_by_shard
    assert result.success
    first, second = result.attempts
    assert (first.success, first.error_code, first.error_message) == (
        False,
        "InternalFailure",
        "Internal service failure.",
    )
    assert first.started_at == pytest.approx(t0 + SEND, abs=EPS)
    assert first.delay == pytest.approx(SEND, abs=EPS)
    assert second.started_at == pytest.approx(first.ended_at + 0.05 + 0.02, abs=EPS)
    assert second.delay == pytest.approx(0.07, abs=EPS)
    assert second.success
    assert rates[SHARD_0] == (1000.0, 1_048_576.0)  # not a throttle: the rate is untouched


# --- row 8: codes no retry can fix ---------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(FAIL_FAST))
async def test_fail_fast_code_per_record_fails_only_that_record_at_once(code: str) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(aggregation_enabled=False)
    async with Producer(config, client=fake) as producer:
        await warm_up(producer, "s")
        fake.script_records([None, (code, f"{code} for this record"), None])
        t0 = anyio.current_time()
        outcomes = [
            await producer.put_record(stream="s", partition_key="k", data=bytes([i]))
            for i in range(3)
        ]
        ok_before, failed, ok_after = [await outcome for outcome in outcomes]
    assert not failed.success
    (attempt,) = failed.attempts
    assert (attempt.error_code, attempt.error_message) == (code, f"{code} for this record")
    assert attempt.started_at == pytest.approx(t0 + 0.1, abs=EPS)  # no grace without aggregation
    for result in (ok_before, ok_after):
        assert result.success
        assert len(result.attempts) == 1
    assert [data for _, _, data in user_records(fake)] == [b"", b"\x00", b"\x02"]


@pytest.mark.parametrize("code", sorted(FAIL_FAST))
async def test_fail_fast_code_for_the_request_fails_every_record_without_backoff(
    code: str,
) -> None:
    fake = FakeKinesis()
    # A request of several Kinesis records refused with a NARROWED code is split instead
    # (test_one_bad_entry_fails_alone_not_the_whole_request): here one aggregate goes alone.
    fake.add_stream("s", shard_count=1 if code in NARROWED else 2)
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        fake.fail_requests(1, code=code, message=f"{code} for this call", http_status=400)
        t0 = anyio.current_time()
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"%d" % i)
            for i in range(4)
        ]
        results = [await outcome for outcome in outcomes]
        t1 = anyio.current_time()
        # Nothing backs the stream off after an error no retry can fix.
        after = await put(producer, b"after")
    for result in results:
        assert not result.success
        (attempt,) = result.attempts
        assert (attempt.error_code, attempt.error_message) == (code, f"{code} for this call")
        assert attempt.started_at == pytest.approx(t0 + SEND, abs=EPS)
    assert after.success
    # A stream not found has its map dropped (test_recreated_stream.py): the next record goes
    # alone, unpredicted, at its deadline (no aggregation, so no grace) while the map loads.
    sent = t1 + (0.1 if code == "ResourceNotFoundException" else SEND)
    assert after.attempts[0].started_at == pytest.approx(sent, abs=EPS)
    assert [data for _, _, data in user_records(fake)] == [b"", b"after"]


# --- row 9: expiry --------------------------------------------------------------------------


async def test_record_retried_until_its_ttl_then_expired() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    async with Producer(CONFIG.replace(record_ttl_ms=500), client=fake) as producer:
        await warm_up(producer, "s")
        fake.fail_requests(1000, code="InternalFailure", message="down", http_status=500)
        t0 = anyio.current_time()
        result = await put(producer, b"d")
        calls = fake.calls("PutRecords")
        await anyio.sleep(5)
        assert fake.calls("PutRecords") == calls  # nothing sent after the expiry
    assert not result.success
    assert result.error_code == "Expired"
    *failures, expired = result.attempts
    assert len(failures) >= 2
    assert all(a.error_code == "InternalFailure" and a.error_message == "down" for a in failures)
    assert failures[0].started_at == pytest.approx(t0 + SEND, abs=EPS)
    assert all(a.started_at < t0 + 0.5 for a in failures)
    # Expired at its TTL exactly: it waited in the sender, its stream backing off, and the
    # scheduler woke it at the TTL rather than at the backoff's end.
    assert expired.started_at == expired.ended_at == pytest.approx(t0 + 0.5, abs=EPS)
    assert expired.delay == pytest.approx(expired.started_at - failures[-1].ended_at, abs=EPS)
    assert not expired.success


# --- row 10: a throttling stream, fail_if_throttled=False --------------------------------------


async def test_throttling_stream_delivers_everything_exactly_once_and_settles() -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1, throttle=True, records_per_second=100.0)
    config = CONFIG.replace(
        aggregation_enabled=False,
        rate_limit_records_per_sec_per_shard=1000.0,
        record_ttl_ms=120_000,
    )
    count = 1000
    async with Producer(config, client=fake) as producer:
        await warm_up(producer, "s")
        t0 = anyio.current_time()
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"%d" % i)
            for i in range(count)
        ]
        results = [await outcome for outcome in outcomes]
        elapsed = anyio.current_time() - t0
    assert all(result.success for result in results)
    attempts = Counter(len(result.attempts) for result in results)
    throttled = sum(1 for result in results for a in result.attempts if a.error_code == THROTTLED)
    assert all(a.error_code == THROTTLED for result in results for a in result.attempts[:-1])
    assert attempts[1] < count  # some were throttled ...
    # ... but the feedback bounds the throttled answers: here about 1.3 per record, where
    # without it (the limiter staying at 1000/s) there are about 9 per record, and up to 41
    # attempts for one record.
    assert throttled < 2 * count
    assert max(attempts) <= 10
    # Delivered at about the stream's own rate: 100 at once (its burst), then 100/s.
    assert 9.0 <= elapsed < 9.5
    stored = [data for _, _, data in user_records(fake)]
    assert sorted(stored) == sorted([b""] + [b"%d" % i for i in range(count)])  # once each


async def test_one_bad_entry_fails_alone_not_the_whole_request() -> None:
    """A request refused as a whole (here: one record over the stream's own record size
    limit, which the producer's Config allows) is split until the bad record is alone; its 40
    neighbours are delivered, and only it fails, with the service's code."""
    fake = FakeKinesis()
    fake.add_stream("s", max_record_size=1000)
    config = CONFIG.replace(aggregation_enabled=False)
    async with Producer(config, client=fake) as producer:
        outcomes = [
            await producer.put_record(
                stream="s", partition_key=f"k{i}", data=b"x" * (2000 if i == 17 else 10)
            )
            for i in range(41)
        ]
        results = [await outcome for outcome in outcomes]
    bad = results.pop(17)
    assert all(result.success for result in results)
    assert not bad.success
    assert bad.error_code == "InvalidArgumentException"
    # Halving 41 entries leaves the bad one alone after at most 6 requests.
    assert 2 <= len(bad.attempts) <= 7
    assert all(a.error_code == "InvalidArgumentException" for a in bad.attempts)
    assert len(fake.stored_records("s")) == 40


async def test_no_credentials_fails_at_once_saying_where_they_are_looked_for() -> None:
    import botocore.exceptions

    fake = FakeKinesis()
    fake.add_stream("s")
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        fake.raise_next(botocore.exceptions.NoCredentialsError())
        t0 = anyio.current_time()
        result = await put(producer, b"d")
    (attempt,) = result.attempts
    assert attempt.error_code == "NoCredentialsError"
    assert "AWS_ACCESS_KEY_ID" in (attempt.error_message or "")
    assert attempt.ended_at == pytest.approx(t0 + SEND, abs=EPS)  # no retry until the TTL


async def test_an_expired_token_is_retried_after_a_backoff_then_fails() -> None:
    fake = FakeKinesis()
    fake.add_stream("s")
    async with Producer(CONFIG, client=fake) as producer:
        await warm_up(producer, "s")
        fake.fail_requests(2, code="ExpiredTokenException", message="expired", http_status=400)
        refreshed = await put(producer, b"refreshed")
        fake.fail_requests(10, code="ExpiredTokenException", message="expired", http_status=400)
        stale = await put(producer, b"stale")
    # Credentials renewed meanwhile: the third attempt goes through.
    assert refreshed.success
    assert [a.error_code for a in refreshed.attempts] == ["ExpiredTokenException"] * 2 + [None]
    # Never renewed: three attempts, then it fails with the code, long before its TTL.
    assert not stale.success
    assert [a.error_code for a in stale.attempts] == ["ExpiredTokenException"] * 3
    assert stale.attempts[-1].ended_at - stale.attempts[0].started_at < 5.0

"""The collector on its own: synchronous, with explicit ``now``; it returns the requests to send."""

from __future__ import annotations

from aiokpl._pipeline.collector import SHARD_FLUSH_BYTES, Collector
from stages import Recorder, kinesis_record


def collector(
    *, max_count: int = 500, max_size: int = 5 * 1024 * 1024
) -> tuple[Collector, Recorder]:
    deadlines = Recorder()
    return Collector(deadlines, max_count=max_count, max_size=max_size), deadlines


def test_a_request_waits_for_its_earliest_deadline_and_goes_when_due() -> None:
    stage, deadlines = collector()
    first, second = kinesis_record(deadline=0.3), kinesis_record(deadline=0.2)
    assert stage.put(first, 0.0) == ()
    assert stage.put(second, 0.0) == ()
    assert [when for when, _ in deadlines.calls] == [0.3, 0.2]  # each one earlier
    assert stage.due(deadlines.calls[0][1], 0.25) == [first, second]  # the request, not the entry
    assert stage.due(deadlines.calls[1][1], 0.3) is None  # sent already: a stale entry
    assert stage.buffered_records == 0


def test_a_full_request_goes_at_once() -> None:
    stage, _ = collector(max_count=2)
    records = [kinesis_record() for _ in range(3)]
    assert stage.put(records[0], 0.0) == ()
    assert stage.put(records[1], 0.0) == [records[:2]]
    assert stage.put(records[2], 0.0) == ()
    assert stage.flush() == [records[2]]
    assert stage.flush() is None


def test_a_record_that_would_pass_the_size_limit_goes_in_the_next_request() -> None:
    stage, _ = collector(max_size=25)
    first, second = kinesis_record(size=20), kinesis_record(size=10)
    assert stage.put(first, 0.0) == ()
    assert stage.put(second, 0.0) == [[first]]
    assert stage.flush() == [second]


def test_a_put_can_send_two_requests_the_open_one_and_its_own() -> None:
    stage, _ = collector(max_size=SHARD_FLUSH_BYTES + 10)
    small = kinesis_record(size=20)
    assert stage.put(small, 0.0) == ()
    shard_full = kinesis_record("b", size=SHARD_FLUSH_BYTES)
    # Past the size limit: the open request goes first; then 256 KiB for one shard send the
    # record's own request at once.
    assert stage.put(shard_full, 0.0) == [[small], [shard_full]]
    assert stage.flush() is None


def test_the_records_of_one_shard_go_once_they_reach_256_kib() -> None:
    stage, _ = collector()
    half = SHARD_FLUSH_BYTES // 2
    first, other = kinesis_record("a", size=half), kinesis_record("b", size=half)
    assert stage.put(first, 0.0) == ()
    assert stage.put(other, 0.0) == ()  # another shard's bytes do not count
    last = kinesis_record("a", size=half)
    assert stage.put(last, 0.0) == [[first, other, last]]
    unpredicted = kinesis_record(None, size=SHARD_FLUSH_BYTES)
    assert stage.put(unpredicted, 0.0) == ()  # no shard, no per-shard flush


def test_the_grace_pushes_a_deadline_to_now_plus_grace_never_past_the_expiry() -> None:
    stage, deadlines = collector()
    early = kinesis_record(deadline=0.5, expires_at=30.0)
    stage.put(early, 0.5, 0.25)
    assert early.deadline == 0.75
    dying = kinesis_record(deadline=0.5, expires_at=0.625)
    stage.put(dying, 0.5, 0.25)
    assert dying.deadline == 0.625
    later = kinesis_record(deadline=1.0)
    stage.put(later, 0.5, 0.25)
    assert later.deadline == 1.0  # already past the floor: unchanged
    without = kinesis_record(deadline=0.5)
    stage.put(without, 0.5)
    assert without.deadline == 0.5
    assert [when for when, _ in deadlines.calls] == [0.75, 0.625, 0.5]

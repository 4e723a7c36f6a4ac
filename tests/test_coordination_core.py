"""The coordination math (``aiokpl._core.coordination``), with explicit numbers and times."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokpl._core.coordination import (
    REPORT_FORMAT,
    SUMMARY_FORMAT,
    CeilingAdjuster,
    MalformedError,
    Report,
    ShardLoad,
    Summarizer,
    Summary,
    decode_report,
    decode_summary,
    encode_report,
    encode_summary,
)

MAX = (1000.0, 1_048_576.0)
KEY = "events/shardId-000000000000"


def report(producer: str, sequence: int, records: float, size: float = 0.0) -> Report:
    # A saturated producer: its limit in force is what it sent.
    return Report(producer, sequence, {KEY: ShardLoad(records, size, records, size)})


def summary(version: int, records: float, size: float, producers: int) -> Summary:
    # Saturated producers: the sum of their limits is what they sent.
    load = ShardLoad(records, size, records, size, producers)
    return Summary("epoch", version, producers, {KEY: load})


def adjuster(**changes: object) -> CeilingAdjuster:
    options: dict[str, object] = {"aggregate_max": MAX, "producer_max": MAX}
    options.update(changes)
    return CeilingAdjuster(**options)  # type: ignore[arg-type]


# -- the adjustment -------------------------------------------------------------------------


def test_one_step_moves_forty_percent_toward_max_over_current_times_ceiling() -> None:
    limits = adjuster(fairness=0.0)  # the seed's formula
    limits.ceilings[KEY] = (1000.0, 1_048_576.0)
    # Four producers sent 4,000 records/s and 2 MiB/s: records scale by 1/4, bytes by 1/2.
    changed = limits.apply(summary(1, 4000.0, 2_097_152.0, 4), now=0.0)
    assert changed == {KEY: (0.6 * 1000 + 0.4 * 250, 0.6 * 1_048_576 + 0.4 * 524_288)}
    assert changed[KEY] == (700.0, 838_860.8)
    assert limits.ceiling(KEY) == (700.0, 838_860.8)


def test_smoothing_one_jumps_to_the_target() -> None:
    limits = adjuster(smoothing=1.0)
    limits.ceilings[KEY] = (500.0, 1000.0)
    assert limits.apply(summary(1, 2000.0, 4000.0, 4), now=0.0) == {KEY: (250.0, 262_144.0)}


def test_four_saturated_producers_converge_to_the_shard_limit() -> None:
    # Each producer sends exactly its ceiling; the summary sums them; all apply it.
    producers = [adjuster() for _ in range(4)]
    for limits in producers:
        limits.ceilings[KEY] = MAX
    summarizer = Summarizer("epoch", staleness=15.0, forget_after=150.0)
    aggregates = []
    for round_number in range(1, 13):
        reports = [
            Report(f"p{i}", round_number, {KEY: ShardLoad(*limits.ceiling(KEY) * 2)})
            for i, limits in enumerate(producers)
        ]
        total, expired = summarizer.summarize(reports, now=float(round_number))
        assert expired == []
        aggregates.append(total.shards[KEY].records_per_second)
        for limits in producers:
            limits.apply(total, now=float(round_number))
    # current - max shrinks by 1 - 0.4 per round: 3000, 1800, 1080, 648, …
    expected = [1000.0 + 3000.0 * 0.6**k for k in range(12)]
    assert aggregates == pytest.approx(expected, rel=1e-12)
    final = sum(limits.ceiling(KEY)[0] for limits in producers)
    assert final == pytest.approx(1000.0 + 3000.0 * 0.6**12, rel=1e-12)
    assert abs(final - 1000.0) / 1000.0 < 0.01
    # They keep equal shares.
    assert {limits.ceiling(KEY) for limits in producers} == {producers[0].ceiling(KEY)}


def test_the_ceiling_is_capped_by_the_producer_maximum() -> None:
    limits = adjuster(producer_max=(400.0, 200_000.0))
    limits.ceilings[KEY] = (300.0, 100_000.0)
    # 100 records/s in total: max/current = 10, so the target is 3,000, capped at 400.
    changed = limits.apply(summary(1, 100.0, 50_000.0, 1), now=0.0)
    assert changed == {KEY: (0.6 * 300 + 0.4 * 400, 0.6 * 100_000 + 0.4 * 200_000)}


def test_zero_traffic_keeps_the_ceiling() -> None:
    limits = adjuster(fairness=0.0)
    limits.ceilings[KEY] = (123.0, 456.0)
    assert limits.apply(summary(1, 0.0, 0.0, 0), now=0.0) == {KEY: (123.0, 456.0)}
    # Records but no bytes counted (a summary written by something else): bytes stay.
    assert limits.apply(summary(2, 246.0, 0.0, 1), now=1.0) == {
        KEY: (0.6 * 123 + 0.4 * 1000 / 246 * 123 / 1, 456.0)
    }


def test_unequal_saturated_shares_drift_toward_equal_while_the_sum_holds() -> None:
    # Two producers at 800 and 200 records/s on a 1,000 records/s shard, both saturated.
    fair = [adjuster(), adjuster()]
    seed = [adjuster(fairness=0.0), adjuster(fairness=0.0)]
    for pair in (fair, seed):
        pair[0].ceilings[KEY] = (800.0, 1e6)
        pair[1].ceilings[KEY] = (200.0, 1e6)
    for version in range(1, 21):
        for pair in (fair, seed):
            a, b = (limits.ceiling(KEY)[0] for limits in pair)
            total = Summary("e", version, 2, {KEY: ShardLoad(a + b, 1.0, a + b, 1.0, 2)})
            for limits in pair:
                limits.apply(total, now=float(version))
    a, b = (limits.ceiling(KEY)[0] for limits in fair)
    # Each round the gap shrinks by smoothing × fairness = 20%: 600 × 0.8**20 ≈ 6.9.
    assert a - b == pytest.approx(600.0 * 0.8**20)
    assert a + b == pytest.approx(1000.0)
    a, b = (limits.ceiling(KEY)[0] for limits in seed)
    assert (a, b) == pytest.approx((800.0, 200.0))


def test_the_target_is_this_producers_part_of_the_aggregate_scaled_to_the_maximum() -> None:
    limits = adjuster(fairness=0.0)
    limits.ceilings[KEY] = (600.0, 1e6)
    # It sent 300 of the 1000 records/s measured (AIMD held it there, say); the shard takes
    # 1000, so its target is 300: the ceiling comes down toward what it could send.
    changed = limits.apply(summary(1, 1000.0, 1.0, 2), now=0.0, admitted={KEY: (300.0, 0.5)})
    # (Bytes: it sent 0.5 of the 1 B/s measured, scaled to 1 MiB: half a MiB.)
    assert changed == {KEY: (0.6 * 600 + 0.4 * 300, 0.6 * 1e6 + 0.4 * 524_288)}
    # A shard it sent nothing to in that report keeps its ceiling: no evidence of its use.
    before = limits.ceiling(KEY)
    assert limits.apply(summary(2, 1000.0, 1.0, 2), now=1.0, admitted={}) == {KEY: before}


def test_targets_add_up_to_the_maximum_whatever_the_limits_did_since_the_measurement() -> None:
    """A burst of throttling measured at 2× the shard, and cut since: no undershoot.

    Four producers each sent 250 records/s into a 500 records/s shard; throttling has cut
    their limits in force to 60 since. Scaling the limit in force (what this did first) set
    targets summing to 500 / 1000 × 240 = 120, a quarter of the shard, and the ceilings fell
    below the shard's capacity for several rounds; each producer's part of the measured
    aggregate gives targets that sum to the shard exactly.
    """
    shard = (500.0, 1e9)
    producers = [adjuster(aggregate_max=shard, producer_max=shard) for _ in range(4)]
    for limits in producers:
        limits.ceilings[KEY] = shard
    measured = summary(1, 1000.0, 1000.0, 4)
    for limits in producers:
        limits.apply(measured, now=1.0, admitted={KEY: (250.0, 250.0)})
    ceilings = [limits.ceiling(KEY)[0] for limits in producers]
    assert sum(ceilings) == pytest.approx(0.6 * 2000.0 + 0.4 * 500.0)
    for version in range(2, 16):  # held by their ceilings from now on, each sends it
        sent = [limits.ceiling(KEY)[0] for limits in producers]
        total = summary(version, sum(sent), sum(sent), 4)
        for limits, rate in zip(producers, sent, strict=True):
            limits.apply(total, now=float(version), admitted={KEY: (rate, rate)})
            assert limits.ceiling(KEY)[0] >= 125.0 - 1e-9  # never below the share
    assert sum(limits.ceiling(KEY)[0] for limits in producers) == pytest.approx(500.0, rel=0.01)


def test_a_joiner_starts_from_its_share_among_the_producers_already_there() -> None:
    limits = adjuster()
    # Three producers send 1,000 records/s (the maximum): the joiner starts at 1000 / 3 and
    # the scale is 1, so that is where it stays this round.
    changed = limits.apply(summary(1, 1000.0, 1_048_576.0, 3), now=0.0)
    assert changed is not None
    assert changed.keys() == {KEY}
    assert changed[KEY] == pytest.approx((1000.0 / 3, 1_048_576.0 / 3), rel=1e-12)


def test_a_joiner_on_a_shard_with_room_starts_from_the_unused_capacity() -> None:
    limits = adjuster(fairness=0.0)
    # Two producers send 100 of 1,000 records/s: rather than half (500), the joiner may
    # start at the 900 unused, then scales by 1000 / 100 toward its maximum.
    changed = limits.apply(summary(1, 100.0, 1_048_576.0, 2), now=0.0)
    assert changed is not None
    assert changed[KEY][0] == 0.6 * 900 + 0.4 * 1000


def test_a_joiner_start_never_exceeds_the_producer_maximum() -> None:
    limits = adjuster(producer_max=(100.0, 1000.0))
    changed = limits.apply(summary(1, 1000.0, 1_048_576.0, 1), now=0.0)
    # Share 1,000 capped at 100; scale 1 keeps it.
    assert changed == {KEY: (100.0, 1000.0)}
    # A shard the summary does not list keeps the producer maximum.
    assert limits.ceiling("events/shardId-000000000009") == (100.0, 1000.0)


def test_each_summary_version_is_applied_once() -> None:
    limits = adjuster()
    limits.ceilings[KEY] = (1000.0, 1000.0)
    first = summary(7, 2000.0, 2000.0, 2)
    # Bytes: 2,000 B/s of 1 MiB allowed, so the target is 1000 × 524.288, under the cap.
    assert limits.apply(first, now=0.0) == {KEY: (800.0, 0.6 * 1000 + 0.4 * 524_288.0)}
    assert limits.apply(first, now=1.0) is None
    assert limits.ceiling(KEY)[0] == 800.0
    # A restarted summarizer (new epoch) starts its sequence again: a new version.
    restarted = Summary("other", 7, 2, {KEY: ShardLoad(2000.0, 2000.0, 2000.0, 2000.0, 2)})
    assert limits.apply(restarted, now=2.0) is not None


def test_a_summary_unchanged_for_staleness_is_stale() -> None:
    limits = adjuster(staleness=10.0)
    assert not limits.summary_stale(100.0)  # none seen yet
    limits.apply(summary(1, 10.0, 10.0, 1), now=100.0)
    assert limits.apply(summary(1, 10.0, 10.0, 1), now=109.0) is None
    assert not limits.summary_stale(109.999)
    assert limits.summary_stale(110.0)
    limits.apply(summary(2, 10.0, 10.0, 1), now=111.0)
    assert not limits.summary_stale(111.0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"aggregate_max": (0.0, 1.0)}, "aggregate_max"),
        ({"producer_max": (1.0, math.inf)}, "producer_max"),
        ({"smoothing": 0.0}, "smoothing"),
        ({"smoothing": 1.5}, "smoothing"),
        ({"fairness": -0.1}, "fairness"),
        ({"staleness": 0.0}, "staleness"),
    ],
)
def test_adjuster_rejects_bad_settings(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        adjuster(**changes)


@given(
    ceilings=st.lists(st.floats(1.0, 1000.0), min_size=1, max_size=20),
    smoothing=st.floats(0.05, 1.0),
)
def test_saturated_aggregate_error_shrinks_by_one_minus_smoothing(
    ceilings: list[float], smoothing: float
) -> None:
    # Without the cap binding, sum(new) - max == (1 - s) × (sum(old) - max).
    big = (1e12, 1e12)
    total = sum(ceilings)
    data = summary(1, total, total, len(ceilings))
    new_total = 0.0
    for ceiling in ceilings:
        limits = adjuster(producer_max=big, smoothing=smoothing)
        limits.ceilings[KEY] = (ceiling, ceiling)
        new_total += limits.apply(data, now=0.0)[KEY][0]  # type: ignore[index]
    assert new_total - 1000.0 == pytest.approx((1 - smoothing) * (total - 1000.0), abs=1e-6)


# -- the summarizer -------------------------------------------------------------------------


def test_summary_adds_rates_and_counts_producers_per_shard() -> None:
    other = "events/shardId-000000000001"
    summarizer = Summarizer("e1", staleness=15.0, forget_after=150.0)
    reports = [
        Report(
            "a",
            1,
            {KEY: ShardLoad(100.0, 1000.0, 150.0, 2e3), other: ShardLoad(5.0, 50.0, 7.0, 70.0)},
        ),
        Report(
            "b",
            1,
            {KEY: ShardLoad(200.0, 3000.0, 250.0, 4e3), other: ShardLoad(0.0, 0.0, 9.0, 90.0)},
        ),
        Report("c", 1, {}),
    ]
    result, expired = summarizer.summarize(reports, now=10.0, wall_time=1234.5)
    assert expired == []
    assert result == Summary(
        "e1",
        1,
        3,
        {
            KEY: ShardLoad(300.0, 4000.0, 400.0, 6000.0, 2),
            other: ShardLoad(5.0, 50.0, 7.0, 70.0, 1),
        },
        1234.5,
    )
    assert summarizer.summarize([], now=11.0)[0].sequence == 2


def test_a_report_whose_sequence_stops_moving_goes_stale_and_its_share_is_reclaimed() -> None:
    summarizer = Summarizer("e", staleness=3.0, forget_after=30.0)
    limits = adjuster()
    limits.ceilings[KEY] = (250.0, 1e6)
    # Four producers at 250 records/s each; "d" stops publishing after t = 1.
    for t in (0.0, 1.0):
        reports = [report(name, int(t) + 1, 250.0) for name in "abcd"]
        result, _ = summarizer.summarize(reports, now=t)
        assert result.shards[KEY] == ShardLoad(1000.0, 0.0, 1000.0, 0.0, 4)
    for t in (2.0, 3.0, 3.999):
        reports = [report(name, int(t) + 1, 250.0) for name in "abc"] + [report("d", 2, 250.0)]
        result, _ = summarizer.summarize(reports, now=t)
        assert result.producers == 4, t  # "d" last changed at t = 1: not stale before t = 4
    reports = [report(name, 5, 250.0) for name in "abc"] + [report("d", 2, 250.0)]
    result, expired = summarizer.summarize(reports, now=4.0)
    assert result.producers == 3
    assert result.shards[KEY] == ShardLoad(750.0, 0.0, 750.0, 0.0, 3)
    assert expired == []
    # The survivors scale up by 1000 / 750.
    changed = limits.apply(result, now=4.0)
    assert changed is not None
    assert changed[KEY][0] == pytest.approx(0.6 * 250 + 0.4 * 1000 / 3)
    # Long gone: listed for deletion; once deleted from the store it is forgotten.
    _, expired = summarizer.summarize([report("d", 2, 250.0)], now=31.0)
    assert expired == ["d"]
    result, expired = summarizer.summarize([], now=32.0)
    assert (result.producers, expired) == (0, [])
    # Seen again after being forgotten, it counts as new (its change time restarts).
    result, _ = summarizer.summarize([report("d", 2, 250.0)], now=33.0)
    assert result.producers == 1


def test_a_producer_listed_twice_counts_once() -> None:
    summarizer = Summarizer("e", staleness=3.0, forget_after=3.0)
    result, _ = summarizer.summarize([report("a", 1, 10.0), report("a", 1, 10.0)], now=0.0)
    assert result.shards[KEY] == ShardLoad(10.0, 0.0, 10.0, 0.0, 1)


@pytest.mark.parametrize(("staleness", "forget_after"), [(0.0, 1.0), (5.0, 4.0)])
def test_summarizer_rejects_bad_settings(staleness: float, forget_after: float) -> None:
    with pytest.raises(ValueError, match="staleness"):
        Summarizer("e", staleness=staleness, forget_after=forget_after)


# -- wire format ------------------------------------------------------------------------------


def test_report_and_summary_round_trip() -> None:
    original = Report("p-1", 42, {KEY: ShardLoad(12.5, 3000.0, 20.0, 4000.0)}, 1.7e9)
    assert decode_report(encode_report(original)) == original
    total = Summary("e", 3, 2, {KEY: ShardLoad(12.5, 3000.0, 20.0, 4000.0, 2)}, 1.7e9)
    assert decode_summary(encode_summary(total)) == total
    assert json.loads(encode_report(original))["format"] == REPORT_FORMAT


def _report_document(**changes: object) -> bytes:
    document: dict[str, object] = {
        "format": REPORT_FORMAT,
        "producer": "p",
        "sequence": 1,
        "wall_time": 0.0,
        "shards": {KEY: [1.0, 2.0, 1.0, 2.0]},
    }
    document.update(changes)
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xfe not utf-8 or json",
        b"{not json",
        b"[1, 2]",
        json.dumps({"format": SUMMARY_FORMAT}).encode(),  # a summary is not a report
        json.dumps({"hello": "a foreign object"}).encode(),
        _report_document(producer=""),
        _report_document(producer=7),
        _report_document(sequence=-1),
        _report_document(sequence=True),
        _report_document(sequence=1.5),
        _report_document(wall_time="now"),
        _report_document(wall_time=-1.0),
        _report_document(shards=[]),
        _report_document(shards={KEY: [1.0]}),
        _report_document(shards={KEY: {"records": 1}}),
        _report_document(shards={KEY: [1.0, 2.0, 1.0, 2.0, 3]}),  # a summary's entry
        _report_document(shards={KEY: [float("nan"), 2.0, 1.0, 2.0]}),
        _report_document(shards={KEY: [1.0, 2.0, 1.0, False]}),
        _report_document(shards={"": [1.0, 2.0, 1.0, 2.0]}),
    ],
)
def test_malformed_reports_are_rejected(data: bytes) -> None:
    with pytest.raises(MalformedError):
        decode_report(data)


@pytest.mark.parametrize(
    "changes",
    [
        {"epoch": None},
        {"sequence": "1"},
        {"producers": -2},
        {"shards": {KEY: [1.0, 2.0, 1.0, 2.0]}},  # a report's entry
        {"shards": {KEY: [1.0, 2.0, 1.0, 2.0, -1]}},
        {"format": REPORT_FORMAT},
    ],
)
def test_malformed_summaries_are_rejected(changes: dict[str, object]) -> None:
    document: dict[str, object] = {
        "format": SUMMARY_FORMAT,
        "epoch": "e",
        "sequence": 1,
        "producers": 1,
        "wall_time": 0.0,
        "shards": {KEY: [1.0, 2.0, 1.0, 2.0, 1]},
    }
    assert decode_summary(json.dumps(document).encode()).producers == 1
    document.update(changes)
    with pytest.raises(MalformedError):
        decode_summary(json.dumps(document).encode())

"""The AUTO-stream benchmark (``bench/auto.py``): its figures from what a stream holds, its
verdicts, a stream made, switched and read back through the in-process fake (both backends),
and one tiny cell of a real producer process over HTTP (figures are measured, not asserted:
only that the counting is right)."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
from bench import auto
from bench.auto import AUTO, AUTO_TARGETS, BY_KEY, KEYLESS_TARGETS, SWITCH_TARGETS, Cell, ReadBack

from aiokpl.aggregation import encode
from aiokpl.testing import FakeKinesis, deaggregate_as_kcl

HALF = 2**127
# Two shards splitting the key space, as CreateStream makes them.
RANGES = {"shard-0": (0, HALF - 1), "shard-1": (HALF, 2**128 - 1)}


def key_in(shard: str, skip: int = 0) -> str:
    """A partition key whose MD5 lies in ``shard``'s range (the ``skip``-th such)."""
    low, high = RANGES[shard]
    found = (
        f"k{i}"
        for i in range(10_000)
        if low <= int.from_bytes(hashlib.md5(f"k{i}".encode()).digest(), "big") <= high
    )
    for _ in range(skip):
        next(found)
    return next(found)


def stored_as(records: list[tuple[str, dict[str, Any]]]) -> ReadBack:
    """What :func:`auto.read_back` returns for ``records``: the KCL's share by its rule."""
    return ReadBack(records, deaggregate_as_kcl(records, RANGES), sorted(RANGES))


def lines(attempts: list[int], errors: dict[int, str], times: list[float], put: int) -> list[Any]:
    per_record = [
        {"i": i, "a": a, "e": errors.get(i), "t": t}
        for i, (a, t) in enumerate(zip(attempts, times, strict=True))
    ]
    done = {
        "put": put,
        "put_seconds": 0.5,
        "resolved_seconds": 2.5,
        "attempt_codes": {"Wrong Shard": 2},
        "streams": [{"record_distribution": "AUTO"}],
    }
    return [{"ready": True}, *per_record, {"done": done}]


def test_a_record_s_data_carries_its_index() -> None:
    for index in (0, 7, 12_345, 99_999_999):
        data = auto.record_data(index)
        assert len(data) == auto.RECORD_BYTES
        assert auto.record_index(data) == index
    assert auto.record_index(b"-1234567 and more") is None
    assert auto.record_index(b"123") is None


def test_every_copy_counts_as_stored_and_a_kcl_consumer_drops_misplaced_aggregates() -> None:
    a, b = key_in("shard-0"), key_in("shard-0", 1)
    data = auto.record_data
    records = [
        # Records 0 and 1 aggregated on their own shard: a KCL consumer keeps both.
        ("shard-0", {"Data": encode([(a, data(0)), (b, data(1))]), "PartitionKey": a}),
        # Records 2 and 3 aggregated and placed on the other shard: dropped whole.
        ("shard-1", {"Data": encode([(a, data(2)), (b, data(3))]), "PartitionKey": a}),
        # Record 2 sent again alone (kept wherever it is), and a second copy of record 0.
        ("shard-0", {"Data": data(2), "PartitionKey": a}),
        ("shard-1", {"Data": data(0), "PartitionKey": a}),
    ]
    # Record 4 expired; record 2 took two attempts, record 4 three.
    produced = lines([1, 1, 2, 1, 3], {4: "Expired"}, [0.1, 0.2, 1.5, 1.7, 2.2], put=5)
    cell = Cell("AUTO 2 shards", 2, 5, targets=AUTO_TARGETS)
    result = auto.measure(cell, produced, stored_as(records))

    assert result.put == 5
    assert result.attempts == {1: 3, 2: 1, 3: 1}
    assert result.attempts_per_record == pytest.approx(8 / 5)
    assert (result.failed, result.failure_codes) == (1, {"Expired": 1})
    assert result.attempt_codes == {"Wrong Shard": 2}
    assert (result.user_records_stored, result.distinct_stored) == (6, 4)
    assert result.extra_copies == pytest.approx(1 / 5)
    # Seen: 0, 1 (their aggregate) and 2 (alone); 3 went with its dropped aggregate, 4 never.
    assert (result.kcl_seen, result.missing_for_kcl) == (3, 2)
    assert result.missing_for_kcl_by_second == {1: 1, 2: 1}
    assert (result.kinesis_records, result.user_per_kinesis) == (4, 1.5)
    assert result.wall_seconds == 2.5
    assert result.spread is not None
    assert result.spread.counts == {"shard-0": 3, "shard-1": 3}
    assert auto.verdicts(result) == {
        "attempts": False,
        "extra copies": False,
        "failed": False,
        "missing for KCL": False,
    }
    assert "missed: attempts, extra copies, failed, missing for KCL" in auto.table([result])


def test_a_producer_killed_before_its_results_has_them_counted_as_failed() -> None:
    produced = [{"ready": True}]  # no result, no "done": it was killed
    cell = Cell("AUTO 2 shards", 2, 3, targets=AUTO_TARGETS)
    records = [("shard-0", {"Data": auto.record_data(i), "PartitionKey": "k"}) for i in range(3)]
    result = auto.measure(cell, produced, stored_as(records))
    assert (result.put, result.failed) == (3, 3)
    assert result.failure_codes == {"no result (producer killed)": 3}
    assert (result.kcl_seen, result.missing_for_kcl) == (3, 0)


def test_a_clean_auto_cell_meets_every_target_and_each_target_has_its_edge() -> None:
    records = [
        (shard, {"Data": auto.record_data(i), "PartitionKey": "k"})
        for i, shard in enumerate(["shard-0", "shard-1"] * 50)
    ]
    produced = lines([1] * 100, {}, [i / 100 for i in range(100)], put=100)
    cell = Cell("AUTO 2 shards", 2, 100, targets=AUTO_TARGETS)
    result = auto.measure(cell, produced, stored_as(records))
    assert auto.verdicts(result) == dict.fromkeys(
        ("attempts", "extra copies", "failed", "missing for KCL"), True
    )
    assert auto.verdict_text(auto.verdicts(result)) == "met"
    # 1.05 attempts a record is within the target (five records in a hundred sent twice).
    result.attempts_per_record = 1.05
    assert auto.verdicts(result)["attempts"] is True
    result.attempts_per_record = 1.06
    assert auto.verdicts(result)["attempts"] is False
    # One extra copy in a hundred is the limit.
    result.extra_copies = 0.01
    assert auto.verdicts(result)["extra copies"] is True
    result.extra_copies = 0.011
    assert auto.verdicts(result)["extra copies"] is False
    # The switch cell is held to copies and the KCL only; the keyed cell to nothing.
    switch = auto.measure(
        Cell("switch", 2, 100, targets=SWITCH_TARGETS), produced, stored_as(records)
    )
    assert auto.verdicts(switch) == {"extra copies": True, "missing for KCL": True}
    keyed = auto.measure(Cell("keyed", 2, 100, BY_KEY), produced, stored_as(records))
    assert auto.verdicts(keyed) == {}
    assert auto.verdict_text({}) == "info"


def test_the_spread_is_each_shard_against_the_mean() -> None:
    spread = auto.spread_of({"a": 90, "b": 100, "c": 110, "d": 100})
    assert spread.above == pytest.approx(0.10)
    assert spread.below == pytest.approx(0.10)
    assert spread.mean_deviation == pytest.approx(0.05)
    assert spread.worst == pytest.approx(0.10)
    lopsided = auto.spread_of({"a": 0, "b": 300})
    assert (lopsided.above, lopsided.below, lopsided.mean_deviation) == (1.0, 1.0, 1.0)
    assert auto.spread_of({"a": 0, "b": 0}).worst == 0.0


def keyless_result(per_kinesis: float, counts: dict[str, int]) -> auto.CellResult:
    result = auto.CellResult(Cell("keyless", 4, 100, BY_KEY, keyless=True, targets=KEYLESS_TARGETS))
    result.user_per_kinesis = per_kinesis
    result.spread = auto.spread_of(counts)
    return result


def test_keyless_records_are_held_to_the_keyed_run_s_aggregation_and_an_even_spread() -> None:
    keyed = auto.CellResult(Cell("keyed", 4, 100, BY_KEY))
    keyed.user_per_kinesis = 100.0
    even = {"a": 95, "b": 105, "c": 100, "d": 100}
    assert auto.verdicts(keyless_result(95.0, even), keyed) == {"aggregation": True, "spread": True}
    assert auto.verdicts(keyless_result(94.0, even), keyed)["aggregation"] is False
    uneven = {"a": 85, "b": 105, "c": 110, "d": 100}
    assert auto.verdicts(keyless_result(95.0, uneven), keyed)["spread"] is False
    # Without a keyed run, the aggregation cannot be judged.
    assert auto.verdicts(keyless_result(95.0, even))["aggregation"] is None
    text = auto.table([keyed, keyless_result(47.0, uneven)])
    assert "47.0 (0.47× keyed) (≥ 0.95× keyed: FAIL)" in text
    assert "+10.0% / -15.0% / 7.5% (≤ 10%: FAIL)" in text


def test_a_producer_that_refuses_keyless_records_misses_the_cell_without_crashing(
    tmp_path: Path,
) -> None:
    refusal = "TypeError: Producer.put_record() missing 1 required keyword-only argument"
    cell = Cell("keyless", 4, 100, BY_KEY, keyless=True, targets=KEYLESS_TARGETS)
    result = auto.measure(cell, [{"ready": True}, {"refused": refusal}], ReadBack([], [], []))
    assert (result.refused, result.put) == (refusal, 0)
    assert auto.verdicts(result) == {"aggregation": False, "spread": False}
    assert f"| keyless | refused: {refusal} |" in auto.table([result])
    [row] = auto.rows([result])
    assert row.ok is False
    assert row.figure == f"refused: {refusal}"
    path = tmp_path / "auto.json"
    auto.write_json([result], path, {"test": True})
    [saved] = json.loads(path.read_text())["cells"]
    assert saved["refused"] == refusal
    assert saved["verdicts"] == {"aggregation": False, "spread": False}


@pytest.mark.anyio
async def test_a_stream_is_made_switched_and_read_back_as_the_cell_needs() -> None:
    fake = FakeKinesis()
    cell = Cell("switch", 2, 4, AUTO, switches=((0.0, BY_KEY),))
    await auto.create_stream(fake, cell)
    summary = await fake.describe_stream_summary(StreamName=auto.STREAM)
    assert summary["StreamDescriptionSummary"]["RecordDistributionStrategy"] == AUTO
    switched = await auto.switch(fake, cell.switches, time.time())
    assert len(switched) == 1
    summary = await fake.describe_stream_summary(StreamName=auto.STREAM)
    assert summary["StreamDescriptionSummary"]["RecordDistributionStrategy"] == BY_KEY
    a, b = key_in("shard-0"), key_in("shard-0", 1)
    data = auto.record_data
    await fake.put_records(
        StreamName=auto.STREAM,
        Records=[
            # Routed by its partition key into the first shard, where its keys belong.
            {"PartitionKey": a, "Data": encode([(a, data(0)), (b, data(1))])},
            # Sent to the second shard by its explicit hash key: a KCL consumer drops it.
            {
                "PartitionKey": a,
                "ExplicitHashKey": str(HALF),
                "Data": encode([(a, data(2)), (b, data(3))]),
            },
        ],
    )
    stored = await auto.read_back(fake)
    assert stored.shard_ids == ["shardId-000000000000", "shardId-000000000001"]
    result = auto.measure(cell, lines([1] * 4, {}, [0.0] * 4, put=4), stored)
    assert (result.kinesis_records, result.user_records_stored) == (2, 4)
    assert (result.kcl_seen, result.missing_for_kcl) == (2, 2)
    assert result.spread is not None
    assert result.spread.counts == {"shardId-000000000000": 2, "shardId-000000000001": 2}


@pytest.mark.integration
@pytest.mark.scenario
def test_a_tiny_switch_cell_of_a_real_producer_process(tmp_path: Path) -> None:
    # 300 records over one second into a 2-shard stream switched to AUTO and back: the
    # server, the producer process, the switches and the read-back fit together.
    cell = Cell("switch", 2, 300, BY_KEY, rate=300.0, switches=((0.3, AUTO), (0.6, BY_KEY)))
    result = auto.run_cell(cell)
    assert (result.error, result.refused) == (None, None)
    assert result.put == 300
    assert len(result.switched_at) == 2
    assert 0.3 <= result.switched_at[0] < result.switched_at[1]
    assert sum(result.attempts.values()) == 300
    assert result.failed == 0
    assert result.distinct_stored == 300  # every record is in the stream at least once
    assert result.user_records_stored >= 300
    assert result.kcl_seen + result.missing_for_kcl == 300
    assert result.kinesis_records >= 1
    assert result.producer_streams[0]["record_distribution"] in (AUTO, BY_KEY)
    path = tmp_path / "auto.json"
    auto.write_json([result], path, {"test": True})
    [saved] = json.loads(path.read_text())["cells"]
    assert saved["name"] == "switch"
    assert saved["kcl_seen"] == result.kcl_seen

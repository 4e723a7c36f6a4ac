"""The sustained-overload benchmark runs and accounts for every record (its target is not tested).

A few virtual seconds of two combinations: the scenario runs on trio's virtual clock (it
starts its own ``anyio.run``, so these tests are synchronous), and the figures are checked for
consistency, not against the SPEC's target: that is the benchmark's job.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench import overload
from bench.overload import Combination

from aiokpl import Config

SECONDS = 3.0
TTL_MS = 1000  # shorter than the run, so records expire and the window is not empty


def test_place_of_names_where_a_record_expired() -> None:
    assert overload.place_of("record_ttl_ms elapsed while waiting in the rate limiter") == (
        "limiter"
    )
    assert overload.place_of("record_ttl_ms elapsed while waiting in the sender queue") == (
        "sender queue"
    )
    assert overload.place_of("record_ttl_ms elapsed before delivery") == "after a failed attempt"
    assert overload.place_of("something new") == "something new"
    assert overload.place_of(None) == "?"


@pytest.mark.scenario
def test_overload_runs_and_every_record_is_accounted_for() -> None:
    combinations = (Combination(5.0, TTL_MS, True), Combination(2.0, TTL_MS, False))
    result = overload.run_combinations(combinations, seconds=SECONDS)

    assert [row.scenario for row in result.rows] == [
        "overload/5x/ttl1s/agg",
        "overload/2x/ttl1s/raw",
        "overload",
    ]
    assert result.rows[-1].ok is True  # nothing lost, duplicated or unresolved
    figures = result.details["combinations"]
    for combination in combinations:
        f = figures[combination.name]
        offered = combination.offered_records_per_second * SECONDS
        assert offered - combination.offered_records_per_second * 0.01 <= f["records_put"]
        assert f["records_put"] <= offered
        assert f["delivered"] + f["failed"] == f["records_put"]
        assert f["unresolved"] == f["lost"] == f["duplicates"] == 0
        # Overloaded for three times the TTL: some records expire, and it is said where.
        assert f["expired"] > 0
        assert sum(f["expired_by_place"].values()) == f["expired"]
        assert f["failed"] == f["expired"] + sum(f["failed_otherwise_by_code"].values())
        assert 0 < f["peak_outstanding_records"] <= Config().max_outstanding_records
        assert 0.0 <= f["throttled_fraction"] <= 1.0
        assert f["window"] == [1, 3]
        series = f["per_second"]
        assert len(series["goodput"]) == len(series["kinesis_records"]) >= SECONDS
        assert all(0.0 <= g <= 2.05 for g in series["goodput"])  # one second of burst at most
        # The first second gets the shard's whole burst and more: the load is there at once.
        assert series["goodput"][0] > 1.0
        assert f["goodput_min"] == pytest.approx(min(series["goodput"][1:3]), abs=1e-4)
        stored = sum(series["kinesis_records"])
        if combination.aggregation:
            assert f["binding_limit"] == "bytes"
            assert stored < f["delivered"]  # several user records per Kinesis record
        else:
            assert f["binding_limit"] == "records"
            assert stored == f["delivered"]
        assert len(series["outstanding_records"]) >= SECONDS


def test_main_prints_the_table_and_writes_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(overload, "COMBINATIONS", (Combination(2.0, TTL_MS, True),))
    out = tmp_path / "overload.json"
    assert overload.main(["--seconds", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "overload/2x/ttl1s/agg" in printed
    assert "where records expired" in printed
    details = json.loads(out.read_text())
    assert set(details["combinations"]) == {"2x/ttl1s/agg"}
    assert details["seconds"] == {"2x/ttl1s/agg": 2.0}


def test_durations_follow_the_ttl() -> None:
    assert overload.duration(Combination(2.0, 3_000, True)) == 60.0
    assert overload.duration(Combination(5.0, 30_000, False)) == 180.0
    assert overload.duration(Combination(5.0, 30_000, False), quick=True) == 40.0
    assert overload.duration(Combination(2.0, 1_000, True)) == 20.0  # 20 TTLs when not listed
    assert {overload.duration(c) for c in overload.COMBINATIONS} == {60.0, 180.0}

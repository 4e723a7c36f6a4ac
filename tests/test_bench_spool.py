"""The spool benchmark (``bench/spool.py``) runs and reports its figures.

Figures are measured, not tested: only that the scenario runs at a small size, gives every
row, and that what it measured is whole (every record recovered, every paced record timed,
the copies dropped).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.scenario
def test_spool_benchmark_runs_and_reports_its_figures(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from bench import pipeline, spool

    monkeypatch.setenv(spool.DIRECTORY_VARIABLE, str(tmp_path))
    monkeypatch.setattr(pipeline, "QUICK_RECORDS", 2_000)
    monkeypatch.setattr(spool, "QUICK_PACED_SECONDS", 0.2)
    monkeypatch.setattr(spool, "QUICK_RECOVERY_RECORDS", 5_000)
    monkeypatch.setattr(spool, "QUICK_FLUSH_SAMPLES", 10)
    monkeypatch.setattr(spool, "QUICK_DEDUPE_RECORDS", 12_000)
    monkeypatch.setattr(spool, "QUICK_DEAGGREGATE_AGGREGATES", 5)

    result = spool.run(quick=True)

    assert result.name == "spool"
    assert [row.scenario for row in result.rows] == [
        *["spool/throughput/asyncio"] * 4,
        *["spool/durable"] * 3,
        "spool/recovery",
        "spool/flush",
        "spool/deduper",
        "spool/deaggregate",
    ]
    assert [row.ok is not None for row in result.rows] == [True] * 3 + [False] + [True] * 3 + [
        False
    ] * 4
    details = result.details
    assert set(details["pipeline"]["best_seconds"]["asyncio"]) == {
        "memory",
        "batch",
        "interval",
        "none",
        "interval-identities",
    }
    assert set(details["pipeline"]["best_cpu_seconds"]["asyncio"]) == set(spool.VARIANTS)
    paced = round(spool.PACED_RATE * 0.2)
    for figures in details["pipeline"]["durable_latency_seconds"].values():
        assert figures["records"] == paced
        assert 0 < figures["p50"] <= figures["p99"] <= figures["max"]
    assert details["recovery"]["records"] == 5_000
    assert details["recovery"]["segments"] == 1
    flush = details["flush"]
    assert flush["batch"]["fsyncs"] == 10  # one per flush
    assert flush["none"]["fsyncs"] == 0
    assert details["deduper"]["kept"] + details["deduper"]["dropped"] == 12_000
    assert details["deduper"]["dropped"] > 0
    assert details["deaggregate"]["user_records"] == 5 * spool.AGGREGATE_RECORDS
    assert list(tmp_path.iterdir()) == []  # every spool directory removed

"""The benchmark harness still runs (figures are not asserted: they are measured, not tested)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# Every scenario but three. The many-producers one, whose processes take about a minute even in
# quick mode: its rows are tested in tests/test_bench_producers.py, its processes in
# tests/integration/test_coordination_processes.py. Isolation and start-up: their quick runs,
# exactly as `python -m bench --quick` makes them (no --http), are tests of their own (below,
# and tests/test_bench_startup.py) that check their figures too; the command line's dispatch
# and report are the same for every scenario, and the others here prove those.
SMOKED = (
    "pipeline",
    "metrics",
    "tracing",
    "codec",
    "saturation",
    "latency",
    "memory",
    "sync",
    "overload",
    "ordering",
)


@pytest.mark.integration
@pytest.mark.scenario
def test_quick_benchmark_runs_and_reports_every_scenario(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--json", str(out), "--only", *SMOKED],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    text = json.dumps(report)
    for scenario in SMOKED:
        assert scenario in text, scenario


@pytest.mark.scenario
def test_isolation_scenario_runs_on_the_virtual_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    # Run in process, quick: on a virtual clock it takes a few seconds.
    monkeypatch.syspath_prepend(str(ROOT))
    from bench import isolation

    result = isolation.run(quick=True)
    assert [row.scenario for row in result.rows] == ["isolation", "isolation/hung"]
    assert all(row.ok is not None for row in result.rows)
    # Beside a failing stream, then beside a hung one (its details under "hung").
    for details in (result.details, result.details["hung"]):
        assert details["clock"] == "virtual clock, trio MockClock"
        assert details["records_timed"] == details["records_put_per_stream"] > 0
        assert details["delivery"]["unresolved"] == details["delivery"]["lost"] == 0
        assert details["failing_stream_results"] == {"Expired": details["records_put_per_stream"]}
        assert set(details["percentiles_seconds"]) == {"p50", "p90", "p99", "p99.9", "max"}
        assert len(details["worst_by_second"]) == details["seconds"]


@pytest.mark.scenario
def test_ordering_scenario_compares_both_modes_on_the_same_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from bench import ordering

    monkeypatch.setattr(ordering, "QUICK_SECONDS", 1.5)
    monkeypatch.setattr(ordering, "QUICK_CPU_RECORDS", 2_000)
    result = ordering.run(quick=True)
    assert [row.scenario for row in result.rows] == [
        "ordering/latency",
        "ordering/goodput",
        "ordering/latency/raw",
        "ordering/cpu",
    ]
    details = result.details
    for part in ("half_capacity", "twice_capacity", "half_capacity_aggregation_off"):
        assert set(details[part]) == {"aggregate", "shard"}
        for mode, figures in details[part].items():
            assert figures["ordering"] == mode
            assert figures["delivery"]["lost"] == figures["delivery"]["unresolved"] == 0
    assert details["half_capacity"]["shard"]["delivery"]["failed_by_code"] == {}
    assert set(details["cpu_records_per_second"]) == {"aggregate", "shard"}

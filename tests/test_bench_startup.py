"""The start-up benchmark (``bench/startup.py``) runs and reports its figures.

Figures are measured, not tested: only that the scenario runs, reports both the cold and the
warm burst, and that every record was delivered.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.integration
@pytest.mark.scenario
def test_startup_benchmark_runs_and_reports_its_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from bench.startup import RECORDS, run

    result = run(quick=True, http=False)
    assert result.name == "startup"
    assert [row.scenario for row in result.rows] == ["startup"] * 6
    assert [row.ratio is not None for row in result.rows] == [True, True, False] * 2
    for how in ("at_once", "loop"):
        for burst in ("cold", "warm"):
            figures = result.details[how][burst]
            assert figures["records"] == RECORDS
            assert figures["succeeded"] == RECORDS
            assert figures["user_records_stored"] == RECORDS
            assert 0.0 <= figures["throttled_fraction"] <= 1.0
            assert figures["user_records_per_kinesis_record"] >= 1.0
        assert result.details[how]["warm"]["waiting_for_shard_map_after_puts"] == 0

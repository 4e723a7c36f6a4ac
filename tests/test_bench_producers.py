"""The many-producers bench scenario's rows, from a made-up run (the run itself takes minutes:
``tests/integration/test_coordination_processes.py`` runs the experiment at a small scale)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from bench.coordination import PhaseResult

ROOT = Path(__file__).resolve().parent.parent


def _phase(name: str, stored: list[int], throttled: list[int], **extra: Any) -> PhaseResult:
    from bench.coordination import PhaseResult

    window = (2.0, 4.0)
    low, high = 2, 4
    capacity = 1000.0
    sent = sum(stored[low:high]) + sum(throttled[low:high])
    return PhaseResult(
        name=name,
        window=window,
        capacity=capacity,
        delivered_fraction=sum(stored[low:high]) / (capacity * (high - low)),
        throttled_fraction=sum(throttled[low:high]) / sent,
        expired=3,
        put=9000,
        seconds=[0.0, 1.0, 2.0, 3.0, 4.0],
        delivered_per_second=stored,
        throttled_per_second=throttled,
        **extra,
    )


def test_rows_hold_each_phase_to_its_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from bench.coordination import Experiment
    from bench.producers import rows

    experiment = Experiment(
        store="dynamodb",
        shard_rate=500.0,
        # 1,900 stored of 2,000 (95%), 100 of 2,000 attempts throttled (5%): both pass
        without=_phase(
            "without", [0, 0, 950, 950, 0], [0, 0, 50, 50, 0], mean_attempt_seconds=0.25
        ),
        # 1,920 stored (96%: below 97%), 0.5% throttled
        with_coordination=_phase(
            "with",
            [0, 0, 960, 960, 0],
            [0, 0, 5, 5, 0],
            swap_at=4.0,
            reconverged_after=3.0,
            reconverged_within_5pct_after=None,
        ),
    )
    table = [(row.scenario, row.target, row.ratio, row.ok) for row in rows(experiment)]
    assert table[:6] == [
        ("producers/without", "≥ 90% of capacity", pytest.approx(0.95), True),
        ("producers/without", "≤ 5% throttled", pytest.approx(0.05), True),
        ("producers/without", "info", None, None),
        ("producers/with", "≥ 97% of capacity", pytest.approx(0.96), False),
        ("producers/with", "≤ 1% throttled", pytest.approx(10 / 1930), True),
        ("producers/with", "info", None, None),
    ]
    figures = [row.figure for row in rows(experiment)]
    assert figures[0].startswith("1,900 records stored in t = 2–4 s, of 2,000 capacity")
    assert figures[1] == (
        "100 of 2,000 Kinesis records throttled in t = 2–4 s (mean request round trip 250 ms)"
    )
    assert figures[4] == "10 of 1,930 Kinesis records throttled in t = 2–4 s"
    assert figures[2] == "3 records expired in t = 2–4 s (5 s TTL)"
    assert figures[6] == (
        "a producer killed and one started at t = 4 s: summed ceilings within 10% of each "
        "shard's capacity after 3 s (5%: not settled by the end)"
    )

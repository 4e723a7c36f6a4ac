"""The fleet benchmark's plumbing (``bench/fleet.py``): its matrix, its figures from the
server's per-second rows, and one tiny cell of real processes (figures are measured, never
asserted: only that the pieces fit)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bench import fleet
from bench.fleet import WITH, WITHOUT, Cell

ROOT = Path(__file__).resolve().parent.parent


def rows(delivered: list[int], throttled: list[int], first: int = 1000) -> list[dict[str, Any]]:
    """Server rows for the fleet stream, one per second from ``first``, plus noise to ignore."""
    found = [
        {
            "second": first + s,
            "stream": fleet.STREAM,
            "delivered": d,
            "throttled": t,
            "failed": 0,
            "delivered_user_records": d,
            "throttled_user_records": t,
        }
        for s, (d, t) in enumerate(zip(delivered, throttled, strict=True))
    ]
    other = {**found[0], "stream": "another"}
    before = {**found[0], "second": first - 1}
    return [*found, other, before]


def test_the_presets_are_the_issue_s_matrix() -> None:
    assert [c.name for c in fleet.PRESETS["baseline"]] == [
        "4p 2x limit=matched agg=off coord=off",
        "4p 2x limit=matched agg=off coord=inside",
        "4p 2x limit=default agg=off coord=off",
        "4p 2x limit=default agg=off coord=inside",
    ]
    full = fleet.PRESETS["full"]
    assert len(full) == 2 * 2 * 2 * 2 * 3 + 3
    assert len({c.name for c in full}) == len(full)
    assert {c.name for c in full if c.churn} == {
        f"4p 2x limit=matched agg=off coord={coord} churn" for coord in ("off", "inside", "process")
    }
    assert [c.name for c in fleet.PRESETS["reduced"]] == [
        "4p 2x limit=matched agg=off coord=off",
        "4p 2x limit=matched agg=off coord=inside",
    ]
    assert all(c.duration == 40 and c.window_from == 12 for c in full)


def test_each_cell_has_the_issue_s_targets() -> None:
    assert Cell().targets is WITHOUT
    assert Cell(limit="default").targets is None  # information only without coordination
    assert Cell(limit="default", coordination="inside").targets is WITH
    assert Cell(coordination="process").targets is WITH
    assert Cell(churn=True).swap_at == 20.0
    assert Cell().swap_at is None


def test_figures_come_from_the_window_of_the_server_series(tmp_path: Path) -> None:
    cell = Cell(duration=6, window_from=2)
    # Capacity 500/s; the window (seconds 2-5) stores 1,900 of 2,000 and throttles 100 of 2,000.
    result = fleet.measure(
        cell,
        rows([900, 0, 500, 500, 450, 450], [700, 0, 0, 0, 50, 50]),
        1000,
        [],
        1000.0,
        ([1.0, 1.0, 1.0], [2.0, 2.0, 2.0]),
    )
    assert result.delivered == pytest.approx(0.95)
    assert result.throttled == pytest.approx(0.05)
    assert result.worst_second == pytest.approx(0.1)
    assert result.worst_second_at == 4  # the start-up burst (second 0) is not counted
    assert result.delivered_per_second == [900, 0, 500, 500, 450, 450]
    assert result.verdicts == {"delivered": True, "throttled": True, "worst second": True}
    text = fleet.table([result])
    assert "| 4p 2x limit=matched agg=off coord=off | 95.0% | 5.0% | 10.0% | - | 0 |" in text
    assert text.endswith("| 1.0→2.0 | - | met |")
    assert fleet.series_text(result).splitlines()[1] == "    delivered/s: 900 0 500 500 450 450"
    fleet.write_json([result], tmp_path / "saved.json", {})
    assert fleet.read_json(tmp_path / "saved.json") == [result]
    missed = fleet.measure(
        Cell(duration=6, window_from=2, coordination="inside"),
        rows([900, 0, 500, 500, 450, 450], [700, 0, 0, 0, 50, 50]),
        1000,
        [],
        1000.0,
        ([1.0] * 3, [1.0] * 3),
    )
    assert missed.verdicts == {"delivered": False, "throttled": False, "worst second": True}
    assert "missed: delivered, throttled" in fleet.table([missed])


def test_recovery_is_the_time_until_every_later_stretch_is_within_targets() -> None:
    capacity = 500.0
    good, bad = (500, 0), (300, 0)
    pattern = [good] * 5 + [bad, bad, good, bad] + [good] * 6
    users = [d for d, _ in pattern]
    throttled = [t for _, t in pattern]
    # Swap at 5: the last bad second is 8, so every 3-s stretch from 9 on is within targets.
    assert fleet.recovery_after(users, users, throttled, capacity, 5, WITH) == 4.0
    assert fleet.recovery_after(users, users, throttled, capacity, 12, WITH) == 0.0
    never = [500] * 8 + [100] * 3
    assert fleet.recovery_after(never, never, [0] * 11, capacity, 4, WITH) is None
    throttling = [500] * 10
    assert (
        fleet.recovery_after(throttling, throttling, [0] * 7 + [50] * 3, capacity, 4, WITH) is None
    )
    churn = fleet.measure(
        Cell(duration=15, window_from=2, churn=True, coordination="process"),
        rows(users, throttled),
        1000,
        [],
        1000.0,
        ([1.0] * 3, [1.0] * 3),
    )
    assert churn.recovery == 2.0  # swap at 7.5 s, counted from second 7
    assert churn.verdicts["recovery"] is True


def test_an_aggregation_cell_is_held_to_the_shard_s_bytes() -> None:
    # Inside an aggregate a user record costs its key (14 bytes, now in the key table) and its
    # data (100), plus a few bytes of framing and its share of the aggregate's own key, magic
    # and checksum: so a shard of 64 KiB/s takes a little under 575 (65,536 / 114) a second.
    each = fleet.user_record_bytes()
    assert 114 < each < 114 + 12
    assert fleet.Cell(aggregation=True).capacity == pytest.approx(2 * 65536 / each)
    assert 1040 < fleet.Cell(aggregation=True).capacity < 1150
    assert fleet.Cell(aggregation=False).capacity == 500
    assert fleet.Cell(server_rate=5000).capacity == 500  # a control: the producers' limit


@pytest.mark.integration
@pytest.mark.scenario
def test_a_tiny_cell_of_real_processes_reads_the_server_s_counts(tmp_path: Path) -> None:
    # Two producer processes for 4 s, offering twice the capacity: the server stored records
    # and counted them per second; the JSON and the figure are written.
    cell = Cell(producers=2, duration=4, window_from=1)
    result = fleet.run_cell(cell)
    assert len(result.delivered_per_second) == 4
    assert sum(result.delivered_user_per_second) > 0
    assert result.put > 0
    path = tmp_path / "fleet.json"
    fleet.write_json([result], path, {"test": True})
    [saved] = json.loads(path.read_text())["cells"]
    assert saved["name"] == "2p 2x limit=matched agg=off coord=off"
    assert saved["delivered_per_second"] == result.delivered_per_second
    fleet.plot([result], tmp_path / "fleet.png")
    assert (tmp_path / "fleet.png").stat().st_size > 0

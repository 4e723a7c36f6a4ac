"""The service-life benchmark (``bench/service_life.py``, ``bench/wrong_endpoint.py``): its
figures from the server's per-second rows, the read-back and the producers' lines and logs, its
verdicts and its table; and one tiny ``lone`` run of a real producer process over HTTP (the
figures are measured, never asserted: only that the pieces fit)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from bench import auto, fleet, service_life, wrong_endpoint
from bench.__main__ import SCENARIOS
from bench.service_life import Figure, FirstSecond, RawRun

from aiokpl._cli import demo
from aiokpl.aggregation import encode

CAPACITY = service_life.RAW_SHARDS * service_life.SHARD_RATE


def aggregate(*indices: int) -> dict[str, Any]:
    """A stored Kinesis record holding the records of ``indices`` (one alone: not aggregated)."""
    if len(indices) == 1:
        return {"Data": auto.record_data(indices[0]), "PartitionKey": "k"}
    return {
        "Data": encode([("k", auto.record_data(i)) for i in indices]),
        "PartitionKey": "k",
    }


def test_the_first_second_counts_the_records_put_in_it_by_how_they_were_stored() -> None:
    # Records 0-4 put in the first second, 5 and 6 after it.
    put_at = {0: 0.0, 1: 0.2, 2: 0.5, 3: 0.9, 4: 0.99, 5: 1.0, 6: 1.5}
    stored = [
        ("shard-0", aggregate(0, 1, 5)),  # two of the first second's, with a later one
        ("shard-1", aggregate(2)),  # alone
        ("shard-1", aggregate(3, 4)),
        ("shard-0", aggregate(3)),  # record 3 again, alone (a retry's copy)
        ("shard-0", aggregate(6)),
        ("shard-0", {"Data": b"not a record of the benchmark", "PartitionKey": "k"}),
    ]
    first = service_life.first_second(stored, put_at)
    assert first == FirstSecond(put=5, aggregated=4, user_records=6, kinesis_records=4)
    assert first.share == pytest.approx(0.8)
    assert first.user_per_kinesis == pytest.approx(1.5)
    assert FirstSecond(0, 0, 0, 0).share == FirstSecond(0, 0, 0, 0).user_per_kinesis == 0.0


def cold_run(share: float) -> service_life.ColdRun:
    run = service_life.ColdRun(1.0, "trio", 100)
    run.first = FirstSecond(100, round(share * 100), 100, 1)
    return run


def test_a_cold_run_is_held_to_95_percent_of_its_first_second_aggregated() -> None:
    [held, *others] = service_life.cold_figures(cold_run(0.95))
    assert (held.cell, held.ok, held.text) == ("cold 1.0s/trio", True, "95.0% (95 of 100)")
    assert all(figure.ok is None for figure in others)
    assert service_life.cold_figures(cold_run(0.94))[0].ok is False
    broken = cold_run(1.0)
    broken.error = "RuntimeError: boom"
    figures = service_life.cold_figures(broken)
    assert figures[0].ok is False
    assert figures[-1] == Figure("cold 1.0s/trio", "producer error", broken.error, "runs", False)


def test_a_cold_run_s_producer_figures_come_from_its_lines() -> None:
    lines: list[dict[str, Any]] = [
        {"ready": True},
        {"resolved": 2.5},
        {"i": 0, "a": 1, "e": None, "t": 0.0},
        {"i": 1, "a": 3, "e": "Expired", "t": 0.4},
        {"i": 2, "a": 1, "e": None, "t": 1.2},
        {
            "done": {
                "put": 3,
                "put_seconds": 1.2,
                "resolved_seconds": 2.5,
                "attempt_codes": {},
                "streams": [],
                "failure_codes": {"Expired": 1},
            }
        },
    ]
    stored = [("shard-0", aggregate(0, 2))]
    run = service_life.measure_cold(0.3, "asyncio", 3, lines, stored)
    assert (run.put, run.failed, run.failure_codes) == (3, 1, {"Expired": 1})
    assert (run.kinesis_records, run.user_per_kinesis, run.wall_seconds) == (1, 2.0, 2.5)
    # Records 0 and 1 were put in the first second; 0 is in an aggregate, 1 was never stored.
    assert run.first == FirstSecond(put=2, aggregated=1, user_records=1, kinesis_records=1)


def test_the_demo_s_figure_is_read_from_its_report(capsys: pytest.CaptureFixture[str]) -> None:
    report = demo.DemoReport(records=100_000, read_back=100_000, kinesis_records=235)
    demo._print_report(report, "trio")
    printed = capsys.readouterr().out
    assert service_life.demo_per_kinesis(printed) == pytest.approx(425.5)
    assert service_life.demo_per_kinesis("no report") is None
    assert service_life.demo_per_kinesis("user records per Kinesis record  1,234.5") == 1234.5


def test_the_demo_s_backends_are_held_to_within_ten_percent_of_each_other() -> None:
    assert service_life.disagreement(100.0, 90.0) == pytest.approx(0.10)
    assert service_life.disagreement(0.0, 0.0) == 0.0

    def runs(a: float | None, b: float | None) -> list[service_life.DemoRun]:
        return [
            service_life.DemoRun("asyncio", 10, a, error=None if a else "exit 1"),
            service_life.DemoRun("trio", 10, b, error=None if b else "exit 1"),
        ]

    assert service_life.demo_figures(runs(400.0, 360.0))[-1].ok is True
    assert service_life.demo_figures(runs(400.0, 359.0))[-1].ok is False
    failed = service_life.demo_figures(runs(400.0, None))
    assert [f.ok for f in failed] == [None, False, False]
    # One backend alone: nothing to compare.
    [alone] = service_life.demo_figures(runs(400.0, 1.0)[:1])
    assert alone.name == "aiokpl demo: user records / Kinesis record"


def test_a_run_s_seconds_are_its_own_but_the_one_the_next_run_starts_in() -> None:
    runs = [(100.0, 105.4), (105.45, 111.0), (114.0, 119.5), (120.0, 121.0)]
    assert service_life.run_windows(runs) == [(100, 104), (105, 111), (114, 119), (120, 121)]
    assert service_life.run_windows([(100.5, 100.9)]) == [(100, 100)]


def test_judged_seconds_lie_between_the_first_and_the_last_active_ones() -> None:
    shares = service_life.judged_shares
    # Start-up (nothing sent), the burst, three whole seconds, the partial last one, and the
    # last outcomes coming back.
    delivered = [0, 0, 3500, 1700, 1900, 2000, 600, 0]
    throttled = [0, 0, 400, 0, 0, 0, 0, 0]
    assert shares(delivered, throttled, 2000.0, False) == [0.85, 0.95, 1.0]
    # A second with records throttled only is active.
    assert shares([0, 0, 1800, 0], [0, 30, 0, 5], 2000.0, False) == [0.9]
    # The first second is the previous run's last: its records are not this run's.
    assert shares([700, 0, 3000, 1800, 100], [0, 0, 0, 0, 0], 2000.0, True) == [0.9]
    assert shares([700, 3000, 1800, 100], [0, 0, 0, 0], 2000.0, False) == [1.5, 0.9]
    # Too short to judge a second, or nothing at all.
    assert shares([0, 3000, 100, 0], [0, 0, 0, 0], 2000.0, False) == []
    # Given what the run puts: the seconds that start with less than two seconds of the
    # capacity left are partial (one shard runs out first), and not judged.
    run = [0, 3000, 2000, 2000, 2000, 1400, 600, 0]  # 11,000 records
    assert shares(run, [0] * 8, 2000.0, False) == [1.0, 1.0, 1.0, 0.7]
    assert shares(run, [0] * 8, 2000.0, False, 11_000) == [1.0, 1.0, 1.0]
    # Left at the starts: 11,000, 8,000, 6,000, 4,000 (judged), then 2,000: not judged.
    assert shares([0, 0], [0, 0], 2000.0, False) == []


def server_rows(stream: str, first: int, delivered: list[int], throttled: list[int]) -> list[Any]:
    """The server's rows of ``stream``, a second each from ``first``, and another stream's."""
    rows = [
        {"second": first + s, "stream": stream, "delivered": d, "throttled": t}
        | {"failed": 0, "delivered_user_records": d, "throttled_user_records": t}
        for s, (d, t) in enumerate(zip(delivered, throttled, strict=True))
    ]
    return [*rows, {**rows[0], "stream": "another", "throttled": 999}]


def test_restart_runs_take_their_series_from_the_server_and_share_no_throttle() -> None:
    # first: 100.0 to 103.5; spent: 103.6 to 106.2 (shares second 103); rested: 109.2 to 111.4.
    delivered = [0, 3000, 2000, 900, 3000, 1000, 500, 0, 0, 2500, 1900, 300]
    throttled = [0, 500, 0, 10, 1000, 50, 0, 0, 0, 200, 0, 0]
    rows = server_rows("restart", 100, delivered, throttled)
    runs = [
        # Records enough that none of these seconds starts with under two seconds left.
        RawRun("first", 20_000, start=100.0, wall_seconds=3.5),
        RawRun("spent", 20_000, start=103.6, wall_seconds=2.6),
        RawRun("rested", 20_000, start=109.2, wall_seconds=2.2),
    ]
    service_life.attach_series(runs, rows, "restart")
    first, spent, rested = runs
    assert (first.first_second, first.delivered, first.shared_first) == (
        100,
        [0, 3000, 2000, 900],
        False,
    )
    assert first.throttled == 500  # second 103's 10 are the spent run's
    assert (spent.delivered, spent.throttled_series) == ([900, 3000, 1000, 500], [10, 1000, 50, 0])
    assert (spent.shared_first, spent.throttled) == (True, 1060)
    assert (rested.delivered, rested.throttled, rested.shared_first) == (
        [2500, 1900, 300],
        200,
        False,
    )
    assert first.shares == [1.0]
    assert spent.shares == [0.5]
    assert rested.shares == [0.95]


def test_restart_runs_are_held_to_90_percent_a_second_and_their_wall_time() -> None:
    assert service_life.wall_target(20_000, 2) == pytest.approx(11.0)
    assert service_life.wall_target(10_000, 2) == pytest.approx(6.0)
    run = RawRun("spent", 20_000, wall_seconds=11.0, delivered=[0, 3000, 1800, 1900, 500])
    run.throttled_series = [0] * 5
    worst, wall, throttled, failed = service_life.restart_figures([run])
    assert (worst.cell, worst.ok, worst.value) == ("restart/spent", True, 0.9)
    assert worst.text == "90% (each: 90% 95%)"
    assert (wall.ok, wall.target) == (True, "≤ 11 s")
    assert throttled.ok is failed.ok is None
    run.delivered[2] = 1799
    run.wall_seconds = 11.1
    assert [f.ok for f in service_life.restart_figures([run])[:2]] == [False, False]
    [ended] = service_life.restart_figures([RawRun("rested", 20_000, error="boom")])
    assert (ended.text, ended.ok) == ("did not end: boom", False)


def test_a_lone_producer_is_held_to_no_throttle() -> None:
    quiet = RawRun("3,000", 3000, wall_seconds=1.5)
    throttled = RawRun("20,000", 20_000, wall_seconds=10.0, throttled=1)
    figures = service_life.lone_figures([quiet, throttled])
    assert [(f.cell, f.ok) for f in figures if f.target == "0"] == [
        ("lone/3,000", True),
        ("lone/20,000", False),
    ]


def test_failures_are_counted_from_the_last_line_and_a_killed_worker_failed_them_all() -> None:
    done = {"done": {"put": 90, "failure_codes": {"Expired": 2, "Cancelled": 1}}}
    assert service_life.outcome([{"ready": True}, done], 100) == (13, None)
    assert service_life.outcome([{"ready": True}], 100) == (100, None)
    assert service_life.outcome([{"error": "OSError: x"}], 5) == (5, "OSError: x")


def test_fleet_agg_is_bench_fleet_s_cell_held_to_the_issue_s_targets() -> None:
    cell = service_life.fleet_cell(quick=False)
    assert cell.name == "8p 2x limit=default agg=on coord=off"
    assert (cell.duration, cell.window_from) == (40.0, 12.0)
    assert (service_life.fleet_cell(quick=True).duration, cell.targets) == (20.0, None)
    command = service_life.fleet_command(quick=True)
    assert command.endswith("--aggregation on --coordination off --quick")
    result = fleet.CellResult(cell, 500.0, 0.97, 0.05, 0.2, 14, None, 0, 0, [], [], [], [], [])
    delivered, throttled, worst = service_life.fleet_figures(result)
    assert (delivered.ok, throttled.ok, worst.ok) == (None, True, True)
    assert worst.text == "20.0% (at 14 s)"
    result.throttled, result.worst_second = 0.051, 0.21
    assert [f.ok for f in service_life.fleet_figures(result)] == [None, False, False]


def log_text(*records: tuple[float, int, str, str]) -> str:
    """What the worker's stderr holds: each ``(created, level, logger, message)`` formatted."""
    formatter = logging.Formatter(wrong_endpoint.LOG_FORMAT)
    lines = []
    for created, level, name, message in records:
        record = logging.LogRecord(name, level, __file__, 1, message, None, None)
        record.created = created
        lines.append(formatter.format(record))
    return "\n".join(lines) + "\nTraceback (most recent call last):\n  a continuation line\n"


def test_a_wrong_endpoint_run_is_timed_from_its_put() -> None:
    stderr = log_text(
        (99.0, logging.WARNING, "aiokpl", "region us-east-11 is not one botocore knows"),
        (101.5, logging.WARNING, "aiokpl", "cannot connect to http://127.0.0.1:9 (...)"),
        (103.0, logging.WARNING, "aiokpl.shard_map", "could not load the shard map"),
    )
    lines: list[dict[str, Any]] = [
        {"ready": True, "health": True},
        {"put": 100.0},
        {"health": "healthy", "codes": [], "t": 100.1},
        {"health": "failing", "codes": ["endpoint_unreachable"], "t": 100.6},
        {"result": {"success": False, "error_code": "Expired", "error_message": "ttl"}, "t": 130.2},
    ]
    run = wrong_endpoint.measure(wrong_endpoint.WrongRun("closed port", "x", "y"), lines, stderr)
    assert run.log_after == pytest.approx(1.5)
    assert run.log_line == "WARNING aiokpl: cannot connect to http://127.0.0.1:9 (...)"
    assert run.failing_after == pytest.approx(0.6)
    assert run.health_seen == ["healthy", "failing"]
    assert run.result_after == pytest.approx(30.2)
    assert wrong_endpoint.result_text(run) == "Expired: ttl"
    assert len(run.log) == 3
    result, log, health = service_life.wrong_figures([run])
    assert (result.ok, log.ok, health.ok) == (None, True, True)
    assert result.text == "Expired: ttl (after 30.2 s)"
    assert health.text == "after 0.6 s (said: healthy, failing)"


def test_a_producer_without_health_or_a_log_line_misses_only_what_it_can() -> None:
    lines: list[dict[str, Any]] = [{"ready": True, "health": False}, {"put": 100.0}]
    run = wrong_endpoint.measure(wrong_endpoint.WrongRun("closed port", "x", "y"), lines, "")
    result, log, health = service_life.wrong_figures([run])
    assert (result.text, log.text, log.ok) == ("no result", "never", False)
    assert (health.text, health.ok) == ("no Producer.health", None)
    crashed = wrong_endpoint.measure(
        wrong_endpoint.WrongRun("closed port", "x", "y"), [{"error": "ValueError: region"}], ""
    )
    assert wrong_endpoint.result_text(crashed) == "producer error: ValueError: region"
    assert service_life.wrong_figures([crashed])[2].text == "the producer did not start"


def test_the_table_lines_an_earlier_run_up_beside_this_one(tmp_path: Path) -> None:
    figures = [
        Figure("lone/3,000", "Kinesis records throttled (server)", "0", "0", True, 0),
        Figure("restart/first", "records failed", "a | b", value=0),
    ]
    path = tmp_path / "life.json"
    service_life.write_json(figures, {"lone": []}, path, {"test": True})
    saved = json.loads(path.read_text())
    assert [f["verdict"] for f in saved["figures"]] == ["pass", "info"]
    before = service_life.read_figures(path)
    before[("lone/3,000", "Kinesis records throttled (server)")] = "417"
    now = [replace_text(figures[0], "3"), figures[1]]
    text = service_life.table(now, before)
    assert "| lone/3,000 | Kinesis records throttled (server) | 417 | 3 | 0 | pass |" in text
    assert "| restart/first | records failed | a / b | a / b | info | info |" in text
    assert "| measured |" in service_life.table(figures)
    [row, _] = service_life.rows(figures)
    assert (row.scenario, row.figure, row.ok) == (
        "service_life/lone/3,000",
        "Kinesis records throttled (server): 0",
        True,
    )
    assert SCENARIOS["service_life"] is service_life.run


def replace_text(figure: Figure, text: str) -> Figure:
    return Figure(figure.cell, figure.name, text, figure.target, figure.ok, figure.value)


@pytest.mark.integration
@pytest.mark.scenario
def test_a_tiny_lone_run_of_a_real_producer_process_on_trio() -> None:
    # 200 records into 2 quiet shards: the server, the producer process (bench.auto's worker
    # on another stream, backend and without aggregation), its counts and the server's series
    # fit together.
    [run] = service_life.run_lone([200], "trio", None)
    assert (run.error, run.failed) == (None, 0)
    assert run.wall_seconds is not None
    assert sum(run.delivered) == 200  # every record stored once, counted by the server
    assert run.throttled == sum(run.throttled_series)

"""Many producers on one stream (SPEC §6): the coordination experiment as a ``make bench`` row set.

Runs both phases of ``bench/coordination.py`` (read its header): four producer *processes*
on one 2-shard stream of the loopback throttling server (500 records/s per shard, so 1,000
records/s of capacity), offering twice the capacity in total, first without coordination, then
with ``aiokpl.coordination`` (DynamoDB store on moto's server, interval 1 s, ``aiokpl
coordinate`` as the summarizer). Per phase, over its steady window, as measured by the server:

* **delivered**: records stored over the stream's capacity for the window;
* **throttled**: Kinesis records throttled over all the server was sent (attempts);
* **expired**: records that failed with ``"Expired"`` (5 s TTL) in the window, information;
* the mean ``PutRecords`` round trip, from the producers' results (beside the throttled
  figure): how fast the throttle feedback was (13-45 ms in this project's runs, at load
  averages of 2 to 10).

Targets (SPEC §6, §4.10): without coordination ≥ 90% delivered and ≤ 5% throttled; with it
≥ 97% delivered and ≤ 1% throttled. With coordination one producer is killed and a new one
started after the window; how soon the ceilings settle again is an information row.

Cost in wall time: the full run is 30 s + 75 s of phases plus the start-up of five Python
processes per phase and of moto's server: 1 min 54 s on an idle 2-core machine, 2 min 15 s at
load averages of 5 to 10; ``--quick`` is 8 s + 34 s of phases, 50 s to 75 s. ``--http``
changes nothing: the producers are processes of their own and always reach the server over
loopback HTTP. The figures are real time on a shared machine, and vary from run to run (the
throttled fraction without coordination by a factor of two or more): compare runs made side
by side, and repeat the decisive ones.
"""

from __future__ import annotations

import os
from dataclasses import asdict

from . import coordination
from .report import Row, ScenarioResult

SHARD_RATE = 500.0
STORE = "dynamodb"
TARGETS = {
    # phase attribute: (delivered at least, throttled at most)
    "without": (0.90, 0.05),
    "with_coordination": (0.97, 0.01),
}


def _window_counts(phase: coordination.PhaseResult) -> tuple[int, int]:
    low, high = int(phase.window[0]), int(phase.window[1])
    return sum(phase.delivered_per_second[low:high]), sum(phase.throttled_per_second[low:high])


def rows(experiment: coordination.Experiment) -> list[Row]:
    """The table rows of one run of the experiment."""
    result: list[Row] = []
    for attribute, (delivered_target, throttled_target) in TARGETS.items():
        phase: coordination.PhaseResult = getattr(experiment, attribute)
        name = f"producers/{'with' if attribute == 'with_coordination' else 'without'}"
        stored, throttled = _window_counts(phase)
        window = f"t = {phase.window[0]:g}–{phase.window[1]:g} s"
        trip = phase.mean_attempt_seconds
        round_trip = "" if trip is None else f" (mean request round trip {trip * 1000:.0f} ms)"
        result += [
            Row(
                name,
                f"{stored:,} records stored in {window}, of "
                f"{phase.capacity * (phase.window[1] - phase.window[0]):,.0f} capacity "
                f"({coordination.PRODUCERS} processes, {coordination.SHARDS} shards × "
                f"{experiment.shard_rate:g}/s, 2× offered)",
                f"≥ {delivered_target:.0%} of capacity",
                phase.delivered_fraction,
                "of capacity",
                phase.delivered_fraction >= delivered_target,
            ),
            Row(
                name,
                f"{throttled:,} of {stored + throttled:,} Kinesis records throttled in {window}"
                f"{round_trip}",
                f"≤ {throttled_target:.0%} throttled",
                phase.throttled_fraction,
                "throttled",
                phase.throttled_fraction <= throttled_target,
            ),
            Row(name, f"{phase.expired} records expired in {window} (5 s TTL)", "info"),
        ]
    phase = experiment.with_coordination
    if phase.swap_at is not None:
        verdicts = [
            "not settled by the end" if after is None else f"{after:g} s"
            for after in (phase.reconverged_after, phase.reconverged_within_5pct_after)
        ]
        result.append(
            Row(
                "producers/with",
                f"a producer killed and one started at t = {phase.swap_at:g} s: summed ceilings "
                f"within 10% of each shard's capacity after {verdicts[0]} (5%: {verdicts[1]})",
                "info",
            )
        )
    return result


def run(quick: bool = False, http: bool = False) -> ScenarioResult:
    """Both phases of the experiment, as rows (``http`` changes nothing: see the header)."""
    load_before = os.getloadavg()
    experiment = coordination.run(quick=quick, store=STORE, shard_rate=SHARD_RATE)
    result = ScenarioResult("producers", rows=rows(experiment))
    result.details = {
        "quick": quick,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "store": STORE,
        "shard_rate": SHARD_RATE,
        "without": asdict(experiment.without),
        "with_coordination": asdict(experiment.with_coordination),
    }
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.producers [--quick] [--json PATH]``: run it alone, print its rows."""
    import argparse
    import json
    from pathlib import Path

    from .report import format_table

    parser = argparse.ArgumentParser(prog="python -m bench.producers", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short phases (about a minute)")
    parser.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    args = parser.parse_args(argv)
    result = run(quick=args.quick)
    print(format_table([result]))
    if args.json is not None:
        args.json.write_text(json.dumps(result.details, indent=1))
    before, after = result.details["load_average_before"], result.details["load_average_after"]
    print(f"load average (1, 5, 15 min) before: {before}, after: {after}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m bench [--quick] [--only NAME ...] [--json PATH] [--http] [--strict]``.

Runs the scenarios of SPEC §6 one after the other, prints one table (and progress on stderr),
and writes every figure to a JSON file (``bench/results/latest.json`` by default). Exits 1 if a
scenario could not run, or with ``--strict`` if a target was missed; 0 otherwise.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from . import (
    _load,
    auto,
    codec,
    fleet,
    isolation,
    latency,
    memory,
    metrics,
    ordering,
    overload,
    pipeline,
    producers,
    saturation,
    service_life,
    spool,
    startup,
    sync,
    tracing,
)
from .report import DEFAULT_JSON, Row, ScenarioResult, format_table, machine, write_json

SCENARIOS: dict[str, Callable[[bool, bool], ScenarioResult]] = {
    # The pipeline first, on a clean heap; the real-time scenarios last.
    "pipeline": pipeline.run,
    "metrics": metrics.run,
    # What Config.tracing costs a record: throughput, bytes on the wire, billing.
    "tracing": tracing.run,
    "codec": codec.run,
    # The spool beside the in-memory pipeline, recovery of 1M records, the Deduper's cost.
    "spool": spool.run,
    "sync": sync.run,
    "memory": memory.run,
    "isolation": isolation.run,
    "overload": overload.run,
    "ordering": ordering.run,
    "latency": latency.run,
    "saturation": saturation.run,
    "startup": startup.run,
    # Four producer processes and a coordination store: minutes of real time, last.
    "producers": producers.run,
    # The same over HTTP against the throttling moto server, as deployments run it (two cells
    # of bench/fleet.py's matrix; `python -m bench.fleet --full` runs all of it).
    "fleet": fleet.run,
    # AUTO streams: one producer process per cell over HTTP against the throttling moto
    # server, each stream read back as a KCL consumer reads it (about two minutes).
    "auto": auto.run,
    # Issue 31's table, a service's first minute and last: cold starts, restarts on spent
    # shards, a lone producer, a fleet aggregating, a wrong endpoint; producer processes over
    # HTTP against the throttling moto server (about five minutes).
    "service_life": service_life.run,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="reduced sizes and durations: a smoke run of under 2 minutes",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=sorted(SCENARIOS),
        metavar="NAME",
        help=f"run only these scenarios ({', '.join(SCENARIOS)})",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=DEFAULT_JSON,
        metavar="PATH",
        help="where to write the results (default: bench/results/latest.json)",
    )
    parser.add_argument(
        "--http",
        action="store_true",
        help="run saturation, latency and isolation over the loopback HTTP server "
        "(aiokpl.testing._loopback)",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 if any target is missed")
    arguments = parser.parse_args(argv)
    if arguments.http and not _load.loopback_available():
        parser.error("--http needs aiokpl.testing._loopback, which is not available")

    names = [name for name in SCENARIOS if not arguments.only or name in arguments.only]
    meta = {
        "quick": arguments.quick,
        "http": arguments.http,
        "scenarios": names,
        "machine_before": machine(),
        "note": "one run on a shared, noisy machine: compare the ratios, not absolute figures",
    }
    results: list[ScenarioResult] = []
    started = time.perf_counter()
    for name in names:
        print(f"bench: {name} …", file=sys.stderr, flush=True)
        scenario_start = time.perf_counter()
        try:
            result = SCENARIOS[name](arguments.quick, arguments.http)
        except Exception as exc:
            traceback.print_exc()
            result = ScenarioResult(name, error=f"{type(exc).__name__}: {exc}")
            result.rows.append(Row(name, f"error: {result.error}", "runs", None, "", False))
        result.seconds = time.perf_counter() - scenario_start
        results.append(result)
        print(f"bench: {name} done in {result.seconds:.1f} s", file=sys.stderr, flush=True)
        gc.collect()
    total = time.perf_counter() - started
    meta["machine_after"] = machine()
    meta["total_seconds"] = round(total, 1)

    print(format_table(results))
    print()
    cpus = machine()["cpus"]
    print(
        f"{len(results)} scenarios in {total:.0f} s on {cpus} CPUs"
        f"{' (quick)' if arguments.quick else ''}; one run on a noisy machine: "
        "read the ratios, measured side by side."
    )
    write_json(arguments.json, results, meta)
    print(f"results written to {arguments.json}")

    if any(result.error for result in results):
        return 1
    if arguments.strict and any(row.ok is False for result in results for row in result.rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

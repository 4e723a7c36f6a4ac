"""``bench.service_life``'s ``wrong-endpoint`` cell: producers pointed where nothing answers.

Two producer processes (``python -m bench.wrong_endpoint worker``), ``Config`` at its defaults
but the endpoint, the region and dummy credentials: one pointed at a closed port on 127.0.0.1
(region us-east-1), one at another closed port with region ``us-east-11``. Each puts one
record, logs at ``WARNING`` to its standard error (:data:`LOG_FORMAT`: each line stamped with
its wall time), polls ``Producer.health()`` every 0.5 s if the producer has it, and reports
the record's result. :func:`measure` turns that into: the result's message and when it came,
the first log line naming the endpoint or a connection and when, the first ``"failing"`` and
when, all in seconds after the put.

The third variant of the issue (region ``us-east-11`` and no ``endpoint_url``) is not run: the
producer would look up ``kinesis.us-east-11.amazonaws.com`` through the machine's resolver,
which reaches the internet.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import auto
from ._processes import (
    LineProcess,
    emit,
    local_config,
    processes,
    producer_environment,
    run_worker,
    spawn,
)

ROOT = Path(__file__).resolve().parent.parent
STREAM = "wrong"
REGION = "us-east-11"
HEALTH_POLL = 0.5
LOG_FORMAT = "%(created).3f %(levelname)s %(name)s: %(message)s"
MENTIONS = re.compile(r"endpoint|connect", re.IGNORECASE)
# How long the two may take from their start (the default TTL is 30 s) before they are killed.
GRACE = 90.0


_LOG_LINE = re.compile(r"^(\d+\.\d+) (.*)$")


def log_lines(text: str) -> list[tuple[float, str]]:
    """The lines :data:`LOG_FORMAT` wrote: ``(wall time, the rest)``; continuation lines (a
    traceback's) are skipped."""
    found = []
    for line in text.splitlines():
        match = _LOG_LINE.match(line)
        if match is not None:
            found.append((float(match.group(1)), match.group(2)))
    return found


def first_mention(lines: Sequence[tuple[float, str]]) -> tuple[float, str] | None:
    """The first log line naming the endpoint or a connection."""
    return next(((at, text) for at, text in lines if MENTIONS.search(text)), None)


def worker_main(argv: Sequence[str]) -> int:
    """``python -m bench.wrong_endpoint worker ...``: one producer, one record, a wrong
    endpoint."""
    parser = argparse.ArgumentParser(prog="bench.wrong_endpoint worker")
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--region", required=True)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format=LOG_FORMAT)
    return run_worker(_worker, args)


def _status(health: Any) -> tuple[str, list[str]]:
    """A ``Health``'s status and reason codes (any object: its text)."""
    status = getattr(health, "status", health)
    return str(status), [str(code) for code in getattr(health, "codes", ())]


async def _worker(args: argparse.Namespace) -> None:
    import anyio

    from aiokpl import Producer

    async with Producer(local_config(args.endpoint, region=args.region)) as producer:
        health: Callable[[], Any] | None = getattr(producer, "health", None)
        emit({"ready": True, "health": health is not None})
        put_at = time.time()
        outcome = await producer.put_record(
            stream=STREAM, partition_key="k", data=auto.record_data(0)
        )
        emit({"put": put_at})

        async def poll(check: Callable[[], Any]) -> None:
            said = None
            while True:
                status, codes = _status(check())
                if status != said:
                    said = status
                    emit({"health": status, "codes": codes, "t": time.time()})
                if status == "failing":
                    return
                await anyio.sleep(HEALTH_POLL)

        async with anyio.create_task_group() as group:
            if health is not None:
                group.start_soon(poll, health)
            result = await outcome
            group.cancel_scope.cancel()
        emit(
            {
                "result": {
                    "success": result.success,
                    "error_code": None if result.success else str(result.error_code),
                    "error_message": None if result.success else str(result.error_message),
                    "attempts": len(result.attempts),
                },
                "t": time.time(),
            }
        )


@dataclass
class WrongRun:
    """A producer pointed where nothing answers."""

    name: str
    endpoint: str
    region: str
    has_health: bool | None = None
    error: str | None = None
    result: dict[str, Any] | None = None
    result_after: float | None = None
    log_after: float | None = None
    log_line: str | None = None
    failing_after: float | None = None
    health_seen: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)


def measure(run: WrongRun, lines: Sequence[Mapping[str, Any]], stderr: str) -> WrongRun:
    """Fill ``run`` from the worker's lines and its standard error (its log)."""
    put = next((float(line["put"]) for line in lines if "put" in line), None)
    run.has_health = next((bool(line["health"]) for line in lines if "ready" in line), None)
    run.error = next((str(line["error"]) for line in lines if "error" in line), None)
    found = log_lines(stderr)
    run.log = [f"{at:.3f} {text}"[:400] for at, text in found[:20]]
    if put is None:
        return run
    for line in lines:
        if "result" in line:
            run.result = dict(line["result"])
            run.result_after = float(line["t"]) - put
        if "health" in line and "t" in line:
            run.health_seen.append(str(line["health"]))
            if line["health"] == "failing" and run.failing_after is None:
                run.failing_after = float(line["t"]) - put
    mention = first_mention(found)
    if mention is not None:
        run.log_after = mention[0] - put
        run.log_line = mention[1][:300]
    return run


@contextlib.contextmanager
def started(backend: str, producer_src: Path | None) -> Iterator[Callable[[], list[WrongRun]]]:
    """Start the two producers; yields ``collect()``, which waits for them (up to
    :data:`GRACE` from their start) and returns their runs. They are killed on leaving."""
    from aiokpl.testing._servers import free_port

    variants = [
        WrongRun("closed port", f"http://127.0.0.1:{free_port()}", "us-east-1"),
        WrongRun(f"closed port, {REGION}", f"http://127.0.0.1:{free_port()}", REGION),
    ]
    with contextlib.ExitStack() as stack:
        into = stack.enter_context(processes())
        logs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in variants]
        began = time.monotonic()
        workers = [
            spawn(
                LineProcess,
                "bench.wrong_endpoint",
                run.name,
                [f"--endpoint={run.endpoint}", f"--region={run.region}", f"--backend={backend}"],
                into,
                cwd=ROOT,
                env=producer_environment(ROOT, producer_src),
                stderr=log,
            )
            for run, log in zip(variants, logs, strict=True)
        ]

        def collect() -> list[WrongRun]:
            for worker in workers:
                worker.finish(began + GRACE - time.monotonic())
            for run, worker, log in zip(variants, workers, logs, strict=True):
                if worker.process.poll() is None:
                    worker.process.kill()
                    worker.process.wait()
                log.seek(0)
                measure(run, worker.lines, log.read())
            return variants

        yield collect


def describe(run: WrongRun) -> str:
    return (
        f"wrong-endpoint/{run.name}: result {result_text(run)}; first log line on the "
        f"endpoint {after_text(run.log_after)}; failing {after_text(run.failing_after)}"
    )


def after_text(seconds: float | None) -> str:
    return "never" if seconds is None else f"after {seconds:.1f} s"


def result_text(run: WrongRun) -> str:
    if run.error is not None:
        return f"producer error: {run.error[:300]}"
    if run.result is None:
        return "no result"
    if run.result["success"]:
        return "delivered (?)"
    return f"{run.result['error_code']}: {run.result['error_message']}"


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] != ["worker"]:
        print("run it through python -m bench.service_life --only wrong-endpoint", file=sys.stderr)
        return 2
    return worker_main(arguments[1:])


if __name__ == "__main__":
    raise SystemExit(main())

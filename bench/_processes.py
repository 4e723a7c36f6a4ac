"""What the many-process benchmarks share (``bench.coordination``, ``bench.fleet``,
``bench.auto``, ``bench.service_life``): producer processes that write one JSON object a line, a
context that kills them all on leaving, the environment they run in
(:func:`producer_environment`), and the ``Config`` and client of a local server
(:func:`local_config`, :func:`local_client`); on the process's side, its lines (:func:`emit`)
and its run (:func:`run_worker`).

A process is started by the benchmark with its standard output piped; a reader thread keeps
every line it could parse (a line that is not JSON, half written at a kill, is skipped). The
process says ``{"ready": ...}`` once its producer is up, and waits for a ``go`` line on its
standard input, so that all of them start their load together.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar


@dataclass
class LineProcess:
    """A producer process and the JSON lines it has written so far."""

    name: str
    process: subprocess.Popen[str]
    lines: list[dict[str, Any]] = field(default_factory=list)
    thread: threading.Thread | None = None

    def start_reader(self) -> None:
        def read() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                with contextlib.suppress(ValueError):
                    self.lines.append(json.loads(line))

        self.thread = threading.Thread(target=read, daemon=True)
        self.thread.start()

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any("ready" in line for line in self.lines):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"producer {self.name} did not start")
            time.sleep(0.05)

    def finish(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds (at least one) for the process to exit, then for its
        reader to take its last lines."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=max(1.0, timeout))
        if self.thread is not None:
            self.thread.join(timeout=10.0)

    def send(self, line: str) -> None:
        """Write ``line`` to the process's standard input (``go``, say)."""
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()


@contextlib.contextmanager
def processes() -> Iterator[list[Any]]:
    """Every process started into the list is killed (if still running) on leaving."""
    started: list[LineProcess] = []
    try:
        yield started
    finally:
        for item in started:
            if item.process.poll() is None:
                item.process.kill()
            item.process.wait()
            for pipe in (item.process.stdin, item.process.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()


_P = TypeVar("_P", bound=LineProcess)


def spawn(
    kind: type[_P],
    module: str,
    name: str,
    arguments: list[str],
    into: list[Any],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stderr: int | IO[Any] = subprocess.DEVNULL,
) -> _P:
    """Start ``python -m MODULE worker ARGUMENTS`` as a ``kind`` (its lines read) into ``into``;
    its standard error goes to ``stderr`` (a file, to read its log afterwards)."""
    process = subprocess.Popen(
        [sys.executable, "-m", module, "worker", *arguments],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=stderr,
        stdin=subprocess.PIPE,
        text=True,
        env=dict(env),
    )
    item = kind(name, process)
    into.append(item)
    item.start_reader()
    return item


def emit(document: Mapping[str, Any]) -> None:
    """A producer process's line: ``document`` as one JSON object on its standard output."""
    print(json.dumps(document), flush=True)


def run_worker(
    worker: Callable[[argparse.Namespace], Awaitable[None]], args: argparse.Namespace
) -> int:
    """Run a producer process's ``worker(args)`` on ``args.backend``; its exit status. An
    exception is written as a line (``{"error": ..., "traceback": ...}``, for the benchmark to
    report) and exits 1."""
    import anyio

    try:
        anyio.run(worker, args, backend=args.backend)
    except Exception as exc:
        emit({"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
        return 1
    return 0


# Credentials a local server accepts; they open nothing anywhere else.
DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def producer_environment(root: Path, producer_src: Path | None = None) -> dict[str, str]:
    """The environment of a producer process: this one's without any ``AWS_*`` variable, with
    dummy credentials and no instance metadata, so that nothing reaches AWS.

    With ``producer_src`` (``--producer-src``: an earlier commit's ``src/``, say), the process
    imports aiokpl from that tree, and the bench package from ``root`` after it: two versions
    of the producer measured against the same server, which always runs this tree's code.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(DUMMY_CREDENTIALS, AWS_EC2_METADATA_DISABLED="true")
    if producer_src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(producer_src), str(root)])
    return env


REGION = "us-east-1"


def local_config(endpoint: str, *, region: str = REGION, **changes: Any) -> Any:
    """A ``Config`` for the local server at ``endpoint``, with dummy credentials and
    ``changes`` (``Config`` fields); every other field at its default.

    It imports aiokpl when called: in a producer process, the tree ``producer_environment``
    put first.
    """
    from aiokpl import Config

    return Config(
        region=region,
        endpoint_url=endpoint,
        aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        **changes,
    )


@contextlib.asynccontextmanager
async def local_client(endpoint: str, service: str = "kinesis") -> AsyncIterator[Any]:
    """An aiobotocore client of ``service`` on the local server at ``endpoint`` (the
    benchmark's own: to create streams and tables, and to read them back)."""
    from aiokpl._kinesis import create_client

    async with create_client(local_config(endpoint), service) as client:
        yield client

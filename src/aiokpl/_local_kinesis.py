"""Start a local Kinesis on 127.0.0.1 (moto's server or kinesalite), for the demo and the tests.

moto is a development dependency, not a runtime one: this module imports nothing from it and
starts it as a separate process, so the server never competes with the producer for the
interpreter lock. kinesalite is an npm package that ``make test`` installs into
``.cache/kinesalite``; it runs under Node.js, also as a separate process.

moto's Kinesis model is not thread-safe: a shard gives each record the largest sequence number
so far plus one, without a lock, so concurrent ``PutRecords`` calls served by its threaded HTTP
server can hand out the same number twice and overwrite a stored record (seen here: 7 of 3,000
records lost with 24 connections, none with one). The launcher below therefore serves moto's
WSGI application behind a lock: HTTP stays concurrent, the model sees one request at a time.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = (
    "DUMMY_CREDENTIALS",
    "KINESALITE_VERSION",
    "LocalServerError",
    "free_port",
    "kinesalite_dir",
    "kinesalite_server",
    "moto_server",
)

DUMMY_CREDENTIALS = {
    "aws_access_key_id": "testing",
    "aws_secret_access_key": "testing",
    "region": "us-east-1",
}
"""Credentials a local server accepts; they open nothing anywhere else."""


class LocalServerError(RuntimeError):
    """The local server could not be started (not installed, or it did not come up)."""


_SERIALIZED_MOTO = """
import sys, threading
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication, MotoRequestHandler, create_backend_app,
)
from werkzeug.serving import make_server

app = DomainDispatcherApplication(create_backend_app)
lock = threading.Lock()

def serialized(environ, start_response):
    with lock:
        return list(app(environ, start_response))

make_server(
    "127.0.0.1", int(sys.argv[1]), serialized, threaded=True, request_handler=MotoRequestHandler
).serve_forever()
"""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _startup_failure(name: str, log: IO[bytes]) -> LocalServerError:
    log.seek(0)
    output = log.read().decode(errors="replace")
    return LocalServerError(f"{name} exited at start-up:\n{output[-2000:]}")


def _wait_for_port(
    process: subprocess.Popen[bytes], port: int, timeout: float, log: IO[bytes]
) -> None:
    step = 0.05
    for _ in range(int(timeout / step)):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=step)  # doubles as the pause between attempts
            raise _startup_failure("moto's server", log)
    raise LocalServerError(f"moto's server did not listen on 127.0.0.1:{port} within {timeout} s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def moto_server(timeout: float = 30.0) -> Iterator[str]:
    """Run moto's server on a free 127.0.0.1 port; yields its endpoint URL; stops it on exit.

    Raises:
        LocalServerError: moto is not installed or the server did not start.
    """
    try:
        import moto.server  # noqa: F401  (only to fail early with a clear message)
    except ImportError as exc:
        raise LocalServerError(
            "moto[server] is not installed: install aiokpl's demo extra (in a checkout: "
            "pip install '.[demo]'), or run `make demo`"
        ) from exc
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    # moto logs every request: its output goes to a file, never to a pipe nobody reads.
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, "-c", _SERIALIZED_MOTO, str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        try:
            _wait_for_port(process, port, timeout, log)
            yield f"http://127.0.0.1:{port}"
        finally:
            _stop(process)


KINESALITE_VERSION = "3.3.3"
"""The kinesalite release ``make kinesalite`` installs (the Makefile pins the same one)."""

# argv[1] is the folder npm installed kinesalite into. Without a `path` option kinesalite keeps
# its store in memory (memdown), so its optional native LevelDB binding is never loaded. Zero
# delays make CreateStream, SplitShard and MergeShards settle at once (kinesalite still reports
# CREATING / UPDATING until its timer fires). Port 0 lets the kernel pick a free port, which is
# then printed: no race with another process grabbing a port picked in advance. The server
# exits when its stdin closes, so it cannot outlive the Python process that started it.
_KINESALITE = r"""
const path = require('path')
const kinesalite = require(path.join(process.argv[1], 'node_modules', 'kinesalite'))
const server = kinesalite({
  createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0, shardLimit: 100000,
})
server.listen(0, '127.0.0.1', () => {
  console.log('kinesalite listening on port ' + server.address().port)
})
process.stdin.on('end', () => process.exit(0))
process.stdin.resume()
"""

_KINESALITE_READY = re.compile(rb"kinesalite listening on port (\d+)")


def kinesalite_dir() -> Path:
    """Where kinesalite is installed: ``$AIOKPL_KINESALITE_DIR``, else ``.cache/kinesalite``.

    The default is relative to the source checkout (``make kinesalite`` installs there).
    """
    configured = os.environ.get("AIOKPL_KINESALITE_DIR")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2] / ".cache" / "kinesalite"


def _wait_for_ready_line(process: subprocess.Popen[bytes], timeout: float, log: IO[bytes]) -> int:
    step = 0.05
    for _ in range(int(timeout / step)):
        log.seek(0)
        found = _KINESALITE_READY.search(log.read())
        if found is not None:
            return int(found.group(1))
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=step)  # doubles as the pause between attempts
            raise _startup_failure("kinesalite", log)
    raise LocalServerError(f"kinesalite did not start listening within {timeout} s")


@contextlib.contextmanager
def kinesalite_server(timeout: float = 30.0) -> Iterator[str]:
    """Run kinesalite on a free 127.0.0.1 port; yields its endpoint URL; stops it on exit.

    kinesalite is found in :func:`kinesalite_dir` and runs under ``node`` from ``PATH``.

    Raises:
        LocalServerError: Node.js or kinesalite is missing, or the server did not start.
    """
    node = shutil.which("node")
    if node is None:
        raise LocalServerError(
            "kinesalite runs on Node.js, and `node` is not on PATH: install Node.js (with npm)"
        )
    directory = kinesalite_dir()
    if not (directory / "node_modules" / "kinesalite" / "package.json").is_file():
        raise LocalServerError(
            f"kinesalite is not installed in {directory}: run `make kinesalite` (or "
            f"`npm install --prefix {directory} kinesalite@{KINESALITE_VERSION}`), or set "
            "AIOKPL_KINESALITE_DIR to the folder it was installed into"
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [node, "-e", _KINESALITE, str(directory)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE,
            env=env,
        )
        try:
            port = _wait_for_ready_line(process, timeout, log)
            yield f"http://127.0.0.1:{port}"
        finally:
            _stop(process)

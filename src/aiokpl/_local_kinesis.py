"""Start a local Kinesis (moto's server) on 127.0.0.1, for the demo and the integration tests.

moto is a development dependency, not a runtime one: this module imports nothing from it and
starts it as a separate process, so the server never competes with the producer for the
interpreter lock.

moto's Kinesis model is not thread-safe: a shard gives each record the largest sequence number
so far plus one, without a lock, so concurrent ``PutRecords`` calls served by its threaded HTTP
server can hand out the same number twice and overwrite a stored record (seen here: 7 of 3,000
records lost with 24 connections, none with one). The launcher below therefore serves moto's
WSGI application behind a lock: HTTP stays concurrent, the model sees one request at a time.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import IO

__all__ = ("DUMMY_CREDENTIALS", "LocalServerError", "free_port", "moto_server")

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


def _wait_for_port(
    process: subprocess.Popen[bytes], port: int, timeout: float, log: IO[bytes]
) -> None:
    step = 0.05
    for _ in range(int(timeout / step)):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=step)  # doubles as the pause between attempts
            log.seek(0)
            output = log.read().decode(errors="replace")
            raise LocalServerError(f"moto's server exited at start-up:\n{output[-2000:]}")
    raise LocalServerError(f"moto's server did not listen on 127.0.0.1:{port} within {timeout} s")


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
            "moto[server] is not installed; `make demo` installs it into .venv"
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
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

"""Start a local Kinesis on 127.0.0.1 (moto's server or kinesalite), for ``aiokpl local``,
the demo and the tests.

moto is an optional dependency (the ``local`` extra, ``pip install 'aiokpl[local]'``), not a
runtime one: this module imports it only inside :func:`make_moto_server`. The demo and the tests
start that server as a separate process, so it never competes with the producer for the
interpreter lock; ``aiokpl local`` (:mod:`aiokpl._cli.local`) serves it in its own process.
kinesalite is an npm package that ``make test`` installs into ``.cache/kinesalite``; it runs
under Node.js, also as a separate process.

moto's Kinesis model is not thread-safe: a shard gives each record the largest sequence number
so far plus one, without a lock, so concurrent ``PutRecords`` calls served by its threaded HTTP
server can hand out the same number twice and overwrite a stored record (seen here: 7 of 3,000
records lost with 24 connections, none with one; ``docs/local-development.md`` has the figures
for stock ``python -m moto.server``). :func:`make_moto_server` therefore serves moto's WSGI
application behind a lock: HTTP stays concurrent, the model sees one request at a time.

In front of it, always, is :class:`~aiokpl.testing._throttling.ThrottlingApp`: it plays what
moto 5.2 lacks of on-demand streams whose record distribution strategy is ``AUTO`` (records
placed at random whatever their keys, records without a partition key,
``UpdateStreamRecordDistributionStrategy``, the strategy in ``DescribeStreamSummary``) and
``DryRun``, and it stores ``PutRecords`` through moto's model directly, with or without limits.

moto's shard also finds that largest number by copying every key it holds into a list, once
per record stored: 8 µs a record on an empty shard, 140 µs at 10,000 records, 270 µs at 20,000,
so a local server slowed down as it filled (a 40-second benchmark cell's requests took three
times as long at its end). :func:`make_moto_server` reads the last key instead (the keys are
the sequence numbers, in the order given: :func:`aiokpl.testing._moto_model.mend_shards`).

Given :class:`~aiokpl.testing._throttling.ShardLimits` (or :class:`~aiokpl.testing._throttling.
ServerFaults`), the same application enforces AWS's per-shard write limits (or adds faults):
see :mod:`aiokpl.testing._throttling`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.request import urlopen

from ._guard import LocalOnly
from ._moto_extras import known_regions_only
from ._moto_model import mend_shards
from ._throttling import THROUGHPUT_PATH, ServerFaults, ShardLimits, ThrottlingApp

if TYPE_CHECKING:
    from werkzeug.serving import BaseWSGIServer

__all__ = (
    "DUMMY_CREDENTIALS",
    "KINESALITE_VERSION",
    "MOTO_MISSING",
    "THROUGHPUT_PATH",
    "LocalServerError",
    "ServerFaults",
    "ShardLimits",
    "free_port",
    "kinesalite_dir",
    "kinesalite_server",
    "make_moto_server",
    "moto_installed",
    "moto_server",
    "throughput",
)

DUMMY_CREDENTIALS = {
    "aws_access_key_id": "testing",
    "aws_secret_access_key": "testing",
    "region": "us-east-1",
}
"""Credentials a local server accepts; they open nothing anywhere else."""


class LocalServerError(RuntimeError):
    """The local server could not be started (not installed, or it did not come up)."""


MOTO_MISSING = "moto's server is not installed: pip install 'aiokpl[local]'"
"""The one line a command prints when the ``local`` extra is missing."""


def moto_installed() -> bool:
    """Whether moto's server (the ``local`` extra) can be imported, without importing it."""
    return all(importlib.util.find_spec(name) is not None for name in ("moto", "werkzeug", "flask"))


def make_moto_server(
    host: str,
    port: int,
    *,
    limits: ShardLimits | None = None,
    faults: ServerFaults | None = None,
    allowed_hosts: Iterable[str] = (),
) -> BaseWSGIServer:
    """moto's server, bound to ``host:port`` and ready to ``serve_forever()``.

    The socket is listening when this returns (port 0: the kernel picks one; read it from the
    server's ``server_port``). Requests are served on threads, and moto's WSGI application
    runs behind one lock (see the module header for why), with ``AUTO`` streams and ``DryRun``
    played in front of it. With ``limits`` every shard takes at most that much, with
    ``faults`` requests fail or hang as they say; the server counts, per second, what it
    stored and refused (``GET`` :data:`THROUGHPUT_PATH`, or :func:`throughput`).

    It serves the programs of this machine only (:class:`~aiokpl.testing._guard.LocalOnly`):
    requests from web pages (an ``Origin`` header) and for another ``Host`` than
    ``localhost``, an IP address or one of ``allowed_hosts``, with its port, are refused, and
    no answer allows anything across origins.

    Raises:
        LocalServerError: moto's server is not installed.
        OSError: the address cannot be bound (in use, not local).
    """
    try:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server
    except ImportError as exc:
        raise LocalServerError(MOTO_MISSING) from exc

    mend_shards()
    served = ThrottlingApp(
        DomainDispatcherApplication(create_backend_app), threading.Lock(), limits, faults
    )

    # Bound here, not by werkzeug, which prints its own message and exits on a bind error.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        bound = int(sock.getsockname()[1])
        # werkzeug serves a duplicate of this descriptor; this one closes on leaving.
        return make_server(
            host,
            bound,
            # Refused first: a request from a web page or for another host name.
            LocalOnly(known_regions_only(served), bound, allowed_hosts),
            threaded=True,
            request_handler=MotoRequestHandler,
            fd=sock.fileno(),
        )


# argv[1] is the folder this package is in, put first on sys.path so the child imports this
# very aiokpl (a source checkout or an installed one); argv[2] the port; argv[3] the limits and
# faults, as JSON.
_SERIALIZED_MOTO = """
import sys
sys.path.insert(0, sys.argv[1])
from aiokpl.testing._servers import _serve_child
_serve_child(int(sys.argv[2]), sys.argv[3])
"""


def _serve_child(port: int, settings: str) -> None:
    """The body of the server process :func:`moto_server` starts."""
    parsed = json.loads(settings)
    limits = None if parsed["limits"] is None else ShardLimits(**parsed["limits"])
    faults = None if parsed["faults"] is None else ServerFaults(**parsed["faults"])
    make_moto_server("127.0.0.1", port, limits=limits, faults=faults).serve_forever()


def throughput(endpoint: str, timeout: float = 10.0) -> dict[str, Any]:
    """What a throttling server (or one with faults) reports at :data:`THROUGHPUT_PATH`.

    Returns the JSON document: ``limits`` and ``faults`` as set, and ``series``, one row per
    second (whole seconds of the server's wall clock, since the epoch) and stream, with the records
    ``delivered`` (stored), ``throttled`` and ``failed`` (by a fault) in that second.
    """
    with urlopen(endpoint.rstrip("/") + THROUGHPUT_PATH, timeout=timeout) as answer:
        document: dict[str, Any] = json.loads(answer.read())
    return document


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
def moto_server(
    timeout: float = 30.0,
    *,
    limits: ShardLimits | None = None,
    faults: ServerFaults | None = None,
) -> Iterator[str]:
    """Run moto's server on a free 127.0.0.1 port; yields its endpoint URL; stops it on exit.

    ``limits`` and ``faults`` are as for :func:`make_moto_server`: AWS's per-shard limits are
    ``ShardLimits()``.

    Raises:
        LocalServerError: moto is not installed or the server did not start.
    """
    if not moto_installed():
        raise LocalServerError(MOTO_MISSING)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    # moto logs every request: its output goes to a file, never to a pipe nobody reads.
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _SERIALIZED_MOTO,
                str(Path(__file__).resolve().parents[2]),
                str(port),
                json.dumps(
                    {
                        "limits": None if limits is None else asdict(limits),
                        "faults": None if faults is None else asdict(faults),
                    }
                ),
            ],
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
# kinesalite rethrows a request's 'error' event (`req.on('error', function(err) { throw err })`),
# so a client that resets its connection mid-request (a producer cancelling a request at exit,
# a timed-out request) killed the whole server, and every later test on it saw "connection
# refused". That one error is said on stderr and survived; anything else still ends the process.
_KINESALITE = r"""
process.on('uncaughtException', (err) => {
  if (err && (err.code === 'ECONNRESET' || err.message === 'aborted')) {
    console.error('kinesalite: a client aborted a request (' + err.message + ')')
    return
  }
  console.error(err && err.stack ? err.stack : String(err))
  process.exit(1)
})
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
    return Path(__file__).resolve().parents[3] / ".cache" / "kinesalite"


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
            died = process.poll()
            _stop(process)
        if died is not None:
            # It ended while in use: the tests that used it saw only refused connections.
            log.seek(0)
            output = log.read().decode(errors="replace")
            raise LocalServerError(
                f"kinesalite exited while in use (status {died}); its output:\n{output[-4000:]}"
            )

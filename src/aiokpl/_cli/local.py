"""``aiokpl local``: a local Kinesis for development, until Ctrl-C.

It serves moto's Kinesis on 127.0.0.1 (default port :data:`DEFAULT_PORT`) through the same
launcher as the demo and the tests (:func:`aiokpl.testing._servers.make_moto_server`): moto's
WSGI application behind a lock, because stock ``python -m moto.server`` loses acknowledged
records under concurrent ``PutRecords`` (see that module and ``docs/local-development.md``).
It creates the streams given with ``--stream NAME[:SHARDS]``, prints the endpoint and the
lines that point a shell, the ``aws`` CLI or a :class:`~aiokpl.Config` at it, and serves until
SIGINT or SIGTERM, which stop it with one line on stderr and exit status 0 (stopping is how a
server ends, as for ``tail`` and ``coordinate``).

The server runs in a thread of this process; the main thread only creates the streams and then
waits for a signal. The signal handlers raise :class:`_Stopped` in the main thread (as Python's
own SIGINT handler raises ``KeyboardInterrupt``), so no lock is ever taken in a handler.

Without moto's server installed, the command prints one line naming the ``local`` extra and
exits 2, as it does when the address cannot be bound.

The web server's line per request is printed only with ``--log-requests``; without it, its
errors still are, and a request that is not HTTP at all (an ``https://`` URL sends a TLS
handshake) gets one line saying so, instead of the bytes it sent (:class:`_RequestErrors`).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import re
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TextIO

import anyio

from .._core.config import Config
from .._kinesis import create_client, error_of
from ..testing._servers import (
    DUMMY_CREDENTIALS,
    LocalServerError,
    make_moto_server,
    moto_installed,
)
from .options import EXIT_OK, EXIT_SERVICE_ERROR, EXIT_USAGE, made_of

__all__ = ("DEFAULT_PORT", "add_parser", "run_local_command", "stream_spec", "usage_lines")

DEFAULT_PORT = 4567
"""The port ``aiokpl local`` listens on by default (kinesalite's default too)."""

_STREAM_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,128}")


class _Stopped(Exception):
    """Raised in the main thread by the SIGINT / SIGTERM handler."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _RequestErrors(logging.Handler):
    """The web server's log (werkzeug's logger) without its line per request.

    Errors are printed, except a request werkzeug cannot parse (``Bad request version``,
    ``Bad request syntax``, ...: a TLS handshake, or another protocol), which is said once, in
    words, without the bytes.
    """

    def __init__(self, stderr: TextIO) -> None:
        # Level NOTSET: werkzeug adds a handler of its own unless one takes its INFO lines.
        super().__init__()
        self._stderr = stderr
        self._warned = False

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.ERROR:
            return
        message = record.getMessage()
        if "code 400, message Bad " in message:
            if self._warned:
                return
            self._warned = True
            message = (
                "aiokpl local: a client sent something that is not HTTP: an https:// URL? "
                "This server speaks plain http://"
            )
        print(message.rstrip(), file=self._stderr, flush=True)


@contextmanager
def _request_log(stderr: TextIO, *, enabled: bool) -> Iterator[None]:
    """Unless ``enabled``, werkzeug logs through :class:`_RequestErrors` only while entered."""
    if enabled:
        yield  # werkzeug's own handler: a line per request on stderr
        return
    logger = logging.getLogger("werkzeug")
    handler = _RequestErrors(stderr)
    saved = logger.level, logger.propagate
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


def stream_spec(text: str) -> tuple[str, int]:
    """An argparse type: ``NAME`` or ``NAME:SHARDS`` (1 shard when not given)."""
    name, colon, shards_text = text.partition(":")
    if not _STREAM_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(
            f"invalid stream name {name!r}: 1 to 128 of a-z, A-Z, 0-9, '_', '.', '-'"
        )
    if not colon:
        return name, 1
    try:
        shards = int(shards_text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a shard count: {shards_text!r}") from None
    if shards < 1:
        raise argparse.ArgumentTypeError(f"a stream needs at least 1 shard, got {shards}")
    return name, shards


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _client_host(host: str) -> str:
    """The address a client on this machine uses to reach a server bound to ``host``."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def usage_lines(endpoint: str, region: str, streams: list[tuple[str, int]]) -> list[str]:
    """What ``aiokpl local`` prints once it listens: how to point everything at ``endpoint``."""
    key = DUMMY_CREDENTIALS["aws_access_key_id"]
    secret = DUMMY_CREDENTIALS["aws_secret_access_key"]
    example = streams[0][0] if streams else "STREAM"
    created = ", ".join(f"{n} ({s} shard{'s' if s > 1 else ''})" for n, s in streams)
    return [
        f"local Kinesis (moto) at {endpoint}, region {region}",
        f"streams: {created or 'none yet (create them with --stream, or the aws line below)'}",
        "",
        "dummy credentials (a local server needs some; these open nothing anywhere else):",
        f"  export AWS_ACCESS_KEY_ID={key} AWS_SECRET_ACCESS_KEY={secret} "
        f"AWS_DEFAULT_REGION={region}",
        "command line:",
        f"  aiokpl --endpoint-url {endpoint} put {example} FILE",
        f"  aiokpl --endpoint-url {endpoint} tail {example} --trim-horizon",
        f"  aws --endpoint-url {endpoint} kinesis list-streams",
        "Python:",
        f'  Config(endpoint_url="{endpoint}", region="{region}",',
        f'         aws_access_key_id="{key}", aws_secret_access_key="{secret}")',
        "",
        "streams live in memory until this stops; Ctrl-C stops it",
    ]


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`_Stopped` in the main thread while this is entered."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers can be set only in the main thread; a caller elsewhere stops us
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise _Stopped(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


async def _create_streams(endpoint: str, region: str, streams: list[tuple[str, int]]) -> None:
    config = Config(
        endpoint_url=endpoint,
        region=region,
        aws_access_key_id=DUMMY_CREDENTIALS["aws_access_key_id"],
        aws_secret_access_key=DUMMY_CREDENTIALS["aws_secret_access_key"],
    )
    async with create_client(config) as client:
        for name, shards in streams:
            await client.create_stream(StreamName=name, ShardCount=shards)


def run_local_command(
    args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Run ``aiokpl local`` as ``args`` say, until SIGINT or SIGTERM; returns the exit status."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    region: str = getattr(args, "region", None) or DUMMY_CREDENTIALS["region"]
    streams: list[tuple[str, int]] = args.streams or []
    names = [name for name, _ in streams]
    if len(set(names)) != len(names):
        print("aiokpl local: a stream is named twice in --stream", file=stderr)
        return EXIT_USAGE
    if not moto_installed():
        print(
            "aiokpl local: moto's server is not installed: pip install 'aiokpl[local]'",
            file=stderr,
        )
        return EXIT_USAGE
    if not _is_loopback(args.host):
        print(
            f"aiokpl local: warning: {args.host} is not a loopback address: anyone who can "
            "reach it can read and write these streams (there is no authentication)",
            file=stderr,
        )
    with _stop_on_signals(), _request_log(stderr, enabled=args.log_requests):
        try:
            return _serve(args.host, args.port, region, streams, stdout, stderr)
        except BaseException as exc:
            if not made_of(exc, _Stopped):
                raise
            stopped = exc if isinstance(exc, _Stopped) else _first_stop(exc)
            name = "Ctrl-C" if stopped.signum == signal.SIGINT else "SIGTERM"
            print(f"aiokpl local: stopped ({name}); its streams are gone", file=stderr)
            return EXIT_OK


def _first_stop(group: BaseException) -> _Stopped:
    for inner in getattr(group, "exceptions", ()):
        if isinstance(inner, _Stopped):
            return inner
        return _first_stop(inner)
    raise AssertionError("made_of() found a _Stopped")  # pragma: no cover


def _serve(
    host: str,
    port: int,
    region: str,
    streams: list[tuple[str, int]],
    stdout: TextIO,
    stderr: TextIO,
) -> int:
    try:
        server = make_moto_server(host, port)
    except LocalServerError as exc:
        print(f"aiokpl local: {exc}", file=stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"aiokpl local: cannot listen on {host}:{port}: {exc.strerror}", file=stderr)
        return EXIT_USAGE
    thread = threading.Thread(target=server.serve_forever, name="aiokpl-local", daemon=True)
    thread.start()
    try:
        endpoint = f"http://{_client_host(host)}:{server.port}"
        try:
            anyio.run(_create_streams, endpoint, region, streams)
        except Exception as exc:  # every client error becomes data here
            code, message = error_of(exc)
            print(f"aiokpl local: cannot create the streams: {code}: {message}", file=stderr)
            return EXIT_SERVICE_ERROR
        for line in usage_lines(endpoint, region, streams):
            print(line, file=stdout)
        stdout.flush()
        threading.Event().wait()  # until a signal handler raises _Stopped
        raise AssertionError("an event nobody sets was set")  # pragma: no cover
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``local`` with the subcommands of the ``aiokpl`` parser.

    ``parents`` (the AWS options) is not used: the server is the endpoint.
    """
    local = commands.add_parser(
        "local",
        help="run a local Kinesis (moto) for development, until Ctrl-C",
        description="Run moto's Kinesis on this machine, made safe for concurrent PutRecords, "
        "until Ctrl-C or SIGTERM (exit status 0). Needs the local extra: "
        "pip install 'aiokpl[local]'.",
    )
    local.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="TCP port to listen on; 0 picks a free one (default: %(default)s)",
    )
    local.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on; anything but a loopback address is warned about: the "
        "server has no authentication (default: %(default)s)",
    )
    local.add_argument(
        "--stream",
        dest="streams",
        action="append",
        type=stream_spec,
        metavar="NAME[:SHARDS]",
        help="create this stream at start-up, with SHARDS shards (default 1); repeatable",
    )
    local.add_argument(
        "--region",
        default=argparse.SUPPRESS,
        help="region the streams are created in: moto keeps streams per region, and a client "
        f"in another region does not see them (default: {DUMMY_CREDENTIALS['region']})",
    )
    local.add_argument(
        "--log-requests",
        action="store_true",
        help="print the web server's line for every request on stderr (default: errors only)",
    )
    local.set_defaults(handler=run_local_command)

"""``aiokpl local``: a local Kinesis for development, until Ctrl-C.

It serves moto's Kinesis on 127.0.0.1 (default port :data:`DEFAULT_PORT`) through the same
launcher as the demo and the tests (:func:`aiokpl.testing._servers.make_moto_server`): moto's
WSGI application behind a lock, because stock ``python -m moto.server`` loses acknowledged
records under concurrent ``PutRecords`` (see that module and ``docs/local-development.md``).
It creates the streams given with ``--stream NAME[:SHARDS[:auto]]`` (``:auto``: an on-demand
stream whose record distribution strategy is ``AUTO``, which the server places records on
itself, whatever their keys), prints the endpoint and the
lines that point a shell, the ``aws`` CLI or a :class:`~aiokpl.Config` at it, and serves until
SIGINT or SIGTERM, which stop it with one line on stderr and exit status 0 (stopping is how a
server ends, as for ``tail`` and ``coordinate``).

The server runs in a thread of this process; the main thread only creates the streams and then
waits for a signal. The signal handlers raise :class:`_Stopped` in the main thread (as Python's
own SIGINT handler raises ``KeyboardInterrupt``), so no lock is ever taken in a handler.

Without moto's server installed, the command prints one line naming the ``local`` extra and
exits 2, as it does when the address cannot be bound.

``--throttle`` makes the server enforce AWS's per-shard write limits (1,000 records/s and
1 MiB/s per shard, one second of burst; ``--shard-records-per-sec``, ``--shard-bytes-per-sec``
and ``--burst-seconds`` change them and imply ``--throttle``); ``--fault-rate``,
``--fail-stream``, ``--hang-stream`` and ``--control-latency`` add faults. Both are
:mod:`aiokpl.testing._throttling`'s; the banner then says what the server enforces.

It serves the programs of this machine, not web pages: a request with an ``Origin`` header (a
browser's, from any page the developer has open) or for another ``Host`` than ``localhost`` or
an IP address with the server's port (a name pointed at 127.0.0.1 by DNS rebinding) is refused
with 403, and no answer carries CORS headers (:mod:`aiokpl.testing._guard`); ``--allow-host``
adds a name (``host.docker.internal``, for a container on this machine).

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
from typing import Any, NamedTuple, TextIO

import anyio

from .._core.config import Config
from .._kinesis import create_client, error_of
from ..testing._servers import (
    DUMMY_CREDENTIALS,
    THROUGHPUT_PATH,
    LocalServerError,
    ServerFaults,
    ShardLimits,
    make_moto_server,
    moto_installed,
)
from .options import EXIT_OK, EXIT_SERVICE_ERROR, EXIT_USAGE, made_of, positive_float

__all__ = (
    "DEFAULT_PORT",
    "AutoStreamSpec",
    "StreamSpec",
    "add_parser",
    "enforcement_lines",
    "fault_rate",
    "limits_and_faults",
    "run_local_command",
    "seconds",
    "stream_spec",
    "usage_lines",
)

DEFAULT_PORT = 4567
"""The port ``aiokpl local`` listens on by default (kinesalite's default too)."""

_STREAM_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,128}")


class StreamSpec(NamedTuple):
    """A ``--stream``: its name and shard count (a provisioned stream)."""

    name: str
    shards: int


class AutoStreamSpec(StreamSpec):
    """A ``--stream NAME:SHARDS:auto``: an on-demand stream whose record distribution strategy
    is ``AUTO`` (the server places its records, whatever their keys)."""

    __slots__ = ()


def _described(stream: tuple[str, int]) -> str:
    """``events (4 shards)``; an ``AUTO`` stream says so."""
    name, shards = stream
    plural = "s" if shards > 1 else ""
    if isinstance(stream, AutoStreamSpec):
        return f"{name} ({shards} shard{plural}, on-demand, AUTO: records placed by the server)"
    return f"{name} ({shards} shard{plural})"


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


def stream_spec(text: str) -> StreamSpec:
    """An argparse type: ``NAME``, ``NAME:SHARDS`` (1 shard when not given) or
    ``NAME:SHARDS:auto`` (an on-demand ``AUTO`` stream: :class:`AutoStreamSpec`)."""
    name, colon, rest = text.partition(":")
    if not _STREAM_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(
            f"invalid stream name {name!r}: 1 to 128 of a-z, A-Z, 0-9, '_', '.', '-'"
        )
    if not colon:
        return StreamSpec(name, 1)
    shards_text, colon, mode = rest.partition(":")
    if colon and mode != "auto":
        raise argparse.ArgumentTypeError(
            f"after the shard count only ':auto' may follow (an on-demand stream whose records "
            f"the server places), got {':' + mode!r}"
        )
    try:
        shards = int(shards_text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a shard count: {shards_text!r}") from None
    if shards < 1:
        raise argparse.ArgumentTypeError(f"a stream needs at least 1 shard, got {shards}")
    return AutoStreamSpec(name, shards) if colon else StreamSpec(name, shards)


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


def fault_rate(text: str) -> float:
    """An argparse type: a fraction from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a fraction from 0 to 1, got {text}")
    return value


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(
            f"must be a finite number of seconds, 0 or more, got {text}"
        )
    return value


def enforcement_lines(
    endpoint: str, limits: ShardLimits | None, faults: ServerFaults | None
) -> list[str]:
    """What the server enforces beyond moto: its limits, its faults, where its counts are."""
    lines = []
    if limits is not None:
        lines += [
            f"throttling: {limits.describe()}",
            "  over the limit, PutRecords answers ProvisionedThroughputExceededException per "
            "record (HTTP 200, FailedRecordCount > 0), PutRecord the same as an HTTP 400 error",
        ]
    if faults is not None and faults.any:
        lines += [f"fault: {line}" for line in faults.describe()]
    if lines:
        lines.append(
            f"records stored, throttled and failed per second: curl {endpoint}{THROUGHPUT_PATH}"
        )
    return lines


def usage_lines(
    endpoint: str,
    region: str,
    streams: list[tuple[str, int]],
    limits: ShardLimits | None = None,
    faults: ServerFaults | None = None,
) -> list[str]:
    """What ``aiokpl local`` prints once it listens: how to point everything at ``endpoint``,
    and what it enforces beyond moto (:func:`enforcement_lines`)."""
    key = DUMMY_CREDENTIALS["aws_access_key_id"]
    secret = DUMMY_CREDENTIALS["aws_secret_access_key"]
    example = streams[0][0] if streams else "STREAM"
    created = ", ".join(_described(stream) for stream in streams)
    return [
        f"local Kinesis (moto) at {endpoint}, region {region}",
        f"streams: {created or 'none yet (create them with --stream, or the aws line below)'}",
        *enforcement_lines(endpoint, limits, faults),
        "",
        "environment: the endpoint, and dummy credentials (a local server needs some; these",
        "open nothing anywhere else):",
        f"  export AWS_ENDPOINT_URL_KINESIS={endpoint}",
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
        for stream in streams:
            name, shards = stream
            if isinstance(stream, AutoStreamSpec):
                await client.create_stream(
                    StreamName=name,
                    ShardCount=shards,
                    StreamModeDetails={"StreamMode": "ON_DEMAND"},
                    RecordDistributionStrategy="AUTO",
                )
            else:
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
    limits, faults = limits_and_faults(args)
    with _stop_on_signals(), _request_log(stderr, enabled=args.log_requests):
        try:
            return _serve(args, region, streams, limits, faults, stdout, stderr)
        except BaseException as exc:
            if not made_of(exc, _Stopped):
                raise
            stopped = exc if isinstance(exc, _Stopped) else _first_stop(exc)
            name = "Ctrl-C" if stopped.signum == signal.SIGINT else "SIGTERM"
            print(f"aiokpl local: stopped ({name}); its streams are gone", file=stderr)
            return EXIT_OK


def limits_and_faults(args: argparse.Namespace) -> tuple[ShardLimits | None, ServerFaults]:
    """The per-shard limits (``None``: no throttling) and faults ``args`` ask for.

    A rate or a burst given implies ``--throttle``; what is not given is AWS's.
    """
    rates = {
        "records_per_second": getattr(args, "shard_records_per_sec", None),
        "bytes_per_second": getattr(args, "shard_bytes_per_sec", None),
        "burst_seconds": getattr(args, "burst_seconds", None),
    }
    given = {name: value for name, value in rates.items() if value is not None}
    limits = ShardLimits(**given) if getattr(args, "throttle", False) or given else None
    faults = ServerFaults(
        fault_rate=getattr(args, "fault_rate", 0.0),
        fail_streams=tuple(getattr(args, "fail_streams", None) or ()),
        hang_streams=tuple(getattr(args, "hang_streams", None) or ()),
        hang_seconds=getattr(args, "hang_seconds", 10.0),
        control_latency=getattr(args, "control_latency", 0.0),
    )
    return limits, faults


def _first_stop(group: BaseException) -> _Stopped:
    for inner in getattr(group, "exceptions", ()):
        if isinstance(inner, _Stopped):
            return inner
        return _first_stop(inner)
    raise AssertionError("made_of() found a _Stopped")  # pragma: no cover


def _serve(
    args: argparse.Namespace,
    region: str,
    streams: list[tuple[str, int]],
    limits: ShardLimits | None,
    faults: ServerFaults,
    stdout: TextIO,
    stderr: TextIO,
) -> int:
    host: str = args.host
    port: int = args.port
    try:
        server = make_moto_server(
            host, port, limits=limits, faults=faults, allowed_hosts=args.allowed_hosts or ()
        )
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
        for line in usage_lines(endpoint, region, streams, limits, faults):
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
    _add_server_options(local)
    _add_fault_options(local)
    local.set_defaults(handler=run_local_command)


def _add_server_options(local: argparse.ArgumentParser) -> None:
    """Where the server listens, the streams it starts with, and what it logs."""
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
        metavar="NAME[:SHARDS[:auto]]",
        help="create this stream at start-up, with SHARDS shards (default 1); ':auto' makes it "
        "an on-demand stream whose record distribution strategy is AUTO (the server places "
        "each record on a shard of its choosing, whatever its keys); repeatable",
    )
    local.add_argument(
        "--region",
        default=argparse.SUPPRESS,
        help="region the streams are created in: moto keeps streams per region, and a client "
        f"in another region does not see them (default: {DUMMY_CREDENTIALS['region']})",
    )
    local.add_argument(
        "--allow-host",
        dest="allowed_hosts",
        action="append",
        metavar="NAME",
        help="answer requests for this host name too (e.g. host.docker.internal, for a "
        "container); without it, only localhost and IP addresses: a request for another name "
        "(a DNS rebinding) or from a web page (with an Origin header) is refused; repeatable",
    )
    local.add_argument(
        "--log-requests",
        action="store_true",
        help="print the web server's line for every request on stderr (default: errors only)",
    )


def _add_fault_options(local: argparse.ArgumentParser) -> None:
    """AWS's per-shard write limits and the faults the server adds (``_shard_limits``)."""
    limits = local.add_argument_group("throttling and faults")
    limits.add_argument(
        "--throttle",
        action="store_true",
        help="enforce AWS's per-shard write limits: 1000 records/s and 1 MiB/s per shard "
        "(data + partition key), one second of burst; over them a record fails with "
        "ProvisionedThroughputExceededException, as on AWS",
    )
    limits.add_argument(
        "--shard-records-per-sec",
        type=positive_float,
        metavar="N",
        help="records per second a shard takes (implies --throttle; default: 1000)",
    )
    limits.add_argument(
        "--shard-bytes-per-sec",
        type=positive_float,
        metavar="N",
        help="bytes (data + partition key) per second a shard takes (implies --throttle; "
        "default: 1048576)",
    )
    limits.add_argument(
        "--burst-seconds",
        type=positive_float,
        metavar="S",
        help="seconds of each rate a quiet shard takes at once (implies --throttle; default: 1)",
    )
    limits.add_argument(
        "--fault-rate",
        type=fault_rate,
        default=0.0,
        metavar="P",
        help="fraction of requests (PutRecord(s), ListShards, DescribeStream*, GetRecords, "
        "GetShardIterator) that fail at random with InternalFailure (HTTP 500) or "
        "ServiceUnavailable (HTTP 503) (default: %(default)s)",
    )
    limits.add_argument(
        "--fail-stream",
        dest="fail_streams",
        action="append",
        metavar="NAME",
        help="every request naming this stream fails with InternalFailure; repeatable",
    )
    limits.add_argument(
        "--hang-stream",
        dest="hang_streams",
        action="append",
        metavar="NAME",
        help="every request naming this stream is answered --hang-seconds late (other streams "
        "are served meanwhile); repeatable",
    )
    limits.add_argument(
        "--hang-seconds",
        type=seconds,
        default=10.0,
        metavar="S",
        help="how late a --hang-stream's requests are answered (default: %(default)g)",
    )
    limits.add_argument(
        "--control-latency",
        type=seconds,
        default=0.0,
        metavar="S",
        help="answer every ListShards, DescribeStream and DescribeStreamSummary S seconds late, "
        "as a far region or a cold start's first calls do: a new producer's first shard map "
        "comes late (default: %(default)g)",
    )

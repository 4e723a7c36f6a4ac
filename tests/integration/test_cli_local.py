"""``aiokpl local`` as a real process: records put through it are stored, and signals stop it.

Each test starts the command on a port the kernel picks (``--port 0``; the endpoint is read from
its first line of output) and its fixture stops the process whatever the test did.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from aiokpl import Producer
from aiokpl.testing import read_stream
from aiokpl.testing._servers import throughput

from .helpers import admin_client, aiokpl_script, config, interruptible, user_records

pytestmark = pytest.mark.integration

_ENDPOINT = re.compile(r"^local Kinesis \(moto\) at (http://127\.0\.0\.1:\d+), region us-east-1$")

StartLocal = Callable[..., tuple["subprocess.Popen[str]", str, str]]


@pytest.fixture
def start_local() -> Iterator[StartLocal]:
    """Start ``python -m aiokpl local --port 0 ARGS...`` (``command`` instead of
    ``python -m aiokpl local`` if given).

    Returns the process, its endpoint and what it printed up to its last line of instructions
    (the rest of stdout is read by ``communicate``).
    """
    started: list[subprocess.Popen[str]] = []

    def start(
        *args: str, command: list[str] | None = None
    ) -> tuple[subprocess.Popen[str], str, str]:
        process = subprocess.Popen(
            [*(command or [sys.executable, "-m", "aiokpl", "local"]), "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=interruptible,
        )
        started.append(process)
        assert process.stdout is not None
        first = process.stdout.readline()
        found = _ENDPOINT.match(first.rstrip("\n"))
        assert found is not None, first + process.stderr.read()  # type: ignore[union-attr]
        banner = [first]
        while not banner[-1].endswith("Ctrl-C stops it\n"):
            banner.append(process.stdout.readline())
            assert banner[-1], banner
        return process, found.group(1), "".join(banner)

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate()


def _stop(process: subprocess.Popen[str], signum: int) -> tuple[str, str]:
    process.send_signal(signum)
    out, err = process.communicate(timeout=30)
    return out, err


async def _put_and_read(endpoint: str, stream: str, count: int) -> list[tuple[str | None, bytes]]:
    async with Producer(config(endpoint, record_max_buffered_time_ms=20)) as producer:
        outcomes = [
            await producer.put_record(
                stream=stream, partition_key=f"key-{i % 7}", data=f"record {i}".encode()
            )
            for i in range(count)
        ]
        await producer.flush()
    assert all(outcome.result().success for outcome in outcomes)
    async with admin_client(endpoint) as admin:
        return [(r.partition_key, r.data) for r in user_records(await read_stream(admin, stream))]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_records_put_through_the_producer_are_stored_and_ctrl_c_stops_it(
    start_local: StartLocal, backend: str
) -> None:
    process, endpoint, out = start_local("--stream", "events:2", "--stream", "other")
    stored = anyio.run(_put_and_read, endpoint, "events", 500, backend=backend)
    assert sorted(stored) == sorted((f"key-{i % 7}", f"record {i}".encode()) for i in range(500))
    rest, err = _stop(process, signal.SIGINT)
    assert rest == ""
    assert process.returncode == 0, err
    assert "Traceback" not in err
    assert err.splitlines()[-1] == "aiokpl local: stopped (Ctrl-C); its streams are gone"
    assert "streams: events (2 shards), other (1 shard)" in out
    assert f"aiokpl --endpoint-url {endpoint} put events FILE" in out
    assert "export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing" in out
    assert f'Config(endpoint_url="{endpoint}", region="us-east-1",' in out


def test_sigterm_stops_it_and_says_so(start_local: StartLocal) -> None:
    process, _, out = start_local()
    _, err = _stop(process, signal.SIGTERM)
    assert process.returncode == 0, err
    assert "Traceback" not in err
    assert err.splitlines()[-1] == "aiokpl local: stopped (SIGTERM); its streams are gone"
    assert "streams: none yet" in out


def test_a_port_in_use_is_one_line_and_exit_2(start_local: StartLocal) -> None:
    _, endpoint, _ = start_local()
    port = endpoint.rsplit(":", 1)[1]
    finished = subprocess.run(
        [sys.executable, "-m", "aiokpl", "local", "--port", port],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == 2
    assert finished.stderr.startswith(f"aiokpl local: cannot listen on 127.0.0.1:{port}: ")
    assert len(finished.stderr.splitlines()) == 1


# The first bytes of a TLS ClientHello: what a client given https://127.0.0.1:PORT sends.
TLS_HELLO = bytes.fromhex("16030100a5010000a10303") + bytes(range(32)) + b"\x00\x20\xc0\x2b"


def _send_raw(endpoint: str, data: bytes) -> None:
    host, port = endpoint.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(4096):  # until the server answers (400) and closes
            pass


def test_requests_are_not_logged_and_a_tls_client_gets_one_line(start_local: StartLocal) -> None:
    process, endpoint, _ = start_local("--stream", "events", command=[aiokpl_script(), "local"])
    _send_raw(endpoint, TLS_HELLO)
    _send_raw(endpoint, TLS_HELLO + b"\r\n")
    assert len(anyio.run(_put_and_read, endpoint, "events", 10)) == 10
    _, err = _stop(process, signal.SIGINT)
    assert process.returncode == 0, err
    assert err.splitlines() == [
        "aiokpl local: a client sent something that is not HTTP: an https:// URL? This server "
        "speaks plain http://",
        "aiokpl local: stopped (Ctrl-C); its streams are gone",
    ]


def test_log_requests_prints_a_line_per_request(start_local: StartLocal) -> None:
    process, endpoint, _ = start_local(
        "--stream", "events", "--log-requests", command=[aiokpl_script(), "local"]
    )
    assert len(anyio.run(_put_and_read, endpoint, "events", 10)) == 10
    _, err = _stop(process, signal.SIGINT)
    assert process.returncode == 0, err
    assert re.search(r'"POST / HTTP/1\.1" 200 -$', err, re.M), err


def _put_record(endpoint: str, **headers: str) -> tuple[int, dict[str, str], dict[str, Any]]:
    """A ``PutRecord`` as a web page's ``fetch`` sends it (``headers`` added): its status,
    headers (lower-case names) and JSON body."""
    host, port = endpoint.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(
            "POST",
            "/",
            json.dumps({"StreamName": "events", "Data": "eA==", "PartitionKey": "k"}),
            headers={
                "X-Amz-Target": "Kinesis_20131202.PutRecord",
                "Content-Type": "application/x-amz-json-1.1",
                "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20240101/us-east-1/"
                "kinesis/aws4_request, SignedHeaders=host, Signature=0",
                **headers,
            },
        )
        answer = connection.getresponse()
        body = json.loads(answer.read())
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, body
    finally:
        connection.close()


async def _stored_count(endpoint: str) -> int:
    async with admin_client(endpoint) as admin:
        return len(await read_stream(admin, "events"))


def test_web_pages_and_rebound_names_are_refused(start_local: StartLocal) -> None:
    process, endpoint, _ = start_local("--stream", "events", "--allow-host", "devbox.test")
    port = endpoint.rsplit(":", 1)[1]
    # A page of any origin: before, stored, with its origin echoed in Access-Control-Allow-Origin.
    status, headers, body = _put_record(endpoint, Origin="https://evil.example")
    assert (status, body["__type"]) == (403, "AccessDeniedException"), body
    assert "Origin: 'https://evil.example'" in body["message"]
    assert not any(name.startswith("access-control-") for name in headers)
    # A name of the page's, rebound to 127.0.0.1: before, stored.
    status, _, body = _put_record(endpoint, Host=f"rebind.evil.example:{port}")
    assert (status, body["__type"]) == (403, "AccessDeniedException"), body
    # Programs on this machine, by address, by localhost, or by a name allowed.
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"devbox.test:{port}"):
        status, headers, body = _put_record(endpoint, Host=host)
        assert (status, sorted(body)) == (200, ["SequenceNumber", "ShardId"]), body
        assert not any(name.startswith("access-control-") for name in headers)  # before: *
    assert anyio.run(_stored_count, endpoint) == 3
    _, err = _stop(process, signal.SIGINT)
    assert process.returncode == 0, err


def _console_script() -> str:
    """The ``aiokpl`` console script installed beside this interpreter (``make test`` installs
    the package in editable mode; ``PYTHONPATH`` still decides which source it runs)."""
    script = Path(sys.executable).with_name("aiokpl")
    assert script.is_file(), f"no console script at {script}: install the package (make test)"
    return str(script)


async def _burst(endpoint: str, stream: str, count: int) -> tuple[dict[str, Any], dict[str, Any]]:
    async with admin_client(endpoint) as admin:
        response: dict[str, Any] = await admin.put_records(
            StreamName=stream,
            Records=[{"Data": b"x" * 100, "PartitionKey": f"k{i}"} for i in range(count)],
        )
    return response, throughput(endpoint)


def test_throttle_through_the_console_script_says_and_does_what_it_enforces(
    start_local: StartLocal,
) -> None:
    process, endpoint, out = start_local(
        "--stream",
        "events",
        "--throttle",
        "--shard-records-per-sec",
        "250",
        "--fail-stream",
        "broken",
        "--hang-stream",
        "slow",
        "--hang-seconds",
        "3",
        command=[_console_script(), "local"],
    )
    assert (
        "throttling: 250 records/s and 1,048,576 bytes/s (1 MiB/s) per shard, 1 s of burst\n"
        "  over the limit, PutRecords answers ProvisionedThroughputExceededException per record "
        "(HTTP 200, FailedRecordCount > 0), PutRecord the same as an HTTP 400 error\n"
        "fault: stream broken: every request fails (InternalFailure)\n"
        "fault: stream slow: every request is answered 3 s late\n"
        f"records stored, throttled and failed per second: curl {endpoint}/_local/throughput\n"
    ) in out
    # One request of 400 records to the one shard: its burst of 250 is stored, the rest not.
    response, counts = anyio.run(_burst, endpoint, "events", 400)
    assert response["FailedRecordCount"] == 150
    assert counts["limits"] == {
        "records_per_second": 250.0,
        "bytes_per_second": 1048576.0,
        "burst_seconds": 1.0,
    }
    [row] = [row for row in counts["series"] if row["stream"] == "events"]
    assert (row["delivered"], row["throttled"]) == (250, 150)
    _, err = _stop(process, signal.SIGINT)
    assert process.returncode == 0, err


async def _auto_burst(endpoint: str) -> tuple[list[str], dict[str, Any], list[str]]:
    """60 records without keys to ``auto``, then what the server says of both streams."""
    async with admin_client(endpoint) as admin:
        answer = await admin.put_records(StreamName="auto", Records=[{"Data": b"x"}] * 60)
        summaries = [
            (await admin.describe_stream_summary(StreamName=name))["StreamDescriptionSummary"]
            for name in ("auto", "keyed")
        ]
        stored = [shard for shard, record in await read_stream(admin, "auto")]
    strategies = [summary.get("RecordDistributionStrategy", "-") for summary in summaries]
    return stored, answer, strategies


def test_an_auto_stream_from_the_command_line_is_placed_by_the_server_and_throttled(
    start_local: StartLocal,
) -> None:
    process, endpoint, out = start_local(
        "--stream", "auto:4:auto", "--stream", "keyed:2", "--throttle",
        "--shard-records-per-sec", "5",
    )  # fmt: skip
    assert (
        "streams: auto (4 shards, on-demand, AUTO: records placed by the server), "
        "keyed (2 shards)\n"
    ) in out
    stored, answer, strategies = anyio.run(_auto_burst, endpoint)
    assert strategies == ["AUTO", "-"]
    # Each shard takes 5 of the 60 records without keys: the shard each was placed on decides.
    assert answer["FailedRecordCount"] == 40
    assert sorted(stored) == [f"shardId-00000000000{i}" for i in range(4) for _ in range(5)]
    _, err = _stop(process, signal.SIGINT)
    assert process.returncode == 0, err

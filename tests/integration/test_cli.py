"""``aiokpl put`` and ``aiokpl tail`` end to end, against moto's server and kinesalite.

Most runs call the command line in-process (``main([...])``, which runs its own event loop on the
backend given with ``--backend``); a few run it as a real process (``python -m aiokpl``) to
check standard input, a live ``tail -f`` and Ctrl-C. Streams are set up and read back with a
plain aiobotocore client, and everything read back is also deaggregated by AWS's own
``aws_kinesis_agg`` (see ``helpers.user_records``).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio
import pytest

from aiokpl import Producer
from aiokpl._cli import main
from aiokpl.testing import read_stream
from aiokpl.testing._servers import DUMMY_CREDENTIALS, free_port

from .helpers import (
    Delivered,
    admin_client,
    config,
    create_stream,
    interruptible,
    stream_name,
    user_records,
    wait_until_active,
)

pytestmark = pytest.mark.integration

BACKENDS = ("asyncio", "trio")


@pytest.fixture(autouse=True)
def _dummy_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line finds credentials the usual way: here, in the environment."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY_CREDENTIALS["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_CREDENTIALS["aws_secret_access_key"])


def new_stream(endpoint: str, shards: int, backend: str = "asyncio") -> str:
    stream = stream_name("cli")

    async def create() -> None:
        async with admin_client(endpoint) as admin:
            await create_stream(admin, stream, shards)

    anyio.run(create, backend=backend)
    return stream


def read_back(endpoint: str, stream: str) -> list[Delivered]:
    async def read() -> list[Delivered]:
        async with admin_client(endpoint) as admin:
            return user_records(await read_stream(admin, stream))

    return anyio.run(read)


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def data_of(line: dict[str, Any]) -> bytes:
    if line["data_encoding"] == "base64":
        return base64.b64decode(line["data"])
    data: bytes = line["data"].encode()
    return data


def subprocess_env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


# --------------------------------------------------------------------------------------------
# put
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_put_delivers_every_line_once_with_its_partition_key(
    kinesis_server: tuple[str, str],
    backend: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, endpoint = kinesis_server
    stream = new_stream(endpoint, 3)
    documents: list[dict[str, Any]] = [
        {"user": {"id": f"u{i % 37}"}, "n": i, "text": "é" * (i % 5)} for i in range(2000)
    ]
    source = tmp_path / "events.jsonl"
    source.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in documents))
    dead_letter = tmp_path / "dead.jsonl"
    report = tmp_path / "report.json"
    status = main(
        [
            "put",
            stream,
            "--json",
            "--partition-key-field",
            "user.id",
            str(source),
            "--endpoint-url",
            endpoint,
            "--backend",
            backend,
            "--dead-letter",
            str(dead_letter),
            "--report-json",
            str(report),
        ]
    )
    err = capsys.readouterr().err
    assert status == 0, err
    assert not dead_letter.exists()
    expected = Counter(
        (d["user"]["id"], json.dumps(d, ensure_ascii=False).encode()) for d in documents
    )
    delivered = read_back(endpoint, stream)
    assert Counter((r.partition_key, r.data) for r in delivered) == expected
    summary = json.loads(report.read_text())
    assert (summary["lines"], summary["delivered"], summary["failed"]) == (2000, 2000, 0)
    assert summary["delivered_bytes"] == sum(len(data) for _, data in expected)
    assert summary["exit_status"] == 0
    assert "delivered  2,000 records" in err


@pytest.mark.parametrize("backend", BACKENDS)
def test_put_dead_letters_bad_lines_and_exits_1(
    kinesis_server: tuple[str, str],
    backend: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, endpoint = kinesis_server
    stream = new_stream(endpoint, 1)
    lines = [
        '{"k": "a", "d": "first"}',
        '{"k": "b", "d": ',
        '{"d": "no key"}',
        '{"k": "c", "d": {"nested": [1, 2]}}',
        '{"k": "d", "d": "' + "x" * 2000 + '"}',
        '{"k": "e", "d": "last"}',
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines))  # no newline at the end
    dead_letter = tmp_path / "dead.jsonl"
    status = main(
        [
            "--endpoint-url",
            endpoint,
            "--backend",
            backend,
            "put",
            stream,
            str(source),
            "--json",
            "--partition-key-template",
            "{k}-{n}",
            "--data-field",
            "d",
            "--dead-letter",
            str(dead_letter),
            "--max-record-size",
            "1024",
            "--report-json",
            "-",
        ]
    )
    out, err = capsys.readouterr()
    assert status == 1, err
    summary = json.loads(out)
    assert summary["failed_by_code"] == {"InvalidJson": 1, "InvalidRecord": 1, "MissingField": 1}
    assert (summary["delivered"], summary["exit_status"]) == (3, 1)
    assert summary["dead_letter_file"] == str(dead_letter)
    assert f"{source}:2: InvalidJson: invalid JSON" in err
    assert f"{source}:3: MissingField: no field 'k'" in err
    assert f"{source}:5: InvalidRecord: " in err
    entries = json_lines(dead_letter.read_text())
    assert [(e["line"], e["error_code"], e["attempts"]) for e in entries] == [
        (2, "InvalidJson", 0),
        (3, "MissingField", 0),
        (5, "InvalidRecord", 0),
    ]
    assert all(e["source"] == str(source) for e in entries)
    assert [e["data"] for e in entries[:2]] == [lines[1], lines[2]]
    assert {(r.partition_key, r.data) for r in read_back(endpoint, stream)} == {
        ("a-1", b"first"),
        ("c-4", b'{"nested":[1,2]}'),
        ("e-6", b"last"),
    }
    assert "failed  3 (InvalidJson 1, InvalidRecord 1, MissingField 1)" in err


def test_put_to_a_missing_stream_exits_3(
    kinesis_server: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, endpoint = kinesis_server
    source = tmp_path / "in.txt"
    source.write_text("a\n")
    status = main(["put", "no-such-stream", str(source), "--endpoint-url", endpoint])
    assert status == 3
    err = capsys.readouterr().err
    assert "cannot write to 'no-such-stream': ResourceNotFoundException" in err
    assert not (tmp_path / "no-such-stream.dead-letter.jsonl").exists()


def test_put_by_arn_dead_letters_to_a_file_named_after_the_stream(
    moto_endpoint: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The default file was named after STREAM as given: an ARN's '/' made it a path into a
    # directory "arn:aws:kinesis:…:stream" that does not exist, and no line was saved.
    stream = new_stream(moto_endpoint, 1)
    arn = f"arn:aws:kinesis:us-east-1:123456789012:stream/{stream}"
    source = tmp_path / "in.jsonl"
    source.write_text('{"k": "a", "d": "kept"}\n{"k": "b"}\n')
    monkeypatch.chdir(tmp_path)
    argv = ["--endpoint-url", moto_endpoint, "put", arn, str(source), "--json"]
    status = main([*argv, "--partition-key-field", "k", "--data-field", "d"])
    err = capsys.readouterr().err
    assert status == 1, err
    assert "NOT ALL WRITTEN" not in err
    [entry] = json_lines((tmp_path / f"{stream}.dead-letter.jsonl").read_text())
    assert (entry["line"], entry["error_code"]) == (2, "MissingField")
    assert [r.data for r in read_back(moto_endpoint, stream)] == [b"kept"]


def test_put_reads_standard_input_in_a_real_process(
    kinesis_server: tuple[str, str], tmp_path: Path
) -> None:
    _, endpoint = kinesis_server
    stream = new_stream(endpoint, 2)
    lines = [f"line {i} ü" for i in range(300)] + ["\udcff"]  # the last is not UTF-8
    data = "\n".join(lines).encode("utf-8", errors="surrogateescape") + b"\n\n"
    finished = subprocess.run(
        [sys.executable, "-m", "aiokpl", "put", stream, "-", "--endpoint-url", endpoint],
        input=data,
        capture_output=True,
        env=subprocess_env(),
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    err = finished.stderr.decode()
    assert finished.returncode == 0, err
    assert finished.stdout == b""
    assert "lines read  302 (1 blank, skipped)" in err
    assert "delivered  301 records" in err
    delivered = read_back(endpoint, stream)
    assert sorted(r.data for r in delivered) == sorted(
        line.encode("utf-8", errors="surrogateescape") for line in lines
    )
    assert len({r.partition_key for r in delivered}) == 301  # random keys
    assert list(tmp_path.iterdir()) == []  # no dead-letter file


@pytest.mark.parametrize(
    ("backend", "signum", "name"),
    [
        ("asyncio", signal.SIGINT, "Ctrl-C"),
        ("trio", signal.SIGINT, "Ctrl-C"),
        ("asyncio", signal.SIGTERM, "SIGTERM"),
    ],
)
def test_put_process_interrupted_reports_and_exits_130(
    kinesis_server: tuple[str, str], backend: str, signum: int, name: str, tmp_path: Path
) -> None:
    _, endpoint = kinesis_server
    stream = new_stream(endpoint, 1)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiokpl",
            "put",
            stream,
            "--endpoint-url",
            endpoint,
            "--backend",
            backend,
        ],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=subprocess_env(),
        cwd=tmp_path,
        preexec_fn=interruptible,
    )
    try:
        assert process.stdin is not None
        process.stdin.write(b"a\nb\nc\n")
        process.stdin.flush()  # and the pipe stays open: the input has no end
        deadline = time.monotonic() + 60
        while len(read_back(endpoint, stream)) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        process.send_signal(signum)
        # stdin closes only once the signal was taken: an input that ends first leaves nothing
        # to resume. (The process then waits for its reading thread to see the end.)
        assert process.stderr is not None
        first = process.stderr.readline()
        assert first.startswith(b"aiokpl put: interrupted"), first
        process.stdin.close()
        err = first + process.stderr.read()  # the buffered rest too, up to the exit
        process.stderr.close()
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    text = err.decode()
    assert process.returncode == 130, text
    assert f"aiokpl put: interrupted ({name}); finishing the records already read" in text
    assert "lines read  3" in text
    assert "delivered  3 records" in text
    assert f"interrupted  stopped by {name} before the end of the input" in text
    assert "resume from  line 4 of standard input: tail -n +4 INPUT | aiokpl put" in text
    assert "Traceback" not in text
    assert sorted(r.data for r in read_back(endpoint, stream)) == [b"a", b"b", b"c"]


# --------------------------------------------------------------------------------------------
# tail
# --------------------------------------------------------------------------------------------


async def _produce(endpoint: str, stream: str, server: str) -> list[tuple[str, bytes, str | None]]:
    """Put records through the producer: aggregated ones, explicit hash keys, binary data."""
    top = 2**128 - 2 if server == "moto" else 2**128 - 1  # moto answers 500 for 2**128 - 1
    sent: list[tuple[str, bytes, str | None]] = []
    async with Producer(config(endpoint, record_max_buffered_time_ms=50)) as producer:
        # Records are aggregated once the shard map has loaded: wait for it.
        await (await producer.put_record(stream=stream, partition_key="first", data=b"1"))
        sent.append(("first", b"1", None))
        with anyio.fail_after(10):
            while producer.statistics().streams[0].shard_map_state != "READY":  # noqa: ASYNC110
                await anyio.sleep(0.01)
        for i in range(400):
            key = f"key-{i % 13}"
            data = bytes([0xFE, 0xFF, i % 256]) if i % 9 == 0 else f"record {i} ü".encode()
            ehk = str(top) if i % 50 == 0 else str(i * 10**35) if i % 10 == 0 else None
            await producer.put_record(
                stream=stream, partition_key=key, data=data, explicit_hash_key=ehk
            )
            sent.append((key, data, ehk))
    return sent


@pytest.mark.parametrize("backend", BACKENDS)
def test_tail_from_the_trim_horizon_prints_what_was_put(
    kinesis_server: tuple[str, str], backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    server, endpoint = kinesis_server
    stream = new_stream(endpoint, 2)
    sent = anyio.run(_produce, endpoint, stream, server)
    status = main(
        [
            "tail",
            stream,
            "--trim-horizon",
            "--count",
            str(len(sent)),
            "--endpoint-url",
            endpoint,
            "--backend",
            backend,
        ]
    )
    out, err = capsys.readouterr()
    assert status == 0, err
    printed = json_lines(out)
    assert len(printed) == len(sent)
    assert Counter((p["partition_key"], data_of(p)) for p in printed) == Counter(
        (key, data) for key, data, _ in sent
    )
    # What AWS's deaggregator reads is what tail printed, record by record.
    delivered = read_back(endpoint, stream)
    assert sorted((d.shard_id, d.sequence_number, d.partition_key, d.data) for d in delivered) == (
        sorted(
            (p["shard_id"], p["sequence_number"], p["partition_key"], data_of(p)) for p in printed
        )
    )
    aggregated = [p for p in printed if p["aggregated"]]
    assert len(aggregated) > len(sent) // 2
    wanted = {(key, data): ehk for key, data, ehk in sent}
    for line in aggregated:
        assert line["explicit_hash_key"] == wanted[(line["partition_key"], data_of(line))]
    assert any(line["explicit_hash_key"] for line in aggregated)
    binary = [p for p in printed if p["data_encoding"] == "base64"]
    assert len(binary) == sum(1 for _, data, _ in sent if data[:2] == b"\xfe\xff")
    assert all(p["stream"] == stream and p["approximate_arrival_timestamp"] for p in printed)
    assert all(p["sequence_number"].isdigit() for p in printed)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tail_at_a_timestamp_skips_older_records(
    kinesis_server: tuple[str, str], backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, endpoint = kinesis_server
    stream = new_stream(endpoint, 2)

    async def put(prefix: str) -> None:
        async with admin_client(endpoint) as admin:
            for i in range(5):
                await admin.put_record(StreamName=stream, PartitionKey=f"k{i}", Data=f"{prefix}{i}")

    anyio.run(put, "old")
    time.sleep(1.1)  # arrival times have millisecond precision; keep well apart
    moment = datetime.now(timezone.utc)
    time.sleep(1.1)
    anyio.run(put, "new")
    status = main(
        [
            "tail",
            stream,
            "--at-timestamp",
            moment.isoformat(),
            "--no-follow",
            "--endpoint-url",
            endpoint,
            "--backend",
            backend,
        ]
    )
    out, err = capsys.readouterr()
    assert status == 0, err
    assert sorted(p["data"] for p in json_lines(out)) == [f"new{i}" for i in range(5)]
    # The same instant as epoch seconds.
    status = main(
        [
            "tail",
            stream,
            "--at-timestamp",
            str(moment.timestamp()),
            "--no-follow",
            "-q",
            "--endpoint-url",
            endpoint,
        ]
    )
    out, err = capsys.readouterr()
    assert (status, err) == (0, "")
    assert sorted(p["data"] for p in json_lines(out)) == [f"new{i}" for i in range(5)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_tail_follows_new_records_until_count(
    kinesis_server: tuple[str, str], backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, endpoint = kinesis_server
    stream = new_stream(endpoint, 2)
    anyio.run(_put_plain, endpoint, stream, "before", 3)
    result: list[int] = []
    thread = threading.Thread(
        target=lambda: result.append(
            main(
                [
                    "tail",
                    stream,
                    "--count",
                    "6",
                    "--poll-interval",
                    "0.2",
                    "--endpoint-url",
                    endpoint,
                    "--backend",
                    backend,
                ]
            )
        )
    )
    thread.start()
    err = ""
    try:
        deadline = time.monotonic() + 30
        while err.count("from LATEST") < 2:  # both shards have their iterators
            assert time.monotonic() < deadline, err
            time.sleep(0.05)
            err += capsys.readouterr().err
        anyio.run(_put_plain, endpoint, stream, "after", 6)
    finally:
        thread.join(timeout=60)
    assert result == [0]
    out = capsys.readouterr().out
    assert sorted(p["data"] for p in json_lines(out)) == [f"after{i}" for i in range(6)]


async def _put_plain(endpoint: str, stream: str, prefix: str, count: int) -> None:
    async with admin_client(endpoint) as admin:
        for i in range(count):
            await admin.put_record(StreamName=stream, PartitionKey=f"k{i}", Data=f"{prefix}{i}")


# Starts `python -m aiokpl tail` with these arguments.
TailProcess = Callable[..., "subprocess.Popen[bytes]"]


@pytest.fixture
def tail_process(kinesis_server: tuple[str, str]) -> Iterator[TailProcess]:
    """Starts ``python -m aiokpl tail`` processes; kills any still running at the end."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*arguments: str) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [sys.executable, "-m", "aiokpl", "tail", *arguments],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=subprocess_env(),
            preexec_fn=interruptible,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()
        for pipe in (process.stdout, process.stderr):
            assert pipe is not None
            pipe.close()


def _wait_for_shards(process: subprocess.Popen[bytes], shards: int) -> list[str]:
    assert process.stderr is not None
    notes: list[str] = []
    while sum("from LATEST" in note for note in notes) < shards:
        line = process.stderr.readline().decode()
        assert line, f"tail ended early: {notes}"
        notes.append(line)
    return notes


def test_tail_process_follows_new_records(
    kinesis_server: tuple[str, str], tail_process: TailProcess
) -> None:
    _, endpoint = kinesis_server
    stream = new_stream(endpoint, 2)
    process = tail_process(stream, "--latest", "--count", "4", "--endpoint-url", endpoint)
    _wait_for_shards(process, 2)
    anyio.run(_put_plain, endpoint, stream, "live", 4)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert sorted(p["data"] for p in json_lines(out.decode())) == [f"live{i}" for i in range(4)]


def test_tail_process_exits_0_on_ctrl_c(
    kinesis_server: tuple[str, str], tail_process: TailProcess
) -> None:
    _, endpoint = kinesis_server
    stream = new_stream(endpoint, 1)
    process = tail_process(stream, "--endpoint-url", endpoint, "--backend", "trio")
    _wait_for_shards(process, 1)
    anyio.run(_put_plain, endpoint, stream, "x", 1)
    assert process.stdout is not None
    assert json.loads(process.stdout.readline())["data"] == "x0"
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0
    assert b"Traceback" not in err
    assert out == b""


def test_tail_process_exits_0_when_its_reader_goes_away(
    kinesis_server: tuple[str, str], tail_process: TailProcess
) -> None:
    """``aiokpl tail STREAM | head -1``: a closed pipe ends it quietly."""
    _, endpoint = kinesis_server
    stream = new_stream(endpoint, 1)
    process = tail_process(stream, "--endpoint-url", endpoint, "--poll-interval", "0.1")
    _wait_for_shards(process, 1)
    anyio.run(_put_plain, endpoint, stream, "first", 1)
    assert process.stdout is not None
    assert json.loads(process.stdout.readline())["data"] == "first0"
    process.stdout.close()
    anyio.run(_put_plain, endpoint, stream, "second", 1)
    assert process.wait(timeout=30) == 0
    assert process.stderr is not None
    assert b"Traceback" not in process.stderr.read()


def test_tail_of_a_missing_stream_exits_3(
    kinesis_server: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, endpoint = kinesis_server
    assert main(["tail", "no-such-stream", "--endpoint-url", endpoint]) == 3
    assert "cannot read 'no-such-stream': ResourceNotFoundException" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["put", "tail"])
def test_an_unreachable_endpoint_exits_3(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    source = tmp_path / "in.txt"
    source.write_text("a\n")
    arguments = [command, "s", "--endpoint-url", endpoint]
    assert main(arguments + ([str(source)] if command == "put" else [])) == 3
    err = capsys.readouterr().err
    assert f': EndpointConnectionError: Could not connect to the endpoint URL: "{endpoint}/"' in err
    assert list(tmp_path.iterdir()) == [source]


def test_tail_follows_the_children_of_a_split_shard(
    kinesalite_endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """kinesalite only: moto routes records for the children to the closed parent."""
    stream = new_stream(kinesalite_endpoint, 1)

    async def split_between_puts() -> None:
        async with admin_client(kinesalite_endpoint) as admin:
            await _put_plain(kinesalite_endpoint, stream, "parent", 3)
            await admin.split_shard(
                StreamName=stream,
                ShardToSplit="shardId-000000000000",
                NewStartingHashKey=str(2**127),
            )
            await wait_until_active(admin, stream)
            await _put_plain(kinesalite_endpoint, stream, "child", 3)

    anyio.run(split_between_puts)
    status = main(
        ["tail", stream, "--trim-horizon", "--no-follow", "--endpoint-url", kinesalite_endpoint]
    )
    out, err = capsys.readouterr()
    assert status == 0, err
    printed = json_lines(out)
    assert [p["data"] for p in printed[:3]] == ["parent0", "parent1", "parent2"]
    assert sorted(p["data"] for p in printed[3:]) == ["child0", "child1", "child2"]
    assert {p["shard_id"] for p in printed[3:]} <= {"shardId-000000000001", "shardId-000000000002"}
    assert err.count("reading shardId") == 3

"""``aiokpl demo``, the README's main job, end to end (it starts and stops its own moto server)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from aiokpl._cli import build_parser, main

from .helpers import aiokpl_script, interruptible

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_demo_verifies_every_record(backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["demo", "--count", "3000", "--shards", "3", "--backend", backend])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "every record landed once, intact, where predicted" in out
    assert "stream  aiokpl-demo-7-3000, 3 shards\n" in out
    assert "records put  3,000 of 100 bytes each, partition keys user-0 … user-4095\n" in out
    assert re.search(r"throughput  [\d,]+ records/s \(", out), out
    assert re.search(r"read back  3,000 user records in [\d,]+ Kinesis records\n", out), out
    assert "delivered  3,000" in out
    assert "missing / duplicated  0 / 0" in out


def test_the_summary_of_one_record_through_the_console_script() -> None:
    finished = subprocess.run(
        [aiokpl_script(), "demo", "--count", "1", "--shards", "1", "--size", "1", "--keys", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    summary = {
        name: value
        for name, _, value in (
            line.strip().partition("  ") for line in finished.stdout.splitlines()
        )
    }
    assert summary["stream"] == "aiokpl-demo-7-1, 1 shard"
    assert summary["records put"] == "1 of 1 byte each, partition key user-0"
    assert summary["read back"] == "1 user record in 1 Kinesis record"
    # A whole number of records per second, with the noun that number takes.
    rate, _, rest = summary["throughput"].partition(" ")
    assert rest.startswith("record/s (" if rate == "1" else "records/s ("), summary


def test_demo_options_are_validated() -> None:
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["demo", "--count", "0"])
    args = parser.parse_args(["demo", "--count", "5", "--size", "10", "--keys", "2"])
    assert (args.count, args.size, args.keys, args.shards, args.backend) == (5, 10, 2, 4, "asyncio")


@pytest.mark.parametrize(
    ("backend", "signum", "name"),
    [
        ("asyncio", signal.SIGINT, "Ctrl-C"),
        ("trio", signal.SIGINT, "Ctrl-C"),
        ("asyncio", signal.SIGTERM, "SIGTERM"),
    ],
)
def test_an_interrupted_demo_says_so_and_exits_130(backend: str, signum: int, name: str) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "aiokpl", "demo", "--count", "10000000", "--backend", backend],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=interruptible,
    )
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
        assert first.startswith("local Kinesis (moto) at http://127.0.0.1:"), first
        progress = process.stderr.readline()  # the first record was put
        assert progress.startswith("put: "), progress
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, err
    assert out == ""
    assert "Traceback" not in err
    *before, last = err.strip().splitlines()
    assert last == f"aiokpl demo: interrupted ({name}); local server stopped"
    # Before it, at most the producer's own line: an interruption that cancels its exit (Ctrl-C
    # on asyncio) makes it say what it cancelled.
    assert len(before) <= 1, err
    assert all(line.startswith("the producer's exit was cancelled: of ") for line in before)

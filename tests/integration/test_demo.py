"""``aiokpl demo``, the README's main job, end to end (it starts and stops its own moto server)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from aiokpl._cli import build_parser, main

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_demo_verifies_every_record(backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["demo", "--count", "3000", "--shards", "3", "--backend", backend])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "every record landed once, intact, where predicted" in out
    assert "records put  3,000" in out
    assert "delivered  3,000" in out
    assert "missing / duplicated  0 / 0" in out


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
def test_an_interrupted_demo_says_one_line_and_exits_130(
    backend: str, signum: int, name: str
) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "aiokpl", "demo", "--count", "10000000", "--backend", backend],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
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
    assert err.strip().splitlines() == [f"aiokpl demo: interrupted ({name}); local server stopped"]

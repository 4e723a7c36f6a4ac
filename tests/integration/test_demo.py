"""``aiokpl demo``, the README's main job, end to end (it starts and stops its own moto server)."""

from __future__ import annotations

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

"""``docs/design/one-record.md`` walks a default record's route: it names every module the
record crosses, and says how many there are.

The test traces one record (its stream's pipeline already built) through ``put_record``,
``flush`` and ``await`` against ``FakeKinesis``, noting each ``aiokpl`` module a function of
which runs (``aiokpl.testing`` left out: the fake stands for the service), and checks the page
against that: a module the route gained and the page does not name, or a count that is no
longer the route's, fails it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from aiokpl import Config, Producer
from aiokpl.testing import FakeKinesis

PAGE = Path(__file__).resolve().parent.parent / "docs" / "design" / "one-record.md"

pytestmark = pytest.mark.anyio


async def traced_route() -> list[str]:
    """The ``aiokpl`` modules one warm default record crosses, in the order first met."""
    fake = FakeKinesis()
    fake.add_stream("events", shard_count=1)
    seen: dict[str, None] = {}

    def note(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            name = frame.f_globals.get("__name__", "")
            if name.startswith("aiokpl") and not name.startswith("aiokpl.testing"):
                seen.setdefault(name)

    async with Producer(Config(region="us-east-1"), client=fake) as producer:
        warm = await producer.put_record(stream="events", partition_key="w", data=b"w")
        await producer.flush()
        assert (await warm).success
        sys.setprofile(note)
        try:
            outcome = await producer.put_record(stream="events", partition_key="k", data=b"x")
            await producer.flush()
            result = await outcome
        finally:
            sys.setprofile(None)
    assert result.success
    return list(seen)


def named_on_the_page(text: str) -> set[str]:
    """The modules the page names, as ``_pipeline/stream.py`` (under ``src/aiokpl/``)."""
    paths = re.findall(r"`([\w/]+\.py)`", text)
    return {"aiokpl." + path.removesuffix(".py").replace("/", ".") for path in paths}


async def test_the_route_of_one_record_is_the_one_the_page_walks() -> None:
    route = await traced_route()
    text = PAGE.read_text(encoding="utf-8")
    assert "aiokpl._producer.producer" in route  # the trace saw the route at all
    missing = [module for module in route if module not in named_on_the_page(text)]
    assert missing == [], f"modules on the route that {PAGE.name} does not name"
    counts = re.findall(r"(\d+) modules in all", text)
    assert counts == [str(len(route))], f"{PAGE.name} gives the route's length as {counts}"

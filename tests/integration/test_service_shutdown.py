"""The shutdown recipe of ``docs/shutdown.md``, run as a process and stopped by SIGTERM.

The page's first block (``watch_signals`` and ``serve``, taken from the page as written) runs
in a child interpreter on asyncio or trio, with a work loop of the test's own that puts
numbered records as fast as the producer takes them, to moto's server on 127.0.0.1, until the
signal cancels it. Signals are sent at points the child announces on its standard output; at
the end it prints every record's result, and the stream read back is held to them: a record
said delivered is in it once, one failed with a known outcome is not in it.

* One SIGTERM, an ordinary server: the drain delivers every record put; the exit status is 0
  and the producer says nothing.
* The drain cut short, by its bound (``DRAIN_SECONDS``, set as a service sets it) or by a
  second SIGTERM, against a server that takes 100 records a second: the rest is cancelled, and
  the one line the producer writes says how many were delivered, cancelled, sent unanswered.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from .helpers import Child, new_stream, stored_data

pytestmark = pytest.mark.integration

PAGE = Path(__file__).resolve().parents[2] / "docs" / "shutdown.md"
BACKENDS = ("asyncio", "trio")


def recipe() -> str:
    """The page's block that defines ``serve``, as written."""
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(encoding="utf-8"), re.S | re.M)
    [block] = [block for block in blocks if "async def serve(" in block]
    return str(block)


# Run after the recipe, in its namespace: sys.argv is the endpoint, the stream, the backend, the
# drain's bound ("page": the page's own) and more Config fields (JSON).
WORK = """
import itertools
import json
import sys

from aiokpl.testing._servers import DUMMY_CREDENTIALS as D

endpoint, stream, backend, drain_seconds, extra = sys.argv[1:6]
if drain_seconds != "page":
    DRAIN_SECONDS = float(drain_seconds)
config = Config(
    endpoint_url=endpoint, region=D["region"], aws_access_key_id=D["aws_access_key_id"],
    aws_secret_access_key=D["aws_secret_access_key"], **json.loads(extra)
)
outcomes = []


async def work(producer):
    # Puts until cancelled: 50 records, a pause of 5 ms, and again.
    try:
        for i in itertools.count():
            outcomes.append(
                await producer.put_record(stream=stream, partition_key=f"k{i}", data=b"%d" % i)
            )
            if i == 499:
                print("put 500", flush=True)
            if i % 50 == 49:
                await anyio.sleep(0.005)
    finally:
        print("stopped", flush=True)


anyio.run(serve, config, work, backend=backend)
print(json.dumps([
    [o.result().success, o.result().error_code, o.result().outcome_unknown] for o in outcomes
]), flush=True)
"""

# The server takes 100 records a second (`slow_endpoint`), one by one (no aggregation): a few
# hundred records take seconds to deliver, however they are sent.
SLOW = {"aggregation_enabled": False, "rate_limit_records_per_sec_per_shard": 100}


def run_until_stopped(
    endpoint: str, backend: str, drain: str, extra: dict[str, Any], signals: int
) -> tuple[str, int, str, list[list[Any]]]:
    """Run the recipe, send SIGTERM once 500 records were put (``signals`` times: the next
    once the work has stopped). (stream, exit status, stderr, every record's result.)"""
    stream = new_stream(endpoint, "service")
    child = Child(recipe() + WORK, endpoint, stream, backend, drain, json.dumps(extra))
    try:
        child.expect("put 500")
        child.interrupt(signal.SIGTERM)
        child.expect("stopped")  # the work was cancelled: the producer's exit drains
        for _ in range(signals - 1):
            child.interrupt(signal.SIGTERM)
        status, out, err = child.finish()
    finally:
        child.kill()
    return stream, status, err, json.loads(out)


def check_against_the_stream(
    endpoint: str, stream: str, results: list[list[Any]]
) -> tuple[int, int, int]:
    """The stream holds exactly what the results say: (delivered, cancelled, unknown)."""
    in_stream = stored_data(endpoint, stream)
    assert set(in_stream.values()) <= {1}  # nothing twice
    delivered = {b"%d" % i for i, (success, _, _) in enumerate(results) if success}
    unknown = {b"%d" % i for i, (success, _, u) in enumerate(results) if not success and u}
    assert delivered <= set(in_stream)  # what a result says is delivered is there
    assert set(in_stream) <= delivered | unknown  # a known failure is not
    failed = [code for success, code, _ in results if not success]
    assert set(failed) <= {"Cancelled"}
    return len(delivered), len(failed), len(unknown)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigterm_stops_the_work_and_every_record_put_is_delivered(
    moto_endpoint: str, backend: str
) -> None:
    stream, status, err, results = run_until_stopped(moto_endpoint, backend, "page", {}, 1)
    assert status == 0, err
    assert len(results) >= 500
    assert all(success for success, _, _ in results)
    assert check_against_the_stream(moto_endpoint, stream, results) == (len(results), 0, 0)
    # The recipe's own line, and nothing from the producer: nothing was lost.
    assert err == "SIGTERM: no new work; delivering what was put (20.0 s at most)\n"


@pytest.mark.parametrize(
    ("drain", "signals", "said"),
    [
        ("1.0", 1, ["SIGTERM: no new work; delivering what was put (1.0 s at most)"]),
        (
            "page",
            2,
            [
                "SIGTERM: no new work; delivering what was put (20.0 s at most)",
                "SIGTERM again: stopping at once",
            ],
        ),
    ],
    ids=["drain-bound", "second-sigterm"],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_drain_cut_short_cancels_the_rest_and_says_what_it_cost(
    slow_endpoint: str, backend: str, drain: str, signals: int, said: list[str]
) -> None:
    stream, status, err, results = run_until_stopped(slow_endpoint, backend, drain, SLOW, signals)
    assert status == 0, err
    assert "Traceback" not in err
    delivered, cancelled, unknown = check_against_the_stream(slow_endpoint, stream, results)
    assert cancelled > 0  # the drain had more to deliver than it was given time for
    *recipe_lines, summary = err.splitlines()
    assert recipe_lines == said
    assert summary == (
        f"the producer's exit was cancelled: of {len(results):,} records put, {delivered:,} "
        f"were delivered and {cancelled:,} were cancelled ({unknown:,} of them sent and not "
        "answered: they may be in the stream); each outcome holds its record's result and "
        'error code ("Cancelled" for those the exit stopped)'
    )

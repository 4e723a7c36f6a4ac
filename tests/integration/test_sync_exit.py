"""``SyncProducer`` at interpreter exit and under Ctrl-C, as real processes against moto's server.

Each test runs a small program in a child interpreter (``sys.executable``, so the same tests
run on every Python a venv is built for), with the producer's loop on asyncio or on trio,
talking HTTP to moto's server on 127.0.0.1. Signals are sent at points the child announces on
its standard output (a line once ``close()`` has begun), and every record is read back from
the stream and checked against what the futures said: a record whose future says delivered is
in the stream once; one that failed with a known outcome is not in it.
"""

from __future__ import annotations

import json
import re
import signal
import textwrap
from typing import Any

import pytest

from aiokpl._blocking.executor import THREADS_AT_EXIT

from .helpers import Child, new_stream, stored_data

pytestmark = pytest.mark.integration

BACKENDS = ("asyncio", "trio")

# The child's set-up: a Config for moto's server at sys.argv[1]; the stream is sys.argv[2], the
# backend sys.argv[3]. `extra` is more Config fields.
PRELUDE = """
import atexit, json, sys, threading, time

# Functions the program runs at its very end: registered before aiokpl is imported, this runs
# after aiokpl's own exit function (atexit runs the last registered first).
at_the_very_end = []
atexit.register(lambda: [function() for function in at_the_very_end])

from aiokpl import Config, SyncProducer
from aiokpl.testing._servers import DUMMY_CREDENTIALS as D

endpoint, stream, backend = sys.argv[1:4]
config = Config(
    endpoint_url=endpoint, region=D["region"], aws_access_key_id=D["aws_access_key_id"],
    aws_secret_access_key=D["aws_secret_access_key"], {extra}
)


def announce_close(producer):
    # One line once close() has begun (at exit too): the test then sends its signal.
    def watch():
        while not producer._handover.closing:
            time.sleep(0.001)
        print("closing", flush=True)
    threading.Thread(target=watch, daemon=True).start()


def summary(futures):
    return json.dumps({{
        "unresolved": sum(not f.done() for f in futures),
        "results": [
            [f.result().success, f.result().error_code, f.result().outcome_unknown]
            for f in futures if f.done()
        ],
    }})
"""

# Slow enough that a close() started now is still sending when the next signal comes. The
# producer's own rate limit cannot do it: close() flushes, and a flush sends at once whatever
# the limiter holds (3,000 records in six requests: on a loaded machine they were all delivered
# before the signal arrived). The server's limit does: one shard (`new_stream`) that takes 100
# records a second (`slow_endpoint`), so 3,000 records take about 30 s, however they are sent.
# Records sent one by one (no aggregation), at the producer at the server's rate.
SLOW = "aggregation_enabled=False, rate_limit_records_per_sec_per_shard=100"


def skip_if_no_thread_can_start_at_exit(backend: str) -> None:
    """On asyncio, a producer that connects at exit needs a thread (aiohttp builds its SSL
    contexts in the loop's executor): Python 3.12.0 to 3.12.2 refuse to start any."""
    if backend == "asyncio" and not THREADS_AT_EXIT:
        pytest.skip("Python 3.12.0 to 3.12.2 start no thread at exit (CPython gh-113964)")


def run(script: str, *args: str) -> tuple[int, str, str]:
    child = Child(script, *args)
    try:
        return child.finish()
    finally:
        child.kill()


def program(body: str, extra: str = "") -> str:
    return PRELUDE.format(extra=extra) + textwrap.dedent(body)


def check_against_the_stream(
    endpoint: str, stream: str, report: dict[str, Any], count: int
) -> tuple[int, int]:
    """Every future resolved; the stream holds exactly what they say. (delivered, failed)."""
    assert report["unresolved"] == 0
    results = report["results"]
    assert len(results) == count
    in_stream = stored_data(endpoint, stream)
    assert set(in_stream.values()) <= {1}  # nothing twice
    delivered = {b"%d" % i for i, (success, _, _) in enumerate(results) if success}
    unknown = {b"%d" % i for i, (success, _, u) in enumerate(results) if not success and u}
    assert delivered <= set(in_stream)  # what a future says is delivered is there
    assert set(in_stream) <= delivered | unknown  # a known failure is not
    failed = [code for success, code, _ in results if not success]
    assert set(failed) <= {"Cancelled"}
    return len(delivered), len(failed)


def unknown(report: dict[str, Any]) -> int:
    """Records whose future says they failed with an unknown outcome (sent, not answered)."""
    return sum(1 for success, _, outcome_unknown in report["results"] if outcome_unknown)


def test_lines_written_at_once_are_each_expected_without_waiting() -> None:
    # The harness itself: the second line is already read from the pipe when the first is
    # expected. (Before: a buffered reader held it, and expecting it waited for more output.)
    child = Child("import time; print('one\\ntwo', flush=True); time.sleep(120)")
    try:
        child.expect("one")
        child.expect("two")
    finally:
        child.kill()


# --- a producer left open ----------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_producer_left_open_delivers_what_it_buffered_at_exit(
    moto_endpoint: str, backend: str
) -> None:
    # The script never connects before its end: at exit, the producer must open its client
    # (aiohttp builds its SSL contexts in the loop's executor) and load the shard map. Before:
    # "can't register atexit after shutdown", 30 s, and 100 records expired.
    skip_if_no_thread_can_start_at_exit(backend)
    stream = new_stream(moto_endpoint, "sync-exit", backend=backend)
    script = program(
        """
        at_the_very_end.append(lambda: print(summary(futures), flush=True))
        producer = SyncProducer(config, backend=backend)
        futures = [
            producer.put_record(stream=stream, partition_key=f"k{i}", data=b"%d" % i)
            for i in range(100)
        ]
        print("pending:", sum(not f.done() for f in futures), flush=True)
        """
    )
    status, out, err = run(script, moto_endpoint, stream, backend)
    assert status == 0, err
    assert err == ""  # no warning: nothing failed, nothing was retried
    pending, report = out.splitlines()
    assert pending == "pending: 100"
    assert check_against_the_stream(moto_endpoint, stream, json.loads(report), 100) == (100, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_at_exit_worker_threads_and_atexit_functions_still_put_before_the_close(
    moto_endpoint: str, backend: str
) -> None:
    # The close at exit comes after the non-daemon threads are joined and after the program's
    # own atexit functions: a worker still putting when the main thread ends, and an exit
    # function that puts a last record, find the producer open.
    skip_if_no_thread_can_start_at_exit(backend)
    stream = new_stream(moto_endpoint, "sync-exit", backend=backend)
    script = program(
        """
        at_the_very_end.append(lambda: print(summary(futures), flush=True))
        producer = SyncProducer(config, backend=backend)
        futures = []

        def worker():
            threading.main_thread().join()  # the main thread has ended: the interpreter exits
            for i in range(50):
                futures.append(
                    producer.put_record(stream=stream, partition_key=f"k{i}", data=b"%d" % i)
                )

        threading.Thread(target=worker).start()  # not a daemon: the interpreter waits for it
        def last_put():
            futures.append(producer.put_record(stream=stream, partition_key="k", data=b"50"))

        atexit.register(last_put)  # registered after aiokpl's exit function: runs before it
        """
    )
    status, out, err = run(script, moto_endpoint, stream, backend)
    assert status == 0, err
    assert err == ""
    assert check_against_the_stream(moto_endpoint, stream, json.loads(out), 51) == (51, 0)


# --- Ctrl-C -------------------------------------------------------------------------------------


@pytest.mark.parametrize("caught", [True, False], ids=["caught", "uncaught"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_second_ctrl_c_during_close_resolves_every_future(
    slow_endpoint: str, backend: str, caught: bool
) -> None:
    # The first Ctrl-C leaves the `with` block, whose close() waits for 3,000 records to be
    # sent; the second interrupts that wait. The program's `except KeyboardInterrupt` (or, when
    # it has none, its last exit function) must find every future resolved, and a summary on
    # stderr. Before: 950 to 2,850 futures unresolved, AssertionError at exit, no summary.
    stream = new_stream(slow_endpoint, "sync-exit", backend=backend)
    body = """
        futures = []
        if not {caught}:
            at_the_very_end.append(lambda: print(summary(futures), flush=True))
        try:
            with SyncProducer(config, backend=backend) as producer:
                announce_close(producer)
                for i in range(3000):
                    futures.append(
                        producer.put_record(stream=stream, partition_key=f"k{{i}}", data=b"%d" % i)
                    )
                futures[99].result()  # some are delivered before the first Ctrl-C
                print("put", flush=True)
                # Until Ctrl-C, in slices: Python raises KeyboardInterrupt between bytecodes,
                # and a SIGINT that came just before a wait without end began (its C handler
                # ran, then the wait blocked) would never be acted on.
                while True:
                    time.sleep(0.1)
        except KeyboardInterrupt:
            if not {caught}:
                raise
            print(summary(futures), flush=True)
        """
    child = Child(program(body.format(caught=caught), SLOW), slow_endpoint, stream, backend)
    try:
        child.expect("put")
        child.interrupt()  # the first Ctrl-C: close() begins, and sends
        child.expect("closing")
        child.interrupt()  # the second, while close() waits
        status, out, err = child.finish()
    finally:
        child.kill()
    assert status == (0 if caught else -signal.SIGINT), err
    assert "Exception ignored" not in err
    assert "AssertionError" not in err
    if caught:
        assert "Traceback" not in err
    else:  # Python's own report of the uncaught KeyboardInterrupt (chained), nothing else
        raised = [line for line in err.splitlines() if re.match(r"\w+(Error|Interrupt)\b", line)]
        assert raised == ["KeyboardInterrupt", "KeyboardInterrupt"]  # the first, then the second
    report = json.loads(out)
    delivered, failed = check_against_the_stream(slow_endpoint, stream, report, 3000)
    assert delivered >= 100
    assert failed > 0  # the second Ctrl-C came while records were still being sent
    assert (
        f"SyncProducer.close() was interrupted: of 3,000 records put, {delivered:,} were "
        f"delivered and {failed:,} were cancelled ({unknown(report):,} of them sent and not "
        "answered: they may be in the stream); each future holds its record's result"
    ) in err


@pytest.mark.parametrize("backend", BACKENDS)
def test_ctrl_c_while_a_producer_is_closed_at_exit_resolves_every_future(
    slow_endpoint: str, backend: str
) -> None:
    # A producer left open is being closed at exit (3,000 records to send) when Ctrl-C comes:
    # the rest is cancelled, a summary is logged, nothing is raised, and the program's own last
    # exit function finds every future resolved.
    skip_if_no_thread_can_start_at_exit(backend)
    stream = new_stream(slow_endpoint, "sync-exit", backend=backend)
    body = """
        at_the_very_end.append(lambda: print(summary(futures), flush=True))
        producer = SyncProducer(config, backend=backend)
        announce_close(producer)
        futures = [
            producer.put_record(stream=stream, partition_key=f"k{i}", data=b"%d" % i)
            for i in range(3000)
        ]
        print("put", flush=True)
        """
    child = Child(program(body, SLOW), slow_endpoint, stream, backend)
    try:
        child.expect("put")
        child.expect("closing")  # the main thread ended: the exit's close has begun
        child.interrupt()
        status, out, err = child.finish()
    finally:
        child.kill()
    assert status == 0, err
    assert "Traceback" not in err
    assert "Exception ignored" not in err
    report = json.loads(out)
    delivered, failed = check_against_the_stream(slow_endpoint, stream, report, 3000)
    assert failed > 0
    assert (
        f"closing a SyncProducer at interpreter exit was interrupted: of 3,000 records put, "
        f"{delivered:,} were delivered and {failed:,} were cancelled ({unknown(report):,} of "
        "them sent and not answered: they may be in the stream)"
    ) in err

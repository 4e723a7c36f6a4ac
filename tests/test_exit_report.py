"""What a producer's exit says when it is cut short: one line, of what it delivered and what
it did not (issue 31: 7,849 of 109,823 records cancelled by Ctrl-C, and nothing logged).

The async ``Producer`` under virtual clocks on asyncio and trio; the line's format, shared with
the ``SyncProducer`` (``tests/test_sync.py``), on its own.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import anyio
import pytest

from aiokpl import Config, Producer
from aiokpl._core.statistics import ProducerStatistics, SpoolStatistics
from aiokpl._producer.exit_report import ExitReport
from aiokpl.testing import FakeKinesis

CONFIG = Config(region="us-east-1", request_timeout_ms=60_000)


class Holding(FakeKinesis):
    """Answers until ``hold`` is set; then stores each request's records and never answers
    (the answer lost in flight)."""

    hold = False

    async def put_records(self, **kwargs: Any) -> dict[str, Any]:
        answer = await super().put_records(**kwargs)
        if self.hold:
            await anyio.sleep(math.inf)
        return answer


def lines(caplog: pytest.LogCaptureFixture, level: int = logging.WARNING) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "aiokpl" and record.levelno >= level
    ]


@pytest.mark.anyio
async def test_a_cancelled_exit_says_what_it_delivered_cancelled_and_left_unknown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = Holding()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(max_connections=1)  # a second request waits, never sent
    with caplog.at_level(logging.INFO, logger="aiokpl"), anyio.CancelScope() as scope:
        async with Producer(config, client=fake) as producer:
            for i in range(4):
                await producer.put_record(stream="s", partition_key=f"a{i}", data=b"d")
            await producer.flush()  # delivered
            fake.hold = True
            for i in range(6):
                await producer.put_record(stream="s", partition_key=f"b{i}", data=b"d")
            await anyio.sleep(1.0)  # sent, stored, never answered: the connection is taken
            for i in range(3):
                await producer.put_record(stream="s", partition_key=f"c{i}", data=b"d")
            await anyio.sleep(1.0)  # their request waits for the connection
            assert producer.statistics().requests_queued == 1
            scope.cancel()  # Ctrl-C on asyncio, a signal handled through anyio, a timeout
            await anyio.sleep(math.inf)
    assert lines(caplog, logging.INFO) == [
        "the producer's exit was cancelled: of 13 records put, 4 were delivered and 9 were "
        "cancelled (6 of them sent and not answered: they may be in the stream); each outcome "
        'holds its record\'s result and error code ("Cancelled" for those the exit stopped)'
    ]


@pytest.mark.anyio
async def test_an_exit_cancelled_while_it_drains_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The block ends normally; the exit's drain is cut short by a deadline around it.
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    fake.latency = 3600.0  # nothing answers
    with caplog.at_level(logging.WARNING, logger="aiokpl"), anyio.move_on_after(5.0):
        async with Producer(CONFIG, client=fake) as producer:
            outcomes = [
                await producer.put_record(stream="s", partition_key=f"k{i}", data=b"d")
                for i in range(5)
            ]
    assert {outcome.result().error_code for outcome in outcomes} == {"Cancelled"}
    [line] = lines(caplog)
    assert line.startswith(
        "the producer's exit was cancelled: of 5 records put, 0 were delivered and 5 were "
        "cancelled ("
    )


@pytest.mark.anyio
async def test_an_interruption_while_the_exit_drains_cancels_the_rest_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # trio delivers Ctrl-C as a KeyboardInterrupt raised at a checkpoint of the main task: a
    # second one, while the exit drains, lands in its flush. The rest is cancelled, as by a
    # cancellation. (Before: the records failed "Expired", and nothing was logged.)
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    fake.latency = 3600.0

    async def interrupted_flush(stream: str | None = None) -> None:
        await anyio.sleep(0.5)
        raise KeyboardInterrupt

    outcomes = []

    async def put_and_leave() -> None:
        async with Producer(CONFIG, client=fake) as producer:
            producer.flush = interrupted_flush  # type: ignore[method-assign]
            for i in range(3):
                outcomes.append(
                    await producer.put_record(stream="s", partition_key=f"k{i}", data=b"d")
                )

    with caplog.at_level(logging.WARNING, logger="aiokpl"), pytest.raises(KeyboardInterrupt):
        await put_and_leave()
    assert {outcome.result().error_code for outcome in outcomes} == {"Cancelled"}
    [line] = lines(caplog)
    assert line.startswith("the producer's exit was cancelled: of 3 records put, 0 were ")


@pytest.mark.anyio
async def test_a_cancelled_exit_that_cancelled_nothing_is_an_info_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    with caplog.at_level(logging.INFO, logger="aiokpl"), anyio.CancelScope() as scope:
        async with Producer(CONFIG, client=fake) as producer:
            await producer.put_record(stream="s", partition_key="k", data=b"d")
            await producer.flush()
            scope.cancel()
            await anyio.sleep(math.inf)
    assert lines(caplog) == []
    assert lines(caplog, logging.INFO) == [
        "the producer's exit was cancelled: of 1 records put, 1 were delivered"
    ]


@pytest.mark.anyio
async def test_an_exit_that_is_not_cancelled_says_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    with caplog.at_level(logging.DEBUG, logger="aiokpl"):
        async with Producer(CONFIG, client=fake) as producer:
            await producer.put_record(stream="s", partition_key="k", data=b"d")
    assert not any("exit" in line for line in lines(caplog, logging.DEBUG))


# --- the line's format, shared by Producer and SyncProducer --------------------------------


def statistics(**counts: Any) -> ProducerStatistics:
    fields: dict[str, Any] = {
        "outstanding_records": 0,
        "outstanding_bytes": 0,
        "records_put": 0,
        "records_succeeded": 0,
        "records_failed": 0,
        "requests_sent": 0,
        "requests_failed": 0,
        "requests_in_flight": 0,
        "requests_queued": 0,
        "streams": (),
    }
    fields.update(counts)
    return ProducerStatistics(**fields)


def spool(unresolved: int, replayed: int = 0) -> SpoolStatistics:
    counts: dict[str, Any] = dict.fromkeys(SpoolStatistics.__dataclass_fields__, 0)
    counts.update(records_unresolved=unresolved, records_replayed=replayed, full=False)
    return SpoolStatistics(**counts)


@pytest.mark.parametrize(
    ("report", "summary", "lost"),
    [
        (
            ExitReport(statistics(records_put=109_823, records_succeeded=101_974)),
            "of 109,823 records put, 101,974 were delivered",
            False,
        ),
        (
            ExitReport(
                statistics(records_put=109_823, records_succeeded=101_974, records_failed=7_849),
                cancelled=7_849,
                unknown=1_200,
            ),
            "of 109,823 records put, 101,974 were delivered and 7,849 were cancelled (1,200 of "
            "them sent and not answered: they may be in the stream)",
            True,
        ),
        (
            ExitReport(
                statistics(
                    records_put=10, records_succeeded=2, records_failed=8, records_expired_unsent=1
                ),
                cancelled=5,
            ),
            "of 10 records put, 2 were delivered, 5 were cancelled (0 of them sent and not "
            "answered: they may be in the stream) and 3 failed otherwise (1 of them expired "
            "before they could be sent)",
            True,
        ),
        (
            ExitReport(statistics(records_put=7, records_failed=7)),
            "of 7 records put, 0 were delivered and 7 failed",
            False,
        ),
        (
            ExitReport(
                statistics(records_put=3, records_succeeded=4, records_failed=2, spool=spool(2, 3)),
                cancelled=2,
            ),
            "of 3 records put and 3 replayed from the spool, 4 were delivered and 2 were "
            "cancelled (0 of them sent and not answered: they may be in the stream); 2 are "
            "left in the spool, sent again at its next start",
            True,
        ),
        (
            ExitReport(statistics(records_put=3, records_succeeded=3, spool=spool(0))),
            "of 3 records put, 3 were delivered",
            False,
        ),
    ],
    ids=["nothing-lost", "cancelled", "failed-otherwise", "failed-only", "spool", "spool-empty"],
)
def test_the_summary_names_each_count_it_has(report: ExitReport, summary: str, lost: bool) -> None:
    assert report.summary() == summary
    assert report.lost_anything is lost

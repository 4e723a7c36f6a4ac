"""The stream's router resolves outcomes after the step that resolved them, never inside it.

End to end through ``Producer`` and ``FakeKinesis``, on asyncio and trio under virtual clocks:
a done-callback may put records (``put_record_nowait``), and when it runs, the step that
resolved its record is over (what that step retried is back in the pipeline).
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from aiokpl import Config, Outcome, Producer, RecordResult
from aiokpl._core.retry_policy import FAIL_FAST
from aiokpl.testing import FakeKinesis

pytestmark = pytest.mark.anyio

CONFIG = Config(region="us-east-1")
THROTTLED = "ProvisionedThroughputExceededException"
FAIL_FAST_CODE = sorted(FAIL_FAST)[0]


async def test_a_done_callback_that_puts_records_works() -> None:
    """A chain of records, each put by the done-callback of the one before; the first fails
    (a code no retry fixes), the others are delivered, in put order."""
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    seen: list[tuple[int, bool]] = []
    last = 12
    finished = anyio.Event()
    async with Producer(CONFIG, client=fake) as producer:

        def chain(n: int) -> Callable[[Outcome[RecordResult]], None]:
            def on_done(outcome: Outcome[RecordResult]) -> None:
                seen.append((n, outcome.result().success))
                if n == last:
                    finished.set()
                    return
                follow = producer.put_record_nowait(
                    stream="s", partition_key="k", data=b"%d" % (n + 1)
                )
                follow.add_done_callback(chain(n + 1))

            return on_done

        await producer.put_record(stream="s", partition_key="warm-up", data=b"")
        await producer.flush()
        fake.script_records([(FAIL_FAST_CODE, "refused")])
        first = await producer.put_record(stream="s", partition_key="k", data=b"0")
        first.add_done_callback(chain(0))
        with anyio.fail_after(60):
            await finished.wait()
    assert seen == [(0, False)] + [(n, True) for n in range(1, last + 1)]
    stored = [record.data for record in fake.stored_records("s") if record.data]
    assert stored == [b"%d" % n for n in range(1, last + 1)]


async def test_a_done_callback_runs_after_the_answer_is_carried_out() -> None:
    """One request, two records: the first is delivered, the second throttled and retried.
    When the first's done-callback runs, the retried record is back in the stream's pipeline
    (not half way, owned by no stage), and a record the callback puts goes after it."""
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = CONFIG.replace(aggregation_enabled=False)
    in_pipeline: list[int] = []
    async with Producer(config, client=fake) as producer:
        await producer.put_record(stream="s", partition_key="warm-up", data=b"")
        await producer.flush()
        fake.script_records([None, (THROTTLED, "Rate exceeded")])

        def on_done(outcome: Outcome[RecordResult]) -> None:
            stream = producer.statistics().streams[0]
            in_pipeline.append(stream.aggregating + stream.rate_limited + stream.collecting)
            producer.put_record_nowait(stream="s", partition_key="k", data=b"from the callback")

        delivered = await producer.put_record(stream="s", partition_key="k", data=b"delivered")
        retried = await producer.put_record(stream="s", partition_key="k", data=b"retried")
        delivered.add_done_callback(on_done)
        assert (await delivered).success
        assert (await retried).success
        await producer.flush()
    assert in_pipeline == [1]
    stored = [record.data for record in fake.stored_records("s") if record.data]
    assert stored == [b"delivered", b"retried", b"from the callback"]

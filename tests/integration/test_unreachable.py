"""An endpoint nothing listens on, over real sockets on both backends (aiohttp on asyncio,
httpx on trio): nothing was sent, so every record's outcome is known.

A refused connection used to be reported like a lost answer (``"Internal"``,
``outcome_unknown=True``), so dead letters were marked as risky to replay although Kinesis had
never seen them.
"""

from __future__ import annotations

import pytest

from aiokpl import Producer
from aiokpl.testing._servers import free_port

from .helpers import config

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_a_refused_connection_leaves_every_outcome_known() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    producer_config = config(endpoint, record_ttl_ms=1500, record_max_buffered_time_ms=50)
    async with Producer(producer_config) as producer:
        outcomes = [
            await producer.put_record(stream="s", partition_key=f"k{i}", data=b"%d" % i)
            for i in range(5)
        ]
        results = [await outcome for outcome in outcomes]
        [stream] = producer.statistics().streams
    # The shard map could not load either, for the same reason, with the same code.
    assert stream.shard_map_last_error is not None
    assert stream.shard_map_last_error[1] == "EndpointConnectionError"
    for result in results:
        assert not result.success
        assert result.error_code == "Expired"
        codes = [attempt.error_code for attempt in result.attempts]
        assert codes[-1] == "Expired"
        assert set(codes[:-1]) == {"EndpointConnectionError"}, codes
        assert "Could not connect to the endpoint URL" in (result.attempts[0].error_message or "")
        assert not any(attempt.outcome_unknown for attempt in result.attempts)
        assert not result.outcome_unknown

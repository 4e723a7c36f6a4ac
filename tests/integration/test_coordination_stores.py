"""The coordination stores against moto's server over HTTP (S3 and DynamoDB), on both loops."""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from aiokpl import ConfigError
from aiokpl._core.coordination import (
    Report,
    ShardLoad,
    decode_report,
    decode_summary,
    encode_report,
)
from aiokpl._kinesis import create_client
from aiokpl.coordination import DynamoDBStore, S3Store, run_summarizer

from .helpers import config

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

_names = itertools.count()


def report(producer: str, records: float) -> bytes:
    load = ShardLoad(records, records * 100, records, records * 100)
    return encode_report(Report(producer, 1, {"events/shardId-000000000000": load}, 1.0))


@asynccontextmanager
async def open_store(kind: str, endpoint: str) -> AsyncIterator[tuple[Any, Any]]:
    """A new, empty store of ``kind`` on moto, and its client."""
    name = f"coordination-{next(_names)}"
    async with create_client(config(endpoint), kind) as client:
        if kind == "s3":
            await client.create_bucket(Bucket=name)
            yield S3Store(client, name, prefix="group/"), client
        else:
            store = DynamoDBStore(client, name, group="group", ttl_seconds=600)
            await store.create_table()
            yield store, client


@pytest.fixture(params=["s3", "dynamodb"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_publish_list_remove_and_summary(kind: str, moto_endpoint: str) -> None:
    async with open_store(kind, moto_endpoint) as (store, _):
        assert await store.reports() == []
        assert await store.read_summary() is None
        await store.publish("a", report("a", 10.0))
        await store.publish("b", report("b", 20.0))
        await store.publish("a", report("a", 30.0))  # overwrites
        found = sorted(
            (r.producer_id, r.shards["events/shardId-000000000000"].records_per_second)
            for r in map(decode_report, await store.reports())
        )
        assert found == [("a", 30.0), ("b", 20.0)]
        await store.remove("a")
        await store.remove("never-there")  # no error
        assert [decode_report(d).producer_id for d in await store.reports()] == ["b"]
        await store.write_summary(b"summary bytes")
        assert await store.read_summary() == b"summary bytes"
        # The service's answers told the store its time (moto's clock is this machine's).
        service_now = store.server_clock.now()
        assert service_now is not None
        assert abs(service_now - time.time()) < 2


async def test_s3_lists_reports_across_pages(moto_endpoint: str) -> None:
    async with open_store("s3", moto_endpoint) as (store, client):
        paged = S3Store(client, store.bucket, store.prefix, page_size=2)
        for index in range(5):
            await paged.publish(f"p{index}", report(f"p{index}", float(index)))
        found = sorted(decode_report(data).producer_id for data in await paged.reports())
        assert found == [f"p{index}" for index in range(5)]
        with pytest.raises(ConfigError, match="page_size must be 1 … 1,000; got 0"):
            S3Store(client, "b", page_size=0)


async def test_the_summarizer_skips_foreign_and_malformed_objects(
    kind: str, moto_endpoint: str
) -> None:
    async with open_store(kind, moto_endpoint) as (store, client):
        await store.publish("a", report("a", 10.0))
        await store.publish("b", report("b", 20.0))
        await store.publish("broken", b'{"format": "aiokpl.coordination.report/1"}')
        if kind == "s3":
            bucket = store.bucket
            for key, body in (
                ("group/reports/notes.txt", b"not json, not fetched"),
                ("group/reports/other.json", b'{"someone": "else"}'),
                ("group/elsewhere.json", b"outside the reports prefix"),
            ):
                await client.put_object(Bucket=bucket, Key=key, Body=body)
        else:
            for sort_key, item in (
                ("report#no-body", {}),
                ("report#string-body", {"body": {"S": "text, not binary"}}),
                ("report#other", {"body": {"B": b'{"someone": "else"}'}}),
            ):
                await client.put_item(
                    TableName=store.table,
                    Item={"pk": {"S": "group"}, "sk": {"S": sort_key}, **item},
                )
            await client.put_item(  # another group in the same table
                TableName=store.table,
                Item={"pk": {"S": "other"}, "sk": {"S": "report#x"}, "body": {"B": report("x", 5)}},
            )
        await run_summarizer(store, interval=1.0, rounds=1)
        summary = decode_summary(await store.read_summary() or b"")
        assert summary.producers == 2
        load = summary.shards["events/shardId-000000000000"]
        assert (load.records_per_second, load.bytes_per_second, load.producers) == (
            30.0,
            3000.0,
            2,
        )


async def test_dynamodb_items_carry_a_ttl_attribute(moto_endpoint: str) -> None:
    async with open_store("dynamodb", moto_endpoint) as (store, client):
        ttl = await client.describe_time_to_live(TableName=store.table)
        description = ttl["TimeToLiveDescription"]
        assert description["AttributeName"] == "expires_at"
        assert description["TimeToLiveStatus"] in ("ENABLED", "ENABLING")
        # The TTL counts on the service's clock, from the Date header of its answers: whole
        # seconds, so up to one second before the local clock (moto runs on this machine).
        before = time.time()
        await store.publish("a", report("a", 1.0))
        await store.write_summary(b"s")
        after = time.time()
        service_now = store.server_clock.now()
        assert service_now is not None
        assert int(before) <= service_now <= after
        for sort_key in ("report#a", "summary"):
            item = (
                await client.get_item(
                    TableName=store.table, Key={"pk": {"S": "group"}, "sk": {"S": sort_key}}
                )
            )["Item"]
            expires_at = int(item["expires_at"]["N"])
            assert int(before) + 600 <= expires_at <= int(after + 600)


async def test_s3_summary_errors_other_than_missing_propagate(moto_endpoint: str) -> None:
    async with create_client(config(moto_endpoint), "s3") as client:
        store = S3Store(client, "no-such-bucket-anywhere", prefix="p/")
        with pytest.raises(Exception, match="NoSuchBucket"):
            await store.read_summary()

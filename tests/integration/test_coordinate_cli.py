"""``aiokpl coordinate`` against moto's S3 and DynamoDB (the command runs its own loop)."""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import pytest

from aiokpl._cli import main
from aiokpl._core.coordination import Report, ShardLoad, decode_summary, encode_report
from aiokpl._kinesis import create_client
from aiokpl.coordination import DynamoDBStore, S3Store

from .helpers import config

pytestmark = pytest.mark.integration

_names = itertools.count()
KEY = "events/shardId-000000000000"


@pytest.fixture(autouse=True)
def _dummy_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    # The command uses the default credential chain, as it would in production.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def store_call(endpoint: str, service: str, make: Any, action: Any) -> Any:
    async def run() -> Any:
        async with create_client(config(endpoint), service) as client:
            return await action(make(client))

    return anyio.run(run)


def test_coordinate_summarizes_a_dynamodb_group(moto_endpoint: str) -> None:
    table = f"cli-{next(_names)}"
    common = ["coordinate", "--dynamodb", table, "--group", "g", "--region", "us-east-1"]
    common += [f"--endpoint-url={moto_endpoint}", "--interval=1"]
    assert main([*common, "--create-table", "--rounds=1"]) == 0

    def store(client: Any) -> DynamoDBStore:
        return DynamoDBStore(client, table, "g")

    report = Report("p", 1, {KEY: ShardLoad(40.0, 400.0, 50.0, 500.0)})
    store_call(moto_endpoint, "dynamodb", store, lambda s: s.publish("p", encode_report(report)))
    assert main([*common, "--rounds=2"]) == 0
    summary = decode_summary(
        store_call(moto_endpoint, "dynamodb", store, lambda s: s.read_summary())
    )
    assert (summary.producers, summary.shards[KEY].records_per_second) == (1, 40.0)


def test_coordinate_summarizes_an_s3_prefix(moto_endpoint: str) -> None:
    bucket = f"cli-{next(_names)}"
    store_call(moto_endpoint, "s3", lambda c: c, lambda c: c.create_bucket(Bucket=bucket))

    def store(client: Any) -> S3Store:
        return S3Store(client, bucket, "team/")

    report = Report("p", 1, {KEY: ShardLoad(7.0, 70.0, 8.0, 80.0)})
    store_call(moto_endpoint, "s3", store, lambda s: s.publish("p", encode_report(report)))
    arguments = ["coordinate", "--s3", f"{bucket}/team/", f"--endpoint-url={moto_endpoint}"]
    assert main([*arguments, "--interval=1", "--rounds=1", "--backend=trio"]) == 0
    summary = decode_summary(store_call(moto_endpoint, "s3", store, lambda s: s.read_summary()))
    assert summary.shards[KEY].records_per_second == 7.0


def test_coordinate_reports_a_table_it_cannot_create(
    moto_endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    table = f"cli-{next(_names)}"
    arguments = ["coordinate", "--dynamodb", table, f"--endpoint-url={moto_endpoint}"]
    assert main([*arguments, "--create-table", "--rounds=1"]) == 0
    assert main([*arguments, "--create-table", "--rounds=1"]) == 2  # it exists now
    assert "ResourceInUseException" in capsys.readouterr().err

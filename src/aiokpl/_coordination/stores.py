"""Coordination stores: where producers publish reports and read the summary.

:class:`CoordinationStore` is the protocol a producer's coordination task and the summarizer
use; two implementations come with aiokpl:

* :class:`S3Store` keeps one object per producer under ``{prefix}reports/`` and the summary at
  ``{prefix}summary.json``;
* :class:`DynamoDBStore` keeps one item per producer (with a TTL attribute, so the table cleans
  up after producers that vanished) and the summary item, all under one partition key, so one
  ``Query`` lists a group.

Both take an aiobotocore client the caller opens and closes, and keep the service's own clock
(:class:`_ServerClock`, from its answers' ``Date`` header) for the wall times they write.
Every method may raise anything on failure: the callers (``coordinator.py``) bound each round
with a timeout, log and carry on.
"""

from __future__ import annotations

import email.utils
import logging
from collections.abc import Mapping
from typing import Any, Protocol

import anyio

from .._core.errors import ConfigError
from .._kinesis import error_of

__all__ = ("CoordinationStore", "DynamoDBStore", "S3Store", "wall_time_of")

logger = logging.getLogger("aiokpl.coordination")

_FETCH_CONCURRENCY = 16  # parallel GETs when the summarizer reads an S3 prefix


class _ServerClock:
    """A store service's own clock: the ``Date`` header of its latest answer, carried forward
    on the event loop's clock (so a fake clock moves it as well).

    Wall time serves DynamoDB's TTL attribute (epoch seconds, as the service counts them) and
    the informational ``wall_time`` of reports and summaries; never timing or staleness, which
    use the event loop's clock. Taken from the service, it needs no local wall clock and no
    trust that this machine's is set right. The header has whole seconds, so the time read may
    be up to a second early.
    """

    def __init__(self) -> None:
        self._anchor: tuple[float, float] | None = None  # (epoch seconds, loop time)

    def observe(self, response: Mapping[str, Any]) -> None:
        """Take the time from an answer of the service (a botocore response or page)."""
        date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        if not isinstance(date, str):
            return
        try:
            epoch = email.utils.parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError):
            return  # not an HTTP date: keep the time from an earlier answer, if any
        self._anchor = (epoch, anyio.current_time())

    def now(self) -> float | None:
        """The service's time in seconds since the epoch, or ``None`` before any answer."""
        if self._anchor is None:
            return None
        epoch, at = self._anchor
        return epoch + (anyio.current_time() - at)


def wall_time_of(store: CoordinationStore) -> float:
    """The store service's time if the store keeps a :class:`_ServerClock`, else 0 (unknown)."""
    clock = getattr(store, "server_clock", None)
    now = clock.now() if isinstance(clock, _ServerClock) else None
    return 0.0 if now is None else now


class CoordinationStore(Protocol):
    """Where producers publish reports and read the summary (see :class:`S3Store`).

    Every method may raise anything on failure; the caller bounds it with a timeout, logs and
    carries on.
    """

    async def publish(self, producer_id: str, data: bytes) -> None:
        """Create or overwrite the report of ``producer_id``."""

    async def remove(self, producer_id: str) -> None:
        """Delete the report of ``producer_id``, if any."""

    async def reports(self) -> list[bytes]:
        """The bodies of all reports (objects it cannot read are left out)."""
        ...

    async def write_summary(self, data: bytes) -> None:
        """Create or overwrite the summary."""

    async def read_summary(self) -> bytes | None:
        """The summary's body, or ``None`` if there is none yet."""
        ...


async def _read_body(response: dict[str, Any]) -> bytes:
    async with response["Body"] as body:
        data: bytes = await body.read()
    return data


class S3Store:
    """Reports as S3 objects under a prefix, and a summary object beside them.

    Reports are ``{prefix}reports/{producer_id}.json``; the summary is
    ``{prefix}summary.json``. Use a bucket without versioning (every report is overwritten
    each interval). Objects under ``{prefix}reports/`` that do not end in ``.json`` are not
    fetched; those that do but are not reports are skipped by the summarizer.

    Args:
        client: an aiobotocore S3 client, opened and closed by the caller.
        bucket: the bucket name.
        prefix: the key prefix of this group of producers, e.g. ``"aiokpl/orders/"``.
        page_size: keys per ``ListObjectsV2`` page, 1 … 1,000.
    """

    def __init__(
        self, client: Any, bucket: str, prefix: str = "aiokpl/", *, page_size: int = 1000
    ) -> None:
        if not 1 <= page_size <= 1000:
            raise ConfigError(f"page_size must be 1 … 1,000; got {page_size!r}")
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.page_size = page_size
        self.server_clock: _ServerClock = _ServerClock()

    def __repr__(self) -> str:
        return f"S3Store(bucket={self.bucket!r}, prefix={self.prefix!r})"

    def _report_key(self, producer_id: str) -> str:
        return f"{self.prefix}reports/{producer_id}.json"

    @property
    def summary_key(self) -> str:
        """The key of the summary object."""
        return f"{self.prefix}summary.json"

    async def publish(self, producer_id: str, data: bytes) -> None:
        self.server_clock.observe(
            await self.client.put_object(
                Bucket=self.bucket, Key=self._report_key(producer_id), Body=data
            )
        )

    async def remove(self, producer_id: str) -> None:
        await self.client.delete_object(Bucket=self.bucket, Key=self._report_key(producer_id))

    async def reports(self) -> list[bytes]:
        keys: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        async for page in paginator.paginate(
            Bucket=self.bucket,
            Prefix=f"{self.prefix}reports/",
            PaginationConfig={"PageSize": self.page_size},
        ):
            self.server_clock.observe(page)
            keys.extend(
                item["Key"] for item in page.get("Contents", ()) if item["Key"].endswith(".json")
            )
        bodies: list[bytes] = []
        limiter = anyio.CapacityLimiter(_FETCH_CONCURRENCY)

        async def fetch(key: str) -> None:
            async with limiter:
                try:
                    response = await self.client.get_object(Bucket=self.bucket, Key=key)
                    bodies.append(await _read_body(response))
                except Exception as exc:
                    # Deleted between the listing and the read, or unreadable: leave it out.
                    logger.debug("skipping %s: %s", key, error_of(exc)[1])

        async with anyio.create_task_group() as task_group:
            for key in keys:
                task_group.start_soon(fetch, key)
        return bodies

    async def write_summary(self, data: bytes) -> None:
        self.server_clock.observe(
            await self.client.put_object(Bucket=self.bucket, Key=self.summary_key, Body=data)
        )

    async def read_summary(self) -> bytes | None:
        try:
            response = await self.client.get_object(Bucket=self.bucket, Key=self.summary_key)
        except Exception as exc:
            if error_of(exc)[0] in ("NoSuchKey", "404"):
                return None
            raise
        self.server_clock.observe(response)
        return await _read_body(response)


class DynamoDBStore:
    """Reports as DynamoDB items with a TTL attribute, and a summary item, in one partition.

    The table's key is ``pk`` (partition, string) and ``sk`` (sort, string); one group of
    producers is one ``pk`` value. Reports are items ``sk = "report#{producer_id}"``, the
    summary is ``sk = "summary"``; each item's ``body`` holds the JSON and ``expires_at`` the
    epoch second after which DynamoDB's TTL may delete it. :meth:`create_table` makes such a
    table (on-demand capacity, TTL on ``expires_at``).

    Args:
        client: an aiobotocore DynamoDB client, opened and closed by the caller.
        table: the table name.
        group: the partition key value of this group of producers.
        ttl_seconds: how long after its last update an item may be deleted by TTL, counted
            on the service's clock (the ``Date`` of its answers).
    """

    def __init__(
        self, client: Any, table: str, group: str = "aiokpl", *, ttl_seconds: float = 3600.0
    ) -> None:
        if not ttl_seconds > 0:
            raise ConfigError(f"ttl_seconds must be greater than 0; got {ttl_seconds!r}")
        self.client = client
        self.table = table
        self.group = group
        self.ttl_seconds = ttl_seconds
        self.server_clock: _ServerClock = _ServerClock()

    def __repr__(self) -> str:
        return f"DynamoDBStore(table={self.table!r}, group={self.group!r})"

    async def create_table(self) -> None:
        """Create the table (on-demand) and enable TTL on ``expires_at``; wait until active."""
        await self.client.create_table(
            TableName=self.table,
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        waiter = self.client.get_waiter("table_exists")
        await waiter.wait(TableName=self.table, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
        await self.client.update_time_to_live(
            TableName=self.table,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"},
        )

    async def _put(self, sort_key: str, data: bytes) -> None:
        """Write an item, expiring ``ttl_seconds`` after now by the service's own clock."""
        now = self.server_clock.now()
        if now is None:  # no answer from the service yet: ask it the time, with a read
            await self._summary_item()
            now = self.server_clock.now()
        item: dict[str, Any] = {"pk": {"S": self.group}, "sk": {"S": sort_key}, "body": {"B": data}}
        if now is not None:  # else no Date header (a proxy?): the item never expires
            item["expires_at"] = {"N": str(int(now + self.ttl_seconds))}
        self.server_clock.observe(await self.client.put_item(TableName=self.table, Item=item))

    async def _summary_item(self) -> dict[str, Any]:
        response: dict[str, Any] = await self.client.get_item(
            TableName=self.table, Key={"pk": {"S": self.group}, "sk": {"S": "summary"}}
        )
        self.server_clock.observe(response)
        return response

    async def publish(self, producer_id: str, data: bytes) -> None:
        await self._put(f"report#{producer_id}", data)

    async def remove(self, producer_id: str) -> None:
        await self.client.delete_item(
            TableName=self.table,
            Key={"pk": {"S": self.group}, "sk": {"S": f"report#{producer_id}"}},
        )

    async def reports(self) -> list[bytes]:
        bodies: list[bytes] = []
        paginator = self.client.get_paginator("query")
        async for page in paginator.paginate(
            TableName=self.table,
            KeyConditionExpression="pk = :group AND begins_with(sk, :report)",
            ExpressionAttributeValues={":group": {"S": self.group}, ":report": {"S": "report#"}},
        ):
            self.server_clock.observe(page)
            for item in page.get("Items", ()):
                body = item.get("body", {}).get("B")
                if isinstance(body, bytes):
                    bodies.append(body)
        return bodies

    async def write_summary(self, data: bytes) -> None:
        await self._put("summary", data)

    async def read_summary(self) -> bytes | None:
        body = (await self._summary_item()).get("Item", {}).get("body", {}).get("B")
        return body if isinstance(body, bytes) else None

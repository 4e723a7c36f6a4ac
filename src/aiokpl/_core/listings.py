"""Reading the answers a shard map is loaded from (``ListShards``, ``DescribeStream`` pages) and
the stream's summary (``DescribeStreamSummary``), pure.

The shard map (``aiokpl._pipeline.shard_map``) catches what its client calls raise, and
nothing else; an answer that came back but cannot make a map is reported by these readers as
:class:`UnusableAnswer`, with a code of its own:

* ``"MalformedResponse"``: not the shape the API documents (no ``Shards`` list, a shard without
  a hash-key range, no open shard at all, more pages announced without a shard to continue
  from, capacity-mode details without a mode, a record distribution that is not a string): a
  proxy's page parsed as an empty document, a
  broken server. The shard map logs it, counts it and retries after its backoff, like a
  failed call;
* ``"StreamNotActive"``: ``DescribeStream`` says the stream is being created or deleted: it has
  no shards to write to yet (or any more).

Anything else these functions raise is a bug, and propagates.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .shards import ShardTable

__all__ = (
    "AUTO",
    "MALFORMED",
    "NOT_ACTIVE",
    "USER_PARTITION_KEY",
    "StreamSummary",
    "UnusableAnswer",
    "describe_stream_page",
    "list_shards_page",
    "open_shards_table",
    "summary_of",
)

MALFORMED = "MalformedResponse"
AUTO = "AUTO"
"""The record distribution of a stream whose service places records itself."""
USER_PARTITION_KEY = "USER_PARTITION_KEY"
"""The record distribution of a stream that places records by partition key (the default)."""
NOT_ACTIVE = "StreamNotActive"
# A stream in another state (CREATING, DELETING) has no shards to write to.
_USABLE_STATUSES = ("ACTIVE", "UPDATING")


class UnusableAnswer(Exception):
    """An answer that came back and cannot make a map: ``code`` and ``message`` say why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _shards_of(container: dict[str, Any], operation: str) -> list[dict[str, Any]]:
    shards = container.get("Shards")
    if shards is None:
        return []  # botocore omits an empty list
    if not isinstance(shards, list) or not all(isinstance(s, dict) for s in shards):
        raise UnusableAnswer(
            MALFORMED, f"{operation} answered Shards that are not a list of shards"
        )
    return shards


def list_shards_page(response: object) -> tuple[list[dict[str, Any]], str | None]:
    """The shards of one ``ListShards`` page, and the ``NextToken`` of the next (or ``None``)."""
    if not isinstance(response, dict):
        raise UnusableAnswer(MALFORMED, f"ListShards answered a {type(response).__name__}")
    token = response.get("NextToken")
    return _shards_of(response, "ListShards"), token if isinstance(token, str) and token else None


def describe_stream_page(stream: str, response: object) -> tuple[list[dict[str, Any]], str | None]:
    """The shards of one ``DescribeStream`` page, and the shard id to continue after (``None``
    on the last page); a stream neither ``ACTIVE`` nor ``UPDATING`` is ``"StreamNotActive"``."""
    description = response.get("StreamDescription") if isinstance(response, dict) else None
    if not isinstance(description, dict):
        raise UnusableAnswer(MALFORMED, "DescribeStream answered without a StreamDescription")
    status = description.get("StreamStatus")
    if status not in _USABLE_STATUSES:
        raise UnusableAnswer(NOT_ACTIVE, f"stream {stream!r} is {status}")
    page = _shards_of(description, "DescribeStream")
    if not description.get("HasMoreShards"):
        return page, None
    last = page[-1].get("ShardId") if page else None
    if not isinstance(last, str):
        raise UnusableAnswer(MALFORMED, "DescribeStream answered HasMoreShards without any shard")
    return page, last


def _is_closed(shard: dict[str, Any]) -> bool:
    sequence_range = shard.get("SequenceNumberRange")
    return isinstance(sequence_range, dict) and bool(sequence_range.get("EndingSequenceNumber"))


def open_shards_table(shards: list[dict[str, Any]], operation: str) -> ShardTable:
    """The table of the open shards of a listing; an answer without any is malformed."""
    # ListShards' AT_LATEST asks for open shards only, but local servers (moto, kinesalite)
    # ignore the filter and list closed parents too, overlapping their children; DescribeStream
    # always lists them. Drop them here.
    open_shards = [shard for shard in shards if not _is_closed(shard)]
    if not open_shards:
        # A stream always has an open shard: an answer without any is malformed (a proxy's
        # page parsed as an empty document, say), a failed attempt to retry, not a map.
        raise UnusableAnswer(MALFORMED, f"{operation} answered without any open shard")
    try:
        return ShardTable.from_shards(open_shards)
    except ValueError as exc:  # a shard without its range, ranges that overlap …
        raise UnusableAnswer(MALFORMED, f"{operation} answered {exc}") from exc


class StreamSummary(NamedTuple):
    """What a ``DescribeStreamSummary`` answer says that the producer uses.

    Attributes:
        capacity_mode: ``StreamModeDetails.StreamMode`` (``"PROVISIONED"``, ``"ON_DEMAND"``),
            ``None`` from a server older than capacity modes (kinesalite).
        record_distribution: ``RecordDistributionStrategy`` (``"AUTO"``,
            ``"USER_PARTITION_KEY"``); the service gives it for on-demand streams only, and
            a stream without it places records by key: ``"USER_PARTITION_KEY"`` then.
        open_shards: ``OpenShardCount``, ``None`` if absent.
        stream_id: ``StreamId``, ``None`` if absent.
    """

    capacity_mode: str | None
    record_distribution: str
    open_shards: int | None
    stream_id: str | None


def summary_of(response: object) -> StreamSummary:
    """Read a ``DescribeStreamSummary`` answer.

    Raises:
        UnusableAnswer: ``"MalformedResponse"``: no ``StreamDescriptionSummary``, or one of
            the members read here has another type than the API documents.
    """
    summary = response.get("StreamDescriptionSummary") if isinstance(response, dict) else None
    if not isinstance(summary, dict):
        raise UnusableAnswer(
            MALFORMED, "DescribeStreamSummary answered without a StreamDescriptionSummary"
        )
    mode = None
    details = summary.get("StreamModeDetails")
    if details is not None:
        mode = details.get("StreamMode") if isinstance(details, dict) else None
        if not isinstance(mode, str):
            raise UnusableAnswer(
                MALFORMED, "DescribeStreamSummary answered without StreamModeDetails.StreamMode"
            )
    distribution = summary.get("RecordDistributionStrategy", USER_PARTITION_KEY)
    if not isinstance(distribution, str):
        raise UnusableAnswer(
            MALFORMED,
            "DescribeStreamSummary answered a RecordDistributionStrategy that is "
            f"not a string ({type(distribution).__name__})",
        )
    count = summary.get("OpenShardCount")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
        raise UnusableAnswer(
            MALFORMED,
            f"DescribeStreamSummary answered an OpenShardCount that is not an integer ({count!r})",
        )
    stream_id = summary.get("StreamId")
    if stream_id is not None and not isinstance(stream_id, str):
        raise UnusableAnswer(
            MALFORMED, "DescribeStreamSummary answered a StreamId that is not a string"
        )
    return StreamSummary(mode, distribution, count, stream_id or None)

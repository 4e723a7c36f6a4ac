"""Metrics, pure: the KPL's metric names, a per-second windowed accumulator, and the roll-ups.

Every metric the KPL publishes is here with its unit and level (KPL ``aws/metrics/
metrics_constants.cc``). A value is recorded once, on the most detailed series the configured
granularity allows (its *leaf*: metric name, error code, stream, shard); the less detailed
series (stream, then global) are computed from the leaves when someone reads them. The KPL
instead puts every value into each ancestor series as it is recorded; merging count, sum,
min and max later gives the same statistics for a third of the recording work.

Time is cut into whole seconds. :class:`WindowedStatistic` keeps count, sum, min and max per
second in a ring of :data:`RING_SECONDS` buckets, so any span of the last minute can be read
back: the last ``window_s`` seconds for :meth:`MetricsTable.collect` queries, or the whole
seconds since the previous upload for a sink (the KPL's accumulator keeps a list of
per-second buckets and flushes it at each upload; a ring needs no flush and bounds memory).

Invariants:

* nothing here reads a clock: every call takes ``now`` (seconds, on the producer's clock);
* a metric above the configured level is never recorded (:meth:`MetricsTable.leaf` returns
  ``None``), and with level ``"none"`` there is no table at all;
* a bucket older than the ring is overwritten, never read: spans are checked by second.

Also here, because it is arithmetic on data: turning statistics into CloudWatch
``MetricDatum`` dictionaries and cutting them into ``PutMetricData`` requests within the
service's limits (:func:`cloudwatch_batches`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from .hashing import stream_name_of

__all__ = (
    "GRANULARITIES",
    "LEVELS",
    "METRICS",
    "RING_SECONDS",
    "WINDOW_SECONDS",
    "MetricStatistics",
    "MetricsTable",
    "WindowedStatistic",
    "cloudwatch_batches",
    "cloudwatch_datum",
)

LEVELS = ("none", "summary", "detailed")
"""Metric levels, least first (KPL ``MetricsLevel``)."""

GRANULARITIES = ("global", "stream", "shard")
"""Granularities, least detailed first (KPL ``MetricsGranularity``)."""

METRICS: dict[str, tuple[str, str]] = {
    # name: (CloudWatch unit, lowest level that records it), as in the KPL.
    "UserRecordsReceived": ("Count", "detailed"),
    "UserRecordsPending": ("Count", "detailed"),
    "UserRecordsPut": ("Count", "summary"),
    "UserRecordsDataPut": ("Bytes", "detailed"),
    "KinesisRecordsPut": ("Count", "summary"),
    "KinesisRecordsDataPut": ("Bytes", "detailed"),
    "ErrorsByCode": ("Count", "summary"),
    "AllErrors": ("Count", "summary"),
    "RetriesPerRecord": ("Count", "detailed"),
    "UserRecordExpired": ("Count", "summary"),
    # Not the KPL's: of those, the records that expired queued, never sent (overload).
    "UserRecordsExpiredUnsent": ("Count", "summary"),
    "BufferingTime": ("Milliseconds", "summary"),
    "RequestTime": ("Milliseconds", "detailed"),
    "UserRecordsPerKinesisRecord": ("Count", "detailed"),
    "KinesisRecordsPerPutRecordsRequest": ("Count", "detailed"),
    "UserRecordsPerPutRecordsRequest": ("Count", "detailed"),
    # Not the KPL's: the durable spool (Config.spool_directory), global series only.
    "SpoolBytes": ("Bytes", "summary"),
    "SpoolSegments": ("Count", "detailed"),
    "SpoolFsyncTime": ("Milliseconds", "summary"),
    "SpoolRecordsRecovered": ("Count", "summary"),
    "SpoolBytesLost": ("Bytes", "summary"),
    # Not the KPL's (its UnhealthyDaemon is about its child process): producer.health()'s
    # status sampled, 0 healthy, 1 degraded, 2 failing; global series only.
    "ProducerHealth": ("Count", "summary"),
}
"""Every metric: its unit and the level from which it is recorded."""

WINDOW_SECONDS = 60
"""The longest span :meth:`MetricsTable.collect` answers for (and the default)."""

RING_SECONDS = 64
"""Buckets kept: a minute of queries, or an upload interval of up to 60 s, plus slack."""


class WindowedStatistic:
    """Count, sum, min and max of the values of one series, per second, over the last minute.

    A bucket is ``[second, count, sum, min, max]``; the ring slot of second ``s`` is
    ``s % RING_SECONDS``, and a slot holding another second is stale (reset on write, skipped
    on read). Buckets are made on first use: a producer makes hundreds of series at once
    (metrics × shards) and most of them see only some seconds.
    """

    __slots__ = ("_ring",)

    def __init__(self) -> None:
        self._ring: list[list[Any] | None] = [None] * RING_SECONDS

    def add(self, value: float, now: float) -> None:
        """Record one value at time ``now``."""
        self.add_many(1, value, value, value, now)

    def add_many(self, count: int, total: float, low: float, high: float, now: float) -> None:
        """Record ``count`` values at ``now`` whose sum, min and max are given."""
        second = math.floor(now)
        slot = second % RING_SECONDS
        bucket = self._ring[slot]
        if bucket is None:
            self._ring[slot] = [second, count, total, low, high]
            return
        if bucket[0] != second:
            bucket[0] = second
            bucket[1] = count
            bucket[2] = total
            bucket[3] = low
            bucket[4] = high
            return
        bucket[1] += count
        bucket[2] += total
        if low < bucket[3]:
            bucket[3] = low
        if high > bucket[4]:
            bucket[4] = high

    def latest(self) -> int | None:
        """The latest second that holds values, or ``None`` if none does."""
        seconds = [bucket[0] for bucket in self._ring if bucket is not None]
        return max(seconds) if seconds else None

    def span(self, begin: int, end: int) -> tuple[int, float, float, float] | None:
        """``(count, sum, min, max)`` of the seconds ``begin <= s < end``; ``None`` if empty."""
        count = 0
        total = 0.0
        low = math.inf
        high = -math.inf
        for bucket in self._ring:
            if bucket is None:
                continue
            second, n, s, lo, hi = bucket
            if begin <= second < end:
                count += n
                total += s
                if lo < low:
                    low = lo
                if hi > high:
                    high = hi
        if not count:
            return None
        return count, total, low, high


@dataclass(frozen=True, slots=True)
class MetricStatistics:
    """Statistics of one metric series over a span of time.

    A series is a metric name with the dimensions it was recorded with: ``stream`` and
    ``shard_id`` are ``None`` on the less detailed series that sum up all streams or shards
    (the KPL's global and stream granularities), and ``error_code`` is set only for
    ``ErrorsByCode``.

    Attributes:
        name: the KPL metric name, e.g. ``"UserRecordsPut"``.
        unit: ``"Count"``, ``"Bytes"`` or ``"Milliseconds"`` (CloudWatch unit names).
        count: how many values were recorded (CloudWatch ``SampleCount``).
        sum: their sum.
        min: the smallest.
        max: the largest.
        stream: the stream, or ``None`` on a global series.
        shard_id: the shard, or ``None`` on a global or per-stream series.
        error_code: the error code (``ErrorsByCode`` only).
    """

    name: str
    unit: str
    count: int
    sum: float
    min: float
    max: float
    stream: str | None = None
    shard_id: str | None = None
    error_code: str | None = None

    @property
    def mean(self) -> float:
        """``sum / count`` (the CloudWatch ``Average``)."""
        return self.sum / self.count

    @property
    def dimensions(self) -> tuple[tuple[str, str], ...]:
        """The CloudWatch dimensions of this series, in the KPL's order."""
        dims: list[tuple[str, str]] = []
        if self.error_code is not None:
            dims.append(("ErrorCode", self.error_code))
        if self.stream is not None:
            # A stream put to by ARN: its name, as in Kinesis's own CloudWatch metrics.
            dims.append(("StreamName", stream_name_of(self.stream)))
        if self.shard_id is not None:
            dims.append(("ShardId", self.shard_id))
        return tuple(dims)


_LeafKey = tuple[str, "str | None", "str | None", "str | None"]  # name, code, stream, shard


class MetricsTable:
    """Every series recorded by one producer.

    Args:
        level: ``"summary"`` or ``"detailed"`` (``"none"`` means no table).
        granularity: ``"global"``, ``"stream"`` or ``"shard"``: the most detailed series kept.

    Raises:
        ValueError: an unknown level or granularity.
    """

    def __init__(self, level: str, granularity: str) -> None:
        if level not in LEVELS[1:]:
            raise ValueError(f"level must be 'summary' or 'detailed'; got {level!r}")
        if granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {GRANULARITIES}; got {granularity!r}")
        rank = LEVELS.index(level)
        self.level = level
        self.granularity = granularity
        self.names = frozenset(
            name for name, (_, lowest) in METRICS.items() if LEVELS.index(lowest) <= rank
        )
        self._keep_stream = granularity != "global"
        self._keep_shard = granularity == "shard"
        self._leaves: dict[_LeafKey, WindowedStatistic] = {}

    def leaf(
        self,
        name: str,
        stream: str | None = None,
        shard_id: str | None = None,
        error_code: str | None = None,
    ) -> WindowedStatistic | None:
        """The series to record ``name`` in (created on first use), or ``None`` if the level
        excludes it. Dimensions finer than the granularity are dropped."""
        if name not in self.names:
            return None
        if not self._keep_shard:
            shard_id = None
            if not self._keep_stream:
                stream = None
        key = (name, error_code, stream, shard_id)
        series = self._leaves.get(key)
        if series is None:
            series = self._leaves[key] = WindowedStatistic()
        return series

    def prune(self, now: float) -> int:
        """Drop the series with no value in the seconds the ring still holds (a shard closed
        by resharding, a stream no longer used): the table does not grow with every shard
        and stream ever seen. Returns how many were dropped; a later value creates the
        series again."""
        oldest = math.floor(now) - RING_SECONDS
        leaves = self._leaves
        stale = [key for key, series in leaves.items() if (series.latest() or -math.inf) <= oldest]
        for key in stale:
            del leaves[key]
        return len(stale)

    def collect(self, begin: int, end: int, name: str | None = None) -> list[MetricStatistics]:
        """Statistics of every series with values in the seconds ``begin <= s < end``.

        Each leaf also counts towards its less detailed series (its stream's, and the global
        one), as in the KPL. Sorted by name, then error code, stream and shard, the less
        detailed series first.
        """
        merged: dict[_LeafKey, list[float]] = {}
        for key, series in self._leaves.items():
            if name is not None and key[0] != name:
                continue
            stats = series.span(begin, end)
            if stats is None:
                continue
            metric, code, stream, shard = key
            for rollup in _rollups(metric, code, stream, shard):
                into = merged.get(rollup)
                if into is None:
                    merged[rollup] = list(stats)
                else:
                    into[0] += stats[0]
                    into[1] += stats[1]
                    into[2] = min(into[2], stats[2])
                    into[3] = max(into[3], stats[3])
        return [
            MetricStatistics(
                name=metric,
                unit=METRICS[metric][0],
                count=int(count),
                sum=float(total),
                min=float(low),
                max=float(high),
                stream=stream,
                shard_id=shard,
                error_code=code,
            )
            for (metric, code, stream, shard), (count, total, low, high) in sorted(
                merged.items(), key=lambda item: _sort_key(item[0])
            )
        ]

    def window(self, now: float, window_s: int, name: str | None = None) -> list[MetricStatistics]:
        """Statistics over the last ``window_s`` seconds, the current (partial) one included."""
        current = math.floor(now)
        return self.collect(current - window_s + 1, current + 1, name)


def _rollups(
    name: str, code: str | None, stream: str | None, shard: str | None
) -> Iterable[_LeafKey]:
    yield (name, code, None, None)
    if stream is not None:
        yield (name, code, stream, None)
        if shard is not None:
            yield (name, code, stream, shard)


def _sort_key(key: _LeafKey) -> tuple[str, str, str, str]:
    # None sorts first: "" is below every real value.
    name, code, stream, shard = key
    return (name, code or "", stream or "", shard or "")


# --- CloudWatch ----------------------------------------------------------------------------

CLOUDWATCH_MAX_DATA = 1000
"""Most ``MetricDatum`` entries in one ``PutMetricData`` request (service limit)."""

CLOUDWATCH_MAX_BYTES = 1_000_000
"""Largest ``PutMetricData`` request body we build (service limit: 1 MB per HTTP POST)."""

_REQUEST_OVERHEAD = 200  # Action, Version, Namespace and framing, generously


def cloudwatch_datum(stats: MetricStatistics, timestamp: Any) -> dict[str, Any]:
    """The ``MetricDatum`` of ``stats``: a statistic set, its unit, its dimensions."""
    return {
        "MetricName": stats.name,
        "Dimensions": [{"Name": n, "Value": v} for n, v in stats.dimensions],
        "Timestamp": timestamp,
        "StatisticValues": {
            "SampleCount": float(stats.count),
            "Sum": stats.sum,
            "Minimum": stats.min,
            "Maximum": stats.max,
        },
        "Unit": stats.unit,
    }


def _encoded_size(datum: dict[str, Any]) -> int:
    """Bytes ``datum`` takes in the largest of the protocols botocore may use (the query
    protocol's ``MetricData.member.N.…=…&`` form, URL-encoded; JSON and CBOR are smaller)."""
    prefix = len("MetricData.member.1000.")
    size = 0
    for dimension in datum["Dimensions"]:
        size += prefix + len("Dimensions.member.30.Name=&") + len(quote(dimension["Name"]))
        size += prefix + len("Dimensions.member.30.Value=&") + len(quote(dimension["Value"]))
    size += prefix + len("MetricName=&") + len(quote(datum["MetricName"]))
    size += prefix + len("Unit=&") + len(datum["Unit"])
    size += prefix + len("Timestamp=&") + len("2000-01-01T00%3A00%3A00.000000Z")
    for field in datum["StatisticValues"]:
        size += prefix + len(f"StatisticValues.{field}=&") + 24  # a double as text
    return size


def cloudwatch_batches(
    data: Sequence[dict[str, Any]],
    namespace: str,
    *,
    max_data: int = CLOUDWATCH_MAX_DATA,
    max_bytes: int = CLOUDWATCH_MAX_BYTES,
) -> list[list[dict[str, Any]]]:
    """Cut ``data`` into ``PutMetricData`` requests of at most ``max_data`` entries and
    ``max_bytes`` bytes each, in order."""
    batches: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    base = _REQUEST_OVERHEAD + len(quote(namespace))
    size = base
    for datum in data:
        datum_size = _encoded_size(datum)
        if current and (len(current) >= max_data or size + datum_size > max_bytes):
            batches.append(current)
            current = []
            size = base
        current.append(datum)
        size += datum_size
    if current:
        batches.append(current)
    return batches

"""Metrics: the pipeline's hooks, the sink protocol, the CloudWatch sink and the upload loop.

:class:`MetricsRecorder` turns what the pipeline already has in hand into values of the KPL's
metrics (``_core.metrics`` keeps them). It is called at batch level only, never per put:

* per answered ``PutRecords`` request, by the retrier (:meth:`~MetricsRecorder.request_done`):
  request time, records per request, and per Kinesis record its success, size and error code;
* per request's delivered user records, in the same call, per shard, in one pass over the
  records (sum and extremes of waits and data sizes at once); those delivered to another
  shard than predicted go through :meth:`~MetricsRecorder.delivered_elsewhere`;
* per failed user record, by the result ledger (``_pipeline.ledger.ResultLedger``, as it
  resolves records: :meth:`~MetricsRecorder.failed`): failures are rare, so this one is per
  record;
* every 200 ms, by the sampler task (:meth:`~MetricsRecorder.sample`), as the KPL does:
  ``UserRecordsPending`` per stream (the producer's outstanding records), and
  ``UserRecordsReceived`` as the growth of finished plus outstanding records, so
  ``put_record`` does no metrics work at all;
* with a spool, by its task and the sampler: ``SpoolBytes`` and ``SpoolSegments`` sampled,
  ``SpoolFsyncTime`` per flush that fsynced, and once at the start what recovery found
  (``SpoolRecordsRecovered``, ``SpoolBytesLost``); global series only.

When ``Config.metrics_level`` is ``"none"`` there is no recorder: each hook is one
``if ... is not None`` on a batch, and no task runs.

Every ``metrics_upload_interval_ms`` the upload loop hands the statistics of the whole
seconds since the previous upload to each :class:`MetricsSink`; on exit a last upload (the
current second included) is made, bounded in time. A sink that fails is logged and skipped:
metrics never disturb delivery.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

import anyio

from .._core.answers import Answer, Answered, Entry, Refused
from .._core.metrics import (
    MetricsTable,
    MetricStatistics,
    WindowedStatistic,
    cloudwatch_batches,
    cloudwatch_datum,
)
from .._kinesis import create_cloudwatch_client, error_of

if TYPE_CHECKING:
    from .._core.config import Config
    from .._core.records import KinesisRecord
    from .._record import UserRecord

__all__ = ("CloudWatchSink", "MetricsRecorder", "MetricsSink", "Uploader")

logger = logging.getLogger("aiokpl.metrics")

SAMPLE_INTERVAL = 0.2  # seconds between UserRecordsPending samples (KPL: 200 ms)

_records_of = attrgetter("records")


@runtime_checkable
class MetricsSink(Protocol):
    """Where a producer sends its metrics, every ``Config.metrics_upload_interval_ms``.

    Implement the three coroutines; give instances to ``Producer(metrics_sinks=[...])``.
    The producer calls ``open`` once on entering, ``publish`` after each interval with the
    statistics of that interval (each series once; ``count`` is never 0), and ``aclose`` once
    on exit after a last ``publish``. Exceptions from ``publish`` are logged and otherwise
    ignored; a ``publish`` that takes longer than the upload interval is cancelled.
    """

    async def open(self, config: Config) -> None:
        """Prepare to publish (e.g. open a client), with the producer's configuration."""

    async def publish(self, metrics: Sequence[MetricStatistics]) -> None:
        """Send the statistics of one interval."""

    async def aclose(self) -> None:
        """Release what ``open`` acquired."""


class MetricsRecorder:
    """Records the KPL's metrics from the pipeline's batch-level events into a table."""

    def __init__(self, table: MetricsTable) -> None:
        self.table = table
        self._leaf = table.leaf
        self._by_shard = table.granularity == "shard"
        self._detailed = table.level == "detailed"
        self._received: dict[str, int] = {}
        self._finished: dict[str, int] = {}
        # (stream, shard) -> the series a request's answer updates: one look-up per shard.
        self._request_series_of: dict[
            tuple[str, str | None],
            tuple[
                WindowedStatistic,
                WindowedStatistic,
                WindowedStatistic | None,
                WindowedStatistic | None,
            ],
        ] = {}
        # (stream, shard) -> the series a delivery updates: one look-up per shard.
        self._delivery_series: dict[
            tuple[str, str | None],
            tuple[
                WindowedStatistic,
                WindowedStatistic,
                WindowedStatistic | None,
                WindowedStatistic | None,
            ],
        ] = {}

    # --- per request ---------------------------------------------------------------------
    def request_done(
        self,
        stream: str,
        records: Sequence[KinesisRecord],
        answer: Answer,
        started: float,
        ended: float,
        now: float,
    ) -> int:
        """A ``PutRecords`` call was answered (or failed as a whole): KPL ``retrier.cc``.

        Also records the delivery of the user records of every Kinesis record delivered to
        its predicted shard (or sent unpredicted), the common case, here a Kinesis record at a
        time; returns how many. The others (delivered elsewhere, judged by the retrier) go
        through :meth:`delivered_elsewhere`.
        """
        if self._detailed:
            self._series("RequestTime", stream).add((ended - started) * 1000.0, now)
            self._series("KinesisRecordsPerPutRecordsRequest", stream).add(len(records), now)
            users = sum(map(len, map(_records_of, records)))
            self._series("UserRecordsPerPutRecordsRequest", stream).add(users, now)
        entries: Sequence[Entry | None]
        if isinstance(answer, Answered):
            entries = answer.entries
        else:
            entries = [None] * len(records)
            self._series("ErrorsByCode", stream, None, answer.code).add(1, now)
            self._series("AllErrors", stream).add(1, now)
        by_shard = self._by_shard
        # Per predicted shard: user records per Kinesis record, sizes of those delivered,
        # and how many failed; errors by (shard, code); user records delivered, by shard.
        per_shard: dict[str | None, tuple[list[int], list[int], list[int]]] = {}
        errors: dict[tuple[str | None, str], int] = {}
        delivered: dict[str | None, list[UserRecord]] = {}
        for kr, entry in zip(records, entries, strict=True):
            shard = kr.predicted_shard
            tally = per_shard.get(shard)
            if tally is None:
                tally = per_shard[shard] = ([], [], [])
            tally[0].append(len(kr.records))
            if entry is None:
                continue  # the request failed as a whole: counted above, without shard
            if not isinstance(entry, Refused):
                actual = entry[0]  # (shard_id, sequence_number)
                tally[1].append(len(kr.data))
                if shard is None or shard == actual:  # all its user records are delivered
                    key = actual if by_shard else None
                    users_here = delivered.get(key)
                    # The Kinesis record's own list when it is the shard's only one (the
                    # common case), never changed in place: no copy.
                    in_kr = cast("list[UserRecord]", kr.records)
                    delivered[key] = in_kr if users_here is None else users_here + in_kr
            else:
                tally[2].append(1)
                error = (shard, entry.code)  # a malformed entry's is "Internal"
                errors[error] = errors.get(error, 0) + 1
        for shard, (users_per_kr, sizes, failed) in per_shard.items():
            put, all_errors, data_put, per_kr = self._request_series(stream, shard)
            if per_kr is not None:
                self._put_many(per_kr, users_per_kr, now)
            if not isinstance(answer, Answered):
                continue  # failed as a whole
            ok, bad = len(sizes), len(failed)
            put.add_many(ok + bad, ok, 0 if bad else 1, 1 if ok else 0, now)
            all_errors.add_many(ok + bad, bad, 0 if ok else 1, 1 if bad else 0, now)
            if data_put is not None:
                self._put_many(data_put, sizes, now)
        for (shard, code), n in errors.items():
            self._series("ErrorsByCode", stream, shard, code).add_many(n, n, 1, 1, now)
        counted = 0
        for shard, users_here in delivered.items():
            self._delivered_group(stream, shard, users_here, started, now)
            counted += len(users_here)
        if self._detailed and counted:
            self._finished[stream] = self._finished.get(stream, 0) + counted
        return counted

    def prune(self, now: float) -> None:
        """Drop series that hold no value any more (see ``MetricsTable.prune``)."""
        if self.table.prune(now):
            # The caches may hold dropped series: they fill again from the table on use.
            self._request_series_of.clear()
            self._delivery_series.clear()

    def _request_series(
        self, stream: str, shard: str | None
    ) -> tuple[
        WindowedStatistic, WindowedStatistic, WindowedStatistic | None, WindowedStatistic | None
    ]:
        series = self._request_series_of.get((stream, shard))
        if series is None:
            series = self._request_series_of[(stream, shard)] = (
                self._series("KinesisRecordsPut", stream, shard),
                self._series("AllErrors", stream, shard),
                self._leaf("KinesisRecordsDataPut", stream, shard),
                self._leaf("UserRecordsPerKinesisRecord", stream, shard),
            )
        return series

    # --- per finished user record --------------------------------------------------------
    def delivered_elsewhere(self, stream: str, records: list[UserRecord], now: float) -> None:
        """Of user records just delivered, record those :meth:`request_done` did not: the ones
        that landed on another shard than predicted (a stale shard map; rare)."""
        by_shard = self._by_shard
        groups: dict[tuple[str | None, float], list[UserRecord]] = {}
        for record in records:
            delivery = record.delivered
            assert delivery is not None
            predicted = record.predicted_shard
            if predicted is None or predicted == delivery[2]:
                continue  # recorded by request_done
            groups.setdefault((delivery[2] if by_shard else None, delivery[0]), []).append(record)
        counted = 0
        for (shard, started), group in groups.items():
            self._delivered_group(stream, shard, group, started, now)
            counted += len(group)
        if self._detailed:
            self._finished[stream] = self._finished.get(stream, 0) + counted

    def _delivered_group(
        self,
        stream: str,
        shard: str | None,
        records: list[UserRecord],
        started: float,
        now: float,
    ) -> None:
        """Delivered user records of one shard, all sent by the request started at
        ``started``."""
        series = self._delivery_series.get((stream, shard))
        if series is None:
            leaf = self._leaf
            series = self._delivery_series[(stream, shard)] = (
                self._series("UserRecordsPut", stream, shard),
                self._series("BufferingTime", stream, shard),
                leaf("UserRecordsDataPut", stream, shard),
                leaf("RetriesPerRecord", stream, shard),
            )
        put, buffering, data_put, retried = series
        n = len(records)
        put.add_many(n, n, 1, 1, now)
        # One pass over the records for every statistic: each pass over a few hundred
        # records is a trip through memory, and this runs for every record delivered.
        # BufferingTime has one value per attempt, the wait before it (KPL: start - last
        # end); for the successful attempt that is the request's start less the record's last
        # end, so its sum and extremes come from the last ends'.
        first = records[0]
        ends = 0.0
        earliest = latest = first.last_end
        sizes = 0
        smallest = largest = first.data_size
        retried_before = False
        for record in records:
            end = record.last_end
            ends += end
            if end < earliest:
                earliest = end
            elif end > latest:
                latest = end
            size = record.data_size
            sizes += size
            if size < smallest:
                smallest = size
            elif size > largest:
                largest = size
            if record.attempts:
                retried_before = True
        count, total = n, n * started - ends
        low, high = started - latest, started - earliest
        retries: list[int] | None = None
        if retried_before:  # earlier failed attempts: rare, the long way
            retries = [len(record.attempts) for record in records]
            earlier = [a.delay for record in records for a in record.attempts]
            count += len(earlier)
            total += sum(earlier)
            low, high = min(low, *earlier), max(high, *earlier)
        buffering.add_many(count, total * 1e3, low * 1e3, high * 1e3, now)
        if data_put is not None:
            data_put.add_many(n, sizes, smallest, largest, now)
        if retried is not None:
            if retries is None:
                retried.add_many(n, 0, 0, 0, now)
            else:
                retried.add_many(n, sum(retries), min(retries), max(retries), now)

    def expired_unsent(self, records: Iterable[UserRecord], now: float) -> None:
        """User records that expired queued in the producer, never sent (overload)."""
        for record in records:
            self._series("UserRecordsExpiredUnsent", record.stream, record.predicted_shard).add(
                1, now
            )

    def failed(self, records: Iterable[UserRecord], now: float) -> None:
        """User records that failed for good (their attempts say why), not resolved yet."""
        for record in records:
            stream = record.stream
            shard = record.predicted_shard
            attempts = record.attempts
            self._series("UserRecordsPut", stream, shard).add(0, now)
            if attempts and attempts[-1].error_code == "Expired":
                self._series("UserRecordExpired", stream, shard).add(1, now)
            delays = [a.delay for a in attempts]
            self._put_many(self._series("BufferingTime", stream, shard), delays, now, 1e3)
            if self._detailed:
                retries = max(len(attempts) - 1, 0)
                self._series("RetriesPerRecord", stream, shard).add(retries, now)
                self._finished[stream] = self._finished.get(stream, 0) + 1

    # --- sampled -------------------------------------------------------------------------
    def sample(self, outstanding: dict[str, int], now: float, *, pending: bool) -> None:
        """From each stream's records outstanding now, count those received since the last
        call (received = finished + outstanding); with ``pending``, record them as
        ``UserRecordsPending`` too."""
        if not self._detailed:
            return
        for stream, waiting in outstanding.items():
            total = self._finished.get(stream, 0) + waiting
            new = total - self._received.get(stream, 0)
            self._received[stream] = total
            if new:
                self._series("UserRecordsReceived", stream).add_many(new, new, 1, 1, now)
            if pending:
                self._series("UserRecordsPending", stream).add(waiting, now)

    # --- the spool (global series: no stream dimension) ----------------------------------
    def spool_sampled(self, bytes_on_disk: int, segments: int, now: float) -> None:
        """A sample of the spool's size (by the sampler, every 200 ms)."""
        self._global("SpoolBytes").add(bytes_on_disk, now)
        if self._detailed:
            self._global("SpoolSegments").add(segments, now)

    def health_sampled(self, severity: int, now: float) -> None:
        """A sample of ``producer.health()``: 0 healthy, 1 degraded, 2 failing."""
        self._global("ProducerHealth").add(severity, now)

    def spool_fsynced(self, seconds: float, now: float) -> None:
        """A spool flush that fsynced took ``seconds`` (write, fsync, the thread hop)."""
        self._global("SpoolFsyncTime").add(seconds * 1000.0, now)

    def spool_recovered(self, records: int, bytes_lost: int, now: float) -> None:
        """What the spool's recovery found at the start: once per start, zeros included
        (a start is a data point)."""
        self._global("SpoolRecordsRecovered").add(records, now)
        self._global("SpoolBytesLost").add(bytes_lost, now)

    # --- helpers -------------------------------------------------------------------------
    def _global(self, name: str) -> WindowedStatistic:
        series = self._leaf(name)
        assert series is not None, name
        return series

    def _series(
        self, name: str, stream: str, shard: str | None = None, code: str | None = None
    ) -> WindowedStatistic:
        """The series of a metric the level is known to record (summary metrics always,
        detailed ones under ``if self._detailed``)."""
        series = self._leaf(name, stream, shard, code)
        assert series is not None, name
        return series

    @staticmethod
    def _put_many(
        series: WindowedStatistic | None, values: list[Any], now: float, scale: float = 1.0
    ) -> None:
        if series is not None and values:
            series.add_many(
                len(values), sum(values) * scale, min(values) * scale, max(values) * scale, now
            )


class Uploader:
    """Hands each interval's statistics to the sinks; never raises into the producer.

    Args:
        table: the producer's metrics.
        sinks: where to send them.
        interval: seconds between uploads.
        clock: the producer's clock.
        before_collect: called just before statistics are collected (to sample counters).
    """

    def __init__(
        self,
        table: MetricsTable,
        sinks: Sequence[MetricsSink],
        interval: float,
        clock: Callable[[], float],
        before_collect: Callable[[float], None],
    ) -> None:
        self._table = table
        self._sinks = tuple(sinks)
        self._interval = interval
        self._clock = clock
        self._before_collect = before_collect
        # Per sink: the first second it has not been sent yet. It moves on once a publish
        # returns, fails or times out; a publish cancelled by the producer's exit leaves it,
        # so the last upload sends that span again rather than losing it.
        self._checkpoints = [math.floor(clock())] * len(self._sinks)
        self.uploads = 0
        self.failures = 0

    async def run(self) -> None:
        """Upload every interval, until cancelled."""
        while True:
            await anyio.sleep(self._interval)
            await self.upload(final=False)

    async def upload(self, *, final: bool) -> None:
        """Publish the whole seconds not yet sent (and the current one if ``final``), to all
        sinks at once."""
        now = self._clock()
        self._before_collect(now)
        end = math.floor(now) + (1 if final else 0)
        self.uploads += 1
        async with anyio.create_task_group() as task_group:
            for index in range(len(self._sinks)):
                task_group.start_soon(self._publish, index, end)

    async def _publish(self, index: int, end: int) -> None:
        sink = self._sinks[index]
        metrics = self._table.collect(self._checkpoints[index], end)
        if metrics:
            try:
                with anyio.move_on_after(self._interval) as scope:
                    await sink.publish(metrics)
                if scope.cancelled_caught:
                    self.failures += 1
                    logger.warning(
                        "metrics upload to %s took over %g s: abandoned",
                        _name(sink),
                        self._interval,
                    )
            except Exception as exc:
                self.failures += 1
                code, message = error_of(exc)
                logger.warning("metrics upload to %s failed: %s: %s", _name(sink), code, message)
        self._checkpoints[index] = end


def _name(sink: object) -> str:
    return type(sink).__name__


class CloudWatchSink:
    """Sends metrics to Amazon CloudWatch with ``PutMetricData``, as the KPL does.

    Each series of an interval becomes one ``MetricDatum`` with a statistic set (sample
    count, sum, minimum, maximum), its unit and dimensions, in the namespace
    ``Config.metrics_namespace``; requests hold at most 1,000 data and 1 MB. The client is
    an aiobotocore CloudWatch client opened from the producer's ``Config`` (region,
    credentials, profile: the same as for Kinesis), with SDK retries off; each request is
    tried up to ``attempts`` times, then logged (code and message only) and dropped.

    Args:
        endpoint_url: CloudWatch endpoint to use instead of the region's (a local server).
            ``Config.endpoint_url`` is Kinesis's and is not used here.
        client: an already open CloudWatch client to use (not closed by the sink).
        attempts: tries per request, 1 … 10.
        retry_delay: seconds before the first retry; doubled for each further one.
    """

    def __init__(
        self,
        *,
        endpoint_url: str | None = None,
        client: Any = None,
        attempts: int = 3,
        retry_delay: float = 1.0,
    ) -> None:
        if not 1 <= attempts <= 10:
            raise ValueError(f"attempts must be 1 … 10; got {attempts!r}")
        self.endpoint_url = endpoint_url
        self._client = client
        self._attempts = attempts
        self._retry_delay = retry_delay
        self._stack: contextlib.AsyncExitStack | None = None
        self._namespace = "KinesisProducerLibrary"
        self.requests_sent: int = 0
        self.requests_failed: int = 0

    def __repr__(self) -> str:
        return (
            f"<CloudWatchSink endpoint_url={self.endpoint_url!r} namespace={self._namespace!r} "
            f"requests_sent={self.requests_sent} requests_failed={self.requests_failed}>"
        )

    async def open(self, config: Config) -> None:
        """Open the CloudWatch client (unless one was given)."""
        self._namespace = config.metrics_namespace
        if self._client is None:
            stack = contextlib.AsyncExitStack()
            self._client = await stack.enter_async_context(
                create_cloudwatch_client(config, endpoint_url=self.endpoint_url)
            )
            self._stack = stack

    async def publish(self, metrics: Sequence[MetricStatistics]) -> None:
        """Send ``metrics`` in as few ``PutMetricData`` requests as the limits allow."""
        if self._client is None:
            raise RuntimeError("CloudWatchSink.publish before open()")
        timestamp = datetime.datetime.now(datetime.timezone.utc)
        data = [cloudwatch_datum(stats, timestamp) for stats in metrics]
        for batch in cloudwatch_batches(data, self._namespace):
            await self._send(batch)

    async def _send(self, batch: list[dict[str, Any]]) -> None:
        delay = self._retry_delay
        for attempt in range(1, self._attempts + 1):
            self.requests_sent += 1
            try:
                await self._client.put_metric_data(Namespace=self._namespace, MetricData=batch)
                return
            except Exception as exc:
                code, message = error_of(exc)
                if attempt == self._attempts:
                    self.requests_failed += 1
                    logger.warning(
                        "PutMetricData of %d metrics failed %d times, dropped: %s: %s",
                        len(batch),
                        attempt,
                        code,
                        message,
                    )
                    return
                await anyio.sleep(delay)
                delay *= 2

    async def aclose(self) -> None:
        """Close the client the sink opened."""
        stack, self._stack = self._stack, None
        if stack is not None:
            self._client = None
            await stack.aclose()


SeriesKey = tuple[str, "str | None", "str | None", "str | None"]  # name, stream, shard, code


class RunningTotals:
    """Per series: count and sum since the start (the sum of every published interval), and
    the min and max of the last interval that had values. What pull-based systems
    (Prometheus, OpenTelemetry's observable instruments) want from interval statistics."""

    def __init__(self) -> None:
        self.series: dict[SeriesKey, list[float]] = {}

    def add(self, metrics: Sequence[MetricStatistics]) -> None:
        for stats in metrics:
            key = (stats.name, stats.stream, stats.shard_id, stats.error_code)
            totals = self.series.get(key)
            if totals is None:
                self.series[key] = [stats.count, stats.sum, stats.min, stats.max]
            else:
                totals[0] += stats.count
                totals[1] += stats.sum
                totals[2] = stats.min
                totals[3] = stats.max

    def of(self, name: str) -> list[tuple[dict[str, str], list[float]]]:
        """``(labels, [count, sum, min, max])`` of every series of ``name``."""
        return [
            (_labels(stream, shard, code), totals)
            for (metric, stream, shard, code), totals in self.series.items()
            if metric == name
        ]


def _labels(stream: str | None, shard: str | None, code: str | None) -> dict[str, str]:
    labels = {}
    if stream is not None:
        labels["stream"] = stream
    if shard is not None:
        labels["shard_id"] = shard
    if code is not None:
        labels["error_code"] = code
    return labels


def snake_case(name: str) -> str:
    """``"UserRecordsPut"`` → ``"user_records_put"``."""
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))

"""The producer's snapshots: what :meth:`aiokpl.Producer.statistics` returns, and each stage's.

:class:`ProducerStatistics` (public) holds one :class:`StreamStatistics` (public) per stream;
the stream composes its snapshot from its stages' own (``ShardMapStatistics``,
``AggregatorStatistics``, ...), each stage reporting only its fields, and the producer composes
its from the streams', the sender's and its result ledger's. All are frozen and slotted: a
snapshot is taken, never updated. Pure: no I/O, no clock.

The KPL has no such snapshot (it exposes metrics only); they are ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ("ProducerStatistics", "SpoolStatistics", "StreamStatistics")


@dataclass(frozen=True, slots=True)
class StreamStatistics:
    """A snapshot of one stream's pipeline; ``str()`` of it is one line to log.

    Attributes:
        stream: the stream as it was put to: its name, or its ARN.
        shard_map_state: ``"INVALID"``, ``"UPDATING"`` or ``"READY"``.
        open_shards: shards in the current map (0 before it loads).
        shard_map_refreshes: completed loads of the map.
        aggregating: user records waiting in open aggregates.
        rate_limited: Kinesis records queued in the limiter, all shards.
        queued_by_shard: Kinesis records queued in the limiter, by shard (non-empty only).
        rates_by_shard: current (records/s, bytes/s) of each shard limited so far.
        ceilings_by_shard: the (records/s, bytes/s) each shard's rate recovers to after
            throttling: the configured rates, or what coordination set.
        collecting: Kinesis records in the open ``PutRecords`` request.
        retries: user-record retries so far.
        expired_unsent: user records that expired queued (in the rate limiter or waiting for
            a connection), never sent: what the stream could not take in time. They took no
            share of the rate limit.
        unmapped_rate: (records/s, bytes/s) of the stream-level limit that records without
            a predicted shard share (no shard map), or ``None`` if there were none.
        shard_map_source: the API that loaded the current map, ``"ListShards"`` or
            ``"DescribeStream"`` (used when ``ListShards`` fails, e.g. when the IAM policy
            lacks ``kinesis:ListShards``); ``None`` before a map loads.
        shard_map_last_error: ``(operation, error_code, error_message)`` of the failure that
            explains the map's state: why the last load attempt failed, or why ``ListShards``
            could not be used for the map in force; ``None`` when ``ListShards`` loaded it.
        waiting_for_shard_map: user records held until the stream's first map load ends
            (records put before it are aggregated with it; none wait past their deadline).
        capacity_mode: ``"PROVISIONED"`` or ``"ON_DEMAND"``, as ``DescribeStreamSummary``
            says (asked when the stream is first put to, then every
            ``Config.record_distribution_check_ms``); ``None`` until it answers, or when it
            cannot be asked (the IAM policy lacks ``kinesis:DescribeStreamSummary``).
        record_distribution: ``"AUTO"`` (the service places records) or
            ``"USER_PARTITION_KEY"`` (by key), as ``DescribeStreamSummary`` last said;
            ``None`` until it answers, or when it cannot be asked.
        placed_by_service: what the producer does: ``True`` while it takes the service to
            place the stream's records (``record_distribution`` is ``"AUTO"``, or a record was
            seen stored where its key does not route and no summary has said otherwise since):
            records then go one per Kinesis record (unless
            ``Config.aggregation_on_auto_streams``), unpredicted, under one stream-level limit.
        billed_kib: what on-demand billing counts of the records delivered: each Kinesis record
            rounded up to a whole KiB.
        put_payload_units: what provisioned billing counts of the records delivered: each
            Kinesis record rounded up to a whole 25 KiB PUT payload unit.
        dry_run: with ``Config.dry_run_check``, what the stream's dry run of ``PutRecords``
            answered: ``"DryRunOperationException"`` (records would be taken), the error code
            that says why not (``"AccessDeniedException"`` …), or ``"Stored"`` (the server does
            not know ``DryRun``); ``None`` without the check, or before it answers.
    """

    stream: str
    shard_map_state: str
    open_shards: int
    shard_map_refreshes: int
    aggregating: int
    rate_limited: int
    queued_by_shard: dict[str, int]
    rates_by_shard: dict[str, tuple[float, float]]
    collecting: int
    retries: int
    ceilings_by_shard: dict[str, tuple[float, float]] = field(default_factory=dict)
    expired_unsent: int = 0
    unmapped_rate: tuple[float, float] | None = None
    shard_map_source: str | None = None
    shard_map_last_error: tuple[str, str, str] | None = None
    waiting_for_shard_map: int = 0
    capacity_mode: str | None = None
    record_distribution: str | None = None
    placed_by_service: bool = False
    billed_kib: int = 0
    put_payload_units: int = 0
    dry_run: str | None = None

    def __str__(self) -> str:
        """One line an operator can read in a log (``repr`` keeps every field)::

            stream events: map READY (4 open shards, 1 load), 12 aggregating, 0 rate limited,
            0 collecting, 3 retries, distribution USER_PARTITION_KEY

        (on one line); records waiting for the first map, records expired unsent and the
        map's last error are added when there are some.
        """
        loads = "load" if self.shard_map_refreshes == 1 else "loads"
        parts = [
            f"map {self.shard_map_state} ({self.open_shards} open shards, "
            f"{self.shard_map_refreshes} {loads})",
            f"{self.aggregating} aggregating",
            f"{self.rate_limited} rate limited",
            f"{self.collecting} collecting",
            f"{self.retries} retries",
        ]
        if self.waiting_for_shard_map:
            parts.append(f"{self.waiting_for_shard_map} waiting for the map")
        if self.expired_unsent:
            parts.append(f"{self.expired_unsent} expired unsent")
        distribution = f"distribution {self.record_distribution or 'unknown'}"
        if self.placed_by_service:
            distribution += " (placed by the service)"
        parts.append(distribution)
        if self.shard_map_last_error is not None:
            operation, code, _ = self.shard_map_last_error
            parts.append(f"map error {operation} {code}")
        return f"stream {self.stream}: " + ", ".join(parts)


@dataclass(frozen=True, slots=True)
class SpoolStatistics:
    """A snapshot of a producer's durable spool (``Config.spool_directory``).

    Attributes:
        segments: segment files in the spool directory.
        bytes_on_disk: their bytes.
        records_appended: records this producer accepted into the spool since it started.
        records_durable: of those, records on disk as the fsync policy promises (fsync'd, or
            written with ``spool_fsync="none"``).
        records_unresolved: records in the spool without an outcome yet (this run's and
            those recovered from earlier runs), or not written yet.
        fsyncs: fsyncs of segment files since the start.
        fsync_seconds_max: the longest flush that fsynced (write, fsync and the hop to the
            worker thread), in seconds of the producer's clock.
        fsync_seconds_total: the time of all of them: divided by ``fsyncs``, the mean.
        records_recovered: records found on disk at the start without an outcome: the ones to
            send again.
        records_replayed: of those, records put back into the pipeline so far.
        records_replay_failed: replayed records that failed (they have no caller: they are
            logged, counted here, and given to ``Config.on_record_failure``).
        frames_lost: damaged entries found at the start; the rest of each damaged segment
            could not be read (its records are lost).
        bytes_lost: the bytes lost so (from each damaged entry to the end of its segment).
        segments_moved_aside: damaged segments kept as ``*.corrupt`` files for inspection.
        torn_tails: segments found at the start ending in a write a crash cut short, cut back
            to their last whole entry (a crash's normal mark: what was cut was never durable,
            unless the disk lost what an fsync had reported written).
        bytes_truncated: the bytes cut off so.
        full: the disk is full now: puts wait (``put_record_nowait`` raises
            ``BufferFullError``) until a write succeeds again.
        write_errors: failed writes and fsyncs so far (disk full, or another error), each
            retried.
    """

    segments: int
    bytes_on_disk: int
    records_appended: int
    records_durable: int
    records_unresolved: int
    fsyncs: int
    fsync_seconds_max: float
    fsync_seconds_total: float
    records_recovered: int
    records_replayed: int
    records_replay_failed: int
    frames_lost: int
    bytes_lost: int
    segments_moved_aside: int
    torn_tails: int
    bytes_truncated: int
    full: bool
    write_errors: int

    def __str__(self) -> str:
        """One line: ``spool: 3 unresolved, 2 segments, 4096 bytes, 0 fsyncs``, and what went
        wrong (full, write errors, records or bytes lost) when something did."""
        parts = [
            f"{self.records_unresolved} unresolved",
            f"{self.segments} segments",
            f"{self.bytes_on_disk} bytes",
            f"{self.fsyncs} fsyncs",
        ]
        if self.records_recovered:
            parts.append(f"{self.records_replayed}/{self.records_recovered} recovered replayed")
        if self.full:
            parts.append("FULL")
        if self.write_errors:
            parts.append(f"{self.write_errors} write errors")
        if self.frames_lost:
            parts.append(f"{self.frames_lost} damaged entries ({self.bytes_lost} bytes lost)")
        return "spool: " + ", ".join(parts)


@dataclass(frozen=True, slots=True)
class ProducerStatistics:
    """A snapshot of the producer.

    ``str()`` of it is a few lines to log: records, requests, a line per stream and one for the
    spool; ``repr()`` keeps every field.

    Attributes:
        outstanding_records: records between ``put_record`` and their result.
        outstanding_bytes: their partition key plus data bytes.
        records_put: records accepted by ``put_record`` so far.
        records_succeeded: records delivered.
        records_failed: records that failed (any code, ``"Expired"`` included).
        requests_sent: ``PutRecords`` calls answered or failed so far.
        requests_failed: of those, calls that failed as a whole.
        requests_in_flight: calls under way now.
        requests_queued: requests waiting for a free connection.
        streams: per-stream snapshots.
        failure_callbacks_pending: async ``Config.on_record_failure`` calls queued or running.
        failure_callback_errors: exceptions ``Config.on_record_failure`` raised so far.
        records_expired_unsent: of ``records_failed``, records that expired queued in the
            producer, never sent (every stream's ``expired_unsent``).
        requests_backing_off: requests held back, without a connection, while their stream
            backs off after request-level failures (or waits for the answer to the one
            request it sends first when its backoff ends).
        spool: the durable spool's counts; ``None`` without ``Config.spool_directory``.
    """

    outstanding_records: int
    outstanding_bytes: int
    records_put: int
    records_succeeded: int
    records_failed: int
    requests_sent: int
    requests_failed: int
    requests_in_flight: int
    requests_queued: int
    streams: tuple[StreamStatistics, ...]
    failure_callbacks_pending: int = 0
    failure_callback_errors: int = 0
    records_expired_unsent: int = 0
    requests_backing_off: int = 0
    spool: SpoolStatistics | None = None

    def __str__(self) -> str:
        """A few lines an operator can read in a log: records, requests, then one line per
        stream and one for the spool (``repr`` keeps every field)::

            records: 1000 put, 990 succeeded, 10 failed, 0 outstanding (0 bytes)
            requests: 12 sent, 0 failed, 1 in flight, 0 queued, 0 backing off
              stream events: map READY (4 open shards, 1 load), 0 aggregating, ...
        """
        records = (
            f"records: {self.records_put} put, {self.records_succeeded} succeeded, "
            f"{self.records_failed} failed"
        )
        if self.records_expired_unsent:
            records += f" ({self.records_expired_unsent} expired unsent)"
        records += f", {self.outstanding_records} outstanding ({self.outstanding_bytes} bytes)"
        lines = [
            records,
            f"requests: {self.requests_sent} sent, {self.requests_failed} failed, "
            f"{self.requests_in_flight} in flight, {self.requests_queued} queued, "
            f"{self.requests_backing_off} backing off",
        ]
        if self.failure_callbacks_pending or self.failure_callback_errors:
            lines.append(
                f"on_record_failure: {self.failure_callbacks_pending} pending, "
                f"{self.failure_callback_errors} errors"
            )
        lines.extend(f"  {stream}" for stream in self.streams)
        if self.spool is not None:
            lines.append(f"  {self.spool}")
        return "\n".join(lines)


# --- the stages' own snapshots: each stage's fields only; the stream composes them ----------
@dataclass(frozen=True, slots=True)
class ShardMapStatistics:
    """A stream's shard map; fields as in :class:`StreamStatistics`."""

    state: str
    open_shards: int
    refreshes: int
    source: str | None
    last_error: tuple[str, str, str] | None


@dataclass(frozen=True, slots=True)
class AggregatorStatistics:
    """A stream's aggregator: records in open aggregates, and held for the first map."""

    aggregating: int
    waiting_for_shard_map: int


@dataclass(frozen=True, slots=True)
class LimiterStatistics:
    """A stream's rate limiter; fields as in :class:`StreamStatistics` (``queued`` is its
    ``rate_limited``)."""

    queued: int
    queued_by_shard: dict[str, int]
    rates_by_shard: dict[str, tuple[float, float]]
    ceilings_by_shard: dict[str, tuple[float, float]]
    unmapped_rate: tuple[float, float] | None


@dataclass(frozen=True, slots=True)
class CollectorStatistics:
    """A stream's collector: Kinesis records in the open ``PutRecords`` request."""

    collecting: int


@dataclass(frozen=True, slots=True)
class RetrierStatistics:
    """A stream's retrier: user-record retries, records expired before they were sent, and
    what the records stored are billed (fields as in :class:`StreamStatistics`)."""

    retries: int
    expired_unsent: int
    billed_kib: int = 0
    put_payload_units: int = 0


@dataclass(frozen=True, slots=True)
class SenderStatistics:
    """The producer's sender; fields as the ``requests_*`` of :class:`ProducerStatistics`."""

    requests_sent: int
    requests_failed: int
    in_flight: int
    queued: int
    backing_off: int

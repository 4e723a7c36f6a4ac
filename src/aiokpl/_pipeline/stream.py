"""One stream's pipeline: its wiring of the stages, its overload warning, flush and statistics.

A record put to the stream goes ShardMap (prediction) → Aggregator → Limiter → Collector →
Sender → Retrier, and from the retrier either to its outcome or back to the aggregator. The
producer builds one pipeline per stream on its first put and releases it when idle.

Mirrors the per-stream part of ``aws/kinesis/core/pipeline.h``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Container
from typing import TYPE_CHECKING, Any, cast

from .._core.config import Config
from .._core.records import KinesisRecord
from .._core.retry_policy import RetryPolicy
from .._core.shards import ShardTable
from .._core.statistics import StreamStatistics
from .._record import UserRecord
from .aggregator import Aggregator
from .collector import Collector, OrderedCollector
from .limiter import Limiter, OrderedLimiter
from .retrier import Retrier
from .shard_map import MissingStreamsLog, ShardMap

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from .._coordination.coordinator import _ProducerCoordinator
    from .._metrics.recorder import MetricsRecorder
    from .scheduler import Scheduler
    from .sender import Sender

__all__ = ("OVERLOAD_LOG_INTERVAL", "StreamPipeline")

logger = logging.getLogger("aiokpl")

# Seconds between two warnings that a stream is offered more than it takes.
OVERLOAD_LOG_INTERVAL = 60.0


class StreamPipeline:
    """The pipeline of one stream: its shard map, aggregator, limiter, collector and retrier.

    Args:
        stream: the stream as it is put to: its name, or its ARN.
        config: the producer's settings.
        client: the Kinesis client that serves the stream.
        task_group: where the shard map's refreshes run.
        scheduler: the producer's scheduler (every deadline).
        clock: the producer's clock.
        sender: the producer's sender (connections are shared by all streams).
        finish: resolves records (the producer's ledger).
        metrics: the producer's metrics recorder, if any.
        coordinator: the producer's coordinator, if any: it meters and sets the limits.
        random_value: the producer's jitter generator (``jitter_source``), for the shard
            map's waits.
        missing_log: the producer's warning about streams not found (one line for many).
    """

    __slots__ = (
        "_clock",
        "_last_seen_out",
        "_overload_logged_at",
        "_overload_since_log",
        "_ttl_ms",
        "aggregator",
        "collector",
        "limiter",
        "retrier",
        "shard_map",
        "stream",
    )

    def __init__(
        self,
        stream: str,
        config: Config,
        *,
        client: Any,
        task_group: TaskGroup,
        scheduler: Scheduler,
        clock: Callable[[], float],
        sender: Sender,
        finish: Callable[[list[UserRecord], bool], None],
        metrics: MetricsRecorder | None,
        coordinator: _ProducerCoordinator | None,
        random_value: Callable[[], float],
        missing_log: MissingStreamsLog | None = None,
    ) -> None:
        self._clock = clock
        self._ttl_ms = config.record_ttl_ms
        self._overload_logged_at = -math.inf
        self._overload_since_log = 0
        self._last_seen_out = -1  # the aggregator's output count at the last idle sweep
        self.stream = stream
        self.shard_map = ShardMap(
            stream,
            client,
            task_group,
            request_timeout=config.request_timeout_ms / 1000,
            random_value=random_value,
            missing_log=missing_log,
        )
        buffered = config.record_max_buffered_time_ms / 1000
        grace = min(0.05, buffered * 0.2) if config.aggregation_enabled else 0.0
        ordered = config.ordering == "shard"
        self.collector = (OrderedCollector if ordered else Collector)(
            scheduler,
            # The retrier is the sender's destination: it owns the stream's verdicts.
            lambda records: sender.submit(self.retrier, records),
            clock,
            max_count=config.collection_max_count,
            max_size=config.collection_max_size,
            grace=grace,
        )
        admit: Callable[[KinesisRecord], None] = self.collector.put
        if coordinator is not None:
            admit = coordinator.meter(stream, admit)
        limits: dict[str, Any] = {
            "records_per_second": config.rate_limit_records_per_sec_per_shard,
            "bytes_per_second": config.rate_limit_bytes_per_sec_per_shard,
            "drain_interval": config.drain_interval_ms / 1000,
            # What a record needs to live on at admission to reach the wire in time: the
            # collector's grace, plus one drain interval of slack for the event loop.
            "send_margin": grace + config.drain_interval_ms / 1000,
            # A shard with a backlog admits a batch per buffered time, not a trickle per drain:
            # its records are past their deadline, so each trickle would be a request.
            "admit_batch": buffered,
        }
        self.limiter = (
            OrderedLimiter(
                scheduler,
                admit,
                self._expire_in_limiter,
                clock,
                hash_range=self.shard_map.hash_range,
                **limits,
            )
            if ordered
            else Limiter(scheduler, admit, self._expire_in_limiter, clock, **limits)
        )
        self.aggregator = Aggregator(
            self.shard_map,
            scheduler,
            self.limiter.put,
            enabled=config.aggregation_enabled,
            max_size=config.aggregation_max_size,
            max_count=config.aggregation_max_count,
            # A failed record's result carries its data: then records keep it in flight.
            release_data=not config.return_record_on_failure,
            # Held records are released early by the collector's grace: sent at their deadline.
            release_lead=grace,
            flush_stream=lambda: self.flush(clock()),
        )
        self.retrier = Retrier(
            stream,
            self.shard_map,
            self.aggregator,
            self.limiter,
            scheduler,
            finish,
            clock,
            RetryPolicy(
                fail_if_throttled=config.fail_if_throttled,
                aggregation_enabled=config.aggregation_enabled,
                retry_delay=buffered / 2,
            ),
            metrics=metrics,
            resend=lambda records: sender.submit(self.retrier, records),
        )
        if coordinator is not None:
            coordinator.attach(stream, self.limiter)
        self.shard_map.on_install = self._map_installed
        self.shard_map.on_drop = self._map_dropped
        self.shard_map.start()

    def _map_installed(self, table: ShardTable, replaced: frozenset[str]) -> None:
        """A new shard map: per-shard state of shards gone from it is dropped, and so is the
        state of ``replaced`` shards (ids the old map held with another range: the old stream
        was deleted and this is a new one under the same name); records still waiting at the
        stream-level limit (sent before any map) go back to the aggregator, to be aggregated
        and limited per shard like the rest."""
        kept: Container[str] = table
        if replaced:
            kept = {shard.shard_id for shard in table} - replaced
        if isinstance(self.limiter, OrderedLimiter):
            # Records predicted with the old map go to their lanes before those retire.
            self.aggregator.close_batches_outside(kept)
        self.limiter.prune(kept)
        put = self.aggregator.put
        for kinesis_record in self.limiter.take_unmapped():
            for record in cast("list[UserRecord]", kinesis_record.records):
                put(record, record.hash_key)

    def _map_dropped(self) -> None:
        """The stream is missing: no shard of it keeps any state (rates, ceilings), except
        what records still queued for it need until they leave."""
        if isinstance(self.limiter, OrderedLimiter):
            self.aggregator.close_batches_outside(())
        self.limiter.prune(())

    def idle_since_last_look(self) -> bool:
        """Whether nothing went through the pipeline since the last call (records put, or
        retried, each make the aggregator emit)."""
        out = self.aggregator.kinesis_records_out
        idle = out == self._last_seen_out
        self._last_seen_out = out
        return idle

    def close(self) -> None:
        """Release the pipeline: it holds no record, and its shard map stops refreshing."""
        self.shard_map.close()

    def _expire_in_limiter(self, record: KinesisRecord) -> None:
        self.retrier.expire(record, "rate limiter")
        shard_limiter = self.limiter.limiter_of(record)
        if shard_limiter is None or not shard_limiter.starved:
            return  # it came back too close to its TTL to be sent: no sign of overload
        # The stream is offered more than its shards take: say so, once a minute at most.
        self._overload_since_log += len(record.records)
        now = self._clock()
        if now - self._overload_logged_at >= OVERLOAD_LOG_INTERVAL:
            logger.warning(
                "stream %r is offered more than its shards take: %d records expired waiting "
                "in the rate limiter (record_ttl_ms=%d) since %s; send less, add shards, or "
                "lower max_outstanding_records so that put_record waits instead",
                self.stream,
                self._overload_since_log,
                self._ttl_ms,
                "the last warning" if self._overload_logged_at > -math.inf else "it started",
            )
            self._overload_logged_at = now
            self._overload_since_log = 0

    def flush(self, now: float) -> None:
        """Send everything buffered now: open aggregates, the rate limiter's queues (at once,
        whatever their tokens) and the open request."""
        self.aggregator.flush()
        self.limiter.drain(now, force=True)
        self.collector.flush()

    def statistics(self) -> StreamStatistics:
        """The stream's snapshot, composed of its stages' own."""
        shard_map = self.shard_map.statistics()
        aggregator = self.aggregator.statistics()
        limiter = self.limiter.statistics()
        retrier = self.retrier.statistics()
        return StreamStatistics(
            stream=self.stream,
            shard_map_state=shard_map.state,
            open_shards=shard_map.open_shards,
            shard_map_refreshes=shard_map.refreshes,
            aggregating=aggregator.aggregating,
            rate_limited=limiter.queued,
            queued_by_shard=limiter.queued_by_shard,
            rates_by_shard=limiter.rates_by_shard,
            collecting=self.collector.statistics().collecting,
            retries=retrier.retries,
            ceilings_by_shard=limiter.ceilings_by_shard,
            expired_unsent=retrier.expired_unsent,
            unmapped_rate=limiter.unmapped_rate,
            shard_map_source=shard_map.source,
            shard_map_last_error=shard_map.last_error,
            waiting_for_shard_map=aggregator.waiting_for_shard_map,
            capacity_mode=shard_map.capacity_mode,
        )

"""One stream's pipeline: its wiring of the stages, its overload warning, flush and statistics.

A record put to the stream goes ShardMap (prediction) → Aggregator → Limiter → Collector →
Sender → Retrier, and from the retrier either to its outcome or back to the aggregator. The
producer builds one pipeline per stream on its first put and releases it when idle.

Mirrors the per-stream part of ``aws/kinesis/core/pipeline.h``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, cast

from .._core.records import KinesisRecord
from .._core.retry_policy import RetryPolicy
from .._core.shards import ShardTable
from .._core.statistics import StreamStatistics
from .._record import UserRecord
from .aggregator import Aggregator
from .collector import Collector
from .limiter import Limiter
from .retrier import Retrier
from .shard_map import ShardMap

__all__ = ("OVERLOAD_LOG_INTERVAL", "_Stream")

logger = logging.getLogger("aiokpl")

# Seconds between two warnings that a stream is offered more than it takes.
OVERLOAD_LOG_INTERVAL = 60.0


class _Stream:
    """The pipeline of one stream: its shard map, aggregator, limiter, collector and retrier."""

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

    def __init__(self, producer: Any, stream: str) -> None:
        config = producer.config
        self._clock = producer._clock
        self._ttl_ms = config.record_ttl_ms
        self._overload_logged_at = -math.inf
        self._overload_since_log = 0
        self._last_seen_out = -1  # the aggregator's output count at the last idle sweep
        assert producer._task_group is not None
        self.stream = stream
        self.shard_map = ShardMap(
            stream,
            producer._client_for(stream),
            producer._task_group,
            request_timeout=config.request_timeout_ms / 1000,
        )
        scheduler = producer._scheduler
        clock = producer._clock
        sender = producer._sender
        assert sender is not None
        buffered = config.record_max_buffered_time_ms / 1000
        grace = min(0.05, buffered * 0.2) if config.aggregation_enabled else 0.0
        self.collector = Collector(
            scheduler,
            # The retrier is the sender's destination: it owns the stream's backoff and verdicts.
            lambda records: sender.submit(self.retrier, records),
            clock,
            max_count=config.collection_max_count,
            max_size=config.collection_max_size,
            grace=grace,
        )
        admit: Callable[[KinesisRecord], None] = self.collector.put
        coordinator = producer._coordinator
        if coordinator is not None:
            admit = coordinator.meter(stream, admit)
        self.limiter = Limiter(
            scheduler,
            admit,
            self._expire_in_limiter,
            clock,
            records_per_second=config.rate_limit_records_per_sec_per_shard,
            bytes_per_second=config.rate_limit_bytes_per_sec_per_shard,
            drain_interval=config.drain_interval_ms / 1000,
            # What a record needs to live on at admission to reach the wire in time: the
            # collector's grace, plus one drain interval of slack for the event loop.
            send_margin=grace + config.drain_interval_ms / 1000,
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
            producer._finish,
            clock,
            RetryPolicy(
                fail_if_throttled=config.fail_if_throttled,
                aggregation_enabled=config.aggregation_enabled,
                retry_delay=buffered / 2,
            ),
            metrics=producer._metrics,
            resend=lambda records: sender.submit(self.retrier, records),
        )
        if coordinator is not None:
            coordinator.attach(stream, self.limiter)
        self.shard_map.on_install = self._map_installed
        self.shard_map.start()

    def _map_installed(self, table: ShardTable) -> None:
        """A new shard map: per-shard state of shards gone from it is dropped, and records
        still waiting at the stream-level limit (sent before any map) go back to the
        aggregator, to be aggregated and limited per shard like the rest."""
        self.limiter.prune(table)
        put = self.aggregator.put
        for kinesis_record in self.limiter.take_unmapped():
            for record in cast("list[UserRecord]", kinesis_record.records):
                put(record, record.hash_key)

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
        self.aggregator.flush()
        self.limiter.drain(now, force=True)
        self.collector.flush()

    def statistics(self) -> StreamStatistics:
        table = self.shard_map.table
        limiter = self.limiter
        return StreamStatistics(
            stream=self.stream,
            shard_map_state=self.shard_map.state.value,
            open_shards=len(table) if table is not None else 0,
            shard_map_refreshes=self.shard_map.refreshes,
            aggregating=self.aggregator.buffered_records,
            rate_limited=limiter.queued,
            queued_by_shard={s: len(sl.queue) for s, sl in limiter.shards.items() if sl.queue},
            rates_by_shard={s: sl.rates for s, sl in limiter.shards.items()},
            collecting=self.collector.buffered_records,
            retries=self.retrier.retries,
            ceilings_by_shard={s: sl.ceiling for s, sl in limiter.shards.items()},
            expired_unsent=self.retrier.expired,
            unmapped_rate=limiter.unmapped.rates if limiter.unmapped is not None else None,
            shard_map_source=self.shard_map.source,
            shard_map_last_error=self.shard_map.last_error,
            waiting_for_shard_map=self.aggregator.held_records,
            capacity_mode=self.shard_map.capacity_mode,
        )

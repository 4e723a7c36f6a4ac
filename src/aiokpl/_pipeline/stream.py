"""One stream's pipeline: the router that says where a record goes next.

The stages (aggregator, limiter, collector, retrier, shard map) know nothing of each other:
each returns what it produces, and this router hands it on, one method per event:

=============================  ===========================================================
event                          route
=============================  ===========================================================
``put`` (a record)             shard map predicts → aggregator → (sealed) limiter →
                               (admitted) collector → (request) sender; on a stream that
                               places records itself, alone and unpredicted (below)
a due deadline                 ``_aggregator_due`` (a batch, or the start-up hold),
                               ``_limiter_due`` (a drain), ``_collector_due`` (a request),
                               ``_verdict_due`` (a delayed verdict, or its refresh)
``handle_result`` (an answer)  retrier judges → shard map (news), limiter (feedback),
                               outcomes; retried records → the ordering policy's route
``found_expired``              the sender found records past their TTL: refund, fail
``_map_installed``/``dropped``  limiter prunes; records without a prediction are put again
``_first_attempt_ended``       the start-up hold's records are put again (once the first map
                               load and the first summary have both ended)
``_distribution_changed``      the service now places records (or no longer): open and
                               queued aggregates go again one by one (or prediction resumes)
``flush``                      aggregator, limiter (forced), collector: everything out
=============================  ===========================================================

Outcomes resolve in one place (the ledger), and only after the step that resolved them: each
event runs inside ``with ledger.step():``, opened by its source (``put`` and ``flush`` here;
the scheduler for a due deadline; the sender's task for an answer; the shard map's, the
summary's and the dry run's tasks for what they learn), and what it resolves is resolved
(done-callbacks and ``on_record_failure`` run) when the outermost step ends. So a callback
that puts a record starts a new step; it never runs inside a stage's (or the sender's) update.

**Who places the records** is a second policy (``placement.py``): records the map does not
predict go where it routes them. While the service places the stream's records (``AUTO``:
``distribution.py`` says when), nothing is predicted (``_table`` is ``None``) and everything
goes under the limiter's stream-level limit at the open shards' combined rates; at the switch,
open aggregates and those queued in the limiter go again one by one (those sent are the retry
policy's), and back to placement by key, prediction resumes with a refreshed map.

``Config.ordering`` is a policy the router consults (``_pipeline/ordering.py``). The producer
builds one pipeline per stream on its first put and releases it when idle, or found missing
(``_streams``). Mirrors the per-stream part of ``aws/kinesis/core/pipeline.h``.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from .._core.config import Config
from .._core.records import KinesisRecord
from .._core.results import Attempt
from .._core.retry_policy import MISSING, Decisions, RetryPolicy
from .._core.shards import ShardTable
from .._core.statistics import StreamStatistics
from .._record import UserRecord
from .aggregator import Aggregator
from .collector import Collector
from .distribution import Distribution
from .limiter import Flow, limits_of
from .ordering import Ordering, Route, ordering_of
from .placement import AGGREGATE, ALONE, ORDERING_ON_AUTO, Placement, refusal
from .preflight import Preflight
from .retrier import Retrier
from .scheduler import RoutedDeadlines
from .shard_map import MissingStreamsLog, ShardMap
from .stream_logs import StreamWarnings

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from .._coordination.coordinator import ProducerCoordinator
    from .._core.answers import Answer
    from .._metrics.recorder import MetricsRecorder
    from .ledger import ResultLedger
    from .scheduler import Scheduler
    from .sender import Sender

__all__ = ("StreamPipeline",)


def _counted(record: KinesisRecord) -> None:
    """What coordination's meter passes an admitted record on to: the router routes it."""


@dataclass(slots=True, eq=False)
class _Verdict:
    """An aggregate delivered to a shard the map did not know: judged once, on the next
    refresh attempt or at its expiry, whichever comes first."""

    kinesis_record: KinesisRecord
    shard_id: str
    sequence_number: str
    started: float
    ended: float
    open: bool = True


class StreamPipeline:
    """The pipeline of one stream, and its router.

    Args:
        stream: the stream as it is put to: its name, or its ARN.
        config: the producer's settings.
        client: the Kinesis client that serves the stream.
        task_group: where the shard map's refreshes run.
        scheduler: the producer's scheduler (every deadline).
        clock: the producer's clock.
        sender: the producer's sender (connections are shared by all streams).
        ledger: resolves records (the producer's), after each step.
        metrics: the producer's metrics recorder, if any.
        coordinator: the producer's coordinator, if any: it meters and sets the limits.
        random_value: the producer's jitter generator (``jitter_source``), for the shard
            map's waits and the phase of the limiter's batches.
        missing_log: the producer's warning about streams not found (one line for many).
        on_missing: told of this pipeline when its stream may be missing (its first map
            load failed, or a request was answered ``ResourceNotFoundException``): the
            producer may release it once it holds nothing (see ``found_missing``).
    """

    __slots__ = (
        "_clock",
        "_grace",
        "_last_seen_out",
        "_ledger",
        "_meter",
        "_on_missing",
        "_policy",
        "_scheduler",
        "_sender",
        "_starting",
        "_table",
        "_warnings",
        "aggregator",
        "collector",
        "distribution",
        "limiter",
        "ordering",
        "placement",
        "preflight",
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
        ledger: ResultLedger,
        metrics: MetricsRecorder | None,
        coordinator: ProducerCoordinator | None,
        random_value: Callable[[], float],
        missing_log: MissingStreamsLog | None = None,
        on_missing: Callable[[StreamPipeline], None] | None = None,
    ) -> None:
        self.stream = stream
        self._on_missing = on_missing
        self._clock = clock
        self._scheduler = scheduler
        self._sender = sender
        self._ledger = ledger
        self._warnings = StreamWarnings(stream, config.record_ttl_ms)
        self._last_seen_out = -1  # the aggregator's output count at the last idle sweep
        # The first map load and the first summary still running: records are held.
        self._starting = {"map", "summary"}
        if config.dry_run_check:
            self._starting.add("dry run")
        # The table records are predicted with: the map's, unless the service places them.
        self._table: ShardTable | None = None
        # When the stream's backoff ends (the sender parks it until then): the retrier's.
        buffered = config.record_max_buffered_time_ms / 1000
        # The collector's grace: a record entering it waits at least this for company.
        self._grace = min(0.05, buffered * 0.2) if config.aggregation_enabled else 0.0
        self.ordering: Ordering = ordering_of(config.ordering)
        self.placement = Placement(
            ordered=self.ordering.keeps_shard_order,
            anywhere=config.aggregation_on_auto_streams,
            budget=config.aggregation_max_size,
            random_value=random_value,
        )
        self.shard_map, self.distribution, self.preflight = _control_plane(
            stream,
            config,
            client,
            task_group,
            random_value,
            missing_log,
            ledger.step,
            # What the router hears of each (in a step of the teller's task).
            on_install=self._map_installed,
            on_drop=self._map_dropped,
            on_change=self._distribution_changed,
            on_first=partial(self._started, "summary"),
            on_done=partial(self._started, "dry run"),
        )
        self.aggregator = Aggregator(
            RoutedDeadlines(scheduler, self._aggregator_due),
            enabled=config.aggregation_enabled,
            max_size=config.aggregation_max_size,
            max_count=config.aggregation_max_count,
            # A failed record's result carries its data: then records keep it in flight.
            release_data=not config.return_record_on_failure,
            # Held records are released early by the collector's grace: sent at their release
            # time; they wait for the first map until half their TTL is left at the latest.
            release_lead=self._grace,
            hold_patience=config.record_ttl_ms / 2000,
        )
        self.limiter = self.ordering.limiter(
            RoutedDeadlines(scheduler, self._limiter_due),
            clock,
            self.shard_map.hash_range,
            limits_of(config, self._grace, random_value()),
        )
        self.collector = Collector(
            RoutedDeadlines(scheduler, self._collector_due),
            max_count=config.collection_max_count,
            max_size=config.collection_max_size,
        )
        self._policy = RetryPolicy.of(config)
        self.retrier = Retrier(stream, self._policy, metrics=metrics)
        self._meter = None
        if coordinator is not None:
            self._meter = coordinator.meter(stream, _counted)
            coordinator.attach(stream, self.limiter)
        self._start()

    def _start(self) -> None:
        """Start the shard map, the summary and the dry run."""
        self.shard_map.start()
        # The refresh just started: this only asks to be told when it ends.
        self.shard_map.after_refresh(partial(self._started, "map"))
        self.distribution.start()
        if self.preflight is not None:
            self.preflight.start()

    # --- events ---------------------------------------------------------------------------
    def put(self, record: UserRecord, hash_key: int) -> None:
        """A record put (new, or retried) whose hash key is ``hash_key``: a step of its own,
        once it does more than join an open batch."""
        # Hot path: the table read inline; most puts close nothing, and open no step.
        table = self._table
        shard = table.lookup(hash_key) if table is not None and hash_key >= 0 else None
        if shard is not None:
            sealed = self.aggregator.put(record, hash_key, shard)
            if sealed is None:
                return
            with self._ledger.step():
                self._limit_sealed(sealed)
            return
        with self._ledger.step():
            sealed = self._unpredicted(record, hash_key)
            if sealed is not None:
                self._limit_sealed(sealed)

    def _limit_sealed(self, sealed: KinesisRecord | list[KinesisRecord]) -> None:
        """What the aggregator sealed: on to the limiter."""
        if isinstance(sealed, KinesisRecord):
            self._limit(sealed, self._clock())
        else:
            now = self._clock()
            for kinesis_record in sealed:
                self._limit(kinesis_record, now)

    # The deadlines' events run in the scheduler's step.
    def _aggregator_due(self, item: Any, now: float) -> None:
        closed, released = self.aggregator.due(item, now)
        for kinesis_record in closed:
            self._limit(kinesis_record, now)
        for record, hash_key in released:
            # Held to its deadline: it goes now where the placement policy says.
            sealed = self._placed(record, hash_key)
            if isinstance(sealed, KinesisRecord):
                self._limit(sealed, now)
            elif sealed is not None:
                for kinesis_record in sealed:
                    self._limit(kinesis_record, now)

    def _limiter_due(self, item: Any, now: float) -> None:
        self._route_flow(self.limiter.due(item, now), now)

    def _collector_due(self, item: Any, now: float) -> None:
        records = self.collector.due(item, now)
        if records is not None:
            self._sender.submit(self, records)

    def handle_result(
        self,
        records: list[KinesisRecord],
        answer: Answer,
        started: float,
        ended: float,
    ) -> None:
        """The sender's answer to a request of ``records`` (in its task's step): judge it and
        act."""
        now = self._clock()
        shard_map = self.shard_map
        decisions = self.retrier.handle_result(
            records, answer, started, ended, now, shard_map.hash_range
        )
        error = decisions.request_error
        if error is not None and error[0] == MISSING:
            # The stream is gone: its map must not outlive it (it may come back another).
            shard_map.missing(started)
            if self._on_missing is not None:
                self._on_missing(self)
        for seen_at, predicted in decisions.invalidate:
            shard_map.invalidate(seen_at, predicted)
        for shard, (count, size) in decisions.accepted.items():
            self.limiter.accepted(shard, count, size, now)
        for shard in decisions.throttled_shards:
            self.limiter.throttled(shard, now, started)
        for kinesis_record, shard_id, sequence_number in decisions.undecided:
            verdict = _Verdict(kinesis_record, shard_id, sequence_number, started, ended)
            self._await_verdict(verdict)
        if decisions.unrouted:
            self._unrouted(now)
        self._act(decisions, self.ordering.after_answer(records, decisions), now)

    def _await_verdict(self, verdict: _Verdict) -> None:
        # Decided by the next refresh attempt, or at the records' expiry if that is sooner.
        self.shard_map.after_refresh(partial(self._verdict_due, verdict, None))
        RoutedDeadlines(self._scheduler, self._verdict_due).call_at(
            verdict.kinesis_record.expires_at, verdict
        )

    def _verdict_due(self, verdict: _Verdict, now: float | None) -> None:
        """Judge an aggregate delivered to a then-unknown shard, with the refreshed map (in the
        scheduler's step, or the shard map's after a refresh)."""
        if not verdict.open:
            return
        verdict.open = False
        now = self._clock()
        kinesis_record = verdict.kinesis_record
        decisions = self.retrier.place(
            kinesis_record,
            verdict.shard_id,
            verdict.sequence_number,
            self.shard_map.hash_range(verdict.shard_id),
            verdict.started,
            verdict.ended,
            now,
        )
        if decisions.unrouted:
            self._unrouted(now)
        self._act(decisions, self.ordering.after_placed(kinesis_record, decisions), now)

    def _unrouted(self, now: float) -> None:
        """A record was stored where its key does not route: the service placed it, as far as
        is known. No more aggregates from now on (the records retried at this step already go
        one by one), unless lanes keep order: records that fail for it fail only once the
        summary says so (a stream deleted and created again looks the same until then)."""
        self.distribution.evidence(now, presume=not self.ordering.keeps_shard_order)

    def found_expired(self, records: list[KinesisRecord], now: float) -> None:
        """The sender found ``records`` past their TTL, unsent (in the step of the event that
        found them, once the sender is consistent): refund their tokens and fail them."""
        for record in records:
            # It took the shard's tokens in the limiter but never reached the wire.
            self.limiter.refund(record, now)
            self._fail(self.retrier.expire(record, "sender queue", now))
            self._settle_lanes(self.ordering.after_unsent(record), now)

    def _map_installed(self, table: ShardTable, replaced: frozenset[str]) -> None:
        """A new shard map: per-shard state of shards gone from it is dropped, and so is the
        state of ``replaced`` shards (ids the old map held with another range: the old stream
        was deleted and this is a new one under the same name); records still waiting at the
        stream-level limit (sent before any map) go back to the aggregator, to be aggregated
        and limited per shard like the rest."""
        kept: Container[str] = table
        if replaced:
            kept = {shard.shard_id for shard in table} - replaced
        now = self._clock()
        self.distribution.stream_found()
        if self.placement.by_service:
            self.limiter.set_stream_ceiling(len(table), now)
        elif not self._starting:
            self._table = table
        if self.ordering.closes_batches_on_new_map:
            # Records predicted with the old map go to their lanes before those retire.
            for kinesis_record in self.aggregator.close_batches_outside(kept):
                self._limit(kinesis_record, now)
        self._route_flow(self.limiter.prune(kept, now), now)
        self._put_unmapped_again(now)

    def _map_dropped(self) -> None:
        """The stream is missing: no shard of it keeps any state (rates, ceilings), except
        what records still queued for it need until they leave."""
        self._table = None
        now = self._clock()
        if self.ordering.closes_batches_on_new_map:
            for kinesis_record in self.aggregator.close_batches_outside(()):
                self._limit(kinesis_record, now)
        self._route_flow(self.limiter.prune((), now), now)

    def _started(self, part: str) -> None:
        """``part`` (``"map"``, ``"summary"``, ``"dry run"``) ended its first attempt; with
        all of them, the start-up hold ends."""
        self._starting.discard(part)
        if part == "map" and self.shard_map.table is None and self._on_missing is not None:
            self._on_missing(self)  # the stream may be missing: whoever keeps us looks
        if not self._starting:
            self._first_attempt_ended()

    def _first_attempt_ended(self) -> None:
        """The first map load attempt and the first summary ended: predict with the map (if
        the stream places records by key), and put the start-up hold's records again."""
        if not self.placement.by_service:
            self._table = self.shard_map.table
        if self._table is not None:
            # Released alone at their deadline while the summary was still awaited: they are
            # predicted (and aggregated) now, as after a late map.
            self._put_unmapped_again(self._clock())
        for record, hash_key in self.aggregator.take_held():
            self.put(record, hash_key)
        if self.aggregator.flush_on_release:
            self.aggregator.flush_on_release = False
            self.flush(self._clock())

    def flush(self, now: float) -> None:
        """Send everything buffered now: open aggregates, the rate limiter's queues (at once,
        whatever their tokens) and the open request; a step of its own."""
        with self._ledger.step():
            for kinesis_record in self.aggregator.flush():
                self._limit(kinesis_record, now)
            self._route_flow(self.limiter.drain(now, force=True), now)
            records = self.collector.flush()
            if records is not None:
                self._sender.submit(self, records)

    # --- routes (inside a step) -----------------------------------------------------------
    def _unpredicted(
        self, record: UserRecord, hash_key: int
    ) -> KinesisRecord | list[KinesisRecord] | None:
        """A record without a prediction: held while the stream's first map load and
        summary run; then where the placement policy routes it (and the map of a missing
        stream is woken: it is tried again only when needed)."""
        if self._starting:
            self.aggregator.hold(record, hash_key)
            return None
        return self._placed(record, hash_key)

    def _placed(
        self, record: UserRecord, hash_key: int
    ) -> KinesisRecord | list[KinesisRecord] | None:
        """``record``, not predicted, where the placement policy routes it."""
        route, hash_key, shard = self.placement.route(record, hash_key, self._table, self._room)
        if route is ALONE:
            shard_map = self.shard_map
            if shard_map.dormant:
                shard_map.wanted()
            return self.aggregator.single(record, hash_key)
        if route is AGGREGATE:
            return self.aggregator.put(record, hash_key, shard)
        self._refuse(record, route)
        return None

    def _room(self, shard: str) -> float:
        """The bytes ``shard`` could take now: its bucket's, less its open aggregate."""
        return self.limiter.room(shard, self._clock()) - self.aggregator.open_size(shard)

    def _refuse(self, record: UserRecord, code: str) -> None:
        """Fail ``record`` at once with ``code``: the placement policy refused it."""
        now = self._clock()
        message = refusal(code, self.stream)
        self._warnings.refused(code, message)
        record.add_attempt(Attempt(now, now, now - record.last_end, False, code, message))
        self._fail([record])

    def _distribution_changed(self) -> None:
        """The service now places the stream's records itself, or no longer does."""
        places = self.distribution.service_places
        if places == self.placement.by_service:
            return
        self.placement.by_service = places
        self._policy.service_places = places
        now = self._clock()
        table = self.shard_map.table
        if places:
            self._table = None
            shards = len(table) if table is not None else self.distribution.open_shards
            self.limiter.set_stream_ceiling(shards or 1, now)
            if self.placement.keeps_aggregates:
                return  # delivered anywhere
            # Nothing predicted waits any more: open aggregates, and aggregates queued for
            # their shards, go again one by one (those sent are the retrier's); with
            # ordering="shard" they fail, as every record put from now on.
            for record in self.aggregator.take_open():
                self.put(record, record.hash_key)
            self._put_again(self.limiter.take_queued(now))
        else:
            if not self._starting:
                self._table = table
            self.limiter.set_stream_ceiling(None, now)
            if table is not None:
                # It may be stale: the stream resharded on its own meanwhile, perhaps.
                self.shard_map.invalidate(now, None)
            self._put_unmapped_again(now)

    def _put_unmapped_again(self, now: float) -> None:
        """Records queued at the stream-level limit go back to be predicted (and aggregated)
        with the map now in force."""
        unmapped, flow = self.limiter.take_unmapped(now)
        self._route_flow(flow, now)
        self._put_again(unmapped)

    def _put_again(self, kinesis_records: Sequence[KinesisRecord]) -> None:
        """The user records of ``kinesis_records`` (taken out of the limiter) are put again."""
        for kinesis_record in kinesis_records:
            kinesis_record.restore_data()
            for record in cast("list[UserRecord]", kinesis_record.records):
                self.put(record, record.hash_key)

    def _limit(self, kinesis_record: KinesisRecord, now: float) -> None:
        """A sealed Kinesis record: to the limiter, and on with what it admits or expires."""
        self._route_flow(self.limiter.put(kinesis_record, now), now)

    def _route_flow(self, flow: Flow, now: float) -> None:
        """What the limiter admitted goes to the collector; what expired fails."""
        admitted, expired = flow
        if admitted:
            self._collect(admitted, now)
        if expired:
            self._expired_in_limiter(expired, now)

    def _collect(self, admitted: Sequence[KinesisRecord], now: float) -> None:
        """Admitted Kinesis records: to the collector, and each request it closes to the
        sender (this router is the sender's destination: it gets the answer)."""
        collector = self.collector
        grace = self.ordering.grace
        meter = self._meter
        for kinesis_record in admitted:
            if meter is not None:
                meter(kinesis_record)
            requests = collector.put(kinesis_record, now, grace(kinesis_record, now, self._grace))
            for request in requests:
                self._sender.submit(self, request)

    def _act(self, decisions: Decisions, route: Route, now: float) -> None:
        """Carry out a verdict: resolve, resend, and route the retried records."""
        if decisions.succeeded:
            self._ledger.finish(cast("list[UserRecord]", decisions.succeeded), True)
        if decisions.failed:
            self._fail(cast("list[UserRecord]", decisions.failed))
        for group in decisions.resend:
            self._sender.submit(self, group, alone=True)
        to_aggregator, settlements = route
        if self.placement.by_service and self.ordering.keeps_shard_order:
            # Lanes keep no order where the service places records: what they would send
            # again fails, as every record put there.
            for _, again in settlements:
                for kinesis_record in again:
                    for record in cast("list[UserRecord]", kinesis_record.records):
                        self._refuse(record, ORDERING_ON_AUTO)
            settlements = [(record, ()) for record, _ in settlements]
        for record in to_aggregator:
            self.put(record, record.hash_key)
        self._settle_lanes(settlements, now)

    def _settle_lanes(
        self, settlements: Sequence[tuple[KinesisRecord, Sequence[KinesisRecord]]], now: float
    ) -> None:
        for record, again in settlements:
            self._route_flow(self.limiter.settle(record, again, now), now)

    def _fail(self, records: list[UserRecord]) -> None:
        self._ledger.finish(records, False)

    def _expired_in_limiter(self, expired: Sequence[KinesisRecord], now: float) -> None:
        for record in expired:
            self._fail(self.retrier.expire(record, "rate limiter", now))
        overloaded = self.limiter.take_overloaded()
        if overloaded:  # none: they came back too close to their TTL, no sign of overload
            self._warnings.overloaded(overloaded, now)

    # --- what the sender and the producer read --------------------------------------------

    @property
    def expired(self) -> int:
        """User records expired before they were sent, so far."""
        return self.retrier.expired

    @property
    def found_missing(self) -> bool:
        """The stream was found missing, and its map is not being loaded again (dormant)."""
        return self.shard_map.dormant

    def idle_since_last_look(self) -> bool:
        """Whether nothing went through the pipeline since the last call (records put, or
        retried, each make the aggregator emit)."""
        out = self.aggregator.kinesis_records_out
        idle = out == self._last_seen_out
        self._last_seen_out = out
        return idle

    def close(self) -> None:
        """Release the pipeline: it holds no record, and its shard map and summary stop."""
        self.shard_map.close()
        self.distribution.close()

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
            capacity_mode=self.distribution.capacity_mode,
            record_distribution=self.distribution.strategy,
            placed_by_service=self.placement.by_service,
            billed_kib=retrier.billed_kib,
            put_payload_units=retrier.put_payload_units,
            dry_run=self.preflight.outcome if self.preflight is not None else None,
        )


def _control_plane(
    stream: str,
    config: Config,
    client: Any,
    task_group: TaskGroup,
    random_value: Callable[[], float],
    missing_log: MissingStreamsLog | None,
    step: Callable[[], AbstractContextManager[None]],
    *,
    on_install: Callable[[ShardTable, frozenset[str]], None],
    on_drop: Callable[[], None],
    on_change: Callable[[], None],
    on_first: Callable[[], None],
    on_done: Callable[[], None],
) -> tuple[ShardMap, Distribution, Preflight | None]:
    """What the control plane says of ``stream``: its shard map, who places its records, and
    (with ``dry_run_check``) whether a put would be taken; each tells the router what it
    learns (through the callbacks given, named as their attributes) in a step of its own task
    (``step``)."""
    request_timeout = config.request_timeout_ms / 1000
    shard_map = ShardMap(
        stream,
        client,
        task_group,
        request_timeout=request_timeout,
        random_value=random_value,
        missing_log=missing_log,
        step=step,
        on_install=on_install,
        on_drop=on_drop,
    )
    distribution = Distribution(
        stream,
        client,
        task_group,
        check_interval=config.record_distribution_check_ms / 1000,
        request_timeout=request_timeout,
        random_value=random_value,
        step=step,
        on_change=on_change,
        on_first=on_first,
    )
    preflight = None
    if config.dry_run_check:
        preflight = Preflight(
            stream, client, task_group, request_timeout=request_timeout, step=step, on_done=on_done
        )
    return shard_map, distribution, preflight

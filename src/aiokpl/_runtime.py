"""What a producer runs from its start to its exit, started and stopped as one exit stack.

A :class:`~aiokpl.Producer` is its put paths over this: the client (given, or opened per region),
the metrics recorder, runner and sinks, the task group, the scheduler serving every deadline,
the sender, the coordinator, and the streams' pipelines. :meth:`Runtime.start` pushes each part
onto the producer's ``AsyncExitStack`` as it starts (the owned client, the metrics runner, the
settlement of what is left outstanding, the task group), so a failure at any step releases
exactly what was started and propagates unchanged; the producer's exit unwinds the same stack.

The producer's own tasks are: one scheduler serving all deadlines (a stream's backoff
included), one task per connection in use (at most ``max_connections``), and one shard-map
refresh per stream while it runs.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import anyio

from ._admission import Admission
from ._backend import current_clock
from ._coordination.coordinator import Coordination
from ._core.config import Config
from ._core.errors import ConfigError
from ._core.health import DEFAULT_WINDOW, Health, check_window
from ._core.metrics import MetricsTable
from ._core.statistics import SenderStatistics
from ._health import Connectivity, health
from ._intake import Intake
from ._kinesis import KinesisClient, RegionalClients, endpoint_of, fixed_region
from ._metrics.recorder import MetricsRecorder, MetricsSink
from ._metrics.runner import MetricsRunner
from ._pipeline.ledger import ResultLedger
from ._pipeline.scheduler import Scheduler
from ._pipeline.sender import Sender
from ._streams import Streams

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ._coordination.coordinator import ProducerCoordinator
    from ._spooling import Spool

__all__ = ("Runtime", "check_arguments")

# What a producer not started yet reports of its requests.
_NO_REQUESTS = SenderStatistics(
    requests_sent=0, requests_failed=0, in_flight=0, queued=0, backing_off=0
)


def check_arguments(
    config: Config,
    coordination: Coordination | None,
    metrics_sinks: Iterable[MetricsSink],
    jitter_source: random.Random | None,
) -> tuple[random.Random, tuple[MetricsSink, ...], MetricsRecorder | None]:
    """Check a producer's arguments but ``config`` (checked first, by the caller).

    Returns its jitter generator, its sinks and its metrics recorder (``None`` when
    ``config.metrics_level`` is ``"none"``).

    Raises:
        TypeError: a sink is not a ``MetricsSink``, ``coordination`` is not a
            ``Coordination``, or ``jitter_source`` is not a ``random.Random``.
        ConfigError: ``metrics_sinks`` are given but ``config.metrics_level`` is ``"none"``.
    """
    if jitter_source is not None and not isinstance(jitter_source, random.Random):
        raise TypeError(
            f"jitter_source must be a random.Random, not {type(jitter_source).__name__}"
        )
    # One generator for all of this producer's jitter: the global one is shared with the
    # rest of the process, so a schedule drawn from it could never be replayed.
    jitter = random.Random() if jitter_source is None else jitter_source
    if coordination is not None and not isinstance(coordination, Coordination):
        raise TypeError(
            "coordination must be an aiokpl.coordination.Coordination, "
            f"not {type(coordination).__name__}"
        )
    sinks = tuple(metrics_sinks)
    for sink in sinks:
        if not isinstance(sink, MetricsSink):
            raise TypeError(f"{sink!r} is not a MetricsSink (open, publish, aclose)")
    if config.metrics_level != "none":
        table = MetricsTable(config.metrics_level, config.metrics_granularity)
        return jitter, sinks, MetricsRecorder(table)
    if sinks:
        raise ConfigError(
            "metrics_sinks need Config.metrics_level 'summary' or 'detailed'; it is 'none'"
        )
    return jitter, sinks, None


async def _shielded(close: Callable[..., Awaitable[Any]], *args: Any) -> None:
    """Run ``close(*args)`` shielded from cancellation (an exit that must finish)."""
    with anyio.CancelScope(shield=True):
        await close(*args)


async def _close_task_group(task_group: TaskGroup) -> None:
    """Cancel ``task_group`` and wait for its tasks (given no exception: it has its own)."""
    task_group.cancel_scope.cancel()
    await task_group.__aexit__(None, None, None)


class Runtime:
    """One producer's running parts.

    Attributes:
        client: the Kinesis client (the given one, or the producer's own once started).
        sender: the sender, once started.
        connectivity: what the requests' answers say of the endpoint and each stream, once
            started (``producer.health()`` reads it).
        coordinator: the coordinator, once started with a ``coordination``.
        spool: the durable spool (``Config.spool_directory``), or ``None``.
        exit_code: the code and message of the records still outstanding at exit.
        exit_failed: how many records the exit failed with ``exit_code`` (once it has), and
            how many of them with an unknown outcome (their request sent, not answered).
    """

    def __init__(
        self,
        config: Config,
        client: KinesisClient | None,
        coordination: Coordination | None,
        sinks: tuple[MetricsSink, ...],
        metrics: MetricsRecorder | None,
        jitter: random.Random,
        parts: tuple[Admission, ResultLedger, Streams, Intake, Scheduler],
        spool: Spool | None,
    ) -> None:
        self.config = config
        self.client: Any = client
        self._coordination = coordination
        self._sinks = sinks
        self._metrics = metrics
        self._jitter = jitter
        self._admission, self._ledger, self._streams, self._intake, self._scheduler = parts
        self.sender: Sender | None = None
        self.connectivity: Connectivity | None = None
        self.coordinator: ProducerCoordinator | None = None
        self.spool = spool
        self.exit_code = ("Expired", "record_ttl_ms elapsed before the producer closed")
        self.exit_failed = (0, 0)

    async def start(
        self,
        stack: AsyncExitStack,
        open_client: Callable[..., Any],
        coordinator_class: Callable[..., ProducerCoordinator],
    ) -> None:
        """Start every part, pushing each onto ``stack`` as it starts.

        ``open_client`` opens an aiobotocore client (``_kinesis.create_client``), and
        ``coordinator_class`` builds the coordinator: the producer's module passes its own
        names for them (where tests replace them).
        """
        config = self.config
        spool = self.spool
        if spool is not None:
            # First: a spool that cannot be opened fails the start before anything runs. Its
            # close (the last writes and fsync) runs after the outstanding records are settled.
            await spool.open()
            stack.push_async_callback(_shielded, spool.close)
            assert self._intake.marks is not None
            self._intake.marks.start()
        if self.client is None:
            clients = RegionalClients(config, open_client)
            self.client = await clients.__aenter__()
            stack.push_async_callback(_shielded, clients.__aexit__, None, None, None)
        self._admission.region = fixed_region(config, self.client)
        clock = self._ledger.clock = self._intake.clock = current_clock()
        self._intake.thread = threading.get_ident()
        runner = None
        if self._metrics is not None:
            runner = MetricsRunner(
                self._metrics,
                self._sinks,
                config,
                clock,
                self.outstanding_by_stream,
                spool,
                health=lambda: self.health(DEFAULT_WINDOW).severity,
            )
            await stack.enter_async_context(runner)  # opens the sinks; the last upload at exit
        stack.push_async_callback(self._settle_outstanding)
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        stack.push_async_callback(_close_task_group, task_group)
        self._intake.running = True
        self._ledger.failures.task_group = task_group
        self.connectivity = Connectivity(endpoint_of(self.client), config.record_ttl_ms)
        self.sender = Sender(
            self.client,
            task_group,
            clock,
            self._scheduler,
            max_connections=config.max_connections,
            request_timeout=config.request_timeout_ms / 1000,
            # A stream with steady traffic sends at least once per buffered time.
            active_window=1.0 + config.record_max_buffered_time_ms / 1000,
            random_value=self._jitter.random,
            on_answer=self.connectivity.observe,
            step=self._ledger.step,
        )
        task_group.start_soon(self._scheduler.run, name="aiokpl scheduler")
        if self._coordination is not None:
            self.coordinator = coordinator_class(self._coordination, config, clock, self._jitter)
            task_group.start_soon(self.coordinator.run, name="aiokpl coordination")
        ledger = self._ledger
        self._streams.start(
            self.client,
            task_group,
            self.sender,
            clock,
            ledger,
            self.coordinator,
            ledger.streams_busy,
        )
        if runner is not None:
            runner.start(task_group)
        if spool is not None:
            task_group.start_soon(spool.run, name="aiokpl spool")
            if not spool.replay_done.is_set():
                task_group.start_soon(spool.replay, self._intake.replay, name="aiokpl replay")

    def outstanding_by_stream(self) -> dict[str, int]:
        """Outstanding records of each stream with a pipeline (what the metrics sample)."""
        return self._ledger.outstanding_by_stream(self._streams.pipelines)

    async def _settle_outstanding(self) -> None:
        """At exit, once the task group has ended: fail what is outstanding, drain callbacks."""
        failures = self._ledger.failures
        failures.task_group = None
        code, message = self.exit_code
        if self.spool is not None:
            # Failed by the exit, not by Kinesis: they stay in the spool, sent at next start.
            self.spool.acking = False
        sender = self.sender
        self.exit_failed = self._ledger.fail_outstanding(
            code, message, sender.unanswered() if sender else ()
        )
        self._streams.missing.on_due(self._intake.clock())  # a warning still gathering streams
        self._scheduler.clear()
        await failures.drain(self.config.request_timeout_ms / 1000)

    def health(self, window_s: float) -> Health:
        """The producer's health now, looking back ``window_s`` seconds.

        Raises:
            ValueError: ``window_s`` is not a number of seconds from 1 to 600.
        """
        window = check_window(window_s)
        ttl = self.config.record_ttl_ms / 1000
        return health(
            self._intake, self._ledger, self.connectivity, self.spool, window=window, ttl=ttl
        )

    def sender_statistics(self) -> SenderStatistics:
        """The sender's counters (zeros before the start)."""
        return self.sender.statistics() if self.sender is not None else _NO_REQUESTS

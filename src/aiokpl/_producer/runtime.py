"""What a producer runs from its start to its exit, built complete when it starts.

A :class:`~aiokpl.Producer` is its put paths over this: the client (given, or opened per region),
the task group, the ledger, the scheduler serving every deadline, the sender, the coordinator,
the streams' pipelines, the admission (which knows the producer's region only then) and the
intake, and the metrics runner. None of them exists before the producer starts, as a nursery
exists only inside ``open_nursery``: :func:`start` builds each with everything it needs (no
attribute is wired in later) and pushes what must be undone onto the producer's
``AsyncExitStack`` as it starts (the spool, the owned client, the metrics runner, the settlement
of what is left outstanding, the task group), so a failure at any step releases exactly what
was started and propagates unchanged; the producer's exit unwinds the same stack.

The producer's own tasks are: one scheduler serving all deadlines (a stream's backoff
included), one task per connection in use (at most ``max_connections``), and one shard-map
refresh per stream while it runs.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from .._backend import current_clock
from .._coordination.coordinator import Coordination
from .._core.config import Config
from .._core.errors import ConfigError
from .._core.health import DEFAULT_WINDOW, Health, check_window
from .._core.metrics import MetricsTable
from .._kinesis import KinesisClient, RegionalClients, endpoint_of, fixed_region
from .._metrics.recorder import MetricsRecorder, MetricsSink
from .._metrics.runner import MetricsRunner
from .._pipeline.ledger import ResultLedger
from .._pipeline.scheduler import Scheduler
from .._pipeline.sender import Sender
from .admission import Admission
from .health import Connectivity, health
from .intake import Intake
from .marks import Marks
from .streams import Streams

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from .._coordination.coordinator import ProducerCoordinator
    from .._spooling import Spool
    from .._tracing import Tracing

__all__ = ("Arguments", "Runtime", "check_arguments", "check_tracing", "start", "tracing_for")


def check_arguments(
    config: Config,
    client: KinesisClient | None,
    coordination: Coordination | None,
    metrics_sinks: Iterable[MetricsSink],
    jitter_source: random.Random | None,
    tracer_provider: Any = None,
) -> Arguments:
    """Check a producer's arguments but ``config`` (checked first, by the caller).

    Returns them checked, with the producer's jitter generator and its metrics recorder
    (``None`` when ``config.metrics_level`` is ``"none"``).

    Raises:
        TypeError: a sink is not a ``MetricsSink``, ``coordination`` is not a
            ``Coordination``, or ``jitter_source`` is not a ``random.Random``.
        ConfigError: ``metrics_sinks`` are given but ``config.metrics_level`` is ``"none"``,
            or a ``tracer_provider`` but ``config.tracing`` is ``"off"``.
        ImportError: ``config.tracing`` is on and OpenTelemetry's API is not installed.
    """
    check_tracing(config, tracer_provider)
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
    metrics = None
    if config.metrics_level != "none":
        metrics = MetricsRecorder(MetricsTable(config.metrics_level, config.metrics_granularity))
    elif sinks:
        raise ConfigError(
            "metrics_sinks need Config.metrics_level 'summary' or 'detailed'; it is 'none'"
        )
    return Arguments(config, client, coordination, sinks, metrics, jitter, tracer_provider)


def check_tracing(config: Config, tracer_provider: Any) -> None:
    """Check that a producer can trace as ``config.tracing`` says, with ``tracer_provider``.

    Raises:
        ConfigError: a ``tracer_provider`` is given but ``config.tracing`` is ``"off"``.
        ImportError: tracing is on and OpenTelemetry's API is not installed.
    """
    if config.tracing == "off":
        if tracer_provider is not None:
            raise ConfigError(
                "tracer_provider needs Config.tracing 'context' or 'create'; it is 'off'"
            )
        return
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"Config.tracing={config.tracing!r} needs OpenTelemetry's API: "
            "pip install 'aiokpl[otel]'"
        ) from exc


def tracing_for(config: Config, tracer_provider: Any, endpoint: str | None) -> Tracing | None:
    """The producer's tracing (checked by :func:`check_tracing`), for requests to
    ``endpoint``; ``None`` with ``config.tracing`` ``"off"`` (nothing imported)."""
    if config.tracing == "off":
        return None
    from .._tracing import Tracing

    return Tracing(config.tracing, config.trace_max_links, tracer_provider, endpoint)


async def _shielded(close: Callable[..., Awaitable[Any]], *args: Any) -> None:
    """Run ``close(*args)`` shielded from cancellation (an exit that must finish)."""
    with anyio.CancelScope(shield=True):
        await close(*args)


async def _close_task_group(task_group: TaskGroup) -> None:
    """Cancel ``task_group`` and wait for its tasks (given no exception: it has its own)."""
    task_group.cancel_scope.cancel()
    await task_group.__aexit__(None, None, None)


@dataclass(frozen=True, slots=True)
class Arguments:
    """A producer's checked arguments (:func:`check_arguments`), what its start builds from.

    Attributes:
        config: the settings.
        client: the client given, or ``None`` (the producer opens its own per region).
        coordination: shared per-shard limits, or ``None``.
        sinks: the metrics sinks.
        metrics: the metrics recorder, or ``None``.
        jitter: the generator of every timing draw.
        tracer_provider: where ``Config.tracing``'s spans go (``None``: OpenTelemetry's
            global provider).
    """

    config: Config
    client: KinesisClient | None
    coordination: Coordination | None
    sinks: tuple[MetricsSink, ...]
    metrics: MetricsRecorder | None
    jitter: random.Random
    tracer_provider: Any = None


class Runtime:
    """One producer's running parts, all made by :func:`start`.

    Attributes:
        config: the settings.
        client: the Kinesis client (the given one, or the producer's own).
        clock: the event loop's clock.
        task_group: the producer's task group.
        ledger: outstanding records and their results.
        scheduler: the one timer of every deadline.
        sender: the requests' connections.
        connectivity: what the requests' answers say of the endpoint and each stream
            (``producer.health()`` reads it).
        coordinator: the coordinator, with a ``coordination``; else ``None``.
        streams: the streams' pipelines.
        admission: what a put must pass (the producer's region known).
        intake: the way in of what passes.
        spool: the durable spool (``Config.spool_directory``), open, or ``None``.
        exit_code: the code and message of the records still outstanding at exit.
        exit_failed: how many records the exit failed with ``exit_code`` (once it has), and
            how many of them with an unknown outcome (their request sent, not answered).
    """

    def __init__(
        self,
        config: Config,
        *,
        client: Any,
        clock: Callable[[], float],
        task_group: TaskGroup,
        ledger: ResultLedger,
        scheduler: Scheduler,
        sender: Sender,
        connectivity: Connectivity,
        coordinator: ProducerCoordinator | None,
        streams: Streams,
        admission: Admission,
        intake: Intake,
        spool: Spool | None,
    ) -> None:
        self.config = config
        self.client = client
        self.clock = clock
        self.task_group = task_group
        self.ledger = ledger
        self.scheduler = scheduler
        self.sender = sender
        self.connectivity = connectivity
        self.coordinator = coordinator
        self.streams = streams
        self.admission = admission
        self.intake = intake
        self.spool = spool
        self.exit_code = ("Expired", "record_ttl_ms elapsed before the producer closed")
        self.exit_failed = (0, 0)

    def outstanding_by_stream(self) -> dict[str, int]:
        """Outstanding records of each stream with a pipeline (what the metrics sample)."""
        return self.ledger.outstanding_by_stream(self.streams.pipelines)

    async def settle(self) -> None:
        """At exit, once the task group has ended: fail what is outstanding, drain callbacks."""
        failures = self.ledger.failures
        failures.close()
        code, message = self.exit_code
        if self.spool is not None:
            # Failed by the exit, not by Kinesis: they stay in the spool, sent at next start.
            self.spool.acking = False
        self.exit_failed = self.ledger.fail_outstanding(code, message, self.sender.unanswered())
        self.streams.missing.on_due(self.clock())  # a warning still gathering streams
        self.scheduler.clear()
        await failures.drain(self.config.request_timeout_ms / 1000)

    def health(self, window_s: float) -> Health:
        """The producer's health now, looking back ``window_s`` seconds.

        Raises:
            ValueError: ``window_s`` is not a number of seconds from 1 to 600.
        """
        window = check_window(window_s)
        ttl = self.config.record_ttl_ms / 1000
        return health(
            self.intake, self.ledger, self.connectivity, self.spool, window=window, ttl=ttl
        )


async def start(
    stack: AsyncExitStack,
    arguments: Arguments,
    spool: Spool | None,
    open_client: Callable[..., Any],
    coordinator_class: Callable[..., ProducerCoordinator],
) -> Runtime:
    """Start a producer: build every part, pushing onto ``stack`` what must be undone, in the
    order its exit undoes it (last first); its tasks start once everything is built.

    ``open_client`` opens an aiobotocore client (``_kinesis.create_client``), and
    ``coordinator_class`` builds the coordinator: the producer's module passes its own names
    for them (where tests replace them).
    """
    config = arguments.config
    metrics = arguments.metrics
    jitter = arguments.jitter
    if spool is not None:
        # First: a spool that cannot be opened fails the start before anything runs. Its
        # close (the last writes and fsync) runs after the outstanding records are settled.
        await spool.open()
        stack.push_async_callback(_shielded, spool.close)
    client: Any = arguments.client
    if client is None:
        clients = RegionalClients(config, open_client)
        client = await clients.__aenter__()
        stack.push_async_callback(_shielded, clients.__aexit__, None, None, None)
    clock = current_clock()
    task_group = anyio.create_task_group()
    await task_group.__aenter__()
    try:
        ledger = ResultLedger(
            config,
            metrics,
            clock,
            task_group,
            on_resolved=spool.resolved if spool is not None else None,
        )
        scheduler = Scheduler(ledger.step)
        endpoint = endpoint_of(client)
        connectivity = Connectivity(endpoint, config.record_ttl_ms)
        tracing = tracing_for(config, arguments.tracer_provider, endpoint)
        sender = Sender(
            client,
            task_group,
            clock,
            scheduler,
            max_connections=config.max_connections,
            request_timeout=config.request_timeout_ms / 1000,
            # A stream with steady traffic sends at least once per buffered time.
            active_window=1.0 + config.record_max_buffered_time_ms / 1000,
            random_value=jitter.random,
            on_answer=connectivity.observe,
            step=ledger.step,
            tracing=tracing,
        )
        coordinator = None
        if arguments.coordination is not None:
            coordinator = coordinator_class(arguments.coordination, config, clock, jitter)
        streams = Streams(
            config,
            scheduler,
            metrics,
            jitter.random,
            client=client,
            task_group=task_group,
            sender=sender,
            clock=clock,
            ledger=ledger,
            coordinator=coordinator,
        )
        admission = Admission(config, fixed_region(config, client), tracing)
        marked = spool is not None or config.record_identities or config.tracing == "create"
        intake = Intake(
            config,
            admission,
            ledger,
            streams.pipelines,
            streams.pipeline_of,
            clock,
            Marks(config, spool, tracing) if marked else None,
        )
        runtime = Runtime(
            config,
            client=client,
            clock=clock,
            task_group=task_group,
            ledger=ledger,
            scheduler=scheduler,
            sender=sender,
            connectivity=connectivity,
            coordinator=coordinator,
            streams=streams,
            admission=admission,
            intake=intake,
            spool=spool,
        )
        runner = None
        if metrics is not None:
            runner = MetricsRunner(
                metrics,
                arguments.sinks,
                config,
                clock,
                runtime.outstanding_by_stream,
                spool,
                health=lambda: runtime.health(DEFAULT_WINDOW).severity,
            )
            # Opens the sinks; its last upload at exit, after the settlement.
            await stack.enter_async_context(runner)
    except BaseException:
        # No task runs in it yet: tasks start once everything is built (below).
        await _close_task_group(task_group)
        raise
    stack.push_async_callback(runtime.settle)
    stack.push_async_callback(_close_task_group, task_group)
    task_group.start_soon(scheduler.run, name="aiokpl scheduler")
    if coordinator is not None:
        task_group.start_soon(coordinator.run, name="aiokpl coordination")
    if runner is not None:
        runner.start(task_group)
    if spool is not None:
        task_group.start_soon(spool.run, name="aiokpl spool")
        if not spool.replay_done.is_set():
            task_group.start_soon(spool.replay, intake.replay, name="aiokpl replay")
    return runtime

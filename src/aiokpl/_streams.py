"""The producer's stream pipelines, by stream: built on a stream's first record, released idle.

A producer writes to any number of streams; each has its own pipeline
(:class:`~aiokpl._pipeline.stream.StreamPipeline`: shard map, aggregator, limiter, collector,
retrier). This keeps them: it builds a stream's pipeline on its first record, flushes them, sums
up their statistics, and every ``IDLE_SWEEP_SECONDS`` releases those idle since the last look
(their shard map, limiter state and connection lane), so that state does not grow with every
stream name ever used. A later put builds the pipeline again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container
from typing import TYPE_CHECKING, Any

from ._core.config import Config
from ._core.statistics import StreamStatistics
from ._kinesis import RegionalClients
from ._pipeline.shard_map import MissingStreamsLog
from ._pipeline.stream import StreamPipeline

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ._coordination.coordinator import ProducerCoordinator
    from ._metrics.recorder import MetricsRecorder
    from ._pipeline.ledger import ResultLedger
    from ._pipeline.scheduler import Scheduler
    from ._pipeline.sender import Sender

__all__ = ("IDLE_SWEEP_SECONDS", "Streams")

logger = logging.getLogger("aiokpl")

# A stream's pipeline with no record outstanding, and none put through it between two looks
# this far apart, is released.
IDLE_SWEEP_SECONDS = 60.0


class Streams:
    """One producer's stream pipelines; the scheduler entry of its idle sweep.

    Attributes:
        pipelines: the pipelines by stream (name or ARN, as put to); the producer reads it
            directly on its hot path.
        missing: the log of streams found missing, shared by the shard maps.
        released_expired_unsent: records that expired unsent in the pipelines released so far.
    """

    def __init__(
        self,
        config: Config,
        scheduler: Scheduler,
        metrics: MetricsRecorder | None,
        random_value: Callable[[], float],
    ) -> None:
        self.config = config
        self.pipelines: dict[str, StreamPipeline] = {}
        self.missing = MissingStreamsLog(scheduler)
        self.released_expired_unsent = 0
        self._scheduler = scheduler
        self._metrics = metrics
        self._random_value = random_value
        self._running: _Running | None = None

    def start(
        self,
        client: Any,
        task_group: TaskGroup,
        sender: Sender,
        clock: Callable[[], float],
        ledger: ResultLedger,
        coordinator: ProducerCoordinator | None,
        busy: Callable[[], Container[str]],
    ) -> None:
        """What the pipelines need from the started producer; starts the idle sweep.

        ``busy`` gives the streams with records outstanding (never released).
        """
        self._running = _Running(client, task_group, sender, clock, ledger, coordinator, busy)
        self._scheduler.call_at(clock() + IDLE_SWEEP_SECONDS, self)

    def pipeline_of(self, stream: str) -> StreamPipeline:
        """The stream's pipeline, built on its first record."""
        pipeline = self.pipelines.get(stream)
        if pipeline is None:
            running = self._running
            assert running is not None
            client = running.client
            if isinstance(client, RegionalClients):  # the producer opened one per region
                client = client.client_for(stream)
            pipeline = self.pipelines[stream] = StreamPipeline(
                stream,
                self.config,
                client=client,
                task_group=running.task_group,
                scheduler=self._scheduler,
                clock=running.clock,
                sender=running.sender,
                ledger=running.ledger,
                metrics=self._metrics,
                coordinator=running.coordinator,
                random_value=self._random_value,
                missing_log=self.missing,
            )
        return pipeline

    def flush(self, stream: str | None) -> None:
        """Send what is buffered now, of ``stream`` or of every stream (``None``)."""
        if self._running is None:
            return  # not started: nothing can be buffered
        now = self._running.clock()
        for name, pipeline in list(self.pipelines.items()):
            if stream is None or name == stream:
                pipeline.flush(now)

    def on_due(self, now: float) -> None:
        """The idle sweep: release the pipelines idle since the last one; schedule the next."""
        running = self._running
        assert running is not None
        pipelines = self.pipelines
        busy = running.busy()
        for name, pipeline in list(pipelines.items()):
            # idle_since_last_look runs for every stream: each look records what it saw.
            if pipeline.idle_since_last_look() and name not in busy:
                del pipelines[name]
                pipeline.close()
                self.released_expired_unsent += pipeline.expired
                running.sender.forget(pipeline)
                if running.coordinator is not None:
                    running.coordinator.detach(name)
                logger.debug("released the idle pipeline of stream %r", name)
        if self._metrics is not None:
            self._metrics.prune(now)
        self._scheduler.call_at(now + IDLE_SWEEP_SECONDS, self)

    def statistics(self) -> tuple[StreamStatistics, ...]:
        """A snapshot of every stream's pipeline."""
        return tuple(pipeline.statistics() for pipeline in self.pipelines.values())


class _Running:
    """What the pipelines need of a started producer."""

    __slots__ = ("busy", "client", "clock", "coordinator", "ledger", "sender", "task_group")

    def __init__(
        self,
        client: Any,
        task_group: TaskGroup,
        sender: Sender,
        clock: Callable[[], float],
        ledger: ResultLedger,
        coordinator: ProducerCoordinator | None,
        busy: Callable[[], Container[str]],
    ) -> None:
        self.client = client
        self.task_group = task_group
        self.sender = sender
        self.clock = clock
        self.ledger = ledger
        self.coordinator = coordinator
        self.busy = busy

"""The producer's metrics at run time: the sinks opened, the sampler and uploader running.

:class:`MetricsRunner` is entered by the producer (pushed on its exit stack) once its task
group runs: entering opens the sinks (closing those opened if one fails) and starts the
sampler (every 200 ms at the ``"detailed"`` level or with a spool, else every second for the
producer's health alone) and the uploader (when there are sinks) in the producer's task group;
exiting makes the last upload and closes the sinks, shielded and bounded by the request
timeout, after the task group has ended (its tasks are cancelled by then). A sink that fails to
close is logged, never raised.

The KPL's counterpart is the ``MetricsManager`` upload loop (``aws/metrics/metrics_manager.h``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

import anyio

from .recorder import SAMPLE_INTERVAL, MetricsRecorder, MetricsSink, Uploader

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from .._core.config import Config
    from .._core.statistics import SpoolStatistics

__all__ = ("HEALTH_SAMPLE_INTERVAL", "MetricsRunner")

HEALTH_SAMPLE_INTERVAL = 1.0
"""Seconds between ``ProducerHealth`` samples when nothing else is sampled."""

logger = logging.getLogger("aiokpl")


class SampledSpool(Protocol):
    """What the sampler reads of the producer's spool (``aiokpl._spooling.Spool``)."""

    def statistics(self) -> SpoolStatistics: ...


class MetricsRunner:
    """Opens the sinks, runs the sampler and uploader, and makes the final upload.

    Args:
        metrics: the producer's recorder.
        sinks: where to upload; may be empty (then only the sampler runs, if detailed).
        config: the producer's settings (upload interval, request timeout).
        clock: the producer's clock.
        outstanding_by_stream: what the samples read: outstanding records by stream.
        spool: the producer's spool, whose size the sampler records too (at any level).
        health: the producer's health as a number (0 healthy, 1 degraded, 2 failing), which
            the sampler records as ``ProducerHealth`` (at any level).
    """

    def __init__(
        self,
        metrics: MetricsRecorder,
        sinks: Sequence[MetricsSink],
        config: Config,
        clock: Callable[[], float],
        outstanding_by_stream: Callable[[], dict[str, int]],
        spool: SampledSpool | None = None,
        health: Callable[[], int] | None = None,
    ) -> None:
        self._metrics = metrics
        self._sinks = tuple(sinks)
        self._config = config
        self._clock = clock
        self._outstanding_by_stream = outstanding_by_stream
        self._spool = spool
        self._health = health
        self._uploader: Uploader | None = None
        self._opened: list[MetricsSink] = []

    async def open(self) -> None:
        """Open the sinks; if one fails, close those opened (shielded) and raise its error."""
        try:
            for sink in self._sinks:
                await sink.open(self._config)
                self._opened.append(sink)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._close_sinks()
            raise

    def start(self, task_group: TaskGroup) -> None:
        """Start the sampler (``"detailed"``, with a spool, or with ``health``) and the
        uploader (with sinks) in ``task_group``."""
        metrics = self._metrics
        if metrics.table.level == "detailed" or self._spool is not None or self._health:
            task_group.start_soon(self._sample, name="aiokpl metrics sampler")
        if self._sinks:
            outstanding = self._outstanding_by_stream
            self._uploader = Uploader(
                metrics.table,
                self._sinks,
                self._config.metrics_upload_interval_ms / 1000,
                self._clock,
                lambda now: metrics.sample(outstanding(), now, pending=False),
            )
            task_group.start_soon(self._uploader.run, name="aiokpl metrics upload")

    async def _sample(self) -> None:
        metrics = self._metrics
        spool = self._spool
        health = self._health
        detailed = metrics.table.level == "detailed"
        # The health alone is sampled once a second: as often as a probe would ask.
        interval = SAMPLE_INTERVAL if detailed or spool is not None else HEALTH_SAMPLE_INTERVAL
        while True:
            await anyio.sleep(interval)
            now = self._clock()
            if detailed:
                metrics.sample(self._outstanding_by_stream(), now, pending=True)
            if spool is not None:
                size = spool.statistics()
                metrics.spool_sampled(size.bytes_on_disk, size.segments, now)
            if health is not None:
                metrics.health_sampled(health(), now)

    async def aclose(self) -> None:
        """The last upload (failures included) and the sinks' release: shielded and bounded."""
        with anyio.CancelScope(shield=True) as scope:
            scope.deadline = anyio.current_time() + self._config.request_timeout_ms / 1000
            if self._uploader is not None:
                await self._uploader.upload(final=True)
            await self._close_sinks()

    async def _close_sinks(self) -> None:
        opened, self._opened = self._opened, []
        for sink in opened:
            try:
                await sink.aclose()
            except Exception as exc:
                logger.warning("closing metrics sink %s failed: %r", type(sink).__name__, exc)

    async def __aenter__(self) -> MetricsRunner:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

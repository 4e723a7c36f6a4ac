"""The producer's stream pipelines, by stream: built on a stream's first record, released idle.

A producer writes to any number of streams; each has its own pipeline
(:class:`~aiokpl._pipeline.stream.StreamPipeline`: shard map, aggregator, limiter, collector,
retrier). This keeps them: it builds a stream's pipeline on its first record, flushes them, sums
up their statistics, and releases them (their shard map, limiter state and connection lane), so
that state does not grow with every stream name ever used. A later put builds the pipeline
again. Two rules release a pipeline that holds no record (none of its stream outstanding):

* **idle**: every ``IDLE_SWEEP_SECONDS`` (60 s), those through which nothing went since the
  last look, so after 60 to 120 s without a record;
* **missing**: a stream found missing (its shard map's first load, or a ``PutRecords``,
  answered ``ResourceNotFoundException``: the map is dormant, see
  :class:`~aiokpl._pipeline.shard_map.ShardMap`) joins the *kept missing*, as the most recent.
  Past ``MISSING_KEPT`` (100) of them, the least recent are released as soon as they hold no
  record; a look at them follows each finding, at most every ``MISSING_LOOK_SECONDS``
  (0.1 s: a look reads the ledger once).

Why: names built from input (a template, user data) can name any number of streams that do not
exist. Each costs a pipeline, three calls and a connection lane; kept for the idle sweep's
minute, 20,000 of them took minutes and expired most of their records on the way (the sender
counted its lanes at every turn; see ``sender.py``). Why keep the last 100 rather than none: a
misspelt name put to again and again keeps its dormant map, which tries ``ListShards`` again at
most once per backoff (1 s growing to 30 s), where a pipeline built anew for each record would
ask ``ListShards`` and ``DescribeStreamSummary`` (20 calls a second per account) every time.

"Holds no record" is the ledger's word (``busy``: the streams with a record outstanding), read
once per look, not the stages': a record may be anywhere in a pipeline (held for a map, queued
at a limiter, in a request, awaiting a verdict), and it is outstanding wherever it is.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from itertools import islice
from typing import TYPE_CHECKING, Any

from .._core.config import Config
from .._core.statistics import StreamStatistics
from .._kinesis import RegionalClients
from .._pipeline.scheduler import RoutedDeadlines
from .._pipeline.shard_map import MissingStreamsLog
from .._pipeline.stream import StreamPipeline

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from .._coordination.coordinator import ProducerCoordinator
    from .._metrics.recorder import MetricsRecorder
    from .._pipeline.ledger import ResultLedger
    from .._pipeline.scheduler import Scheduler
    from .._pipeline.sender import Sender

__all__ = ("IDLE_SWEEP_SECONDS", "MISSING_KEPT", "MISSING_LOOK_SECONDS", "Streams")

logger = logging.getLogger("aiokpl")

# A stream's pipeline with no record outstanding, and none put through it between two looks
# this far apart, is released.
IDLE_SWEEP_SECONDS = 60.0
# Pipelines of streams found missing, holding no record, kept for their next record; past this
# many, the least recently found are released.
MISSING_KEPT = 100
# The shortest time between two looks at the streams found missing (each reads the ledger).
MISSING_LOOK_SECONDS = 0.1


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
        *,
        client: Any,
        task_group: TaskGroup,
        sender: Sender,
        clock: Callable[[], float],
        ledger: ResultLedger,
        coordinator: ProducerCoordinator | None,
    ) -> None:
        """A started producer's streams, with what their pipelines need of it; the first idle
        sweep is scheduled now."""
        self.config = config
        self.pipelines: dict[str, StreamPipeline] = {}
        self.missing = MissingStreamsLog(scheduler)
        self.released_expired_unsent = 0
        self._scheduler = scheduler
        self._metrics = metrics
        self._random_value = random_value
        self._client = client
        self._task_group = task_group
        self._sender = sender
        self._clock = clock
        self._ledger = ledger
        self._coordinator = coordinator
        # Found missing since the last look, and the kept missing, least recent first.
        self._found_missing: dict[str, StreamPipeline] = {}
        self._kept_missing: dict[str, StreamPipeline] = {}
        self._look = RoutedDeadlines(scheduler, self._look_at_missing)
        self._next_look = -math.inf
        scheduler.call_at(clock() + IDLE_SWEEP_SECONDS, self)

    def pipeline_of(self, stream: str) -> StreamPipeline:
        """The stream's pipeline, built on its first record."""
        pipeline = self.pipelines.get(stream)
        if pipeline is None:
            client = self._client
            if isinstance(client, RegionalClients):  # the producer opened one per region
                client = client.client_for(stream)
            pipeline = self.pipelines[stream] = StreamPipeline(
                stream,
                self.config,
                client=client,
                task_group=self._task_group,
                scheduler=self._scheduler,
                clock=self._clock,
                sender=self._sender,
                ledger=self._ledger,
                metrics=self._metrics,
                coordinator=self._coordinator,
                random_value=self._random_value,
                missing_log=self.missing,
                on_missing=self._on_missing,
            )
        return pipeline

    def flush(self, stream: str | None) -> None:
        """Send what is buffered now, of ``stream`` or of every stream (``None``)."""
        now = self._clock()
        for name, pipeline in list(self.pipelines.items()):
            if stream is None or name == stream:
                pipeline.flush(now)

    def on_due(self, now: float) -> None:
        """The idle sweep: release the pipelines idle since the last one; schedule the next."""
        busy = self._ledger.streams_busy()
        for name, pipeline in list(self.pipelines.items()):
            # idle_since_last_look runs for every stream: each look records what it saw.
            if pipeline.idle_since_last_look() and name not in busy:
                self._release(name, pipeline, "idle")
        if self._metrics is not None:
            self._metrics.prune(now)
        self._scheduler.call_at(now + IDLE_SWEEP_SECONDS, self)

    def _on_missing(self, pipeline: StreamPipeline) -> None:
        """``pipeline``'s stream may have been found missing: look at it once this step is
        over, and no sooner than :data:`MISSING_LOOK_SECONDS` after the last look."""
        found = self._found_missing
        if not found:
            self._look.call_at(max(self._clock(), self._next_look), None)
        found[pipeline.stream] = pipeline

    def _look_at_missing(self, _: object, now: float) -> None:
        """The pipelines found missing join the kept missing, as the most recent; past
        :data:`MISSING_KEPT`, the least recent are released, but those holding a record,
        which stay where they are until a later look (or the idle sweep) finds them empty."""
        self._next_look = now + MISSING_LOOK_SECONDS
        found, self._found_missing = self._found_missing, {}
        kept = self._kept_missing
        for name, pipeline in found.items():
            kept.pop(name, None)
            if self.pipelines.get(name) is pipeline and pipeline.found_missing:
                kept[name] = pipeline
        excess = len(kept) - MISSING_KEPT
        if excess <= 0:
            return
        busy = self._ledger.streams_busy()  # once per look: a pass over the outstanding
        for name in list(islice(kept, excess)):
            pipeline = kept[name]
            if self.pipelines.get(name) is not pipeline or not pipeline.found_missing:
                del kept[name]  # released already, or the stream exists now
            elif name not in busy:
                self._release(name, pipeline, "missing")

    def _release(self, name: str, pipeline: StreamPipeline, why: str) -> None:
        """Release ``pipeline``, which holds no record: it stops, and its state goes."""
        del self.pipelines[name]
        self._kept_missing.pop(name, None)
        pipeline.close()
        self.released_expired_unsent += pipeline.expired
        self._sender.forget(pipeline)
        if self._coordinator is not None:
            self._coordinator.detach(name)
        logger.debug("released the %s pipeline of stream %r", why, name)

    def statistics(self) -> tuple[StreamStatistics, ...]:
        """A snapshot of every stream's pipeline."""
        return tuple(pipeline.statistics() for pipeline in self.pipelines.values())

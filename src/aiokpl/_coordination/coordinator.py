"""Coordination I/O: each producer's coordination task, and the summarizer loop.

The math is pure and lives in ``_core/coordination.py``; the stores (``S3Store``,
``DynamoDBStore``, the ``CoordinationStore`` protocol) are in ``stores.py``; this module only
moves the math's inputs and outputs between the pipeline's limiters and a store:

* :class:`Coordination` is the user's settings, validated when built;
* :class:`ProducerCoordinator` is one task in a producer's task group. Every interval
  (jittered ±10%, so a fleet started together does not hit the store in lockstep) it takes the
  admitted counts from its meters (a wrapper around each stream's limiter → collector hand-off,
  installed only when coordination is on: one dict lookup per *Kinesis* record, nothing per
  user record), publishes its report, optionally runs the summary itself, reads the summary,
  and pushes the new ceilings into the limiters. Its part of the summary's aggregate is what
  it admitted in the report the summary counts: the one before the latest (a summarizer of
  its own wrote the summary before this round's publish), or the latest when it summarizes.
* :func:`run_summarizer` is the summary role as a loop of its own (``aiokpl coordinate``).

Failure handling (invariants):

* the pipeline never waits for the store: the task runs beside it, and each round is bounded
  by ``request_timeout``; a failed or slow round changes no ceiling;
* a failure is logged once (a warning naming the error), and its end once (info); rounds in
  between are silent;
* an object the store lists that is not a valid report is skipped (it may belong to something
  else sharing the prefix); a malformed summary is ignored like a missing one;
* when the producer exits, it deletes its report (best effort, at most one second), so its
  share is reclaimed at once; if it crashes, the staleness cutoff reclaims it.
"""

from __future__ import annotations

import logging
import math
import random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import anyio

from .._core.coordination import (
    CeilingAdjuster,
    MalformedError,
    Report,
    ShardLoad,
    Summarizer,
    Summary,
    decode_report,
    decode_summary,
    encode_report,
    encode_summary,
)
from .._core.errors import ConfigError
from .._kinesis import error_of
from .stores import CoordinationStore, wall_time_of

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._core.config import Config
    from .._core.records import KinesisRecord

__all__ = ("Coordination", "run_summarizer")

logger = logging.getLogger("aiokpl.coordination")


class _ShardRates(Protocol):
    def current_rates(self, now: float) -> tuple[float, float]: ...


class Limiter(Protocol):
    """What coordination needs of a stream's limiter (``aiokpl._pipeline.limiter.Limiter``):
    its shards' current rates, and a way to set a shard's ceiling. A protocol, so the pipeline
    depends on coordination and not the other way round."""

    @property
    def shards(self) -> Mapping[str, _ShardRates]: ...

    def set_ceiling(
        self, shard: str, records_per_second: float, bytes_per_second: float
    ) -> None: ...


_MIB = 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class Coordination:
    """Share per-shard limits with other producers through a store: pass to ``Producer``.

    ``Producer(config, coordination=Coordination(store=...))`` publishes this producer's
    admitted rates every ``interval`` and moves its per-shard ceilings toward its share of
    ``shard_max_*`` (see ``docs/coordination.md``). ``config.rate_limit_*_per_sec_per_shard``
    stays the most this producer sends to one shard. One process of the group must run the
    summary: ``aiokpl coordinate`` (or :func:`run_summarizer`), or one producer with
    ``summarize=True``.

    Attributes:
        store: an :class:`S3Store`, a :class:`DynamoDBStore`, or any
            :class:`CoordinationStore`.
        interval: seconds between reports, 1 … 3,600 (each wait is jittered ±10%).
        staleness: seconds after which a report (or summary) that has not changed stops
            counting; ``None`` means 3 × ``interval``. At least ``interval``.
        smoothing: fraction of the way to the target ceiling moved per summary, in (0, 1].
        fairness: how strongly each shard's limits are pulled toward their mean, 0 … 1; 0 is
            the seed's formula (shares keep their ratios).
        shard_max_records_per_sec: what all producers together may send to one shard,
            records/s (Kinesis allows 1,000). Greater than 0.
        shard_max_bytes_per_sec: the same in bytes/s (Kinesis allows 1 MiB). Greater than 0.
        summarize: this producer also runs the summary each interval.
        request_timeout: seconds one round with the store may take before it is abandoned;
            ``None`` means ``interval``.
        producer_id: this producer's name in the store; ``None`` draws a random one. Must be
            unique in the group.
    """

    store: CoordinationStore
    interval: float = 5.0
    staleness: float | None = None
    smoothing: float = 0.4
    fairness: float = 0.5
    shard_max_records_per_sec: float = 1000.0
    shard_max_bytes_per_sec: float = float(_MIB)
    summarize: bool = False
    request_timeout: float | None = None
    producer_id: str | None = None

    def __post_init__(self) -> None:
        _check_range("interval", self.interval, 1.0, 3600.0)
        if self.staleness is not None:
            _check_range("staleness", self.staleness, self.interval, math.inf)
        if not (isinstance(self.smoothing, int | float) and 0.0 < self.smoothing <= 1.0):
            raise ConfigError(f"smoothing must be in (0, 1]; got {self.smoothing!r}")
        if not (isinstance(self.fairness, int | float) and 0.0 <= self.fairness <= 1.0):
            raise ConfigError(f"fairness must be in [0, 1]; got {self.fairness!r}")
        for name in ("shard_max_records_per_sec", "shard_max_bytes_per_sec"):
            _check_range(name, getattr(self, name), 0.0, math.inf, open_low=True)
        if self.request_timeout is not None:
            _check_range("request_timeout", self.request_timeout, 0.0, 3600.0, open_low=True)
        if self.producer_id is not None and not (
            isinstance(self.producer_id, str) and 0 < len(self.producer_id) <= 200
        ):
            raise ConfigError(f"producer_id must be 1 … 200 characters; got {self.producer_id!r}")

    @property
    def effective_staleness(self) -> float:
        """``staleness``, or 3 × ``interval`` when it is ``None``."""
        return 3.0 * self.interval if self.staleness is None else self.staleness


def _check_range(
    name: str, value: object, low: float, high: float, *, open_low: bool = False
) -> None:
    """``value`` must be a finite number in ``[low, high]`` (``(low, high]`` if ``open_low``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number; got {value!r}")
    above_low = value > low if open_low else value >= low
    if not (above_low and value <= high and math.isfinite(value)):
        low_text = f"greater than {low:g}" if open_low else f"at least {low:g}"
        high_text = "finite" if high == math.inf else f"at most {high:g}"
        raise ConfigError(f"{name} must be {low_text} and {high_text}; got {value!r}")


class _Problems:
    """Logs each kind of trouble once when it starts and once when it ends."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._active: set[str] = set()

    def fail(self, kind: str, message: str) -> None:
        if kind not in self._active:
            self._active.add(kind)
            logger.warning("%s: %s (logged once until it recovers)", self._name, message)

    def ok(self, kind: str) -> None:
        if kind in self._active:
            self._active.discard(kind)
            logger.info("%s: %s recovered", self._name, kind)


def _describe(exc: BaseException) -> str:
    code, message = error_of(exc)
    return f"{code}: {message}"


async def _summarize_once(
    store: CoordinationStore, summarizer: Summarizer, problems: _Problems
) -> Summary:
    reports: list[Report] = []
    skipped = 0
    for data in await store.reports():
        try:
            reports.append(decode_report(data))
        except MalformedError:
            skipped += 1
    if skipped:
        logger.debug("skipped %d object(s) that are not reports", skipped)
    summary, expired = summarizer.summarize(reports, anyio.current_time(), wall_time_of(store))
    await store.write_summary(encode_summary(summary))
    for producer in expired:
        await store.remove(producer)
    problems.ok("store")
    return summary


async def run_summarizer(
    store: CoordinationStore,
    *,
    interval: float = 5.0,
    staleness: float | None = None,
    request_timeout: float | None = None,
    rounds: int | None = None,
) -> None:
    """Run the summary role: every ``interval``, add up the fresh reports into the summary.

    Run exactly one per group (``aiokpl coordinate`` runs this), or instead give one
    producer ``Coordination(summarize=True)``. Store failures are logged once and retried at
    the next interval; reports unchanged for ``staleness`` seconds (3 × ``interval`` by
    default) stop counting, and after 10 × that they are deleted from the store.

    Args:
        store: the group's store.
        interval: seconds between summaries.
        staleness: see :class:`Coordination`.
        request_timeout: seconds one round may take; ``interval`` by default.
        rounds: stop after this many rounds (``None``: run until cancelled).
    """
    _check_range("interval", interval, 0.0, 3600.0, open_low=True)
    stale = 3.0 * interval if staleness is None else staleness
    _check_range("staleness", stale, 0.0, math.inf, open_low=True)
    summarizer = Summarizer(uuid.uuid4().hex, stale, 10.0 * stale)
    problems = _Problems("coordination summarizer")
    timeout = interval if request_timeout is None else request_timeout
    jitter = random.Random()
    done = 0
    while rounds is None or done < rounds:
        await _guarded(_summarize_once(store, summarizer, problems), timeout, problems)
        done += 1
        if rounds is None or done < rounds:
            await anyio.sleep(interval * jitter.uniform(0.9, 1.1))


async def _guarded(work: Awaitable[object], limit: float, problems: _Problems) -> None:
    """Await ``work`` within ``limit`` seconds; on any failure log once and carry on."""
    try:
        with anyio.fail_after(limit):
            await work
    except TimeoutError:
        problems.fail("store", f"the store did not answer within {limit:g} s")
    except Exception as exc:
        problems.fail("store", f"the store failed ({_describe(exc)})")


class ProducerCoordinator:
    """A producer's coordination task: meters, reports, summaries, ceilings."""

    def __init__(
        self,
        coordination: Coordination,
        config: Config,
        clock: Callable[[], float],
        jitter: random.Random | None = None,
    ) -> None:
        self.coordination = coordination
        self.producer_id = coordination.producer_id or uuid.uuid4().hex
        self._clock = clock
        staleness = coordination.effective_staleness
        self.adjuster = CeilingAdjuster(
            aggregate_max=(
                coordination.shard_max_records_per_sec,
                coordination.shard_max_bytes_per_sec,
            ),
            producer_max=(
                config.rate_limit_records_per_sec_per_shard,
                config.rate_limit_bytes_per_sec_per_shard,
            ),
            smoothing=coordination.smoothing,
            fairness=coordination.fairness,
            staleness=staleness,
        )
        self._summarizer = (
            Summarizer(self.producer_id, staleness, 10.0 * staleness)
            if coordination.summarize
            else None
        )
        self._limiters: dict[str, Limiter] = {}
        # stream → shard → [records, bytes] admitted since the last report.
        self._meters: dict[str, dict[str, list[int]]] = {}
        self._since = self._started = clock()
        self._sequence = 0
        # Admitted (records/s, bytes/s) per shard key in the last two reports published: a
        # summary counts one of them as this producer's part of the aggregate.
        self._reported: tuple[dict[str, tuple[float, float]], dict[str, tuple[float, float]]] = (
            {},
            {},
        )
        self._problems = _Problems("coordination")
        self._random = random.Random() if jitter is None else jitter  # the producer's
        self.rounds = 0

    def meter(
        self, stream: str, admit: Callable[[KinesisRecord], None]
    ) -> Callable[[KinesisRecord], None]:
        """Wrap a limiter's ``admit`` so it counts what it admits per shard."""
        counts = self._meters.setdefault(stream, {})

        def metered(record: KinesisRecord) -> None:
            shard = record.predicted_shard
            if shard is not None:  # records without a prediction are not limited either
                count = counts.get(shard)
                if count is None:
                    count = counts[shard] = [0, 0]
                count[0] += 1
                count[1] += record.size
            admit(record)

        return metered

    def detach(self, stream: str) -> None:
        """The producer released ``stream``'s idle pipeline: stop tracking its limiter.

        Its meter counts stay until the next report has taken them (a new pipeline for the
        stream gets a new meter, which adds to the same counts).
        """
        self._limiters.pop(stream, None)

    def attach(self, stream: str, limiter: Limiter) -> None:
        """Apply the ceilings known for ``stream`` to its new limiter; track it from now on."""
        self._limiters[stream] = limiter
        prefix = f"{stream}/"
        for key, (records, size) in self.adjuster.ceilings.items():
            if key.startswith(prefix):
                limiter.set_ceiling(key[len(prefix) :], records, size)

    def _limits(self, now: float) -> dict[str, tuple[float, float]]:
        """Each limited shard's rates in force: its ceiling, or less after throttling."""
        return {
            f"{stream}/{shard}": shard_limiter.current_rates(now)
            for stream, limiter in self._limiters.items()
            for shard, shard_limiter in limiter.shards.items()
        }

    def _take_report(self, now: float) -> Report:
        elapsed = max(now - self._since, 1e-9)
        self._since = now
        limits = self._limits(now)
        shards: dict[str, ShardLoad] = {}
        for stream, counts in self._meters.items():
            for shard, (records, size) in counts.items():
                if records:
                    key = f"{stream}/{shard}"
                    limit = limits.get(key) or self.adjuster.ceiling(key)
                    shards[key] = ShardLoad(records / elapsed, size / elapsed, *limit)
            counts.clear()
        self._sequence += 1
        admitted = {
            key: (load.records_per_second, load.bytes_per_second) for key, load in shards.items()
        }
        self._reported = (self._reported[1], admitted)
        return Report(
            self.producer_id, self._sequence, shards, wall_time_of(self.coordination.store)
        )

    def _own_part(self) -> dict[str, tuple[float, float]]:
        """What this producer sent per shard in the report the summary just read counts.

        A summary written by this producer (``summarize=True``) counts the report it has just
        published. A summarizer of its own runs at its own times: the summary read right
        after publishing was almost always written before, from the report published one
        interval earlier.
        """
        previous, latest = self._reported
        return latest if self._summarizer is not None else previous

    def _apply(self, summary: Summary | None, now: float) -> None:
        if summary is None:
            # Right after start-up the summarizer may simply not have written one yet.
            if now - self._started >= self.adjuster.staleness:
                self._problems.fail(
                    "summary", "no summary in the store yet: is a summarizer running?"
                )
            return
        changed = self.adjuster.apply(summary, now, self._own_part())
        if changed is None:
            if self.adjuster.summary_stale(now):
                self._problems.fail(
                    "summary",
                    "the summary has not changed for "
                    f"{self.adjuster.staleness:g} s: is its summarizer running?",
                )
            return
        self._problems.ok("summary")
        for key, (records, size) in changed.items():
            stream, _, shard = key.rpartition("/")
            stream_limiter = self._limiters.get(stream)
            if stream_limiter is not None:
                stream_limiter.set_ceiling(shard, records, size)

    async def _round(self) -> None:
        store = self.coordination.store
        await store.publish(self.producer_id, encode_report(self._take_report(self._clock())))
        summary: Summary | None
        if self._summarizer is not None:
            summary = await _summarize_once(store, self._summarizer, self._problems)
        else:
            data = await store.read_summary()
            try:
                summary = None if data is None else decode_summary(data)
            except MalformedError as exc:
                self._problems.fail("summary", f"the summary is malformed ({exc}); ignoring it")
                summary = None
        self._problems.ok("store")
        self._apply(summary, self._clock())

    async def run(self) -> None:
        """Report and adjust every interval until cancelled; then remove the report.

        The first round runs at once: a producer joining a busy group reads the summary
        before it has sent much, so its shards start at a share instead of at the maximum.
        """
        coordination = self.coordination
        timeout = (
            coordination.interval
            if coordination.request_timeout is None
            else coordination.request_timeout
        )
        try:
            while True:
                await _guarded(self._round(), timeout, self._problems)
                self.rounds += 1
                await anyio.sleep(coordination.interval * self._random.uniform(0.9, 1.1))
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
                try:
                    await coordination.store.remove(self.producer_id)
                except Exception as exc:
                    logger.debug("could not remove this producer's report: %s", _describe(exc))

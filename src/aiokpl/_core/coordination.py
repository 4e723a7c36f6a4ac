"""Coordination math: sharing per-shard limits among producers through a store (pure).

Producer processes writing the same stream cannot see each other's traffic; each one's limiter
allows itself the whole shard, so N of them together offer N times what Kinesis accepts. They
coordinate through a store they can all reach (an S3 prefix or a DynamoDB table):

1. every producer publishes a :class:`Report` each interval: what its limiter *admitted* per
   shard since the last report (records/s and bytes/s, retries included: that is the load
   Kinesis sees);
2. one summarizer (:class:`Summarizer`) adds up the fresh reports into a :class:`Summary`:
   per shard, the aggregate rates, the summed limits and how many producers sent there;
3. every producer reads the summary and moves each shard's ceiling (the rate its limiter
   admits at most, and that throttle feedback recovers to) with :class:`CeilingAdjuster`::

       base    = (1 - fairness) × own + fairness × current / producers on the shard
       target  = min(per_producer_max, aggregate_max / current × base)
       ceiling = (1 - smoothing) × ceiling + smoothing × target

   where ``current`` is the summary's aggregate rate on the shard and ``own`` this producer's
   part of it: what it reported admitting there in the report the summary counts.

   The targets of a shard's producers add up to ``aggregate_max`` exactly (the fairness term
   sums to zero over them, so it changes only the split, pulling shares toward equal); each
   summary moves the ceilings ``smoothing`` of the way there. The scaled quantity is measured
   over the same interval as ``current``. Scaling the limit each producer had in force when it
   read the summary instead (what this did first) double-counted throttling: a burst measured
   at 2× the shard, whose throttling cut every limit by half or more *after* the measurement,
   set targets summing to a quarter of the shard, and the ceilings spent several rounds below
   its capacity (in ``bench/coordination.py``, 84% of it for seconds after the start-up burst,
   and the steady window was reached later still on a loaded machine).

Staleness without synchronised clocks: a report carries a sequence number the producer bumps
each time it publishes. The summarizer remembers, on its *own* clock, when each producer's
sequence last changed; a report whose sequence has not moved for ``staleness`` seconds is
ignored, so a producer that stopped (cleanly or not) stops counting and its share is reclaimed
by the others. No wall-clock time is compared across machines, so clock skew cannot make a
live producer look dead or a dead one look alive. The same holds for producers reading the
summary: each summary version ``(epoch, sequence)`` is applied once, however often it is read
(applying one scale twice would overshoot), and one that has not changed for ``staleness``
seconds is reported stale (its summarizer stopped; the ceilings stay as they are).

A joiner (a producer with no ceiling yet for a shard the summary lists) starts from the equal
share ``aggregate_max / producers on that shard``, or from the capacity the others leave unused
if that is more, rather than from the per-producer maximum, so its entry does not first push
the shard far over its limit.

Wire format: UTF-8 JSON objects with a ``"format"`` marker. Decoding validates every field and
raises :class:`MalformedError` for anything else, so a foreign or corrupt object in the shared
prefix is skipped by the caller, never trusted.

The seed is AWS's distributed DynamoDB rate limiting through S3 (per-worker objects, a summary
object, the ``max / current`` scale, smoothing 0.4, a staleness cutoff, jittered intervals); the
KPL has nothing like it (its limits are per process). Differences: limits per shard and in two
currencies; each producer's measured part of the aggregate (not its limit) is scaled, and the
fairness term; staleness by sequence numbers on the reader's clock instead of wall-clock
timestamps; a summary applied once per version; the joiner's start. (Reports still carry the
limits in force and summaries their sums: information for people reading the store.)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = (
    "REPORT_FORMAT",
    "SUMMARY_FORMAT",
    "CeilingAdjuster",
    "MalformedError",
    "Report",
    "ShardLoad",
    "Summarizer",
    "Summary",
    "decode_report",
    "decode_summary",
    "encode_report",
    "encode_summary",
)

REPORT_FORMAT = "aiokpl.coordination.report/1"
SUMMARY_FORMAT = "aiokpl.coordination.summary/1"


class MalformedError(ValueError):
    """An object in the store is not a report or summary this version understands."""


@dataclass(frozen=True, slots=True)
class ShardLoad:
    """Traffic on one shard.

    In a report: what one producer admitted (records/s, bytes/s) and the limits it had in
    force (its ceilings, or less while throttling feedback holds it lower). In a summary: the
    sums of both over the producers that sent there, and how many they were.
    """

    records_per_second: float
    bytes_per_second: float
    limit_records_per_second: float
    limit_bytes_per_second: float
    producers: int = 1


@dataclass(frozen=True, slots=True)
class Report:
    """One producer's admitted rates per shard over its last interval.

    Attributes:
        producer_id: unique per producer process run.
        sequence: bumped on every publish; staleness is judged by it changing.
        shards: ``"stream/shardId"`` → the rates admitted there (``producers`` is 1).
        wall_time: the producer's wall clock when it published (seconds since the epoch);
            informational only, never compared with another clock.
    """

    producer_id: str
    sequence: int
    shards: Mapping[str, ShardLoad]
    wall_time: float = 0.0


@dataclass(frozen=True, slots=True)
class Summary:
    """The aggregate of the fresh reports.

    Attributes:
        epoch: identifies the summarizer run (it restarts ``sequence`` at 1).
        sequence: bumped on every summary; ``(epoch, sequence)`` is its version.
        producers: fresh reports counted.
        shards: ``"stream/shardId"`` → summed rates and the number of producers that sent
            there.
        wall_time: the summarizer's wall clock when it wrote this (informational only).
    """

    epoch: str
    sequence: int
    producers: int
    shards: Mapping[str, ShardLoad]
    wall_time: float = 0.0

    @property
    def version(self) -> tuple[str, int]:
        return (self.epoch, self.sequence)


# -- wire format ---------------------------------------------------------------------------


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedError(f"{what} must be a number, got {type(value).__name__}")
    number = float(value)
    if not (math.isfinite(number) and number >= 0.0):
        raise MalformedError(f"{what} must be a finite number >= 0, got {value!r}")
    return number


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MalformedError(f"{what} must be an integer >= 0, got {value!r}")
    return value


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise MalformedError(f"{what} must be a non-empty string, got {value!r}")
    return value


def _object(data: bytes, expected_format: str) -> dict[str, object]:
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedError(f"not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != expected_format:
        raise MalformedError(f"not an {expected_format!r} object")
    return document


def _shards(value: object, *, with_producers: bool) -> dict[str, ShardLoad]:
    if not isinstance(value, dict):
        raise MalformedError("shards must be an object")
    shards: dict[str, ShardLoad] = {}
    for key, entry in value.items():
        if not isinstance(entry, list) or len(entry) != (5 if with_producers else 4):
            raise MalformedError(f"shard {key!r}: wrong entry {entry!r}")
        producers = _count(entry[4], f"shard {key!r} producers") if with_producers else 1
        numbers = [_number(entry[i], f"shard {key!r} [{i}]") for i in range(4)]
        shards[_text(key, "shard key")] = ShardLoad(
            numbers[0], numbers[1], numbers[2], numbers[3], producers
        )
    return shards


def _entry(load: ShardLoad) -> list[float]:
    return [
        load.records_per_second,
        load.bytes_per_second,
        load.limit_records_per_second,
        load.limit_bytes_per_second,
        load.producers,
    ]


def encode_report(report: Report) -> bytes:
    """The report as compact UTF-8 JSON."""
    document = {
        "format": REPORT_FORMAT,
        "producer": report.producer_id,
        "sequence": report.sequence,
        "wall_time": report.wall_time,
        "shards": {key: _entry(load)[:4] for key, load in report.shards.items()},
    }
    return json.dumps(document, separators=(",", ":")).encode()


def decode_report(data: bytes) -> Report:
    """Parse and validate a report.

    Raises:
        MalformedError: ``data`` is not a valid report.
    """
    document = _object(data, REPORT_FORMAT)
    return Report(
        producer_id=_text(document.get("producer"), "producer"),
        sequence=_count(document.get("sequence"), "sequence"),
        shards=_shards(document.get("shards"), with_producers=False),
        wall_time=_number(document.get("wall_time"), "wall_time"),
    )


def encode_summary(summary: Summary) -> bytes:
    """The summary as compact UTF-8 JSON."""
    document = {
        "format": SUMMARY_FORMAT,
        "epoch": summary.epoch,
        "sequence": summary.sequence,
        "producers": summary.producers,
        "wall_time": summary.wall_time,
        "shards": {key: _entry(load) for key, load in summary.shards.items()},
    }
    return json.dumps(document, separators=(",", ":")).encode()


def decode_summary(data: bytes) -> Summary:
    """Parse and validate a summary.

    Raises:
        MalformedError: ``data`` is not a valid summary.
    """
    document = _object(data, SUMMARY_FORMAT)
    return Summary(
        epoch=_text(document.get("epoch"), "epoch"),
        sequence=_count(document.get("sequence"), "sequence"),
        producers=_count(document.get("producers"), "producers"),
        shards=_shards(document.get("shards"), with_producers=True),
        wall_time=_number(document.get("wall_time"), "wall_time"),
    )


# -- the summarizer ------------------------------------------------------------------------


@dataclass(slots=True)
class _Seen:
    sequence: int
    changed_at: float


@dataclass(slots=True)
class Summarizer:
    """Adds up fresh reports into summaries; remembers when each report last changed.

    Args:
        epoch: this run's identity, written into every summary.
        staleness: seconds without a new sequence after which a report stops counting.
        forget_after: seconds without a new sequence after which a report is listed in
            ``expired`` (for deletion from the store); at least ``staleness``.
    """

    epoch: str
    staleness: float
    forget_after: float
    sequence: int = 0
    _seen: dict[str, _Seen] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.staleness > 0 or not self.forget_after >= self.staleness:
            raise ValueError("need staleness > 0 and forget_after >= staleness")

    def summarize(
        self, reports: Iterable[Report], now: float, wall_time: float = 0.0
    ) -> tuple[Summary, list[str]]:
        """Summarize the reports listed at ``now``.

        Returns:
            The new summary, and the ids of producers whose reports are older than
            ``forget_after`` (the caller may delete them from the store).
        """
        seen = self._seen
        listed: set[str] = set()
        totals: dict[str, list[float]] = {}
        producers = 0
        expired: list[str] = []
        for report in reports:
            producer = report.producer_id
            if producer in listed:
                continue  # a store listing the same producer twice counts it once
            listed.add(producer)
            entry = seen.get(producer)
            if entry is None or entry.sequence != report.sequence:
                entry = seen[producer] = _Seen(report.sequence, now)
            age = now - entry.changed_at
            if age >= self.forget_after:
                expired.append(producer)
            if age >= self.staleness:
                continue
            producers += 1
            for key, load in report.shards.items():
                if load.records_per_second <= 0.0 and load.bytes_per_second <= 0.0:
                    continue
                total = totals.setdefault(key, [0.0, 0.0, 0.0, 0.0, 0.0])
                total[0] += load.records_per_second
                total[1] += load.bytes_per_second
                total[2] += load.limit_records_per_second
                total[3] += load.limit_bytes_per_second
                total[4] += 1
        for producer in [p for p in seen if p not in listed]:
            del seen[producer]  # gone from the store: forget it
        self.sequence += 1
        summary = Summary(
            epoch=self.epoch,
            sequence=self.sequence,
            producers=producers,
            shards={
                key: ShardLoad(total[0], total[1], total[2], total[3], int(total[4]))
                for key, total in totals.items()
            },
            wall_time=wall_time,
        )
        return summary, expired


# -- each producer's side ------------------------------------------------------------------


@dataclass(slots=True)
class CeilingAdjuster:
    """One producer's per-shard ceilings, moved toward its share of each shard's capacity.

    Args:
        aggregate_max: (records/s, bytes/s) all producers together may send to one shard.
        producer_max: (records/s, bytes/s) this producer may send to one shard at most; it is
            also the ceiling of shards the summary does not list.
        smoothing: fraction of the way to the target moved per summary, 0 < s <= 1.
        fairness: weight of the mean limit of the shard's producers in the base that is
            scaled, 0 … 1 (0 is the seed's formula: shares keep their ratios forever).
        staleness: seconds a summary version may stay unchanged before it is called stale.
    """

    aggregate_max: tuple[float, float]
    producer_max: tuple[float, float]
    smoothing: float = 0.4
    fairness: float = 0.5
    staleness: float = 15.0
    ceilings: dict[str, tuple[float, float]] = field(default_factory=dict)
    _version: tuple[str, int] | None = None
    _version_since: float = 0.0

    def __post_init__(self) -> None:
        for name, pair in (
            ("aggregate_max", self.aggregate_max),
            ("producer_max", self.producer_max),
        ):
            if not all(0.0 < value < math.inf for value in pair):
                raise ValueError(f"{name} must be two positive finite rates, got {pair!r}")
        if not 0.0 < self.smoothing <= 1.0:
            raise ValueError(f"smoothing must be in (0, 1], got {self.smoothing!r}")
        if not 0.0 <= self.fairness <= 1.0:
            raise ValueError(f"fairness must be in [0, 1], got {self.fairness!r}")
        if not self.staleness > 0:
            raise ValueError(f"staleness must be > 0, got {self.staleness!r}")

    def ceiling(self, key: str) -> tuple[float, float]:
        """The current ceiling of shard ``key``: the producer maximum until a summary says."""
        return self.ceilings.get(key, self.producer_max)

    def apply(
        self,
        summary: Summary,
        now: float,
        admitted: Mapping[str, tuple[float, float]] | None = None,
    ) -> dict[str, tuple[float, float]] | None:
        """Apply ``summary``, read at ``now``, unless its version was applied already.

        Per shard and currency, with ``own`` what this producer sent there over its last
        report's interval and ``current`` what all of them sent (from the summary)::

            base    = (1 - fairness) × own + fairness × current / producers
            target  = min(producer_max, aggregate_max / current × base)
            ceiling = (1 - smoothing) × ceiling + smoothing × target

        Each producer's target is its part of the measured aggregate, scaled to the shard's
        maximum: the targets add up to exactly the maximum, whatever limits were in force
        while the reports were measured or have been since. Over the producers of a shard the
        fairness term adds up to what it takes away, so it changes only the split, which
        drifts toward equal shares instead of keeping whatever ratios history left.

        Args:
            summary: the summary read from the store.
            now: the time it was read.
            admitted: this producer's admitted rates per shard, (records/s, bytes/s), over
                the interval of its last report: its part of the summary's aggregate. A shard
                it sent nothing to keeps its ceiling (no evidence of its own use). ``None``
                counts each shard's ceiling as sent (a producer held by its ceilings).

        Returns:
            The new ceilings of the shards the summary lists (shard key → (records/s,
            bytes/s)), or ``None`` if this version was applied before: a summary scales the
            ceilings once, however many times it is read.
        """
        version = summary.version
        if version == self._version:
            return None
        self._version = version
        self._version_since = now
        changed: dict[str, tuple[float, float]] = {}
        for key, load in summary.shards.items():
            old = self.ceilings.get(key)
            if old is None:
                # A joiner's start: its share among the producers already there, or what
                # they leave unused if that is more.
                old = (
                    self._start(load.records_per_second, load, 0),
                    self._start(load.bytes_per_second, load, 1),
                )
            own = old if admitted is None else admitted.get(key)
            new = (
                old
                if own is None
                else (self._move(old[0], own[0], load, 0), self._move(old[1], own[1], load, 1))
            )
            self.ceilings[key] = new
            changed[key] = new
        return changed

    def summary_stale(self, now: float) -> bool:
        """Whether the last summary version applied has not changed for ``staleness`` s.

        The ceilings then stay where they are; the caller says so (its summarizer stopped).
        """
        return self._version is not None and now - self._version_since >= self.staleness

    def _start(self, current: float, load: ShardLoad, index: int) -> float:
        aggregate_max = self.aggregate_max[index]
        share = aggregate_max / max(1, load.producers)
        return min(self.producer_max[index], max(share, aggregate_max - current))

    def _move(self, ceiling: float, own: float, load: ShardLoad, index: int) -> float:
        current = load.bytes_per_second if index else load.records_per_second
        if current <= 0.0 or own <= 0.0:
            return ceiling  # no traffic measured: no evidence either way (as the seed does)
        mean = current / load.producers if load.producers > 0 else own
        base = (1.0 - self.fairness) * own + self.fairness * mean
        target = min(self.producer_max[index], self.aggregate_max[index] / current * base)
        return (1.0 - self.smoothing) * ceiling + self.smoothing * target
